{-# LANGUAGE BangPatterns #-}
-- | A software Intel 82599: the register file and DMA engine behaviour
-- that weft's ixgbe driver ("Weft.Packet.Internal.Ixgbe") relies on, so that the
-- driver can run, and be tested and measured, without the hardware.
-- Internal and unstable: import "Weft.Packet", which re-exports what users need.
--
-- One model is one port with one receive and one transmit queue (queue
-- 0). What it does:
--
--   * __Registers.__ A write of @CTRL.RST@ resets every register and
--     starts a reset that completes after a few reads of @CTRL@ (which
--     read @RST@ set until then); then @EEC.ARD@ (EEPROM read) and
--     @RDRXCTL.DMAIDONE@ (DMA initialised) read set. A write of @AUTOC@
--     with @RESTART_AN@ brings the link up (10 Gbit/s in @LINKS@) after a
--     few reads of @LINKS@. Queue enable bits read back as written. The
--     statistics registers clear on read. @RAL@/@RAH@ hold the port's MAC
--     address, @02:00:00:00:00:NN@ for port NN.
--   * __DMA__ ('modelStep', or the engine thread of 'startModelEngine').
--     Transmit: every descriptor from @TDH@ up to @TDT@ is read, its frame
--     handed to the wire, its status written back with @DD@. Receive:
--     while @RDH@ has not reached @RDT@ and the wire has a frame, the
--     frame is copied to the descriptor's buffer and the descriptor
--     written back with its length and @DD|EOP@ (Note [The RDT
--     off-by-one]).
--   * __The wire__ ('Wire'): the port cabled to itself ('loopWire'), a
--     source or a sink for benchmarks ('sourceWire', 'sinkWire'), or a
--     real interface through an AF_PACKET device ('deviceWire').
--   * __Faults__ ('Fault'): a link that never comes up, a reset that never
--     completes, receive write-backs without @EOP@, a transmit descriptor
--     the device rejects (it then stops the queue by clearing
--     @TXDCTL.ENABLE@).
--
-- Frames are standard Ethernet frames without the CRC, up to
-- 'maxFrameLength' bytes; no jumbo frames, no offloads, no interrupts.
--
-- Note [Model memory ordering]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- The driver and the engine thread share the descriptor rings and the
-- head and tail registers, as a driver and a device share them through
-- PCIe. The driver writes a descriptor, then the tail register; the
-- engine reads the tail, then the descriptors below it; and the other way
-- round for write-backs (the engine writes the length, then the status
-- with @DD@; the driver reads @DD@, then the length). Each side's stores
-- are plain, in program order, and x86-64 keeps stores in order and loads
-- in order, so each side sees the other's writes in the order they were
-- made, as with a real device's posted writes. The statistics, which both
-- sides change (the engine counts, a driver's read clears), are atomic
-- counters.
module Weft.Packet.Internal.Ixgbe.Model
  ( -- * Models
    Model
  , ModelConfig (..)
  , defaultModelConfig
  , Fault (..)
  , newModel
  , modelWindow
  , modelStep
  , startModelEngine
  , stopModelEngine
  , modelMac
  , maxFrameLength
    -- * Wires
  , Wire (..)
  , loopWire
  , sourceWire
  , sinkWire
  , deviceWire
  ) where

import Control.Concurrent (forkIO, yield)
import Control.Concurrent.MVar
import Control.Exception (finally, mask_)
import Control.Monad
import Data.Bits
import Data.ByteString (ByteString)
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Primitive.PrimArray
import Data.Word
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, touchForeignPtr)
import Foreign.ForeignPtr.Unsafe (unsafeForeignPtrToPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr
import Foreign.Storable
import GHC.Exts (RealWorld)

import qualified Weft
import Weft.Internal.Counters
import Weft.Packet.Internal.Device (Device (..))
import Weft.Packet.Internal.Headers (MacAddress (..))
import Weft.Packet.Internal.Ixgbe.Registers
import Weft.Packet.Internal.MemPool

-- | A fault to inject.
data Fault
  = LinkStaysDown        -- ^ the link never comes up
  | ResetStuck           -- ^ @CTRL.RST@ never clears
  | CorruptRxWriteBack   -- ^ received frames are written back without @EOP@
  | CorruptTxDescriptor  -- ^ the first transmit descriptor is rejected as corrupt
  deriving (Eq, Show)

-- | How to build a model.
data ModelConfig = ModelConfig
  { mcPort       :: !Int         -- ^ port number, for the MAC address
  , mcFault      :: !(Maybe Fault)
  , mcResetReads :: !Int         -- ^ reads of @CTRL@ a reset takes
  , mcLinkReads  :: !Int         -- ^ reads of @LINKS@ until the link is up
  }

-- | Port 0, no fault, a reset of 3 reads and a link of 5.
defaultModelConfig :: ModelConfig
defaultModelConfig = ModelConfig { mcPort = 0, mcFault = Nothing, mcResetReads = 3, mcLinkReads = 5 }

-- | What a port is cabled to. Both functions are called by the model's
-- DMA step only, so from one thread at a time.
data Wire = Wire
  { wireTransmit :: Ptr Word8 -> Int -> IO ()
    -- ^ a frame the port sent; the bytes are valid during the call only
  , wireReceive  :: Ptr Word8 -> IO Int
    -- ^ copy the next frame for the port into the room given
    -- ('maxFrameLength' bytes) and return its length; 0 when none waits
  , wireDropped  :: IO Word64
    -- ^ frames lost on the wire so far for want of room at the receiver
  }

-- | The longest frame the model carries, in bytes, without the CRC.
maxFrameLength :: Int
maxFrameLength = 1518

-- | A software 82599 port.
data Model = Model
  { mRegs    :: !(MutablePrimArray RealWorld Word32)
    -- ^ the register file, indexed by offset / 4
  , mStats   :: !Counters
    -- ^ the clear-on-read statistics ('stGprc' ...), shared with readers
  , mState   :: !(MutablePrimArray RealWorld Int)
    -- ^ reset and link countdowns, octet-counter latches ('msReset' ...)
  , mConfig  :: !ModelConfig
  , mWire    :: !Wire
  , mEngine  :: !(MVar (Maybe (IORef Bool, MVar ())))
    -- ^ the running engine's stop flag and exit signal
  }

-- Statistics slots.
stGprc, stGptc, stGorc, stGotc, stMpc :: Int
stGprc = 0
stGptc = 1
stGorc = 2
stGotc = 3
stMpc = 4

-- State slots: reads of CTRL until a reset completes (-1: none running),
-- reads of LINKS until the link comes up (-1: not starting), the high
-- words of the octet counters latched by reading their low words, the
-- wire's drops already counted in MPC, and whether a transmit fault was
-- injected already.
msReset, msLink, msGorch, msGotch, msWireDrops, msTxFaulted :: Int
msReset = 0
msLink = 1
msGorch = 2
msGotch = 3
msWireDrops = 4
msTxFaulted = 5

registerWords :: Int
registerWords = (regEec + 4) `div` 4

-- | A model in its power-on state (as after a reset, with the link down).
newModel :: ModelConfig -> Wire -> IO Model
newModel cfg wire = do
  regs <- newPrimArray registerWords
  stats <- newCounters 5
  st <- newPrimArray 6
  setPrimArray st 0 6 0
  engine <- newMVar Nothing
  let m = Model regs stats st cfg wire engine
  powerOn m
  pure m

-- | The port's MAC address.
modelMac :: Model -> MacAddress
modelMac m = MacAddress (0x020000000000 .|. fromIntegral (mcPort (mConfig m) .&. 0xff))

-- | Every register to its reset value; the reset itself completes later.
powerOn :: Model -> IO ()
powerOn m = do
  setPrimArray (mRegs m) 0 registerWords 0
  forM_ [stGprc, stGptc, stGorc, stGotc, stMpc] $ \i -> writeCounter (mStats m) i 0
  let MacAddress mac = modelMac m
      byte k = fromIntegral ((mac `shiftR` (8 * (5 - k))) .&. 0xff) :: Word32
  setReg m regRal (byte 0 .|. byte 1 `shiftL` 8 .|. byte 2 `shiftL` 16 .|. byte 3 `shiftL` 24)
  setReg m regRah (byte 4 .|. byte 5 `shiftL` 8 .|. rahAv)
  writePrimArray (mState m) msReset (-1)
  writePrimArray (mState m) msLink (-1)
  setReg m regEec eecArd
  setReg m regRdrxctl rdrxctlDmaidone

getReg :: Model -> Int -> IO Word32
getReg m off = readPrimArray (mRegs m) (off `shiftR` 2)
{-# INLINE getReg #-}

setReg :: Model -> Int -> Word32 -> IO ()
setReg m off = writePrimArray (mRegs m) (off `shiftR` 2)
{-# INLINE setReg #-}

-- | The model's registers, for the driver.
modelWindow :: Model -> RegisterWindow
modelWindow m = RegisterWindow (readRegister m) (writeRegister m)

readRegister :: Model -> Int -> IO Word32
readRegister m off
  | off < 0 || off >= registerWords * 4 || off .&. 3 /= 0 = pure 0xffffffff
  | off == regCtrl = do
      left <- readPrimArray (mState m) msReset
      when (left > 0 && mcFault (mConfig m) /= Just ResetStuck) $ do
        writePrimArray (mState m) msReset (left - 1)
        when (left == 1) $ do
          -- The reset completes: the EEPROM is read and DMA is set up.
          v <- getReg m regCtrl
          setReg m regCtrl (v .&. complement (ctrlRst .|. ctrlLrst))
          setReg m regEec eecArd
          setReg m regRdrxctl rdrxctlDmaidone
      getReg m regCtrl
  | off == regLinks = do
      left <- readPrimArray (mState m) msLink
      when (left > 0 && mcFault (mConfig m) /= Just LinkStaysDown) $ do
        writePrimArray (mState m) msLink (left - 1)
        when (left == 1) $ setReg m regLinks (linksUp .|. linksSpeed10G)
      getReg m regLinks
  | off == regGprc = takeStat stGprc
  | off == regGptc = takeStat stGptc
  | off == regMpc = do
      countWireDrops m
      takeStat stMpc
  | off == regGorcl = takeOctets stGorc msGorch
  | off == regGotcl = takeOctets stGotc msGotch
  | off == regGorch = fromIntegral <$> readPrimArray (mState m) msGorch
  | off == regGotch = fromIntegral <$> readPrimArray (mState m) msGotch
  | otherwise = getReg m off
  where
    takeStat i = fromIntegral <$> exchangeZero (mStats m) i
    -- The octet counters are 36 bits: the low word's read latches the
    -- high bits for the next read of the high word.
    takeOctets i latch = do
      v <- exchangeZero (mStats m) i
      writePrimArray (mState m) latch ((v `shiftR` 32) .&. 0xf)
      pure (fromIntegral v)

-- | Reads a counter and sets it to zero, atomically.
exchangeZero :: Counters -> Int -> IO Int
exchangeZero c i = do
  v <- readCounter c i
  seen <- casCounter c i v 0
  if seen == v then pure v else exchangeZero c i

writeRegister :: Model -> Int -> Word32 -> IO ()
writeRegister m off v
  | off < 0 || off >= registerWords * 4 || off .&. 3 /= 0 = pure ()
  | off == regCtrl, v .&. ctrlRst /= 0 = do
      powerOn m
      -- RST and LRST read set until the reset completes; EEC and DMA are
      -- not ready before then.
      setReg m regCtrl (v .|. ctrlRst)
      setReg m regEec 0
      setReg m regRdrxctl 0
      writePrimArray (mState m) msReset (max 1 (mcResetReads (mConfig m)))
  | off == regAutoc = do
      setReg m regAutoc (v .&. complement autocRestartAn)
      when (v .&. autocRestartAn /= 0) $ do
        setReg m regLinks 0
        writePrimArray (mState m) msLink (max 1 (mcLinkReads (mConfig m)))
  | off `elem` readOnly = pure ()
  | otherwise = setReg m off v
  where
    readOnly = [regStatus, regLinks, regEec, regGprc, regGptc, regGorcl, regGorch, regGotcl, regGotch, regMpc]

-- | Frames the wire dropped since the last look, into MPC.
countWireDrops :: Model -> IO ()
countWireDrops m = do
  total <- fromIntegral <$> wireDropped (mWire m)
  seen <- readPrimArray (mState m) msWireDrops
  when (total > seen) $ do
    writePrimArray (mState m) msWireDrops total
    void (addCounter (mStats m) stMpc (total - seen))

------------------------------------------------------------------------------
-- DMA

-- Note [The RDT off-by-one]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- The device owns the receive descriptors from RDH up to but not
-- including RDT; it stops when RDH reaches RDT. So RDT names the first
-- descriptor the device must not fill, and a ring of N descriptors can
-- hold at most N - 1 received frames: with all N, RDH == RDT would mean
-- both "full" and "empty". The driver therefore starts with RDT = N - 1
-- and, after taking descriptors, sets RDT to the last one it re-armed
-- (not one past it). Transmit is the mirror image: the device sends from
-- TDH up to TDT, and the driver keeps one descriptor free so that TDT ==
-- TDH only ever means "nothing to send".

-- | One pass of the DMA engine: transmit everything queued, then receive
-- what the wire has into the descriptors available. Returns the number of
-- descriptors completed. Does nothing for a queue that is not enabled.
modelStep :: Model -> IO Int
modelStep m = do
  t <- stepTx m
  r <- stepRx m
  pure (t + r)

ringBase :: Model -> Int -> Int -> IO (Ptr Word8)
ringBase m lo hi = do
  l <- getReg m lo
  h <- getReg m hi
  pure (wordPtrToPtr (fromIntegral ((fromIntegral h :: Word64) `shiftL` 32 .|. fromIntegral l)))

stepTx :: Model -> IO Int
stepTx m = do
  ctl <- getReg m regTxdctl
  te <- getReg m regDmatxctl
  if ctl .&. queueEnable == 0 || te .&. dmatxctlTe == 0 then pure 0 else do
    base <- ringBase m regTdbal regTdbah
    size <- (`div` descriptorSize) . fromIntegral <$> getReg m regTdlen
    h0 <- fromIntegral <$> getReg m regTdh
    tail' <- fromIntegral <$> getReg m regTdt
    let go !h !done !bytes
          | h == tail' = finish h done bytes
          | otherwise = do
              let d = base `plusPtr` (h * descriptorSize)
              addr <- peekByteOff d txdBufferAddr :: IO Word64
              cmd <- peekByteOff d txdCmdTypeLen :: IO Word32
              corrupt <- injectTxFault
              let len = fromIntegral (cmd .&. 0xffff)
              if corrupt || cmd .&. txdCmdEop == 0 || len == 0 || len > maxFrameLength
                then do
                  -- A descriptor the device cannot process: it stops the
                  -- queue, as the 82599 does on a malformed descriptor.
                  setReg m regTxdctl (ctl .&. complement queueEnable)
                  finish h done bytes
                else do
                  wireTransmit (mWire m) (wordPtrToPtr (fromIntegral addr)) len
                  pokeByteOff d txdOlinfoStatus txdStatusDd
                  go (if h + 1 == size then 0 else h + 1) (done + 1) (bytes + len)
        finish h done bytes = do
          setReg m regTdh (fromIntegral h)
          when (done > 0) $ do
            void (addCounter (mStats m) stGptc done)
            void (addCounter (mStats m) stGotc bytes)
          pure done
    if size <= 0 || tail' >= size then pure 0 else go h0 0 0
  where
    injectTxFault
      | mcFault (mConfig m) /= Just CorruptTxDescriptor = pure False
      | otherwise = do
          before <- readPrimArray (mState m) msTxFaulted
          writePrimArray (mState m) msTxFaulted 1
          pure (before == 0)

stepRx :: Model -> IO Int
stepRx m = do
  ctl <- getReg m regRxdctl
  en <- getReg m regRxctrl
  if ctl .&. queueEnable == 0 || en .&. rxctrlRxen == 0 then pure 0 else do
    base <- ringBase m regRdbal regRdbah
    size <- (`div` descriptorSize) . fromIntegral <$> getReg m regRdlen
    h0 <- fromIntegral <$> getReg m regRdh
    tail' <- fromIntegral <$> getReg m regRdt
    let status = if mcFault (mConfig m) == Just CorruptRxWriteBack
                   then rxdStatusDd else rxdStatusDd .|. rxdStatusEop
        go !h !done !bytes
          | h == tail' = finish h done bytes
          | otherwise = do
              let d = base `plusPtr` (h * descriptorSize)
              addr <- peekByteOff d rxdPktAddr :: IO Word64
              len <- wireReceive (mWire m) (wordPtrToPtr (fromIntegral addr))
              if len <= 0 then finish h done bytes else do
                -- The length before the status: the driver polls DD.
                pokeByteOff d rxdLength (fromIntegral len :: Word16)
                pokeByteOff d rxdStatus status
                go (if h + 1 == size then 0 else h + 1) (done + 1) (bytes + len)
        finish h done bytes = do
          setReg m regRdh (fromIntegral h)
          when (done > 0) $ do
            void (addCounter (mStats m) stGprc done)
            void (addCounter (mStats m) stGorc bytes)
          pure done
    if size <= 0 || tail' >= size then pure 0 else go h0 0 0

-- | Runs the DMA engine on its own thread until 'stopModelEngine': a step
-- whenever there may be work, backing off to a 50 µs sleep after 64 idle
-- steps in a row. Does nothing if it is running already.
startModelEngine :: Model -> IO ()
startModelEngine m = modifyMVar_ (mEngine m) $ \cur -> case cur of
  Just _ -> pure cur
  Nothing -> do
    stop <- newIORef False
    done <- newEmptyMVar
    _ <- mask_ (forkIO (loop stop (0 :: Int) `finally` putMVar done ()))
    pure (Just (stop, done))
  where
    loop stop !idle = do
      halt <- readIORef stop
      unless halt $ do
        n <- modelStep m
        if n > 0 then yield >> loop stop 0
          else if idle < 64 then yield >> loop stop (idle + 1)
          else Weft.threadDelay 50 >> loop stop idle

-- | Stops the engine thread and waits until it has finished its step, so
-- that the rings and buffers it was reading may be released. Idempotent.
stopModelEngine :: Model -> IO ()
stopModelEngine m = modifyMVar_ (mEngine m) $ \cur -> do
  forM_ cur $ \(stop, done) -> atomicWriteIORef stop True >> readMVar done
  pure Nothing

------------------------------------------------------------------------------
-- Wires

-- | The port cabled to itself: what it sends, it receives, in order,
-- through a queue of up to @capacity@ frames. A frame sent when the queue
-- is full is dropped and counted ('wireDropped').
loopWire :: Int -> IO Wire
loopWire capacity = do
  let slot = maxFrameLength + 2
  store <- mallocForeignPtrBytes (capacity * slot) :: IO (ForeignPtr Word8)
  -- head (next to receive), count, drops
  st <- newPrimArray 3
  setPrimArray st 0 3 (0 :: Int)
  let slotPtr i = unsafeForeignPtrToPtr store `plusPtr` (i * slot)
      transmit src len = do
        n <- readPrimArray st 1
        if n >= capacity then readPrimArray st 2 >>= writePrimArray st 2 . (+ 1) else do
          h <- readPrimArray st 0
          let p = slotPtr ((h + n) `mod` capacity)
          pokeByteOff p 0 (fromIntegral len :: Word16)
          copyBytes (p `plusPtr` 2) src len
          writePrimArray st 1 (n + 1)
          touchForeignPtr store
      receive dst = do
        n <- readPrimArray st 1
        if n == 0 then pure 0 else do
          h <- readPrimArray st 0
          let p = slotPtr h
          len <- fromIntegral <$> (peekByteOff p 0 :: IO Word16)
          copyBytes dst (p `plusPtr` 2) len
          writePrimArray st 0 ((h + 1) `mod` capacity)
          writePrimArray st 1 (n - 1)
          touchForeignPtr store
          pure len
  pure Wire { wireTransmit = transmit, wireReceive = receive
            , wireDropped = fromIntegral <$> readPrimArray st 2 }

-- | A wire that always has the given frame waiting (cut to
-- 'maxFrameLength'); what the port sends is discarded.
sourceWire :: ByteString -> Wire
sourceWire frame = Wire
  { wireTransmit = \_ _ -> pure ()
  , wireReceive = \dst -> BU.unsafeUseAsCStringLen frame $ \(src, len) -> do
      let n = min len maxFrameLength
      copyBytes dst (castPtr src) n
      pure n
  , wireDropped = pure 0
  }

-- | A wire that counts what the port sends (frames and bytes, read with
-- the action returned) and never has anything to receive.
sinkWire :: IO (Wire, IO (Int, Int))
sinkWire = do
  c <- newCounters 2
  let wire = Wire
        { wireTransmit = \_ len -> bumpCounter c 0 1 >> bumpCounter c 1 len
        , wireReceive = \_ -> pure 0
        , wireDropped = pure 0
        }
  pure (wire, (,) <$> readCounter c 0 <*> readCounter c 1)

-- | A wire that is queue 0 of another device (an AF_PACKET interface, say):
-- frames the port sends are copied into buffers of the given pool and
-- sent there; frames received there are copied to the port and freed. A
-- frame the device does not take (its ring is full) is dropped and
-- counted. The pool and the device's receive pool are used from the
-- model's engine thread only.
deviceWire :: Device -> MemPool -> IO Wire
deviceWire dev pool = do
  out <- newBufferArray 1
  inbox <- newBufferArray 32
  -- next to hand out, how many are held, frames dropped
  st <- newPrimArray 3
  setPrimArray st 0 3 (0 :: Int)
  let rxPool0 = rxPool dev 0
      transmit src len = do
        got <- allocBatch pool out 0 1
        if got == 0 then drop1 else do
          b <- readBuffer out 0
          copyBytes (bufferData b) src len
          setBufferLength b len
          sent <- txBatch dev 0 out 1
          when (sent == 0) $ freeBatch pool out 0 1 >> drop1
      drop1 = readPrimArray st 2 >>= writePrimArray st 2 . (+ 1)
      receive dst = do
        held <- readPrimArray st 1
        next <- readPrimArray st 0
        if next < held then takeOne dst next held else do
          k <- rxBatch dev 0 inbox 32
          writePrimArray st 0 0
          writePrimArray st 1 k
          if k == 0 then pure 0 else takeOne dst 0 k
      takeOne dst i held = do
        b <- readBuffer inbox i
        len <- bufferLength b
        let n = min len maxFrameLength
        copyBytes dst (bufferData b) n
        freeBatch rxPool0 inbox i 1
        writePrimArray st 0 (i + 1)
        when (i + 1 == held) $ writePrimArray st 1 0 >> writePrimArray st 0 0
        pure n
  pure Wire { wireTransmit = transmit, wireReceive = receive
            , wireDropped = fromIntegral <$> readPrimArray st 2 }
