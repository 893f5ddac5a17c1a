{-# LANGUAGE ScopedTypeVariables #-}
-- | Backend A (AF_PACKET rings) over a real veth pair.
--
-- Each test makes its own veth pair in the root namespace with unique
-- names (@wtA<pid>n@ / @wtB<pid>n@), IPv6 off so the kernel sends nothing
-- on it, and deletes it afterwards even on failure. Frames are tagged
-- (EtherType 0x88b5 and a magic word, or UDP to port 9999) and carry a
-- sequence number; anything else that shows up is freed and ignored.
-- Without root (or without veth support) the tests are pending.
module Test.AfPacket (spec, withVeth, onCap0, fillFrame, seqOf, sendAll, recvN) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import Data.List (sort)
import Data.Word (Word16, Word32, Word8)
import GHC.Clock (getMonotonicTimeNSec)
import Foreign.Storable
import System.Exit (ExitCode (..))
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Process (getProcessID)
import System.Posix.User (getEffectiveUserID)
import System.Process (readProcessWithExitCode)
import qualified System.Timeout as GHC
import Test.Hspec

import Foreign.C.Types (CInt (..), CLong (..))
import System.Posix.IO (closeFd)
import System.Posix.Types (Fd (..))

import Support (newPipe, within)
import Weft.Packet.Internal.AfPacket
import Weft.Packet.Internal.Device
import Weft.Packet.Internal.Headers (parseMac, peekBE16, pokeBE16, peekBE32, pokeBE32)
import Weft.Packet.Internal.MemPool

spec :: Spec
spec = describe "AfPacket" $ do
  it "closes an fd exactly once (a second close would report EBADF, or close another thread's new fd)" $ do
    (r, w) <- newPipe
    let Fd raw = r
    c_afp_close raw `shouldReturn` 0
    c_afp_close raw `shouldReturn` (-9) -- EBADF: it was closed, once
    closeFd w

  it "reports a missing interface as DeviceInitFailed" $ do
    r <- try (openAfPacket defaultAfPacketConfig "wtnosuch0" 1)
    case r of
      Left (DeviceInitFailed n step) -> do
        n `shouldBe` "afpacket:wtnosuch0"
        step `shouldContain` "if_nametoindex"
      Left e -> expectationFailure ("unexpected " ++ show e)
      Right d -> closeDevice d >> expectationFailure "opened a missing interface"

  it "reports a missing privilege (EPERM) as DeviceInitFailed" $ do
    uid <- getEffectiveUserID
    if uid == 0 then pendingWith "runs only without root (as root the socket opens)" else do
      r <- try (openAfPacket defaultAfPacketConfig "lo" 1)
      case r of
        Left (DeviceInitFailed n step) -> do
          n `shouldBe` "afpacket:lo"
          step `shouldContain` "socket: Operation not permitted"
        Left e -> expectationFailure ("unexpected " ++ show e)
        Right d -> closeDevice d >> expectationFailure "opened a packet socket without privilege"

  it "rejects an invalid ring configuration" $ do
    r <- try (openAfPacket defaultAfPacketConfig { afpFrameSize = 1000 } "lo" 1)
    case r of
      Left (DeviceInitFailed _ step) -> step `shouldContain` "config"
      Left e -> expectationFailure ("unexpected " ++ show e)
      Right d -> closeDevice d >> expectationFailure "opened with frame size 1000"

  it "delivers N frames exactly once and in order, with exact stats" $ withVeth $ \(a, b) ->
    onCap0 $ withDevs (small 256) a (small 256) b 1 $ \da db -> withGen $ \gen -> do
      sent <- sendAll gen da 0 200 32
      sent `shouldBe` 200
      got <- recvN db 0 200
      got `shouldBe` [0 .. 199]
      sa <- readStats da
      sb <- readStats db
      statTxPackets sa `shouldBe` 200
      statTxBytes sa `shouldBe` 200 * 60
      statRxPackets sb `shouldBe` 200
      statRxBytes sb `shouldBe` 200 * 60
      statRxDropped sb `shouldBe` 0
      leakCheck [da, db] gen

  it "wraps the rings: 1000 frames through 64-frame rings" $ withVeth $ \(a, b) ->
    onCap0 $ withDevs (small 64) a (small 64) b 1 $ \da db -> withGen $ \gen -> do
      seqs <- fmap concat $ forM [0, 32 .. 999] $ \s -> do
        let k = min 32 (1000 - s)
        void (sendAll gen da s k k)
        recvN db 0 k
      seqs `shouldBe` [0 .. 999]
      leakCheck [da, db] gen

  it "takes only as many as the TX ring has free frames; the rest stay with the caller" $
    withVeth $ \(a, b) -> onCap0 $
      withDevs (small 16) a (small 64) b 1 $ \da db -> withGen $ \gen -> do
        arr <- newBufferArray 40
        n <- allocBatch gen arr 0 40
        n `shouldBe` 40
        forM_ [0 .. 39] $ \i -> readBuffer arr i >>= \buf -> fillFrame buf i
        k <- txBatch da 0 arr 40
        k `shouldBe` 16
        free1 <- poolFreeCount gen
        free1 `shouldBe` poolEntries gen - 24  -- the 16 taken went back at once
        got <- recvN db 0 16
        got `shouldBe` [0 .. 15]
        -- the caller retries the rest from where the device stopped
        moveDown arr 16 24
        k2 <- txBatch da 0 arr 24
        k2 `shouldBe` 16
        moveDown arr 16 8
        k3 <- txBatch da 0 arr 8
        k3 `shouldBe` 8
        got2 <- recvN db 0 24
        got2 `shouldBe` [16 .. 39]
        leakCheck [da, db] gen

  it "stops a receive batch when the pool is empty and leaves the frames in the ring" $
    withVeth $ \(a, b) -> onCap0 $
      withDevs (small 64) a ((small 64) { afpPool = debugPool 8 }) b 1 $ \da db -> withGen $ \gen -> do
        void (sendAll gen da 0 20 20)
        arr <- newBufferArray 32
        k <- pollRx db 0 arr 32 8
        k `shouldBe` 8
        k' <- rxBatch db 0 arr 32
        k' `shouldBe` 0  -- pool empty
        s1 <- seqsOf arr 8
        freeBatch (rxPool db 0) arr 0 8
        rest <- recvN db 0 12
        (s1 ++ rest) `shouldBe` [0 .. 19]
        leakCheck [da, db] gen

  it "drops an oversized TX buffer and counts it" $ withVeth $ \(a, b) -> onCap0 $ do
    ha <- openAfPacketHandle (small 64) a 1
    let da = afPacketDevice ha
    (`finally` closeDevice da) $ bracket (openAfPacket (small 64) b 1) closeDevice $ \db -> withGen $ \gen -> do
      arr <- newBufferArray 2
      void (allocBatch gen arr 0 2)
      readBuffer arr 0 >>= \buf -> fillFrame buf 0 >> setBufferLength buf 1600
      readBuffer arr 1 >>= \buf -> fillFrame buf 1
      k <- txBatch da 0 arr 2
      k `shouldBe` 2
      got <- recvN db 0 1
      got `shouldBe` [1]
      c <- afPacketCounters ha
      afpTxInvalid c `shouldBe` 1
      statTxPackets <$> readStats da `shouldReturn` 1
      leakCheck [db] gen

  it "receives the same over a TPACKET_V3 ring, across block wrap-around" $
    withVeth $ \(a, b) -> onCap0 $ do
      let v3 = (small 64) { afpRxVersion = RxV3, afpV3BlockSize = 8192
                          , afpV3BlockCount = 4, afpV3RetireMs = 1 }
      withDevs (small 64) a v3 b 1 $ \da db -> withGen $ \gen -> do
        seqs <- fmap concat $ forM [0, 25 .. 299] $ \s -> do
          void (sendAll gen da s 25 25)
          recvN db 0 25
        seqs `shouldBe` [0 .. 299]
        statRxDropped <$> readStats db `shouldReturn` 0
        leakCheck [da, db] gen

  it "fans out over 2 queues: each frame arrives exactly once across both" $
    withVeth $ \(a, b) -> onCap0 $
      withDevs (small 256) a (small 256) b 2 $ \da db -> withGen $ \gen -> do
        arr <- newBufferArray 32
        forM_ [0, 32 .. 191] $ \s -> do
          n <- allocBatch gen arr 0 32
          n `shouldBe` 32
          forM_ [0 .. 31] $ \i -> readBuffer arr i >>= \buf -> fillUdp buf (s + i)
          k <- txBatch da 0 arr 32
          k `shouldBe` 32
        (q0, q1) <- recvFanout db 192
        sort (q0 ++ q1) `shouldBe` [0 .. 191]
        -- 192 flows (distinct UDP source ports) hash onto both queues
        length q0 `shouldSatisfy` (> 0)
        length q1 `shouldSatisfy` (> 0)
        leakCheck [da, db] gen

  it "waitRx blocks while idle and returns when a frame arrives" $ withVeth $ \(a, b) -> onCap0 $
    withDevs (small 64) a (small 64) b 1 $ \da db -> withGen $ \gen -> do
      done <- newEmptyMVar
      _ <- forkIO (try (waitRx db 0) >>= putMVar done)
      r0 <- GHC.timeout 200000 (readMVar done)
      case r0 of
        Nothing -> pure ()
        Just (e :: Either SomeException ()) -> expectationFailure ("waitRx returned while idle: " ++ show e)
      void (sendAll gen da 0 1 1)
      r1 <- GHC.timeout 2000000 (takeMVar done)
      case r1 of
        Just (Right ()) -> pure ()
        other -> expectationFailure ("waitRx did not return after a frame: " ++ show other)
      recvN db 0 1 `shouldReturn` [0]
      leakCheck [da, db] gen

  it "reports link speed, MAC address and sets promiscuous mode" $ withVeth $ \(_, b) -> onCap0 $
    bracket (openAfPacket (small 64) b 1) closeDevice $ \db -> do
      linkSpeed db `shouldReturn` 10000
      addr <- takeWhile (/= '\n') <$> readFile ("/sys/class/net/" ++ b ++ "/address")
      mac <- macAddress db
      Just mac `shouldBe` parseMac addr
      setPromisc db True
      setPromisc db False
  where
    small k = defaultAfPacketConfig { afpRxFrames = k, afpTxFrames = k, afpPool = debugPool 512 }
    debugPool k = defaultPoolConfig { poolSize = k, poolHuge = False, poolDebug = True }

-- | Opens two devices (the second with @nq@ queues) and closes both
-- afterwards.
withDevs :: AfPacketConfig -> String -> AfPacketConfig -> String -> Int
         -> (Device -> Device -> IO a) -> IO a
withDevs ca a cb b nq act =
  bracket (openAfPacket ca a 1) closeDevice $ \da ->
    bracket (openAfPacket cb b nq) closeDevice $ \db -> act da db

-- | A generator pool, destroyed afterwards.
withGen :: (MemPool -> IO a) -> IO a
withGen = withMemPool defaultPoolConfig { poolSize = 1024, poolHuge = False, poolDebug = True }

magic :: Word32
magic = 0x77656674

-- | A 60-byte frame: broadcast, EtherType 0x88b5, magic, sequence number.
fillFrame :: Buffer -> Int -> IO ()
fillFrame buf s = do
  let p = bufferData buf
  forM_ [0 .. 59] $ \i -> pokeByteOff p i (0 :: Word8)
  forM_ [0 .. 5] $ \i -> pokeByteOff p i (0xff :: Word8)
  forM_ [6 .. 11] $ \i -> pokeByteOff p i (fromIntegral i :: Word8)
  pokeBE16 p 12 0x88b5
  pokeBE32 p 14 magic
  pokeBE32 p 18 (fromIntegral s)
  setBufferLength buf 60

-- | A 60-byte IPv4/UDP frame to port 9999 whose source port varies with
-- the sequence number, so that the fanout hash spreads them.
fillUdp :: Buffer -> Int -> IO ()
fillUdp buf s = do
  let p = bufferData buf
  forM_ [0 .. 59] $ \i -> pokeByteOff p i (0 :: Word8)
  forM_ [0 .. 5] $ \i -> pokeByteOff p i (0xff :: Word8)
  forM_ [6 .. 11] $ \i -> pokeByteOff p i (fromIntegral i :: Word8)
  pokeBE16 p 12 0x0800
  pokeByteOff p 14 (0x45 :: Word8)
  pokeBE16 p 16 46  -- total length
  pokeByteOff p 22 (64 :: Word8)
  pokeByteOff p 23 (17 :: Word8)
  pokeBE32 p 26 0x0a000001
  pokeBE32 p 30 0x0a000002
  pokeBE16 p 34 (fromIntegral (10000 + s))
  pokeBE16 p 36 9999
  pokeBE16 p 38 26
  pokeBE32 p 42 magic
  pokeBE32 p 46 (fromIntegral s)
  setBufferLength buf 60

-- | The sequence number of one of our frames, or Nothing for a stray one.
seqOf :: Buffer -> IO (Maybe Int)
seqOf buf = do
  let p = bufferData buf
  len <- bufferLength buf
  et <- peekBE16 p 12
  if len < 50 then pure Nothing else case et of
    0x88b5 -> tagged 14
    0x0800 -> do
      dport <- peekBE16 p 36
      if dport == (9999 :: Word16) then tagged 42 else pure Nothing
    _ -> pure Nothing
  where
    tagged off = do
      m <- peekBE32 (bufferData buf) off
      if m /= magic then pure Nothing
        else Just . fromIntegral <$> peekBE32 (bufferData buf) (off + 4)

seqsOf :: BufferArray -> Int -> IO [Int]
seqsOf arr k = fmap concat $ forM [0 .. k - 1] $ \i ->
  maybe [] pure <$> (readBuffer arr i >>= seqOf)

-- | Sends sequence numbers [s, s+count) in batches, retrying what the
-- ring does not take (bounded); returns how many were taken.
sendAll :: MemPool -> Device -> Int -> Int -> Int -> IO Int
sendAll gen dev s count batch = do
  arr <- newBufferArray batch
  let go next tries
        | next >= s + count = pure (next - s)
        | tries > (10000 :: Int) = expectationFailure "txBatch never took the frames" >> pure (next - s)
        | otherwise = do
            let k = min batch (s + count - next)
            n <- allocBatch gen arr 0 k
            when (n /= k) $ expectationFailure "generator pool ran dry"
            forM_ [0 .. k - 1] $ \i -> readBuffer arr i >>= \buf -> fillFrame buf (next + i)
            t <- txBatch dev 0 arr k
            freeBatch gen arr t (k - t)
            when (t < k) yield
            go (next + t) (if t == 0 then tries + 1 else tries)
  go s 0

-- | Receives until @want@ tagged frames came (at most 3 s), freeing every
-- buffer; returns the sequence numbers in arrival order.
recvN :: Device -> QueueId -> Int -> IO [Int]
recvN dev q want = do
  arr <- newBufferArray 32
  acc <- newIORef []
  deadline <- (+ 3000000) <$> nowMicros
  let go have
        | have >= want = pure ()
        | otherwise = do
            k <- rxBatch dev q arr 32
            ss <- seqsOf arr k
            freeBatch (rxPool dev q) arr 0 k
            modifyIORef' acc (reverse ss ++)
            t <- nowMicros
            if t > deadline then pure () else do
              when (k == 0) (threadDelay 200)
              go (have + length ss)
  go 0
  reverse <$> readIORef acc

-- | Polls until exactly @want@ buffers are in arr (at most 3 s), without
-- freeing them.
pollRx :: Device -> QueueId -> BufferArray -> Int -> Int -> IO Int
pollRx dev q arr n want = do
  deadline <- (+ 3000000) <$> nowMicros
  let go have
        | have >= want = pure have
        | otherwise = do
            k <- rxBatch dev q arr n
            t <- nowMicros
            when (k > 0) $ moveDown' have k
            if t > deadline then pure (have + k) else do
              when (k == 0) (threadDelay 200)
              go (have + k)
      moveDown' have k = when (have > 0) $
        forM_ (reverse [0 .. k - 1]) $ \i -> readBuffer arr i >>= writeBuffer arr (have + i)
  go 0

-- | Receives @want@ tagged frames across queues 0 and 1.
recvFanout :: Device -> Int -> IO ([Int], [Int])
recvFanout dev want = do
  arr <- newBufferArray 32
  r0 <- newIORef []
  r1 <- newIORef []
  deadline <- (+ 3000000) <$> nowMicros
  let one q ref = do
        k <- rxBatch dev q arr 32
        ss <- seqsOf arr k
        freeBatch (rxPool dev q) arr 0 k
        modifyIORef' ref (++ ss)
        pure (length ss)
      go have
        | have >= want = pure ()
        | otherwise = do
            a <- one 0 r0
            b <- one 1 r1
            t <- nowMicros
            if t > deadline then pure () else do
              when (a + b == 0) (threadDelay 200)
              go (have + a + b)
  go 0
  (,) <$> readIORef r0 <*> readIORef r1

-- | Moves arr[from .. from+k) to arr[0 .. k).
moveDown :: BufferArray -> Int -> Int -> IO ()
moveDown arr from k = forM_ [0 .. k - 1] $ \i -> readBuffer arr (from + i) >>= writeBuffer arr i

-- | Every pool is full again: no buffer leaked.
leakCheck :: [Device] -> MemPool -> IO ()
leakCheck devs gen = do
  forM_ devs $ \d -> forM_ [0 .. rxQueueCount d - 1] $ \q -> do
    let p = rxPool d q
    poolFreeCount p `shouldReturn` poolEntries p
  poolFreeCount gen `shouldReturn` poolEntries gen

nowMicros :: IO Int
nowMicros = (\t -> fromIntegral (t `quot` 1000)) <$> getMonotonicTimeNSec

-- | Runs the action on capability 0 (debug pools check that one
-- capability uses them), within 8 s.
onCap0 :: IO a -> IO a
onCap0 act = within 8 "AfPacket test" $ do
  mv <- newEmptyMVar
  _ <- forkOn 0 (try act >>= putMVar mv)
  r <- takeMVar mv
  either (\(e :: SomeException) -> throwIO e) pure r

vethCounter :: IORef Int
vethCounter = unsafePerformIO (newIORef 0)
{-# NOINLINE vethCounter #-}

-- | A fresh veth pair, up, IPv6 off; deleted afterwards. Pending when
-- not root or when it cannot be made.
withVeth :: ((String, String) -> IO ()) -> IO ()
withVeth act = do
  uid <- getEffectiveUserID
  if uid /= 0 then pendingWith "AF_PACKET tests need root (CAP_NET_ADMIN and CAP_NET_RAW)" else do
    pid <- getProcessID
    n <- atomicModifyIORef' vethCounter (\i -> (i + 1, i))
    let a = "wtA" ++ show pid ++ "n" ++ show n
        b = "wtB" ++ show pid ++ "n" ++ show n
        ip args = readProcessWithExitCode "ip" args ""
    (code, _, err) <- ip ["link", "add", a, "type", "veth", "peer", "name", b]
    case code of
      ExitFailure _ -> pendingWith ("cannot make a veth pair: " ++ err)
      ExitSuccess -> (`finally` void (ip ["link", "del", a])) $ do
        forM_ [a, b] $ \i -> do
          writeFile ("/proc/sys/net/ipv6/conf/" ++ i ++ "/disable_ipv6") "1"
            `catch` \(_ :: IOException) -> pure ()
          (c, _, e) <- ip ["link", "set", i, "up"]
          when (c /= ExitSuccess) $ expectationFailure ("ip link set up: " ++ e)
        act (a, b)

foreign import ccall unsafe "weft_afp_close" c_afp_close :: CInt -> IO CLong
