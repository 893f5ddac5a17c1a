{-# LANGUAGE ScopedTypeVariables #-}
-- | The packet layer's device-independent parts: buffer pools against a
-- model, the debug checks, header access and checksums, and the hybrid
-- receive rule against a scripted device.
module Test.Packet (spec) where

import Control.Concurrent
import Control.Exception hiding (assert)
import Control.Monad
import Data.Bits
import qualified Data.ByteString as B
import Data.IORef
import Data.List (nub, sort)
import Data.Word
import Foreign.Marshal.Array (pokeArray)
import Foreign.Ptr
import Foreign.Storable
import Test.Hspec
import Test.QuickCheck hiding ((.&.))
import Test.QuickCheck.Monadic

import Weft.Packet.Internal.Device
import Weft.Packet.Internal.Headers
import Weft.Packet.Internal.Hybrid
import Weft.Packet.Internal.MemPool

spec :: Spec
spec = describe "Weft.Packet" $ do
  poolSpec
  headerSpec
  hybridSpec

------------------------------------------------------------------------------
-- Pools

data PoolOp = Alloc Int | Free [Int]
  deriving Show

instance Arbitrary PoolOp where
  arbitrary = frequency
    [ (3, Alloc <$> choose (0, 40))
    , (2, Free <$> listOf (choose (0, 1000))) ]

-- | Runs on capability 0, as a pool's owner must stay on one capability
-- (the debug checks catch a thread that migrates).
pinned :: IO a -> IO a
pinned act = do
  r <- newEmptyMVar
  _ <- forkOn 0 (try act >>= putMVar r)
  takeMVar r >>= either (\(e :: SomeException) -> throwIO e) pure

debugPool :: Int -> PoolConfig
debugPool n = defaultPoolConfig { poolSize = n, poolDebug = True, poolHuge = False }

poolSpec :: Spec
poolSpec = describe "MemPool" $ do
  it "never hands out a buffer twice and gets every buffer back (model)" $
    property $ \(Positive size0) (ops :: [PoolOp]) -> monadicIO $ do
      let size = 1 + size0 `mod` 64
      ok <- run $ pinned $ withMemPool (debugPool size) $ \mp -> do
        arr <- newBufferArray 64
        held <- newIORef ([] :: [Buffer])
        let step (Alloc n) = do
              let n' = min n 64
              held0 <- readIORef held
              k <- allocBatch mp arr 0 n'
              got <- mapM (readBuffer arr) [0 .. k - 1]
              writeIORef held (got ++ held0)
              free <- poolFreeCount mp
              pure $ and
                [ k == min n' (size - length held0)
                , length (nub (got ++ held0)) == length (got ++ held0)
                , free == size - k - length held0 ]
            step (Free picks) = do
              held0 <- readIORef held
              let chosen = nub [ held0 !! (p `mod` length held0) | not (null held0), p <- picks ]
                  keep = filter (`notElem` chosen) held0
              zipWithM_ (writeBuffer arr) [0 ..] (take 64 chosen)
              let k = min 64 (length chosen)
              freeBatch mp arr 0 k
              writeIORef held (drop k chosen ++ keep)
              free <- poolFreeCount mp
              pure (free == size - length (drop k chosen ++ keep))
        oks <- mapM step ops
        rest <- readIORef held
        mapM_ (freeBuffer mp) rest
        final <- poolFreeCount mp
        pure (and oks && final == size)
      assert ok

  it "lays buffers out at 2048-byte strides with the data at offset 64" $
    pinned $ withMemPool (debugPool 8) $ \mp -> do
      arr <- newBufferArray 8
      8 <- allocBatch mp arr 0 8
      bufs <- mapM (readBuffer arr) [0 .. 7]
      let addrs = sort [ ptrToWordPtr p | Buffer p <- bufs ]
      zipWith (-) (drop 1 addrs) addrs `shouldBe` replicate 7 2048
      forM_ bufs $ \b -> do
        iova <- bufferIova b
        fromIntegral iova `shouldBe` ptrToWordPtr (bufferData b)
        bufferPoolId b `shouldReturn` poolId mp
      Nothing <- allocBuffer mp
      freeBatch mp arr 0 8
      poolFreeCount mp `shouldReturn` 8

  it "gives a zero-copy view of a buffer's bytes" $
    pinned $ withMemPool (debugPool 1) $ \mp -> do
      Just b <- allocBuffer mp
      pokeArray (bufferData b) [1, 2, 3, 4 :: Word8]
      setBufferLength b 3
      bufferLength b `shouldReturn` 3
      view <- bufferBytes b
      B.unpack view `shouldBe` [1, 2, 3]
      poke (bufferData b) (9 :: Word8)
      B.head view `shouldBe` 9
      freeBuffer mp b

  describe "debug mode" $ do
    it "rejects a buffer of another pool" $
      pinned $ withMemPool (debugPool 2) $ \a -> withMemPool (debugPool 2) $ \b -> do
        Just x <- allocBuffer a
        freeBuffer b x `shouldThrow` (== ForeignBuffer (poolId a) (poolId b))
        poolFreeCount b `shouldReturn` 2
        freeBuffer a x
        poolFreeCount a `shouldReturn` 2

    it "rejects a double free, keeping the pool consistent" $
      pinned $ withMemPool (debugPool 4) $ \mp -> do
        arr <- newBufferArray 3
        2 <- allocBatch mp arr 0 2
        readBuffer arr 0 >>= writeBuffer arr 2
        try (freeBatch mp arr 0 3) >>= \r -> case r of
          Left (DoubleFree p _) -> p `shouldBe` poolId mp
          other -> expectationFailure ("expected DoubleFree, got " ++ show other)
        poolFreeCount mp `shouldReturn` 4

    it "rejects use from a second capability" $
      withMemPool (debugPool 2) $ \mp -> do
        done <- newEmptyMVar
        _ <- forkOn 0 $ (allocBuffer mp >>= maybe (pure ()) (freeBuffer mp)) `finally` putMVar done ()
        takeMVar done
        r <- newEmptyMVar
        _ <- forkOn 1 $ try (void (allocBuffer mp)) >>= putMVar r
        takeMVar r >>= \x -> case x of
          Left (WrongCapability 0 1) -> pure ()
          other -> expectationFailure ("expected WrongCapability 0 1, got " ++ show (void other))

  it "refuses an empty pool size" $
    newMemPool defaultPoolConfig { poolSize = 0 } `shouldThrow` anyIOException

------------------------------------------------------------------------------
-- Headers

headerSpec :: Spec
headerSpec = describe "Headers" $ do
  it "computes the RFC 1071 example checksum" $
    withBytes [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7] $ \p n ->
      internetChecksum p n 0 `shouldReturn` complement 0xddf2

  it "checksums odd lengths as if padded with a zero byte" $
    property $ \(bytes :: [Word8]) -> monadicIO $ do
      c <- run $ withBytes bytes $ \p n -> internetChecksum p n 0
      assert (c == referenceChecksum bytes)

  it "writes headers that read back, with a valid IPv4 checksum" $
    property $ \src dst tos ident ttl sport dport (payload :: [Word8]) -> monadicIO $ do
      ok <- run $ withBytes (replicate 1500 0) $ \p _ -> do
        let plen = min 1000 (length payload)
            eth = EthHeader (mac src) (mac dst) etherTypeIPv4
            ip = Ipv4Header tos (fromIntegral (28 + plen)) ident ttl ipProtoUdp 0
                            (IPv4 src) (IPv4 dst)
            udp = UdpHeader sport dport (fromIntegral (8 + plen)) 0
        writeEth p eth
        writeIpv4 p ip
        writeUdp p udp
        pokeArray (p `plusPtr` udpPayloadOffset) (take plen payload)
        eth' <- readEth p
        ip' <- readIpv4 p
        udp' <- readUdp p
        good <- ipv4HeaderChecksumOk p
        c <- udpChecksum p
        pokeBE16 (p `plusPtr` udpOffset) 6 c
        -- a datagram carrying its checksum sums to zero with the pseudo-header
        c' <- udpChecksum p
        bytes <- mapM (peekByteOff p) [udpOffset .. udpOffset + 8 + plen - 1]
        pure $ and
          [ eth' == eth, ip' { ipChecksum = 0 } == ip, udp' == udp, good
          , c == referenceUdpChecksum src dst (take 8 bytes ++ drop 8 bytes)
          , c' == c ]
      assert ok

  it "shows and parses MAC addresses" $ do
    showMac (MacAddress 0x0102030a0b0c) `shouldBe` "01:02:03:0a:0b:0c"
    parseMac "01:02:03:0A:0b:0c" `shouldBe` Just (MacAddress 0x0102030a0b0c)
    parseMac "01:02:03:0a:0b" `shouldBe` Nothing
    parseMac "01:02:03:0a:0b:zz" `shouldBe` Nothing
    showIPv4 (ipv4 10 0 0 1) `shouldBe` "10.0.0.1"
 where
  mac :: Word32 -> MacAddress
  mac w = MacAddress (fromIntegral w `shiftL` 8 .|. 0x020000000000)

withBytes :: [Word8] -> (Ptr Word8 -> Int -> IO a) -> IO a
withBytes bs act = pinned $ withMemPool (debugPool 1) $ \mp -> do
  Just b <- allocBuffer mp
  pokeArray (bufferData b) (take maxDataLength bs)
  r <- act (bufferData b) (min maxDataLength (length bs))
  freeBuffer mp b
  pure r

-- | RFC 1071 over a list, written independently of 'internetChecksum'.
referenceChecksum :: [Word8] -> Word16
referenceChecksum bytes = complement (fromIntegral (fold (sum (words16 bytes))))
 where
  words16 (a : b : rest) = (fromIntegral a * 256 + fromIntegral b :: Integer) : words16 rest
  words16 [a] = [fromIntegral a * 256]
  words16 [] = []
  fold x = if x > 0xffff then fold ((x `mod` 65536) + (x `div` 65536)) else x

referenceUdpChecksum :: Word32 -> Word32 -> [Word8] -> Word16
referenceUdpChecksum s d segment =
  let zeroed = take 6 segment ++ [0, 0] ++ drop 8 segment
      be32 w = [fromIntegral (w `shiftR` 24), fromIntegral (w `shiftR` 16), fromIntegral (w `shiftR` 8), fromIntegral w]
      len = length segment
      pseudo = be32 s ++ be32 d ++ [0, 17, fromIntegral (len `shiftR` 8), fromIntegral len]
      c = referenceChecksum (pseudo ++ zeroed)
  in if c == 0 then 0xffff else c

------------------------------------------------------------------------------
-- The hybrid rule

-- | A device whose receive queue returns the scripted counts in turn (0
-- once the script is out), counting waits.
scriptedDevice :: MemPool -> [Int] -> IO (Device, IORef Int)
scriptedDevice mp script = do
  left <- newIORef script
  waits <- newIORef 0
  let rx _ arr n = do
        s <- readIORef left
        case s of
          [] -> pure 0
          (k : rest) -> do
            writeIORef left rest
            allocBatch mp arr 0 (min n k)
      dev = Device
        { deviceName = "scripted", rxQueueCount = 1, txQueueCount = 1
        , rxBatch = rx, txBatch = \_ _ _ -> pure 0, rxPool = const mp
        , waitRx = \_ -> modifyIORef' waits (+ 1)
        , readStats = pure zeroStats, setPromisc = \_ -> pure ()
        , linkSpeed = pure 0, macAddress = pure (MacAddress 0), closeDevice = pure () }
  pure (dev, waits)

hybridSpec :: Spec
hybridSpec = describe "Hybrid" $ do
  it "blocks on an empty poll while idle" $
    pinned $ withMemPool (debugPool 64) $ \mp -> do
      (dev, waits) <- scriptedDevice mp [0, 0, 1]
      h <- newHybrid defaultHybridConfig
      arr <- newBufferArray 32
      k <- receive h dev 0 arr 32
      k `shouldBe` 0
      readIORef waits `shouldReturn` 1
      k2 <- receive h dev 0 arr 32
      k2 `shouldBe` 1
      readIORef waits `shouldReturn` 1
      freeBatch mp arr 0 1
      isPolling h `shouldReturn` False

  it "polls after a full batch, and blocks once a poll comes back empty at a low rate" $
    pinned $ withMemPool (debugPool 64) $ \mp -> do
      (dev, waits) <- scriptedDevice mp [32, 0]
      h <- newHybrid defaultHybridConfig
      arr <- newBufferArray 32
      32 <- receive h dev 0 arr 32
      freeBatch mp arr 0 32
      isPolling h `shouldReturn` True
      readIORef waits `shouldReturn` 0
      0 <- receive h dev 0 arr 32
      isPolling h `shouldReturn` False
      readIORef waits `shouldReturn` 1
      hybridStats h `shouldReturn` HybridStats 1 2

  it "stays polling while the average rate is above the threshold" $
    pinned $ withMemPool (debugPool 64) $ \mp -> do
      -- 16 packets per call, 1 µs intervals: far above 1 packet/ms
      (dev, waits) <- scriptedDevice mp (replicate 200 16)
      h <- newHybrid defaultHybridConfig { hcThreshold = 1, hcIntervalNanos = 1000 }
      arr <- newBufferArray 32
      replicateM_ 200 $ do
        k <- receive h dev 0 arr 32
        freeBatch mp arr 0 k
      isPolling h `shouldReturn` True
      -- the script is out: empty polls now yield, they do not block
      replicateM_ 3 (receive h dev 0 arr 32)
      readIORef waits `shouldReturn` 0
