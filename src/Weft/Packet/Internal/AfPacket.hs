{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | Backend A of "Weft.Packet": real traffic over Linux @AF_PACKET@
-- memory-mapped rings (kernel Documentation/networking/packet_mmap.rst).
-- Internal and unstable: weft's own modules and tests use it. Over 600
-- lines because both rings' frame protocols, the fanout set-up and the
-- device record share one frame layout and one mapping.
--
-- Each queue is one packet socket bound to the interface with a
-- @TPACKET_V2@ receive ring and a @TPACKET_V2@ transmit ring in one
-- mapping. With 'RxV3' the receive side is a @TPACKET_V3@ (block) ring on
-- its own socket, and transmission uses a second, send-only @TPACKET_V2@
-- socket. With more than one queue the receiving sockets form one
-- @PACKET_FANOUT_HASH@ group, so the kernel spreads flows over the queues
-- and delivers each frame to exactly one of them. (A socket must be
-- bound before it may join the group, so a frame arriving while the queues
-- are being opened can reach an earlier queue and the group both; open
-- before traffic starts.)
--
-- Transmit sockets use @PACKET_QDISC_BYPASS@ (by default; 'afpQdiscBypass')
-- and @PACKET_LOSS@ (a frame the kernel rejects is skipped instead of
-- stalling the ring). Receive sockets use @PACKET_IGNORE_OUTGOING@, and the
-- receive loop also skips any frame whose @sll_pkttype@ is
-- @PACKET_OUTGOING@, so a forwarder never receives its own transmissions.
--
-- The set-up calls are in @cbits/weft_afpacket.c@; everything done per
-- packet (status words, copies, the send kick) is here, in Haskell
-- (Note [Ring status handshake]).
--
-- Note [Frames that do not fit]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Receive: a frame the ring truncated (@tp_snaplen < tp_len@, when the
-- ring frame is smaller than the packet) or longer than a pool buffer
-- holds ('maxDataLength', 1984 bytes) is handed back to the kernel
-- unread, counted in 'afpRxTooLong' and in 'statRxDropped'. With the
-- default 2048-byte frames the ring holds at most 1982 bytes of a frame.
--
-- Transmit: a buffer shorter than an Ethernet header (14 bytes) or longer
-- than fits a transmit frame (frame size - 32) or the link (MTU + 14,
-- read at open) is taken and freed without being sent: it counts as taken
-- in 'txBatch''s result (the caller no longer owns it), not in
-- 'statTxPackets', and in 'afpTxInvalid'. Nothing of this kind ever
-- reaches the kernel, so it cannot stall the ring.
module Weft.Packet.Internal.AfPacket
  ( -- * Configuration
    AfPacketConfig (..)
  , RxVersion (..)
  , defaultAfPacketConfig
    -- * Opening
  , openAfPacket
  , AfPacket
  , openAfPacketHandle
  , afPacketDevice
    -- * Backend counters
  , AfPacketCounters (..)
  , afPacketCounters
  , afPacketFds
  ) where

import Control.Exception
import Control.Monad
import Data.Bits ((.&.))
import Data.IORef
import Data.Primitive.Array
import Data.Primitive.PrimArray
import Data.Word (Word16, Word32, Word64, Word8)
import Foreign.C.String (CString, peekCString, withCString)
import Foreign.C.Types
import Foreign.Marshal.Alloc (alloca, allocaBytes)
import Foreign.Ptr
import Foreign.Storable
import GHC.Exts (RealWorld)
import System.Posix.Types (CSsize (..), Fd (..))

import qualified Weft
import Weft.Packet.Internal.Device
import Weft.Packet.Internal.Headers (MacAddress (..))
import Weft.Packet.Internal.MemPool

-- Note [Ring status handshake]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A ring frame (V2) or block (V3) belongs to whoever its status word
-- says: the kernel fills a receive frame and then sets TP_STATUS_USER; we
-- read it and hand it back by storing TP_STATUS_KERNEL. A transmit frame
-- is ours while TP_STATUS_AVAILABLE (or WRONG_FORMAT); we fill it, store
-- TP_STATUS_SEND_REQUEST, and one send(fd, NULL, 0, MSG_DONTWAIT) per
-- batch makes the kernel send every requested frame, after which it
-- stores SENDING and, once the skb is gone, AVAILABLE.
--
-- What the kernel requires: that we read a frame's contents only after
-- seeing its status say we own it, and that our writes to the contents
-- are visible before the status store that hands it over. The kernel's
-- side is __packet_set_status/__packet_get_status: an smp_wmb() before
-- its status store and an smp_rmb() after its status load.
--
-- The hardware side (x86-64, TSO): loads are not reordered with older
-- loads, stores are not reordered with older stores, and stores are not
-- reordered with older loads. So (1) status load, then data loads: the
-- data loads see at least what the kernel wrote before its status store;
-- (2) data stores (memcpy, tp_len), then the status store: the kernel
-- sees the data once it sees the status; (3) receive: data loads (the
-- copy out of the frame), then the KERNEL status store: the kernel cannot
-- reuse the frame while we still read it. No fence instruction is needed
-- on x86-64. (On a weakly ordered CPU this code would need a load-acquire
-- of the status and a store-release of the new status; weft is x86-64
-- only here.)
--
-- The compiler side: every access is a Storable peek/poke, i.e. a
-- read/write primop threaded through the State# token, which GHC's
-- simplifier does not reorder or speculate, and which the Cmm sinking
-- pass does not move a store past another store or a load past a store
-- to possibly-aliasing memory. The copies are unsafe foreign calls to
-- memcpy, which Cmm treats as clobbering all memory, so nothing moves
-- across them either. The reads of tp_len/tp_snaplen/tp_mac happen only
-- in the branch taken after the status test, and GHC does not hoist loads
-- above a branch. The ring memory is a MAP_SHARED mapping outside the GHC
-- heap, so the garbage collector never moves it. The TX kick is a system
-- call and therefore a full barrier.

-- | Which receive ring to use.
data RxVersion
  = RxV2  -- ^ @TPACKET_V2@: one status word per frame (lowest latency; the default)
  | RxV3  -- ^ @TPACKET_V3@: blocks of frames, retired by the kernel when full or after 'afpV3RetireMs'
  deriving (Eq, Show)

-- | How to open an interface.
data AfPacketConfig = AfPacketConfig
  { afpRxVersion    :: !RxVersion
  , afpFrameSize    :: !Int
    -- ^ bytes per ring frame: a power of two from 256 to 65536 (default 2048)
  , afpRxFrames     :: !Int
    -- ^ V2 receive ring frames (default 4096); a multiple of
    -- @max 1 (4096 \/ afpFrameSize)@, the frames in one page-sized block
  , afpTxFrames     :: !Int
    -- ^ transmit ring frames (default 4096); the same rule
  , afpV3BlockSize  :: !Int
    -- ^ V3 block size in bytes: a power of two, at least a page and at
    -- least 'afpFrameSize' (default 256 KiB)
  , afpV3BlockCount :: !Int
    -- ^ V3 blocks (default 32: 8 MiB, as the V2 default)
  , afpV3RetireMs   :: !Int
    -- ^ V3 block retire timeout in ms; 0 lets the kernel choose (default 1)
  , afpQdiscBypass  :: !Bool
    -- ^ @PACKET_QDISC_BYPASS@ on the transmit sockets (default on)
  , afpPool         :: !PoolConfig
    -- ^ the pool each queue receives into (default 'defaultPoolConfig':
    -- 4096 buffers)
  }

-- | TPACKET_V2, 2048-byte frames, 4096 receive and 4096 transmit frames
-- per queue, QDISC_BYPASS on, 4096-buffer pools.
defaultAfPacketConfig :: AfPacketConfig
defaultAfPacketConfig = AfPacketConfig
  { afpRxVersion = RxV2
  , afpFrameSize = 2048
  , afpRxFrames = 4096
  , afpTxFrames = 4096
  , afpV3BlockSize = 256 * 1024
  , afpV3BlockCount = 32
  , afpV3RetireMs = 1
  , afpQdiscBypass = True
  , afpPool = defaultPoolConfig
  }

-- | Counters of this backend beyond 'DeviceStats', totals since open.
data AfPacketCounters = AfPacketCounters
  { afpRxTooLong     :: !Word64  -- ^ received frames dropped as too long (Note [Frames that do not fit])
  , afpTxInvalid     :: !Word64  -- ^ buffers taken by txBatch and dropped as too short or too long
  , afpKernelDrops   :: !Word64  -- ^ PACKET_STATISTICS tp_drops (ring full), as of the last 'readStats'
  , afpTxKicks       :: !Word64  -- ^ send() calls made by txBatch
  } deriving (Eq, Show)

-- | An open interface: the 'Device' and what only this backend has.
data AfPacket = AfPacket
  { apDevice :: Device
  , apQueues :: !(Array Queue)
  , apKernelDrops :: !(IORef Word64)
  }

-- | The 'Device' to drive.
afPacketDevice :: AfPacket -> Device
afPacketDevice = apDevice

-- | One queue: its sockets, rings, pool and counters.
data Queue = Queue
  { qRxFd      :: !CInt
  , qTxFd      :: !CInt      -- ^ the same as qRxFd with V2
  , qRxRing    :: !(Ptr Word8)
  , qTxRing    :: !(Ptr Word8)
  , qMaps      :: ![(Ptr Word8, Int)]  -- ^ what to unmap
  , qFrameSize :: !Int
  , qRxFrames  :: !Int       -- ^ V2 frames, or V3 blocks
  , qBlockSize :: !Int       -- ^ V3 only
  , qTxFrames  :: !Int
  , qTxMax     :: !Int       -- ^ the longest frame txBatch sends
  , qV3        :: !Bool
  , qPool      :: !MemPool
  , qLastPool  :: !(IORef MemPool)  -- ^ the pool txBatch freed to last ('freeToOwners')
  , qState     :: !(MutablePrimArray RealWorld Int)
  }

-- Cells of qState. Written only by the queue's owner thread, except
-- sClosed; read by readStats from any thread (word-sized, so a reading is
-- at worst a batch old).
sRxHead, sTxHead, sRxPkts, sRxBytes, sTxPkts, sTxBytes, sRxTooLong, sTxInvalid,
  sV3Left, sV3Off, sClosed, sKicks, sCells :: Int
sRxHead = 0     -- V2: next frame to look at; V3: current block
sTxHead = 1     -- next transmit frame to fill
sRxPkts = 2
sRxBytes = 3
sTxPkts = 4
sTxBytes = 5
sRxTooLong = 6
sTxInvalid = 7
sV3Left = 8     -- V3: packets left in the current block, -1 before it is opened
sV3Off = 9      -- V3: offset of the next packet in the block
sClosed = 10
sKicks = 11
sCells = 12

-- Kernel constants (linux/if_packet.h).
tpStatusKernel, tpStatusUser, tpStatusAvailable, tpStatusSendRequest, tpStatusWrongFormat :: Word32
tpStatusKernel = 0
tpStatusUser = 1
tpStatusAvailable = 0
tpStatusSendRequest = 1
tpStatusWrongFormat = 4

packetOutgoing :: Word8
packetOutgoing = 4

optVersion, optLoss, optQdiscBypass, optIgnoreOutgoing :: CInt
optVersion = 10
optLoss = 14
optQdiscBypass = 20
optIgnoreOutgoing = 23

-- Offsets in a TPACKET_V2 frame (struct tpacket2_hdr, then sockaddr_ll
-- at TPACKET_ALIGN(32)).
v2Len, v2Snaplen, v2Mac, v2PktType, v2TxData :: Int
v2Len = 4
v2Snaplen = 8
v2Mac = 12
v2PktType = 32 + 10
v2TxData = 32  -- TPACKET2_HDRLEN - sizeof (struct sockaddr_ll)

-- Offsets in a TPACKET_V3 block (struct tpacket_block_desc) and packet
-- (struct tpacket3_hdr, then sockaddr_ll at 48).
b3Status, b3NumPkts, b3FirstPkt :: Int
b3Status = 8
b3NumPkts = 12
b3FirstPkt = 16
p3Next, p3Snaplen, p3Len, p3Mac, p3PktType :: Int
p3Next = 0
p3Snaplen = 12
p3Len = 16
p3Mac = 24
p3PktType = 48 + 10

pageSize :: Int
pageSize = 4096

-- | Opens @ifname@ with @queues@ receive and transmit queues. Throws
-- 'DeviceInitFailed' (the device name is @afpacket:IFNAME@; the step says
-- which call failed and the errno text) when the interface is missing,
-- the caller lacks CAP_NET_RAW, the configuration is invalid (step
-- @config@), or a ring cannot be set up.
openAfPacket :: AfPacketConfig -> String -> Int -> IO Device
openAfPacket cfg ifname nq = afPacketDevice <$> openAfPacketHandle cfg ifname nq

-- | 'openAfPacket', keeping the backend's handle.
openAfPacketHandle :: AfPacketConfig -> String -> Int -> IO AfPacket
openAfPacketHandle cfg ifname nq = mask $ \restore -> do
  let name = "afpacket:" ++ ifname
      failWith step msg = throwIO (DeviceInitFailed name (step ++ ": " ++ msg))
  either (failWith "config") pure (validate cfg nq)
  cleanups <- newIORef []
  let addCleanup act = modifyIORef' cleanups (act :)
      runCleanups = readIORef cleanups >>= mapM_ (\a -> a `catch` \(SomeException _) -> pure ())
      check step act = do
        r <- act
        if r < 0 then errText (fromIntegral (negate r)) >>= failWith step
                 else pure (fromIntegral r :: Int)
  (`onException` runCleanups) $ restore $ do
    ifindex <- check "if_nametoindex" (withCString ifname c_ifindex)
    let fsz = afpFrameSize cfg
        v2Block = max pageSize fsz
        v3 = afpRxVersion cfg == RxV3
        txBytes = afpTxFrames cfg * fsz
        rxBytes | v3 = afpV3BlockSize cfg * afpV3BlockCount cfg
                | otherwise = afpRxFrames cfg * fsz
        newSock = do
          fd <- fromIntegral <$> check "socket" c_socket
          addCleanup (void (c_close fd))
          pure fd
        -- options first: the kernel refuses PACKET_LOSS once a ring exists
        setTxOpts fd = do
          when (afpQdiscBypass cfg) $
            void $ check "PACKET_QDISC_BYPASS" (c_setopt fd optQdiscBypass 1)
          void $ check "PACKET_LOSS" (c_setopt fd optLoss 1)
        setTxRing fd =
          void $ check "PACKET_TX_RING" $
            c_ring fd 1 0 (fromIntegral v2Block) (fromIntegral (txBytes `quot` v2Block))
                   (fromIntegral fsz) 0
        setRx fd = do
          -- older kernels lack it; the receive loop filters outgoing frames anyway
          _ <- c_setopt fd optIgnoreOutgoing 1
          void $ check "PACKET_RX_RING" $
            if v3 then c_ring fd 0 1 (fromIntegral (afpV3BlockSize cfg))
                              (fromIntegral (afpV3BlockCount cfg)) (fromIntegral fsz)
                              (fromIntegral (afpV3RetireMs cfg))
                  else c_ring fd 0 0 (fromIntegral v2Block) (fromIntegral (rxBytes `quot` v2Block))
                              (fromIntegral fsz) 0
        mapRing fd len = do
          p <- alloca $ \pp -> do
            void $ check "mmap" (c_mmap fd (fromIntegral len) pp)
            peek pp
          addCleanup (void (c_munmap p (fromIntegral len)))
          pure (castPtr p :: Ptr Word8)
    mtu <- do
      fd <- fromIntegral <$> check "socket" c_socket
      m <- withCString ifname (c_mtu fd)
      _ <- c_close fd
      if m < 0 then errText (fromIntegral (negate m)) >>= failWith "SIOCGIFMTU"
               else pure (fromIntegral m :: Int)
    fanoutRef <- newIORef (-1)
    let openQueue :: Int -> IO Queue
        openQueue _ = do
          rxFd <- newSock
          void $ check "PACKET_VERSION" (c_setopt rxFd optVersion (if v3 then 2 else 1))
          unless v3 (setTxOpts rxFd)
          setRx rxFd
          (txFd, rxRing, txRing, maps) <-
            if v3
              then do
                rxRing <- mapRing rxFd rxBytes
                txFd <- newSock
                void $ check "PACKET_VERSION" (c_setopt txFd optVersion 1)
                setTxOpts txFd
                setTxRing txFd
                txRing <- mapRing txFd txBytes
                -- send-only: bound without a protocol, it receives nothing
                void $ check "bind" (c_bind txFd (fromIntegral ifindex) 0)
                pure (txFd, rxRing, txRing, [(rxRing, rxBytes), (txRing, txBytes)])
              else do
                setTxRing rxFd
                ring <- mapRing rxFd (rxBytes + txBytes)
                pure (rxFd, ring, ring `plusPtr` rxBytes, [(ring, rxBytes + txBytes)])
          void $ check "bind" (c_bind rxFd (fromIntegral ifindex) 1)
          when (nq > 1) $ do
            gid <- readIORef fanoutRef
            gid' <- check "PACKET_FANOUT" (c_fanout rxFd (fromIntegral gid))
            writeIORef fanoutRef gid'
          pool <- newMemPool (afpPool cfg) `catch` \e ->
                    failWith "pool" (show (e :: IOException))
          addCleanup (destroyMemPool pool)
          lastRef <- newIORef pool
          st <- newPrimArray sCells
          setPrimArray st 0 sCells 0
          writePrimArray st sV3Left (-1)
          pure Queue
            { qRxFd = rxFd, qTxFd = txFd, qRxRing = rxRing, qTxRing = txRing, qMaps = maps
            , qFrameSize = fsz
            , qRxFrames = if v3 then afpV3BlockCount cfg else afpRxFrames cfg
            , qBlockSize = afpV3BlockSize cfg
            , qTxFrames = afpTxFrames cfg
            , qTxMax = min (fsz - v2TxData) (mtu + 14)
            , qV3 = v3, qPool = pool, qLastPool = lastRef, qState = st }
    qs <- arrayFromList <$> mapM openQueue [0 .. nq - 1]
    drops <- newIORef 0
    closed <- newIORef False
    let queue :: QueueId -> IO Queue
        queue q
          | q < 0 || q >= nq = throwIO (DeviceFault name ("no queue " ++ show q))
          | otherwise = do
              let qu = indexArray qs q
              c <- readPrimArray (qState qu) sClosed
              when (c /= 0) $ throwIO (DeviceFault name "device is closed")
              pure qu
        q0 = indexArray qs 0
        dev = Device
          { deviceName = name
          , rxQueueCount = nq
          , txQueueCount = nq
          , rxBatch = \q arr n -> queue q >>= \qu ->
              if qV3 qu then rxV3 qu arr n else rxV2 qu arr n
          , txBatch = \q arr n -> queue q >>= \qu -> txV2 qu arr n
          , rxPool = \q -> qPool (indexArray qs (max 0 (min (nq - 1) q)))
          , waitRx = \q -> queue q >>= \qu -> Weft.threadWaitRead (Fd (qRxFd qu))
          , readStats = do
              c <- readIORef closed
              unless c $ forM_ [0 .. nq - 1] $ \i -> do
                (_, d) <- kernelStats (qRxFd (indexArray qs i))
                atomicModifyIORef' drops (\x -> (x + d, ()))
              kd <- readIORef drops
              cs <- mapM (\i -> cells (indexArray qs i)) [0 .. nq - 1]
              let tot k = fromIntegral (sum (map (!! k) cs))
              pure DeviceStats
                { statRxPackets = tot sRxPkts
                , statTxPackets = tot sTxPkts
                , statRxBytes = tot sRxBytes
                , statTxBytes = tot sTxBytes
                , statRxDropped = kd + tot sRxTooLong }
          , setPromisc = \on -> do
              void (queue 0)
              r <- c_promisc (qRxFd q0) (fromIntegral ifindex) (if on then 1 else 0)
              when (r < 0) $ errText (fromIntegral (negate r)) >>=
                throwIO . DeviceFault name . ("PACKET_ADD/DROP_MEMBERSHIP: " ++)
          , linkSpeed = sysLinkSpeed ifname
          , macAddress = do
              void (queue 0)
              allocaBytes 8 $ \p -> do
                r <- withCString ifname $ \s -> c_hwaddr (qRxFd q0) s p
                when (r < 0) $ errText (fromIntegral (negate r)) >>=
                  throwIO . DeviceFault name . ("SIOCGIFHWADDR: " ++)
                bs <- mapM (\i -> fromIntegral <$> (peekByteOff p i :: IO Word8)) [0 .. 5]
                pure (MacAddress (foldl (\acc b -> acc * 256 + b) 0 bs))
          , closeDevice = do
              already <- atomicModifyIORef' closed (\c -> (True, c))
              unless already $ forM_ [0 .. nq - 1] $ \i -> do
                let qu = indexArray qs i
                writePrimArray (qState qu) sClosed 1
                Weft.closeFdWith (void . c_close . fdInt) (Fd (qRxFd qu))
                when (qTxFd qu /= qRxFd qu) $
                  Weft.closeFdWith (void . c_close . fdInt) (Fd (qTxFd qu))
                forM_ (qMaps qu) $ \(p, len) -> c_munmap p (fromIntegral len)
                -- Note [Closing with buffers out]
                free <- poolFreeCount (qPool qu)
                when (free == poolEntries (qPool qu)) $ destroyMemPool (qPool qu)
          }
    -- the cleanups were for a failed open; from here closeDevice owns it all
    writeIORef cleanups []
    pure AfPacket { apDevice = dev, apQueues = qs, apKernelDrops = drops }
  where
    fdInt (Fd x) = x

-- Note [Closing with buffers out]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- closeDevice closes the sockets (through weft's closeFdWith, so a thread
-- blocked in waitRx gets EBADF rather than a reused fd) and unmaps the
-- rings. It destroys a queue's pool only if every buffer is back in it.
-- If the caller still holds buffers (or has handed them to another
-- device's txBatch, which frees them to this pool later), the pool stays
-- mapped, so those buffers stay valid memory and can still be freed; its
-- memory is then leaked until the process ends. Batch calls after close
-- throw DeviceFault; close must not race with a batch call in progress.

-- | All counter cells of a queue.
cells :: Queue -> IO [Int]
cells qu = mapM (readPrimArray (qState qu)) [0 .. sCells - 1]

-- | The backend's own counters (totals over all queues).
afPacketCounters :: AfPacket -> IO AfPacketCounters
afPacketCounters h = do
  cs <- mapM cells (arrayToList (apQueues h))
  kd <- readIORef (apKernelDrops h)
  let tot k = fromIntegral (sum (map (!! k) cs))
  pure AfPacketCounters { afpRxTooLong = tot sRxTooLong, afpTxInvalid = tot sTxInvalid
                        , afpKernelDrops = kd, afpTxKicks = tot sKicks }

-- | The receive and transmit fds of each queue (equal with V2).
afPacketFds :: AfPacket -> [(Fd, Fd)]
afPacketFds h = [ (Fd (qRxFd q), Fd (qTxFd q)) | q <- arrayToList (apQueues h) ]

arrayToList :: Array a -> [a]
arrayToList a = [ indexArray a i | i <- [0 .. sizeofArray a - 1] ]

validate :: AfPacketConfig -> Int -> Either String ()
validate cfg nq
  | nq < 1 = Left ("queues must be at least 1, not " ++ show nq)
  | not (pow2 fsz) || fsz < 256 || fsz > 65536 =
      Left ("afpFrameSize must be a power of two from 256 to 65536, not " ++ show fsz)
  | bad (afpTxFrames cfg) = Left (framesMsg "afpTxFrames" (afpTxFrames cfg))
  | afpRxVersion cfg == RxV2 && bad (afpRxFrames cfg) = Left (framesMsg "afpRxFrames" (afpRxFrames cfg))
  | afpRxVersion cfg == RxV3 && (not (pow2 bs) || bs < pageSize || bs < fsz) =
      Left ("afpV3BlockSize must be a power of two of at least a page and afpFrameSize, not " ++ show bs)
  | afpRxVersion cfg == RxV3 && (afpV3BlockCount cfg < 1 || afpV3BlockCount cfg > 65536) =
      Left ("afpV3BlockCount must be from 1 to 65536, not " ++ show (afpV3BlockCount cfg))
  | afpV3RetireMs cfg < 0 = Left "afpV3RetireMs must not be negative"
  | poolSize (afpPool cfg) < 1 = Left "the pool size must be at least 1"
  | otherwise = Right ()
  where
    fsz = afpFrameSize cfg
    bs = afpV3BlockSize cfg
    perBlock = max 1 (pageSize `quot` fsz)
    bad k = k < perBlock || k `rem` perBlock /= 0 || k > 1048576
    framesMsg what k = what ++ " must be a positive multiple of " ++ show perBlock
                       ++ " (frames per page-sized block) up to 1048576, not " ++ show k
    pow2 x = x > 0 && x .&. (x - 1) == 0

-- | Receive on a V2 ring (Note [Ring status handshake]).
rxV2 :: Queue -> BufferArray -> Int -> IO Int
rxV2 qu arr n = do
  let st = qState qu
      base = qRxRing qu
      fsz = qFrameSize qu
      nfr = qRxFrames qu
      pool = qPool qu
      finish !h !k !bytes !long = do
        writePrimArray st sRxHead h
        when (k > 0) $ do
          addCell st sRxPkts k
          addCell st sRxBytes bytes
        when (long > 0) $ addCell st sRxTooLong long
        pure k
      go !h !k !bytes !long
        | k >= n = finish h k bytes long
        | otherwise = do
            let fr = base `plusPtr` (h * fsz) :: Ptr Word8
                h' = if h + 1 == nfr then 0 else h + 1
            status <- peekByteOff fr 0 :: IO Word32
            if status .&. tpStatusUser == 0
              then finish h k bytes long
              else do
                pkttype <- peekByteOff fr v2PktType :: IO Word8
                snap <- fromIntegral <$> (peekByteOff fr v2Snaplen :: IO Word32)
                len <- fromIntegral <$> (peekByteOff fr v2Len :: IO Word32)
                if pkttype == packetOutgoing
                  then pokeByteOff fr 0 tpStatusKernel >> go h' k bytes long
                  else if snap < len || snap > maxDataLength
                    then pokeByteOff fr 0 tpStatusKernel >> go h' k bytes (long + 1)
                    else do
                      got <- allocBatch pool arr k 1
                      if got == 0
                        then finish h k bytes long  -- pool empty: the frame stays in the ring
                        else do
                          mac <- fromIntegral <$> (peekByteOff fr v2Mac :: IO Word16)
                          b <- readBuffer arr k
                          _ <- c_memcpy (bufferData b) (fr `plusPtr` mac) (fromIntegral snap)
                          setBufferLength b snap
                          pokeByteOff fr 0 tpStatusKernel
                          go h' (k + 1) (bytes + snap) long
  if n <= 0 then pure 0 else do
    h0 <- readPrimArray st sRxHead
    go h0 0 0 0

-- | Receive on a V3 ring: walk the packets of each retired block, and
-- hand the block back once all of them are read. If the pool runs dry in
-- the middle of a block, the position is kept for the next call.
rxV3 :: Queue -> BufferArray -> Int -> IO Int
rxV3 qu arr n = do
  let st = qState qu
      nblk = qRxFrames qu
      bsz = qBlockSize qu
      pool = qPool qu
      finish !blk !left !off !k !bytes !long = do
        writePrimArray st sRxHead blk
        writePrimArray st sV3Left left
        writePrimArray st sV3Off off
        when (k > 0) $ do
          addCell st sRxPkts k
          addCell st sRxBytes bytes
        when (long > 0) $ addCell st sRxTooLong long
        pure k
      go !blk !left !off !k !bytes !long = do
        let bd = qRxRing qu `plusPtr` (blk * bsz) :: Ptr Word8
        if left < 0
          then do
            status <- peekByteOff bd b3Status :: IO Word32
            if status .&. tpStatusUser == 0
              then finish blk left off k bytes long
              else do
                np <- fromIntegral <$> (peekByteOff bd b3NumPkts :: IO Word32)
                first <- fromIntegral <$> (peekByteOff bd b3FirstPkt :: IO Word32)
                go blk np first k bytes long
          else if left == 0
            then do
              pokeByteOff bd b3Status tpStatusKernel
              go (if blk + 1 == nblk then 0 else blk + 1) (-1) 0 k bytes long
            else if k >= n
              then finish blk left off k bytes long
              else do
                let pk = bd `plusPtr` off :: Ptr Word8
                next <- fromIntegral <$> (peekByteOff pk p3Next :: IO Word32)
                pkttype <- peekByteOff pk p3PktType :: IO Word8
                snap <- fromIntegral <$> (peekByteOff pk p3Snaplen :: IO Word32)
                len <- fromIntegral <$> (peekByteOff pk p3Len :: IO Word32)
                if pkttype == packetOutgoing
                  then go blk (left - 1) (off + next) k bytes long
                  else if snap < len || snap > maxDataLength
                    then go blk (left - 1) (off + next) k bytes (long + 1)
                    else do
                      got <- allocBatch pool arr k 1
                      if got == 0
                        then finish blk left off k bytes long
                        else do
                          mac <- fromIntegral <$> (peekByteOff pk p3Mac :: IO Word16)
                          b <- readBuffer arr k
                          _ <- c_memcpy (bufferData b) (pk `plusPtr` mac) (fromIntegral snap)
                          setBufferLength b snap
                          go blk (left - 1) (off + next) (k + 1) (bytes + snap) long
  if n <= 0 then pure 0 else do
    blk <- readPrimArray st sRxHead
    left <- readPrimArray st sV3Left
    off <- readPrimArray st sV3Off
    go blk left off 0 0 0

-- | Transmit: copy into free frames, request them, free the taken
-- buffers to their pools, and kick the kernel once.
txV2 :: Queue -> BufferArray -> Int -> IO Int
txV2 qu arr n = do
  let st = qState qu
      base = qTxRing qu
      fsz = qFrameSize qu
      nfr = qTxFrames qu
      maxLen = qTxMax qu
      finish !i !h !queued !bytes !bad !full = do
        writePrimArray st sTxHead h
        freeToOwners (qLastPool qu) arr 0 i
        -- One kick per batch: when something was queued, or when the ring
        -- is full (frames the kernel could not send yet get another try).
        -- Its result is ignored: on a transient error (ENOBUFS, EAGAIN)
        -- the frames stay SEND_REQUEST and the next kick sends them.
        when (queued > 0 || full) $ do
          _ <- c_send (qTxFd qu) nullPtr 0 msgDontWait
          addCell st sKicks 1
        when (queued > 0) $ do
          addCell st sTxPkts queued
          addCell st sTxBytes bytes
        when (bad > 0) $ addCell st sTxInvalid bad
        pure i
      go !i !h !queued !bytes !bad
        | i >= n = finish i h queued bytes bad False
        | otherwise = do
            b <- readBuffer arr i
            len <- bufferLength b
            if len < 14 || len > maxLen
              then go (i + 1) h queued bytes (bad + 1)  -- taken and dropped
              else do
                let fr = base `plusPtr` (h * fsz) :: Ptr Word8
                status <- peekByteOff fr 0 :: IO Word32
                if status /= tpStatusAvailable && status /= tpStatusWrongFormat
                  then finish i h queued bytes bad True
                  else do
                    _ <- c_memcpy (fr `plusPtr` v2TxData) (bufferData b) (fromIntegral len)
                    pokeByteOff fr v2Len (fromIntegral len :: Word32)
                    pokeByteOff fr 0 tpStatusSendRequest
                    go (i + 1) (if h + 1 == nfr then 0 else h + 1) (queued + 1) (bytes + len) bad
  if n <= 0 then pure 0 else do
    h0 <- readPrimArray st sTxHead
    go 0 h0 (0 :: Int) 0 (0 :: Int)

addCell :: MutablePrimArray RealWorld Int -> Int -> Int -> IO ()
addCell st i d = readPrimArray st i >>= writePrimArray st i . (+ d)
{-# INLINE addCell #-}

-- | Packets and drops since the last call (the kernel clears them).
kernelStats :: CInt -> IO (Word64, Word64)
kernelStats fd = allocaBytes 16 $ \p -> do
  r <- c_stats fd p (p `plusPtr` 8)
  if r < 0 then pure (0, 0) else (,) <$> peekByteOff p 0 <*> peekByteOff p 8

-- | Mbit/s from sysfs: 0 when the link is not up (operstate not "up" or
-- "unknown"), the speed when the kernel knows it (veth: 10000), and -1
-- when the link is up but its speed is unknown (the kernel reports -1, or
-- the file cannot be read).
sysLinkSpeed :: String -> IO Int
sysLinkSpeed ifname = do
  oper <- readSys "operstate"
  case oper of
    Just s | s `notElem` ["up", "unknown"] -> pure 0
    _ -> do
      sp <- readSys "speed"
      pure $ case sp >>= readInt of
        Just v | v > 0 -> v
        _ -> -1
  where
    readSys f = do
      r <- try (readFile ("/sys/class/net/" ++ ifname ++ "/" ++ f) >>= \s -> length s `seq` pure s)
      pure $ case r of
        Right s -> Just (takeWhile (/= '\n') s)
        Left (_ :: IOException) -> Nothing
    readInt s = case reads s of
      [(v, "")] -> Just (v :: Int)
      _ -> Nothing

errText :: CInt -> IO String
errText e = c_strerror e >>= peekCString

msgDontWait :: CInt
msgDontWait = 0x40

foreign import ccall unsafe "string.h memcpy"
  c_memcpy :: Ptr a -> Ptr b -> CSize -> IO (Ptr ())
foreign import ccall unsafe "send"
  c_send :: CInt -> Ptr () -> CSize -> CInt -> IO CSsize
foreign import ccall unsafe "string.h strerror"
  c_strerror :: CInt -> IO CString

foreign import ccall unsafe "weft_afp_ifindex"
  c_ifindex :: CString -> IO CLong
foreign import ccall unsafe "weft_afp_socket"
  c_socket :: IO CLong
foreign import ccall unsafe "weft_afp_setopt"
  c_setopt :: CInt -> CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_afp_ring"
  c_ring :: CInt -> CInt -> CInt -> CUInt -> CUInt -> CUInt -> CUInt -> IO CLong
foreign import ccall unsafe "weft_afp_mmap"
  c_mmap :: CInt -> CSize -> Ptr (Ptr ()) -> IO CLong
foreign import ccall unsafe "weft_afp_munmap"
  c_munmap :: Ptr a -> CSize -> IO CLong
foreign import ccall unsafe "weft_afp_bind"
  c_bind :: CInt -> CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_afp_fanout"
  c_fanout :: CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_afp_stats"
  c_stats :: CInt -> Ptr Word64 -> Ptr Word64 -> IO CLong
foreign import ccall unsafe "weft_afp_promisc"
  c_promisc :: CInt -> CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_afp_hwaddr"
  c_hwaddr :: CInt -> CString -> Ptr Word8 -> IO CLong
foreign import ccall unsafe "weft_afp_mtu"
  c_mtu :: CInt -> CString -> IO CLong
foreign import ccall unsafe "weft_afp_close"
  c_close :: CInt -> IO CLong
