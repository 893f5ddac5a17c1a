{-# LANGUAGE ScopedTypeVariables #-}
-- | Backend B: weft's ixgbe driver against the 82599 model — init, the
-- ring invariants, each injected fault, statistics, and the leak check;
-- and end to end over a veth pair, with the model's wire on AF_PACKET.
module Test.Ixgbe (spec) where

import Control.Exception
import Control.Monad
import Data.List (isInfixOf)
import Data.Word (Word8)
import Foreign.Storable
import Test.Hspec

import Support (within)
import Test.AfPacket (fillFrame, onCap0, recvN, sendAll, seqOf, withVeth)
import Weft.Packet
import Weft.Packet.Internal.AfPacket (defaultAfPacketConfig, openAfPacket)
import Weft.Packet.Internal.Ixgbe.Registers

spec :: Spec
spec = describe "Ixgbe on the 82599 model" $ do
  it "initialises: link at 10 Gbit/s, the port's MAC, RDH 0 and RDT one short of the ring" $
    withModel 5 Nothing True $ \m dev -> do
      linkSpeed dev `shouldReturn` 10000
      show <$> macAddress dev `shouldReturn` "02:00:00:00:00:05"
      let win = modelWindow m
      regRead win regRdh `shouldReturn` 0
      -- Note [The RDT off-by-one]: 511 of 512 descriptors are the device's.
      regRead win regRdt `shouldReturn` 511

  it "loops 1,500 frames (three times round the rings) exactly once, in order, with exact stats" $
    withGen $ \gen -> withModel 0 Nothing True $ \_ dev -> do
      let go s | s >= 1500 = pure []
               | otherwise = do
                   sent <- sendAll gen dev s 100 32
                   sent `shouldBe` 100
                   (++) <$> recvN dev 0 100 <*> go (s + 100)
      got <- go 0
      got `shouldBe` [0 .. 1499]
      st <- readStats dev
      statRxPackets st `shouldBe` 1500
      statTxPackets st `shouldBe` 1500
      statRxBytes st `shouldBe` 1500 * 60
      statTxBytes st `shouldBe` 1500 * 60
      statRxDropped st `shouldBe` 0
      -- Totals: no traffic, no change.
      readStats dev `shouldReturn` st

  it "a full transmit ring takes 511 frames, leaves the rest to the caller, and more once cleaned" $
    withGen $ \gen -> withModel 0 Nothing False $ \m dev -> do
      arr <- newBufferArray 600
      n <- allocBatch gen arr 0 600
      n `shouldBe` 600
      forM_ [0 .. 599] $ \i -> readBuffer arr i >>= \b -> fillFrame b i
      taken <- txBatch dev 0 arr 600
      taken `shouldBe` 511
      -- The caller's buffers are untouched.
      rest <- forM [511 .. 599] $ \i -> readBuffer arr i >>= seqOf
      rest `shouldBe` map Just [511 .. 599]
      txBatch dev 0 arr 0 `shouldReturn` 0
      -- Not one more fits until the device has sent some.
      moveDown arr 511 89
      txBatch dev 0 arr 89 `shouldReturn` 0
      done <- modelStep m
      done `shouldSatisfy` (>= 511)
      -- The cleaning frees runs of 32 whose last descriptor is done, so
      -- now the 89 fit.
      txBatch dev 0 arr 89 `shouldReturn` 89
      -- The 511 + 89 that were sent come back in order.
      _ <- modelStep m
      got <- recvDrained m dev 600
      got `shouldBe` [0 .. 599]

  it "reports a receive write-back without EOP as a DeviceFault" $
    withGen $ \gen -> withModel 0 (Just CorruptRxWriteBack) True $ \_ dev -> do
      _ <- sendAll gen dev 0 10 10
      arr <- newBufferArray 32
      let poll k = do
            r <- try (rxBatch dev 0 arr 32)
            case r of
              Left (DeviceFault _ why) -> why `shouldContain` "without EOP"
              Left e -> expectationFailure ("unexpected " ++ show e)
              Right got | got > 0 -> expectationFailure "received a frame without EOP"
                        | k > (3000 :: Int) -> expectationFailure "no frame came back"
                        | otherwise -> waitRx dev 0 >> poll (k + 1)
      poll 0

  it "reports a rejected transmit descriptor as a DeviceFault instead of hanging" $
    withGen $ \gen -> withModel 0 (Just CorruptTxDescriptor) True $ \_ dev -> do
      arr <- newBufferArray 32
      let push k = do
            n <- allocBatch gen arr 0 32
            forM_ [0 .. n - 1] $ \i -> readBuffer arr i >>= \b -> fillFrame b i
            r <- try (txBatch dev 0 arr n)
            case r of
              Left (DeviceFault _ why) -> do
                freeBatch gen arr 0 n
                why `shouldContain` "TXDCTL.ENABLE"
              Left e -> expectationFailure ("unexpected " ++ show e)
              Right t -> do
                freeBatch gen arr t (n - t)
                if k > (2000 :: Int) then expectationFailure "the stopped queue was never reported"
                  else waitRx dev 0 >> push (k + 1)
      push 0

  forM_ [ (ResetStuck, "reset: waited", "CTRL.RST")
        , (LinkStaysDown, "link: waited", "LINKS.LINK_UP") ] $ \(fault, step, reg) ->
    it ("fails init with the step and the register when " ++ show fault) $ do
      wire <- loopWire 64
      m <- newModel defaultModelConfig { mcFault = Just fault } wire
      r <- within 5 "init" (try (openIxgbe quickInit "model:test" (modelWindow m)))
      case r of
        Left (DeviceInitFailed n why) -> do
          n `shouldBe` "model:test"
          why `shouldSatisfy` (step `isInfixOf`)
          why `shouldSatisfy` (reg `isInfixOf`)
        Left e -> expectationFailure ("unexpected " ++ show e)
        Right d -> closeDevice d >> expectationFailure "init succeeded on a faulty device"

  it "counts frames lost for want of room as dropped, and returns every buffer on close" $ do
    -- A wire that holds 64 frames: a burst of 300 overflows it.
    wire <- loopWire 64
    m <- newModel defaultModelConfig wire
    startModelEngine m
    dev <- onCap0 (openIxgbe quickInit "model:leak" (modelWindow m))
    let pool = rxPool dev 0
    withGen $ \gen -> do
      onCap0 $ do
        _ <- sendAll gen dev 0 300 300
        got <- recvN dev 0 300
        st <- readStats dev
        statRxDropped st `shouldSatisfy` (> 0)
        (length got, fromIntegral (statRxDropped st)) `shouldSatisfy` (\(g, d) -> g + d == 300)
        statRxPackets st `shouldBe` fromIntegral (length got)
        -- Some in flight on the transmit ring, some on the wire, at close.
        _ <- sendAll gen dev 300 40 40
        stopModelEngine m
        closeDevice dev
        closeDevice dev
      poolFreeCount gen `shouldReturn` poolEntries gen
      poolFreeCount pool `shouldReturn` poolEntries pool

  it "openDevice opens model names and rejects bad options clearly" $ do
    onCap0 $ bracket (openDevice "model:3:loop") closeDevice $ \dev -> do
      deviceName dev `shouldBe` "model:3:loop"
      show <$> macAddress dev `shouldReturn` "02:00:00:00:00:03"
    r <- try (openDevice "model:1:fault=sparks")
    case r of
      Left (BadDeviceName _ why) -> why `shouldContain` "unknown fault"
      other -> either (\e -> expectationFailure (show e)) closeDevice other
        >> expectationFailure "accepted an unknown fault"

  it "end to end over veth: frames through a model port whose wire is AF_PACKET, counted exactly" $
    withVeth $ \(a, b) -> withGen $ \gen -> onCap0 $
      bracket (openDevice ("model:0:wire=" ++ a)) closeDevice $ \model ->
        bracket (openAfPacket defaultAfPacketConfig b 1) closeDevice $ \peer -> do
          -- model -> veth -> peer
          sent <- sendAll gen model 0 300 32
          sent `shouldBe` 300
          recvN peer 0 300 `shouldReturn` [0 .. 299]
          -- peer -> veth -> model
          sent' <- sendAll gen peer 1000 300 32
          sent' `shouldBe` 300
          recvN model 0 300 `shouldReturn` [1000 .. 1299]

-- | Init timeouts short enough for the fault tests.
quickInit :: IxgbeConfig
quickInit = defaultIxgbeConfig { ixInitTimeoutMicros = 200000, ixLinkTimeoutMicros = 300000, ixPoolDebug = True }

-- | A model of the given port on a loop wire, the driver on it (with the
-- engine running, or not), all on capability 0, closed afterwards.
withModel :: Int -> Maybe Fault -> Bool -> (Model -> Device -> IO a) -> IO a
withModel port fault engine act = onCap0 $ do
  wire <- loopWire 4096
  m <- newModel defaultModelConfig { mcPort = port, mcFault = fault } wire
  when engine (startModelEngine m)
  bracket (openIxgbe quickInit ("model:" ++ show port) (modelWindow m))
          (\d -> stopModelEngine m >> closeDevice d)
          (act m)

-- | A generator pool with debug checks, destroyed afterwards. It must
-- outlive the devices it sends through, which hold its buffers until their
-- transmit descriptors are cleaned or they are closed.
withGen :: (MemPool -> IO a) -> IO a
withGen = withMemPool defaultPoolConfig { poolSize = 1024, poolHuge = False, poolDebug = True }

moveDown :: BufferArray -> Int -> Int -> IO ()
moveDown arr from k = forM_ [0 .. k - 1] $ \i -> readBuffer arr (from + i) >>= writeBuffer arr i

-- | Receives @want@ frames with the engine stopped, stepping the model by
-- hand between receives; their sequence numbers in order.
recvDrained :: Model -> Device -> Int -> IO [Int]
recvDrained m dev want = do
  arr <- newBufferArray 64
  let go have acc tries
        | have >= want || tries > (1000 :: Int) = pure (concat (reverse acc))
        | otherwise = do
            k <- rxBatch dev 0 arr 64
            ss <- forM [0 .. k - 1] $ \i -> do
              b <- readBuffer arr i
              -- Touch the payload as a forwarder would.
              _ <- peekByteOff (bufferData b) 1 :: IO Word8
              maybe [] pure <$> seqOf b
            freeBatch (rxPool dev 0) arr 0 k
            _ <- modelStep m
            go (have + k) (concat ss : acc) (tries + 1)
  go 0 [] 0
