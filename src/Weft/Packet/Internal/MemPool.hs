{-# LANGUAGE BangPatterns #-}
-- | Packet buffer pools: ixy's mempool in weft's Haskell.
-- Internal and unstable: import "Weft.Packet", which re-exports what users need.
--
-- A 'MemPool' is one mapping of fixed 2048-byte buffers ('bufferSize').
-- Each buffer starts with a 64-byte header; the packet bytes start at
-- 'dataOffset'. Free buffers are kept on an unboxed stack, so allocating
-- and freeing a batch of @n@ buffers is @n@ array reads or writes and no
-- heap allocation.
--
-- A pool has a single owner (Note [One owner per pool]): use it from one
-- thread at a time, normally the one thread that drives a queue on one
-- capability. A pool made with 'poolDebug' checks this, and checks that
-- every buffer freed to it came from it and is not already free; these
-- checks throw 'PoolError'. Without 'poolDebug' the checks are off and a
-- misuse corrupts the pool silently, as it would in ixy.
module Weft.Packet.Internal.MemPool
  ( -- * Pools
    MemPool
  , PoolConfig (..)
  , defaultPoolConfig
  , Backing (..)
  , newMemPool
  , withMemPool
  , destroyMemPool
  , poolEntries
  , poolFreeCount
  , poolId
  , poolBacking
  , lookupPool
  , PoolError (..)
    -- * Buffers
  , Buffer (..)
  , bufferSize
  , dataOffset
  , maxDataLength
  , bufferData
  , bufferIova
  , bufferLength
  , setBufferLength
  , bufferPoolId
  , bufferBytes
    -- * Allocation
  , allocBuffer
  , freeBuffer
  , allocBatch
  , freeBatch
  , freeToOwners
    -- * Arrays of buffers
  , BufferArray
  , newBufferArray
  , bufferArraySize
  , readBuffer
  , writeBuffer
    -- * Memory for device rings
  , DmaMemory
  , dmaPtr
  , dmaSize
  , newDmaMemory
  , freeDmaMemory
  ) where

import Weft.Internal.Capability (currentCapability)
import Control.Exception (Exception, IOException, bracket, throwIO, try)
import Control.Monad (void, when)
import Data.ByteString (ByteString)
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import qualified Data.IntMap.Strict as IM
import Data.Primitive.PrimArray
import Data.Word (Word32, Word64, Word8)
import Foreign.C.Error (getErrno)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Marshal.Alloc (alloca)
import Foreign.Ptr
import Foreign.Storable
import GHC.Exts (RealWorld)
import System.IO.Unsafe (unsafePerformIO)

import Weft.Internal.Error (invalidArgument, syscallError)

-- Note [One owner per pool]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- ixy's mempool is not thread-safe by design, and neither is this one: a
-- lock or a CAS per buffer would cost more than the rest of a forwarding
-- loop. A pool belongs to the thread driving one receive queue (weft's
-- packet loops pin that thread to a capability with forkOn), and buffers
-- it hands out come back to it from the transmit path of the same thread.
-- A forwarder that receives on one device and sends on another frees the
-- first device's buffers to the first device's pool, from the same thread,
-- which is fine. Handing a buffer to a thread on another capability is
-- not: that thread must give it back through the owner. Debug mode
-- catches the two mistakes this invites: freeing to the wrong pool, and
-- using a pool from a second capability.

-- | Every buffer is this many bytes, header included.
bufferSize :: Int
bufferSize = 2048

-- | Where the packet bytes start, from the start of the buffer.
dataOffset :: Int
dataOffset = 64

-- | The largest packet a buffer holds, in bytes (1984).
maxDataLength :: Int
maxDataLength = bufferSize - dataOffset

-- Header layout, from the start of a buffer.
hdrIova, hdrPool, hdrIndex, hdrLength :: Int
hdrIova = 0     -- Word64: device-visible address of the data
hdrPool = 8     -- Word32: the pool's id
hdrIndex = 12   -- Word32: the entry's index in its pool
hdrLength = 16  -- Word32: bytes of packet data

-- | A packet buffer: the address of its header. Valid while it is allocated.
newtype Buffer = Buffer (Ptr Word8)
  deriving (Eq, Ord, Show)

-- | The packet bytes: 'maxDataLength' bytes of room.
bufferData :: Buffer -> Ptr Word8
bufferData (Buffer p) = p `plusPtr` dataOffset
{-# INLINE bufferData #-}

-- | The address a device uses to reach the data. weft uses virtual
-- addresses as IO addresses, as ixy does under VFIO with an IOMMU.
bufferIova :: Buffer -> IO Word64
bufferIova (Buffer p) = peekByteOff p hdrIova
{-# INLINE bufferIova #-}

-- | The packet's length in bytes.
bufferLength :: Buffer -> IO Int
bufferLength (Buffer p) = fromIntegral <$> (peekByteOff p hdrLength :: IO Word32)
{-# INLINE bufferLength #-}

-- | Sets the packet's length in bytes; the caller keeps it within
-- 'maxDataLength'.
setBufferLength :: Buffer -> Int -> IO ()
setBufferLength (Buffer p) n = pokeByteOff p hdrLength (fromIntegral n :: Word32)
{-# INLINE setBufferLength #-}

-- | The id of the pool the buffer belongs to.
bufferPoolId :: Buffer -> IO Int
bufferPoolId (Buffer p) = fromIntegral <$> (peekByteOff p hdrPool :: IO Word32)

-- | A zero-copy view of the packet's bytes. It is valid only while the
-- buffer is held: once the buffer is freed (or handed to 'txBatch') the
-- bytes change under it. Copy it ('Data.ByteString.copy') to keep it.
bufferBytes :: Buffer -> IO ByteString
bufferBytes b = do
  n <- bufferLength b
  BU.unsafePackCStringLen (castPtr (bufferData b), n)

-- | What backs a pool's memory.
data Backing
  = HugePages       -- ^ 2 MiB huge pages
  | LockedMemory    -- ^ anonymous memory locked with @mlock@
  | UnlockedMemory  -- ^ anonymous memory that could not be locked
  deriving (Eq, Show)

-- | How to make a pool.
data PoolConfig = PoolConfig
  { poolSize  :: !Int   -- ^ number of buffers (at least 1)
  , poolHuge  :: !Bool  -- ^ try huge pages first (used only when some are configured)
  , poolDebug :: !Bool  -- ^ check ownership, pool membership and double frees
  }

-- | 4096 buffers (8 MiB), huge pages when available, no checks.
defaultPoolConfig :: PoolConfig
defaultPoolConfig = PoolConfig { poolSize = 4096, poolHuge = True, poolDebug = False }

-- | A misuse of a pool caught by its checks.
data PoolError
  = ForeignBuffer !Int !Int
    -- ^ a buffer of pool @a@ (first) was freed to pool @b@
  | DoubleFree !Int !Int
    -- ^ entry @i@ (second) of pool @p@ was freed while free
  | WrongCapability !Int !Int
    -- ^ a pool owned by capability @a@ was used from capability @b@
  | UnknownPool !Int
    -- ^ a buffer names pool @p@, which does not exist (destroyed, or not
    -- a buffer at all)
  deriving (Eq, Show)

instance Exception PoolError

-- | A pool of packet buffers.
data MemPool = MemPool
  { mpBase     :: !(Ptr Word8)
  , mpEntries  :: !Int
  , mpId       :: !Int
  , mpBacking  :: !Backing
  , mpStack    :: !(MutablePrimArray RealWorld Word32)
    -- ^ indices of free entries; the top is at mpTop - 1
  , mpTop      :: !(MutablePrimArray RealWorld Int)
    -- ^ one cell: how many entries are free
  , mpDebug    :: !(Maybe DebugState)
  }

data DebugState = DebugState
  { dbgAllocated :: !(MutablePrimArray RealWorld Word8)  -- ^ 1 while allocated
  , dbgOwner     :: !(IORef Int)                         -- ^ capability, or -1 before first use
  }

-- | Pool ids are unique within the process, so a foreign buffer is caught.
nextPoolId :: IORef Int
nextPoolId = unsafePerformIO (newIORef 1)
{-# NOINLINE nextPoolId #-}

-- | Makes a pool; every buffer starts free. Fails with an 'IOError' when
-- the memory cannot be mapped, and with an 'InvalidArgument' one when
-- 'poolSize' is below 1. Release it with 'destroyMemPool' once no buffer is in use.
newMemPool :: PoolConfig -> IO MemPool
newMemPool cfg = do
  let n = poolSize cfg
  when (n < 1) $ ioError (invalidArgument "newMemPool" "poolSize must be at least 1")
  huge <- if poolHuge cfg then hugePagesConfigured else pure False
  (base, backing) <- alloca $ \pb -> do
    p <- mapMemory "newMemPool" (fromIntegral (n * bufferSize)) huge pb
    b <- peek pb
    pure (castPtr p, toBacking b)
  pid <- atomicModifyIORef' nextPoolId (\i -> (i + 1, i))
  stack <- newPrimArray n
  let fill !i
        | i >= n = pure ()
        | otherwise = do
            let p = base `plusPtr` (i * bufferSize)
            pokeByteOff p hdrIova (fromIntegral (ptrToWordPtr (p `plusPtr` dataOffset)) :: Word64)
            pokeByteOff p hdrPool (fromIntegral pid :: Word32)
            pokeByteOff p hdrIndex (fromIntegral i :: Word32)
            pokeByteOff p hdrLength (0 :: Word32)
            -- the lowest index is allocated first, as in ixy
            writePrimArray stack (n - 1 - i) (fromIntegral i)
            fill (i + 1)
  fill 0
  top <- newPrimArray 1
  writePrimArray top 0 n
  dbg <- if poolDebug cfg
    then do
      flags <- newPrimArray n
      setPrimArray flags 0 n 0
      owner <- newIORef (-1)
      pure (Just (DebugState flags owner))
    else pure Nothing
  let mp = MemPool { mpBase = base, mpEntries = n, mpId = pid, mpBacking = backing
                   , mpStack = stack, mpTop = top, mpDebug = dbg }
  atomicModifyIORef' poolRegistry (\m -> (IM.insert pid mp m, ()))
  pure mp

-- | Every live pool by id, so that a device that is handed buffers of
-- any pool (a transmit queue) can free them to their own pool.
poolRegistry :: IORef (IM.IntMap MemPool)
poolRegistry = unsafePerformIO (newIORef IM.empty)
{-# NOINLINE poolRegistry #-}

-- | The live pool with the given id ('bufferPoolId'), if any. One
-- 'readIORef' and a map lookup: callers do it once per run of buffers of
-- one pool, not per buffer.
lookupPool :: Int -> IO (Maybe MemPool)
lookupPool pid = IM.lookup pid <$> readIORef poolRegistry

-- | 'newMemPool' and 'destroyMemPool' around an action.
withMemPool :: PoolConfig -> (MemPool -> IO a) -> IO a
withMemPool cfg = bracket (newMemPool cfg) destroyMemPool

-- | Unmaps the pool. Every buffer of it becomes invalid.
destroyMemPool :: MemPool -> IO ()
destroyMemPool mp = do
  atomicModifyIORef' poolRegistry (\m -> (IM.delete (mpId mp) m, ()))
  _ <- c_weft_pkt_unmap (castPtr (mpBase mp)) (fromIntegral (mpEntries mp * bufferSize))
                        (fromBacking (mpBacking mp))
  pure ()

-- | How many buffers the pool has.
poolEntries :: MemPool -> Int
poolEntries = mpEntries

-- | How many buffers are free now. After every buffer has come back it
-- equals 'poolEntries'; the leak checks compare the two.
poolFreeCount :: MemPool -> IO Int
poolFreeCount mp = readPrimArray (mpTop mp) 0

-- | The pool's process-wide id (see 'bufferPoolId').
poolId :: MemPool -> Int
poolId = mpId

-- | What backs the pool's memory.
poolBacking :: MemPool -> Backing
poolBacking = mpBacking

-- | One buffer, or 'Nothing' when the pool is empty.
allocBuffer :: MemPool -> IO (Maybe Buffer)
allocBuffer mp = do
  checkOwner mp
  top <- readPrimArray (mpTop mp) 0
  if top == 0
    then pure Nothing
    else do
      i <- readPrimArray (mpStack mp) (top - 1)
      writePrimArray (mpTop mp) 0 (top - 1)
      markAllocated mp (fromIntegral i)
      pure (Just (entryBuffer mp (fromIntegral i)))

-- | Gives one buffer back to its pool.
freeBuffer :: MemPool -> Buffer -> IO ()
freeBuffer mp b = do
  checkOwner mp
  top <- readPrimArray (mpTop mp) 0
  i <- checkedIndex mp b
  writePrimArray (mpStack mp) top (fromIntegral i)
  writePrimArray (mpTop mp) 0 (top + 1)

-- | @allocBatch pool arr off n@ writes up to @n@ buffers into @arr@ from
-- index @off@ and returns how many it wrote (fewer than @n@ only when the
-- pool runs out).
allocBatch :: MemPool -> BufferArray -> Int -> Int -> IO Int
allocBatch mp (BufferArray arr) off n = do
  checkOwner mp
  top <- readPrimArray (mpTop mp) 0
  let k = min n top
      go !j
        | j >= k = pure ()
        | otherwise = do
            i <- readPrimArray (mpStack mp) (top - 1 - j)
            markAllocated mp (fromIntegral i)
            writePrimArray arr (off + j) (entryPtr mp (fromIntegral i))
            go (j + 1)
  go 0
  writePrimArray (mpTop mp) 0 (top - k)
  pure k
{-# INLINE allocBatch #-}

-- | @freeBatch pool arr off n@ gives back the @n@ buffers of @arr@ from
-- index @off@. They must all belong to @pool@.
freeBatch :: MemPool -> BufferArray -> Int -> Int -> IO ()
freeBatch mp (BufferArray arr) off n = do
  checkOwner mp
  top <- readPrimArray (mpTop mp) 0
  -- The top moves with each buffer, so that a debug check failing half
  -- way leaves the pool consistent.
  let go !j
        | j >= n = pure ()
        | otherwise = do
            p <- readPrimArray arr (off + j)
            i <- checkedIndex mp (Buffer p)
            writePrimArray (mpStack mp) (top + j) (fromIntegral i)
            writePrimArray (mpTop mp) 0 (top + j + 1)
            go (j + 1)
  go 0
{-# INLINE freeBatch #-}

-- | @freeToOwners cache arr off n@ gives the @n@ buffers of @arr@ from
-- index @off@ back to the pools they came from, with one 'freeBatch' per
-- run of buffers of one pool. @cache@ holds the pool freed to last, tried
-- before a lookup ('lookupPool'); a transmit queue keeps one. Throws
-- 'UnknownPool' for a buffer of no live pool (the buffers before it are
-- freed, it and the rest are not).
freeToOwners :: IORef MemPool -> BufferArray -> Int -> Int -> IO ()
freeToOwners cache arr off n = go off
  where
    end = off + n
    go !i
      | i >= end = pure ()
      | otherwise = do
          pid <- bufferPoolId =<< readBuffer arr i
          j <- runEnd pid (i + 1)
          pool <- poolFor pid
          freeBatch pool arr i (j - i)
          go j
    runEnd !pid !j
      | j >= end = pure j
      | otherwise = do
          p <- bufferPoolId =<< readBuffer arr j
          if p == pid then runEnd pid (j + 1) else pure j
    poolFor pid = do
      cached <- readIORef cache
      if mpId cached == pid then pure cached else do
        m <- lookupPool pid
        case m of
          Just p -> writeIORef cache p >> pure p
          Nothing -> throwIO (UnknownPool pid)

entryPtr :: MemPool -> Int -> Ptr Word8
entryPtr mp i = mpBase mp `plusPtr` (i * bufferSize)
{-# INLINE entryPtr #-}

entryBuffer :: MemPool -> Int -> Buffer
entryBuffer mp i = Buffer (entryPtr mp i)

-- | The entry index of a buffer being freed, checked in debug mode.
checkedIndex :: MemPool -> Buffer -> IO Int
checkedIndex mp b@(Buffer p) = case mpDebug mp of
  Nothing -> pure $! (p `minusPtr` mpBase mp) `quot` bufferSize
  Just dbg -> do
    owner <- bufferPoolId b
    when (owner /= mpId mp) $ throwIO (ForeignBuffer owner (mpId mp))
    let i = (p `minusPtr` mpBase mp) `quot` bufferSize
    flag <- readPrimArray (dbgAllocated dbg) i
    when (flag == 0) $ throwIO (DoubleFree (mpId mp) i)
    writePrimArray (dbgAllocated dbg) i 0
    pure i
{-# INLINE checkedIndex #-}

markAllocated :: MemPool -> Int -> IO ()
markAllocated mp i = case mpDebug mp of
  Nothing -> pure ()
  Just dbg -> writePrimArray (dbgAllocated dbg) i 1
{-# INLINE markAllocated #-}

-- | In debug mode, the first capability to use a pool owns it.
checkOwner :: MemPool -> IO ()
checkOwner mp = case mpDebug mp of
  Nothing -> pure ()
  Just dbg -> do
    cap <- currentCapability
    owner <- readIORef (dbgOwner dbg)
    if owner < 0
      then writeIORef (dbgOwner dbg) cap
      else when (owner /= cap) $ throwIO (WrongCapability owner cap)
{-# INLINE checkOwner #-}

-- | Whether the kernel has huge pages set aside (@vm.nr_hugepages@ > 0).
hugePagesConfigured :: IO Bool
hugePagesConfigured = do
  r <- try (readFile "/proc/sys/vm/nr_hugepages" >>= \s -> length s `seq` pure s)
         :: IO (Either IOException String)
  pure $ case r of
    Right s | [(k, _)] <- reads s -> (k :: Int) > 0
    _ -> False

toBacking :: CInt -> Backing
toBacking 1 = HugePages
toBacking 2 = LockedMemory
toBacking _ = UnlockedMemory

fromBacking :: Backing -> CInt
fromBacking HugePages = 1
fromBacking LockedMemory = 2
fromBacking UnlockedMemory = 3

-- | A fixed-size, unboxed array of buffers: what 'allocBatch',
-- 'freeBatch' and the devices' batch calls fill and read.
newtype BufferArray = BufferArray (MutablePrimArray RealWorld (Ptr Word8))

-- | An array with room for @n@ buffers.
newBufferArray :: Int -> IO BufferArray
newBufferArray n = BufferArray <$> newPrimArray n

-- | How many buffers the array holds.
bufferArraySize :: BufferArray -> IO Int
bufferArraySize (BufferArray a) = getSizeofMutablePrimArray a

-- | The buffer at an index (no bounds check beyond the array's own).
readBuffer :: BufferArray -> Int -> IO Buffer
readBuffer (BufferArray a) i = Buffer <$> readPrimArray a i
{-# INLINE readBuffer #-}

-- | Stores a buffer at an index.
writeBuffer :: BufferArray -> Int -> Buffer -> IO ()
writeBuffer (BufferArray a) i (Buffer p) = writePrimArray a i p
{-# INLINE writeBuffer #-}

-- | Memory a device reads and writes by DMA (descriptor rings): locked
-- (or on huge pages), zeroed, page-aligned, and addressed by its virtual
-- address as buffers are ('bufferIova').
data DmaMemory = DmaMemory
  { dmaPtr     :: !(Ptr Word8)
  , dmaSize    :: !Int  -- ^ bytes
  , dmaBacking :: !CInt
  }

-- | Maps @n@ bytes of DMA memory. Throws an 'IOError' when nothing can be
-- mapped. Release it with 'freeDmaMemory' once the device has stopped.
newDmaMemory :: Int -> IO DmaMemory
newDmaMemory n = alloca $ \pb -> do
  huge <- hugePagesConfigured
  p <- mapMemory "newDmaMemory" (fromIntegral n) huge pb
  DmaMemory (castPtr p) n <$> peek pb

-- | Maps memory (huge pages if asked and available), writing how it is
-- backed; an 'IOError' with @mmap@'s errno if nothing can be mapped.
mapMemory :: String -> CSize -> Bool -> Ptr CInt -> IO (Ptr ())
mapMemory loc len huge backing = do
  p <- c_weft_pkt_map len (if huge then 1 else 0) backing
  if p /= nullPtr then pure p else getErrno >>= ioError . syscallError loc

-- | Unmaps DMA memory.
freeDmaMemory :: DmaMemory -> IO ()
freeDmaMemory d = void (c_weft_pkt_unmap (castPtr (dmaPtr d)) (fromIntegral (dmaSize d)) (dmaBacking d))

foreign import ccall unsafe "weft_pkt_map"
  c_weft_pkt_map :: CSize -> CInt -> Ptr CInt -> IO (Ptr ())
foreign import ccall unsafe "weft_pkt_unmap"
  c_weft_pkt_unmap :: Ptr () -> CSize -> CInt -> IO CInt
