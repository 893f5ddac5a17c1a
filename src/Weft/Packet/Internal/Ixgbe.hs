{-# LANGUAGE BangPatterns #-}
-- | weft's driver for the Intel 82599 (ixgbe): one receive and one
-- transmit queue with advanced descriptors, written against a
-- 'RegisterWindow' and DMA memory, in the style of ixy's driver.
-- Internal and unstable: import "Weft.Packet", which re-exports what users need.
--
-- It runs against the software model of "Weft.Packet.Internal.Ixgbe.Model";
-- "Weft.Packet.Internal.Ixgbe.Registers" says what real hardware would need
-- (VFIO), which is not available here.
--
-- Note [Ixgbe buffer ownership]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Every receive descriptor always holds a buffer of the queue's pool: the
-- driver fills the ring at start-up, and when it takes a received buffer
-- out (handing it to the caller, Note [Batch ownership]) it puts a fresh
-- one in its place. A descriptor whose replacement cannot be allocated
-- (the pool is empty) is left as it is, done but not taken, until a later
-- 'rxBatch' finds a buffer for it; meanwhile the device stops at it.
--
-- A transmitted buffer belongs to the device from 'txBatch' until its
-- descriptor is done; the driver keeps it at the descriptor's index and
-- frees it when it cleans. Cleaning goes in batches of 32 (as ixy's
-- does): only when the 32nd descriptor after the clean index is done are
-- the 32 freed, with one 'freeToOwners'. A transmitted buffer may come
-- from any pool (a forwarder sends what another port received), so it
-- goes back to its own. So every pool whose buffers are given to
-- 'txBatch' must outlive the device, or at least its 'closeDevice'.
--
-- 'closeDevice' stops both queues and frees every buffer the rings hold,
-- so after it each pool is back to what its users hold.
module Weft.Packet.Internal.Ixgbe
  ( IxgbeConfig (..)
  , defaultIxgbeConfig
  , openIxgbe
  , cleanBatch
  ) where

import Control.Exception (onException, throwIO)
import Control.Monad
import Data.Bits
import Data.IORef
import Data.Primitive.PrimArray
import Data.Word
import Foreign.Ptr
import Foreign.Storable
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Exts (RealWorld)
import Numeric (showHex)

import qualified Weft
import Weft.Packet.Internal.Device
import Weft.Packet.Internal.Headers (MacAddress (..))
import Weft.Packet.Internal.Ixgbe.Registers
import Weft.Packet.Internal.MemPool
import Weft.Internal.Error (invalidArgument)

-- | How the driver sets a port up.
data IxgbeConfig = IxgbeConfig
  { ixRingSize         :: !Int   -- ^ descriptors per ring, a multiple of 32 from 32 to 4096
  , ixPoolSize         :: !Int   -- ^ buffers in the receive pool (more than the ring)
  , ixInitTimeoutMicros :: !Int  -- ^ how long each init step may wait for the device
  , ixLinkTimeoutMicros :: !Int  -- ^ how long to wait for the link
  , ixPoolDebug        :: !Bool  -- ^ the pool's debug checks ('poolDebug')
  }

-- | 512-descriptor rings, 4096 buffers, 1 s per init step, 2 s for the
-- link, no pool checks.
defaultIxgbeConfig :: IxgbeConfig
defaultIxgbeConfig = IxgbeConfig
  { ixRingSize = 512, ixPoolSize = 4096, ixInitTimeoutMicros = 1000000
  , ixLinkTimeoutMicros = 2000000, ixPoolDebug = False }

-- | Buffers freed per transmit clean (Note [Ixgbe buffer ownership]).
cleanBatch :: Int
cleanBatch = 32

-- | The state of one ring. Owned by the queue's single user thread.
data Ring = Ring
  { rDesc  :: !(Ptr Word8)                         -- ^ the descriptors
  , rSize  :: {-# UNPACK #-} !Int
  , rBufs  :: !BufferArray                         -- ^ the buffer at each descriptor
  , rIndex :: !(MutablePrimArray RealWorld Int)
    -- ^ receive: [next to look at]; transmit: [next free, next to clean]
  }

-- | Opens the port behind the register window (the name is for messages):
-- resets and initialises the device, sets up both rings, enables
-- promiscuous mode and waits for the link. Throws 'DeviceInitFailed' with
-- the step that failed (the device not coming out of reset, the EEPROM or
-- DMA not becoming ready, a queue not enabling, the link not coming up
-- within 'ixLinkTimeoutMicros'), or an 'InvalidArgument' 'IOError' for a bad
-- configuration.
--
-- The device's 'waitRx' sleeps 100 µs (the model has no interrupts and
-- no fd to wait on); its 'readStats' folds the clear-on-read hardware
-- counters into totals on each call, so concurrent readers must not
-- share a device's stats.
openIxgbe :: IxgbeConfig -> String -> RegisterWindow -> IO Device
openIxgbe cfg name win = do
  let n = ixRingSize cfg
  when (n < 32 || n > 4096 || n `mod` cleanBatch /= 0) $
    ioError (invalidArgument "openIxgbe" ("the ring size must be a multiple of 32 from 32 to 4096, not " ++ show n))
  when (ixPoolSize cfg <= n) $
    ioError (invalidArgument "openIxgbe" "the pool must have more buffers than the ring")
  let rd = regRead win
      wr = regWrite win
      setBits r b = rd r >>= wr r . (.|. b)
      clearBits r b = rd r >>= wr r . (.&. complement b)
      waitFor = waitUntil name (ixInitTimeoutMicros cfg)
  -- Interrupts off, global reset, interrupts off again (the reset turns
  -- them back on).
  wr regEimc 0x7fffffff
  wr regCtrl (ctrlRst .|. ctrlLrst)
  waitFor "reset" "CTRL.RST to clear" regCtrl rd (\v -> v .&. ctrlRst == 0)
  Weft.threadDelay 1000
  wr regEimc 0x7fffffff
  waitFor "EEPROM" "EEC.ARD (EEPROM auto-read done)" regEec rd (\v -> v .&. eecArd /= 0)
  waitFor "DMA init" "RDRXCTL.DMAIDONE" regRdrxctl rd (\v -> v .&. rdrxctlDmaidone /= 0)
  -- Link: 10G serial, restart auto-negotiation.
  autoc <- rd regAutoc
  wr regAutoc ((autoc .&. complement autocLmsMask) .|. autocLms10GSerial .|. autocRestartAn)
  -- Statistics: reading clears them.
  mapM_ rd [regGprc, regGptc, regGorcl, regGorch, regGotcl, regGotch, regMpc]
  -- Receive: off while configured; CRC stripped; one ring with advanced
  -- one-buffer descriptors of 2 KiB.
  wr regRxctrl 0
  setBits regHlreg0 hlreg0RxCrcStrp
  pool <- newMemPool defaultPoolConfig { poolSize = ixPoolSize cfg, poolDebug = ixPoolDebug cfg }
  let ringBytes = n * descriptorSize
  rxMem <- newDmaMemory ringBytes `onException` destroyMemPool pool
  txMem <- newDmaMemory ringBytes `onException` (freeDmaMemory rxMem >> destroyMemPool pool)
  let release = freeDmaMemory rxMem >> freeDmaMemory txMem >> destroyMemPool pool
  (rx, tx) <- (`onException` release) $ do
    srrctl <- rd regSrrctl
    wr regSrrctl ((srrctl .&. complement (srrctlDescMask .|. srrctlBsizeMask)) .|. srrctlDescAdvOneBuf .|. 2)
    setRingBase wr regRdbal regRdbah regRdlen (dmaPtr rxMem) ringBytes
    rx <- newRing (dmaPtr rxMem) n
    filled <- allocBatch pool (rBufs rx) 0 n
    when (filled < n) $ throwIO (DeviceInitFailed name "RX init: the pool cannot fill the ring")
    forM_ [0 .. n - 1] $ \i -> do
      b <- readBuffer (rBufs rx) i
      armRx (rDesc rx) i b
    wr regRdh 0
    -- Note [The RDT off-by-one] in Weft.Packet.Internal.Ixgbe.Model.
    wr regRdt (fromIntegral (n - 1))
    -- Transmit: CRC appended by the device, one ring, transmit DMA on.
    setBits regHlreg0 hlreg0TxCrcEn
    setRingBase wr regTdbal regTdbah regTdlen (dmaPtr txMem) ringBytes
    wr regTdh 0
    wr regTdt 0
    setBits regDmatxctl dmatxctlTe
    tx <- newRing (dmaPtr txMem) n
    -- Queues on, then receive on.
    setBits regRxdctl queueEnable
    waitFor "RX queue enable" "RXDCTL.ENABLE" regRxdctl rd (\v -> v .&. queueEnable /= 0)
    setBits regTxdctl queueEnable
    waitFor "TX queue enable" "TXDCTL.ENABLE" regTxdctl rd (\v -> v .&. queueEnable /= 0)
    setBits regRxctrl rxctrlRxen
    setBits regFctrl (fctrlMpe .|. fctrlUpe .|. fctrlBam)
    waitUntil name (ixLinkTimeoutMicros cfg) "link" "LINKS.LINK_UP" regLinks rd (\v -> v .&. linksUp /= 0)
    pure (rx, tx)
  totals <- newIORef zeroStats
  spares <- newBufferArray 256
  lastPool <- newIORef pool
  closed <- newIORef False
  let queue0 call what q = when (q /= 0) $
        ioError (invalidArgument call (name ++ " has one " ++ what ++ " queue, not queue " ++ show q))
  pure Device
    { deviceName = name
    , rxQueueCount = 1
    , txQueueCount = 1
    , rxBatch = \q arr k -> queue0 "rxBatch" "receive" q >> receiveBatch name win pool spares rx arr k
    , txBatch = \q arr k -> queue0 "txBatch" "transmit" q >> transmitBatch name win lastPool tx arr k
    , rxPool = const pool
    , waitRx = \_ -> Weft.threadDelay 100
    , readStats = readTotals win totals
    , setPromisc = \on -> (if on then setBits else clearBits) regFctrl (fctrlMpe .|. fctrlUpe)
    , linkSpeed = linkSpeedOf <$> rd regLinks
    , macAddress = macOf <$> rd regRal <*> rd regRah
    , closeDevice = do
        already <- atomicModifyIORef' closed (\c -> (True, c))
        unless already $ do
          wr regRxctrl 0
          clearBits regRxdctl queueEnable
          clearBits regTxdctl queueEnable
          -- Every buffer still on a ring goes back (Note [Ixgbe buffer
          -- ownership]): all of the receive ring, and the transmit
          -- descriptors not yet cleaned.
          freeBatch pool (rBufs rx) 0 n
          next <- readPrimArray (rIndex tx) 0
          clean <- readPrimArray (rIndex tx) 1
          let inFlight = (next - clean) `mod` n
              firstRun = min inFlight (n - clean)
          freeToOwners lastPool (rBufs tx) clean firstRun
          freeToOwners lastPool (rBufs tx) 0 (inFlight - firstRun)
          freeDmaMemory rxMem
          freeDmaMemory txMem
    }

-- | Polls a register until the condition holds, for at most @micros@.
waitUntil :: String -> Int -> String -> String -> Int -> (Int -> IO Word32) -> (Word32 -> Bool) -> IO ()
waitUntil name micros step expected reg rd ok = do
  start <- getMonotonicTimeNSec
  let deadline = start + fromIntegral micros * 1000
      go = do
        v <- rd reg
        unless (ok v) $ do
          now <- getMonotonicTimeNSec
          if now >= deadline
            then throwIO (DeviceInitFailed name (step ++ ": waited " ++ show (micros `div` 1000)
                          ++ " ms for " ++ expected ++ "; the register reads 0x" ++ showHex v ""))
            else Weft.threadDelay 100 >> go
  go

setRingBase :: (Int -> Word32 -> IO ()) -> Int -> Int -> Int -> Ptr Word8 -> Int -> IO ()
setRingBase wr lo hi len base bytes = do
  let addr = fromIntegral (ptrToWordPtr base) :: Word64
  wr lo (fromIntegral (addr .&. 0xffffffff))
  wr hi (fromIntegral (addr `shiftR` 32))
  wr len (fromIntegral bytes)

newRing :: Ptr Word8 -> Int -> IO Ring
newRing desc n = do
  bufs <- newBufferArray n
  idx <- newPrimArray 2
  setPrimArray idx 0 2 0
  pure (Ring desc n bufs idx)

-- | Gives descriptor @i@ the buffer to receive into; clears its DD.
armRx :: Ptr Word8 -> Int -> Buffer -> IO ()
armRx desc i b = do
  let d = desc `plusPtr` (i * descriptorSize)
  iova <- bufferIova b
  pokeByteOff d rxdPktAddr iova
  pokeByteOff d rxdHdrAddr (0 :: Word64)
{-# INLINE armRx #-}

-- | rxBatch (Note [Batch ownership], Note [Ixgbe buffer ownership]).
receiveBatch :: String -> RegisterWindow -> MemPool -> BufferArray -> Ring -> BufferArray -> Int -> IO Int
receiveBatch name win pool spares ring arr n0 = do
  n <- min n0 <$> bufferArraySize spares
  idx0 <- readPrimArray (rIndex ring) 0
  -- Replacements first, in one batch; the unused ones go back at the end.
  have <- allocBatch pool spares 0 n
  let size = rSize ring
      go !i !idx
        | i >= have = finish i idx
        | otherwise = do
            let d = rDesc ring `plusPtr` (idx * descriptorSize)
            status <- peekByteOff d rxdStatus :: IO Word32
            if status .&. rxdStatusDd == 0 then finish i idx else do
              when (status .&. rxdStatusEop == 0) $ do
                freeBatch pool spares i (have - i)
                throwIO (DeviceFault name ("receive descriptor " ++ show idx
                  ++ " is done without EOP: frames over several descriptors are not supported"))
              len <- peekByteOff d rxdLength :: IO Word16
              got <- readBuffer (rBufs ring) idx
              setBufferLength got (fromIntegral len)
              fresh <- readBuffer spares i
              armRx (rDesc ring) idx fresh
              writeBuffer (rBufs ring) idx fresh
              writeBuffer arr i got
              go (i + 1) (if idx + 1 == size then 0 else idx + 1)
      finish !i !idx = do
        when (have > i) $ freeBatch pool spares i (have - i)
        when (i > 0) $ do
          writePrimArray (rIndex ring) 0 idx
          -- The last descriptor re-armed (Note [The RDT off-by-one]).
          regWrite win regRdt (fromIntegral (if idx == 0 then size - 1 else idx - 1))
        pure i
  if n <= 0 then pure 0 else go 0 idx0
{-# INLINE receiveBatch #-}

-- | txBatch (Note [Batch ownership], Note [Ixgbe buffer ownership]).
transmitBatch :: String -> RegisterWindow -> IORef MemPool -> Ring -> BufferArray -> Int -> IO Int
transmitBatch name win lastPool ring arr n = do
  let size = rSize ring
      idxs = rIndex ring
  -- Clean: free each run of 32 whose last descriptor is done.
  let clean !c = do
        next <- readPrimArray idxs 0
        let inFlight = (next - c) `mod` size
            lastOfRun = (c + cleanBatch - 1) `mod` size
        if inFlight < cleanBatch then pure c else do
          st <- peekByteOff (rDesc ring `plusPtr` (lastOfRun * descriptorSize)) txdOlinfoStatus :: IO Word32
          if st .&. txdStatusDd == 0 then pure c else do
            -- Runs of 32 never wrap: the ring size is a multiple of 32.
            freeToOwners lastPool (rBufs ring) c cleanBatch
            clean (if c + cleanBatch == size then 0 else c + cleanBatch)
  c0 <- readPrimArray idxs 1
  cleaned <- clean c0
  writePrimArray idxs 1 cleaned
  next0 <- readPrimArray idxs 0
  let go !i !idx
        | i >= n = finish i idx
        | otherwise = do
            let idx' = if idx + 1 == size then 0 else idx + 1
            if idx' == cleaned then finish i idx else do
              b <- readBuffer arr i
              iova <- bufferIova b
              len <- bufferLength b
              let d = rDesc ring `plusPtr` (idx * descriptorSize)
              pokeByteOff d txdBufferAddr iova
              pokeByteOff d txdCmdTypeLen (txdCmdBits .|. fromIntegral len)
              pokeByteOff d txdOlinfoStatus (fromIntegral len `shiftL` txdPaylenShift :: Word32)
              writeBuffer (rBufs ring) idx b
              go (i + 1) idx'
      finish !i !idx = do
        when (i > 0) $ do
          writePrimArray idxs 0 idx
          regWrite win regTdt (fromIntegral idx)
        -- A full ring that the device does not drain may be a stopped
        -- queue: the device clears TXDCTL.ENABLE on a descriptor it
        -- rejects. Checked only when nothing fit, off the common path.
        when (i == 0 && n > 0) $ do
          ctl <- regRead win regTxdctl
          when (ctl .&. queueEnable == 0) $
            throwIO (DeviceFault name "the device stopped the transmit queue (TXDCTL.ENABLE cleared): it rejected a descriptor")
        pure i
  go 0 next0
{-# INLINE transmitBatch #-}

-- | Folds the clear-on-read counters into the totals and returns them.
readTotals :: RegisterWindow -> IORef DeviceStats -> IO DeviceStats
readTotals win totals = do
  let rd = regRead win
      wide lo hi = do
        l <- rd lo
        h <- rd hi
        pure ((fromIntegral h `shiftL` 32) .|. fromIntegral l :: Word64)
  rxp <- fromIntegral <$> rd regGprc
  txp <- fromIntegral <$> rd regGptc
  rxb <- wide regGorcl regGorch
  txb <- wide regGotcl regGotch
  miss <- fromIntegral <$> rd regMpc
  atomicModifyIORef' totals $ \s ->
    let s' = s { statRxPackets = statRxPackets s + rxp, statTxPackets = statTxPackets s + txp
               , statRxBytes = statRxBytes s + rxb, statTxBytes = statTxBytes s + txb
               , statRxDropped = statRxDropped s + miss }
    in (s', s')

linkSpeedOf :: Word32 -> Int
linkSpeedOf v
  | v .&. linksUp == 0 = 0
  | otherwise = case v .&. linksSpeedMask of
      s | s == linksSpeed10G -> 10000
        | s == linksSpeed1G -> 1000
        | s == linksSpeed100M -> 100
        | otherwise -> -1

macOf :: Word32 -> Word32 -> MacAddress
macOf ral rah =
  let b k = fromIntegral ((if k < 4 then ral `shiftR` (8 * k) else rah `shiftR` (8 * (k - 4))) .&. 0xff) :: Word64
  in MacAddress (foldl (\acc k -> acc `shiftL` 8 .|. b k) 0 [0 .. 5])
