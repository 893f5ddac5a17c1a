{-# LANGUAGE ScopedTypeVariables #-}
-- | Weft.Net over loopback: waits, close and fd reuse, async exceptions,
-- resets, half-close, idle timeouts, fd exhaustion at accept, UDP and
-- interop. Clients are @network@ sockets (GHC's manager) unless the test is
-- about weft's client side.
module Test.Net (spec, withWeftServer, withPair, liveWatches, recvExactly, connectClient, countFds, makesRoomForNewcomers,
                 keepsClientsWhenFull, recvToEnd, loopback, withResetPeer) where

import Control.Concurrent
import Control.Concurrent.Async (async, forConcurrently_, mapConcurrently, wait)
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.IORef
import GHC.Clock (getMonotonicTime)
import GHC.IO.Exception (IOErrorType (..), IOException (..))
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import qualified System.Timeout as GHC
import System.Directory (getTemporaryDirectory, removeFile)
import System.FilePath ((</>))
import System.Posix.IO (closeFd)
import Test.Hspec

import Support
import qualified Weft.Event as E
import qualified Weft.Net as W
import qualified Weft.Timer as T
import Weft.Net.Internal.Eviction (Choice (Refuse))
import Weft.Net.Internal.Socket (idleTimerFired, idleTimerKey)
import qualified Weft.Net.Internal.Serve as S
import Weft.Internal.Error (hasErrno)
import Foreign.C.Error (eBADF)

loopback :: SockAddr
loopback = SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1))

-- | Run a weft server on a free loopback port for the body's duration.
withWeftServer :: W.ServerConfig -> (W.Socket -> SockAddr -> IO ()) -> (SockAddr -> IO a) -> IO a
withWeftServer cfg handler body = do
  ready <- newEmptyMVar
  bracket (forkIO (W.serve cfg { W.serverOnReady = putMVar ready } loopback handler)) killThread $ \_ ->
    body =<< within 5 "server start" (takeMVar ready)

-- | A full server keeps every client it serves and answers each newcomer
-- with its refusal and a close (Note [Making room under fd pressure] in
-- "Weft.Net.Internal.Serve"): with room for eight connections (fds, or the
-- server's limit if @headroom@ is 'False'), eight clients connect and talk
-- once, then stay idle for 300 ms (past the eviction grace); six
-- newcomers then each get exactly @refusal@ and the end of the stream,
-- within a second, and every one of the eight is still served. Once all
-- have left, the process has the fds it had before they came.
keepsClientsWhenFull :: Bool -> SockAddr -> B.ByteString -> (N.Socket -> IO ()) -> IO ()
keepsClientsWhenFull headroom addr refusal exchange = do
  startManagers
  performMajorGCAndSettle
  fds0 <- countFds
  -- Client sockets made before the limit drops; connecting needs no fd.
  clients <- replicateM 8 (N.socket N.AF_INET N.Stream N.defaultProtocol)
  newcomers <- replicateM 6 (N.socket N.AF_INET N.Stream N.defaultProtocol)
  let limited act = if headroom then withFdHeadroom 8 (const act) else act
  (`finally` mapM_ N.close (clients ++ newcomers)) $ limited $ do
    forM_ clients $ \c -> within 1 "a client's first answer" (N.connect c addr >> exchange c)
    threadDelay 300000
    forM_ newcomers $ \c -> within 1 "a newcomer's refusal" $ labelled "a newcomer" $ do
      N.connect c addr
      recvToEnd c `shouldReturn` refusal
    forM_ clients $ \c -> within 1 "an established client's answer" (labelled "an established client" (exchange c))
  -- The server's side closes once the clients are gone.
  _ <- try (eventually "the fds back to what they were" ((== fds0) <$> countFds)) :: IO (Either SomeException ())
  countFds `shouldReturn` fds0
  where
    performMajorGCAndSettle = threadDelay 20000

-- | Everything a peer sends until it closes; an 'IOException' (a reset)
-- is thrown.
recvToEnd :: N.Socket -> IO B.ByteString
recvToEnd s = go []
  where
    go acc = do
      c <- NB.recv s 4096
      if B.null c then return (B.concat (reverse acc)) else go (c : acc)

-- | An HTTP server out of fds may close idle clients for new ones (Note
-- [Making room under fd pressure] in "Weft.Net.Internal.Serve"): with room for three connections, two
-- idle clients and a busy one (an exchange every 5 ms) hold them; once
-- the idle ones are stale (300 ms), five newcomers arrive 30 ms apart, and
-- each must be answered within a second. The idle clients must be closed,
-- the busy one keeps its connection. @exchange@ sends one request on a
-- connected socket and checks the answer.
makesRoomForNewcomers :: SockAddr -> (N.Socket -> IO ()) -> IO ()
makesRoomForNewcomers addr exchange = do
  startManagers
  -- Client sockets made before the limit drops; connecting needs no fd.
  clients <- replicateM 8 (N.socket N.AF_INET N.Stream N.defaultProtocol)
  let (idle1, idle2, busy, newcomers) = case clients of
        (a : b : c : rest) -> (a, b, c, rest)
        _ -> error "eight clients"
      arrive c = within 1 "a client's first answer" (N.connect c addr >> exchange c)
      closed c = within 5 "an idle client closed" $ do
        r <- try (NB.recv c 10)
        either (\(_ :: IOException) -> return ()) (`shouldBe` B.empty) r
  (`finally` mapM_ N.close clients) $ withFdHeadroom 3 $ \_ -> do
    mapM_ arrive [idle1, idle2, busy]
    stop <- newIORef False
    talker <- async $ let go = do
                            exchange busy
                            threadDelay 5000
                            done <- readIORef stop
                            unless done go
                      in go
    threadDelay 300000
    forM_ newcomers $ \c -> arrive c >> threadDelay 30000
    closed idle1
    closed idle2
    writeIORef stop True
    within 5 "the busy client" (wait talker)
    exchange busy
    exchange (last newcomers)

-- | A weft socket whose peer (a network client on loopback) has reset the
-- connection: closed with a zero linger, so the kernel sent a RST.
withResetPeer :: (W.Socket -> IO a) -> IO a
withResetPeer body = do
  l <- W.listen loopback
  addr <- W.localAddress l
  (`finally` W.close l) $ do
    c <- connectClient addr
    (s, _) <- within 5 "accept" (W.accept l)
    (`finally` W.close s) $ do
      N.setSockOpt c N.Linger (N.StructLinger 1 0)
      N.close c
      body s

connectClient :: SockAddr -> IO N.Socket
connectClient addr = do
  s <- N.socket N.AF_INET N.Stream N.defaultProtocol
  N.connect s addr `onException` N.close s
  return s

-- | Receive exactly n bytes from a network socket (fewer at end of stream).
recvExactly :: N.Socket -> Int -> IO B.ByteString
recvExactly s n = go [] n
  where
    go acc 0 = return (B.concat (reverse acc))
    go acc k = do
      c <- NB.recv s k
      if B.null c then return (B.concat (reverse acc)) else go (c : acc) (k - B.length c)

-- | Say which part of a test an I/O error came from.
labelled :: String -> IO a -> IO a
labelled what act = act `catch` \(e :: IOException) -> throwIO (userError (what ++ ": " ++ show e))

echo :: W.Socket -> SockAddr -> IO ()
echo s _ = echoLoop s

-- | One echoed byte.
echoX :: N.Socket -> IO ()
echoX c = do
  NB.sendAll c (BC.pack "x")
  recvExactly c 1 `shouldReturn` BC.pack "x"

echoLoop :: W.Socket -> IO ()
echoLoop s = do
  c <- W.recv s 4096
  unless (B.null c) (W.sendAll s c >> echoLoop s)

liveWatches :: IO Int
liveWatches = sum . map E.statWatches <$> (mapM E.getManagerStats =<< E.systemManagers)

kernelCalls :: IO Int
kernelCalls = sum . map E.statKernelCalls <$> (mapM E.getManagerStats =<< E.systemManagers)

-- | 'kernelCalls' once it reads the same twice, 20 ms apart (at most 2 s).
settledKernelCalls :: IO Int
settledKernelCalls = go (100 :: Int)
  where
    go k = do
      a <- kernelCalls
      threadDelay 20000
      b <- kernelCalls
      if a == b || k == 0 then return b else go (k - 1)

countFds :: IO Int
countFds = openFdCount

-- | A connected pair of weft sockets: (client, server side).
withPair :: ((W.Socket, W.Socket) -> IO a) -> IO a
withPair body = do
  l <- W.listen loopback
  addr <- W.localAddress l
  (`finally` W.close l) $ do
    acceptor <- async' (W.accept l)
    c <- W.connect addr
    (srv, _) <- either throwIO return =<< takeMVar acceptor
    body (c, srv) `finally` (W.close c >> W.close srv)
  where
    async' act = do
      m <- newEmptyMVar
      _ <- forkIO (try act >>= putMVar m)
      return (m :: MVar (Either SomeException (W.Socket, SockAddr)))

isErrno :: IOErrorType -> Either SomeException a -> Bool
isErrno ty (Left e) = maybe False ((== ty) . ioe_type) (fromException e)
isErrno _ _ = False

spec :: E.BackendKind -> Spec
spec kind = describe "Weft.Net" $ do
  it "serves many concurrent clients on both capabilities, then releases every fd and watch" $ do
    startManagers
    fds0 <- countFds
    withWeftServer W.defaultServerConfig echo $ \addr ->
      within 30 "clients" $ forConcurrently_ [1 .. 100 :: Int] $ \i ->
        bracket (connectClient addr) N.close $ \c -> forM_ [1 .. 30 :: Int] $ \j -> do
          let msg = BC.pack (show (i, j))
          NB.sendAll c msg
          got <- recvExactly c (B.length msg)
          got `shouldBe` msg
    eventually "server connections closed" ((<= fds0) <$> countFds)
    eventually "watches ended" ((== 0) <$> liveWatches)

  it "places threads forked one after another on every capability in turn (forkRoundRobin)" $ do
    caps <- getNumCapabilities
    placed <- forM [1 .. 4 * caps] $ \_ -> do
      v <- newEmptyMVar
      _ <- W.forkRoundRobin $ \_ -> putMVar v . fst =<< threadCapability =<< myThreadId
      takeMVar v
    -- Consecutive threads never share a capability, and each gets as many.
    and (zipWith (/=) placed (drop 1 placed)) `shouldBe` (caps > 1)
    forM_ [0 .. caps - 1] $ \c -> length (filter (== c) placed) `shouldBe` 4

  it "serves with one SO_REUSEPORT listener per capability" $
    withWeftServer W.defaultServerConfig { W.serverReusePort = True } echo $ \addr ->
      within 10 "clients" $ forConcurrently_ [1 .. 20 :: Int] $ \i ->
        bracket (connectClient addr) N.close $ \c -> do
          let msg = BC.pack (show i)
          NB.sendAll c msg
          recvExactly c (B.length msg) `shouldReturn` msg

  when (kind == E.EPollBackend) $
    it "waits cost no epoll_ctl once a socket is watched" $ withPair $ \(c, srv) -> do
      W.sendAll c (BC.pack "x")
      _ <- W.recv srv 1
      _ <- forkIO (replicateM_ 2001 (W.recv srv 1 >>= W.sendAll srv))
      -- One round trip first, so that both sockets have waited (and are
      -- watched), and every capability's manager started, before counting:
      -- a watch's registration and a manager's start are epoll_ctls.
      W.sendAll c (BC.pack "w")
      _ <- W.recv c 1
      startManagers
      -- Sockets of earlier tests may still be closing (each close is an
      -- epoll_ctl): count from when the calls have stopped.
      arms0 <- settledKernelCalls
      within 10 "round trips" $ replicateM_ 2000 $ do
        W.sendAll c (BC.pack "y")
        r <- W.recv c 1
        r `shouldBe` BC.pack "y"
      arms1 <- kernelCalls
      arms1 - arms0 `shouldBe` 0

  it "close wakes a thread blocked in recv with EBADF and leaves nothing behind" $ do
    w0 <- liveWatches
    withPair $ \(c, _) -> do
      (_, res) <- forkResult 1 (W.recv c 10)
      threadDelay 20000
      W.close c
      r <- within 2 "woken" (takeMVar res)
      r `shouldSatisfy` isBadFd
      W.recv c 10 `shouldThrow` (\e -> ioe_type e == InvalidArgument && hasErrno eBADF e)
    eventually "watches back" ((== w0) <$> liveWatches)

  it "close ends what else was registered on the socket's fd through the managers" $ withPair $ \(_, srv) -> do
    -- A socket that never waited itself, with a registration made on its
    -- fd from outside (as Weft.Color's onReadable does): closing the
    -- socket must complete it with evtClose, not leave it armed for a
    -- later socket given the same fd number.
    mgr <- E.getSystemManager
    got <- newEmptyMVar
    _ <- E.registerFd mgr (\_ ev -> void (tryPutMVar got ev)) (W.socketFd srv) E.evtRead E.OneShot
    W.close srv
    ev <- within 2 "the registration's end" (takeMVar got)
    ev `shouldSatisfy` (`E.eventIs` E.evtClose)

  it "a socket closed while a thread waits never lets that thread see a reused fd's data" $ do
    reused <- newIORef (0 :: Int)
    l <- W.listen loopback
    addr <- W.localAddress l
    peers <- newChan
    -- The acceptor ends when the listener closes.
    _ <- forkIO (void (try (forever (W.accept l >>= writeChan peers . fst)) :: IO (Either IOException ())))
    (`finally` W.close l) $ forM_ [1 .. 100 :: Int] $ \_ -> do
      a <- W.connect addr
      pa <- readChan peers
      (_, res) <- forkResult 1 (W.recv a 100)
      threadDelay 200
      let fdA = W.socketFd a
      W.close a
      b <- W.connect addr
      pb <- readChan peers
      when (W.socketFd b == fdA) (modifyIORef' reused (+ 1))
      W.sendAll pb (BC.pack "for b")
      r <- within 2 "old waiter woken" (takeMVar res)
      r `shouldSatisfy` isBadFd
      got <- within 2 "new socket reads" (W.recv b 100)
      got `shouldBe` BC.pack "for b"
      mapM_ W.close [b, pa, pb]
    n <- readIORef reused
    n `shouldSatisfy` (> 0)

  -- An exception that lands between recv's syscall and its return loses
  -- what the syscall took (as with any receive in GHC; documented on
  -- 'W.recv'), so the exceptions here land only while recv waits: the
  -- sender sends each byte after the receiver's timed wait has ended.
  it "async exceptions during a wait in recv consume nothing; the next recv gets the bytes" $
    withPair $ \(c, srv) -> do
      let total = 300 :: Int
          byte i = fromIntegral (i `mod` 251)
      got <- within 20 "receive all" $ forM [1 .. total] $ \i -> do
        -- Nothing is in flight: this wait can only be interrupted.
        GHC.timeout (if even i then 50 else 300) (W.recv srv 1) `shouldReturn` Nothing
        W.sendAll c (B.singleton (byte i))
        W.recv srv 1
      B.concat got `shouldBe` B.pack (map byte [1 .. total])

  it "a peer's reset is an ECONNRESET IOError (ResourceVanished); the server lives on" $ do
    outcome <- newEmptyMVar
    withWeftServer W.defaultServerConfig (\s _ -> try (W.recv s 10 >> W.recv s 10) >>= putMVar outcome) $ \addr -> do
      c <- connectClient addr
      NB.sendAll c (BC.pack "a")
      threadDelay 20000
      N.setSockOpt c N.Linger (N.StructLinger 1 0)
      N.close c
      r <- within 2 "reset seen" (takeMVar outcome)
      r `shouldSatisfy` isErrno ResourceVanished
      -- Still serving.
      bracket (connectClient addr) N.close $ \c2 -> NB.sendAll c2 (BC.pack "b")
      r2 <- within 2 "next client served" (takeMVar outcome)
      -- The handler read "b", then the end of the stream.
      case r2 of
        Right rest -> rest `shouldBe` B.empty
        Left e -> expectationFailure ("the next client's connection failed: " ++ show (e :: SomeException))

  it "a half-close is an end of stream, and the other direction still works" $ withPair $ \(c, srv) -> do
    W.sendAll c (BC.pack "last words")
    W.shutdownSend c
    a <- W.recv srv 100
    a `shouldBe` BC.pack "last words"
    eof <- within 2 "eof" (W.recv srv 100)
    eof `shouldBe` B.empty
    W.sendAll srv (BC.pack "reply")
    W.recv c 100 `shouldReturn` BC.pack "reply"

  it "sending to a closed peer is an EPIPE or ECONNRESET IOError (ResourceVanished)" $ withPair $ \(c, srv) -> do
    W.close srv
    r <- within 5 "send fails" $ try (forever (W.sendAll c (B.replicate 65536 1)))
    (r :: Either SomeException ()) `shouldSatisfy` isErrno ResourceVanished

  it "the idle timeout closes silent connections and spares active ones" $ do
    outcomes <- newChan
    let cfg = W.defaultServerConfig { W.serverIdleTimeout = 200000 }
        handler s _ = try (echoLoop s) >>= writeChan outcomes
    withWeftServer cfg handler $ \addr -> do
      idle <- connectClient addr
      active <- connectClient addr
      -- The active client talks every 50 ms for 600 ms: three periods.
      forM_ [1 .. 12 :: Int] $ \_ -> do
        NB.sendAll active (BC.pack "p")
        recvExactly active 1 `shouldReturn` BC.pack "p"
        threadDelay 50000
      r <- within 2 "idle connection timed out" (readChan outcomes)
      (r :: Either IOException ()) `shouldSatisfy` either W.isIdleTimeoutError (const False)
      within 2 "idle client sees the end" (NB.recv idle 10) `shouldReturn` B.empty
      NB.sendAll active (BC.pack "q")
      recvExactly active 1 `shouldReturn` BC.pack "q"
      mapM_ N.close [idle, active]

  it "an idle timer whose check runs after its timeout was replaced or removed does nothing" $ withPair $ \(c, srv) -> do
    -- The check of a timer that fired as 'setIdleTimeout' ran, called by
    -- hand once the call is done (Note [Idle timers are the socket's only
    -- while they are its key]).
    mgr <- T.getSystemTimerManager
    W.setIdleTimeout c 40000
    k1 <- idleTimerKey c
    W.setIdleTimeout c 60000
    k2 <- idleTimerKey c
    -- The replacement has a timer of its own.
    (k2 == Nothing) `shouldBe` False
    (k2 == k1) `shouldBe` False
    -- The socket made progress lately: the old check would re-arm.
    mapM_ (idleTimerFired mgr c 40000000) k1
    ((== k2) <$> idleTimerKey c) `shouldReturn` True
    W.setIdleTimeout c 0
    mapM_ (idleTimerFired mgr c 60000000) k2
    ((== Nothing) <$> idleTimerKey c) `shouldReturn` True
    -- Silent for longer than the period: the old check would expire it.
    threadDelay 80000
    mapM_ (idleTimerFired mgr c 60000000) k2
    W.sendAll c (BC.pack "y")
    W.recv srv 10 `shouldReturn` BC.pack "y"

  it "out of fds, keeps every established client (idle or not) and refuses newcomers with a close" $
    withWeftServer W.defaultServerConfig echo $ \addr -> keepsClientsWhenFull True addr B.empty echoX

  it "at serverMaxClients, refuses newcomers with exactly serverRefusal, keeps the clients it has" $
    withWeftServer W.defaultServerConfig { W.serverMaxClients = 8, W.serverRefusal = BC.pack "busy\n" } echo $ \addr ->
      keepsClientsWhenFull False addr (BC.pack "busy\n") echoX

  it "with EvictStalledThenIdle, out of fds, closes idle clients for newcomers, never the busy one" $
    withWeftServer W.defaultServerConfig { W.serverEviction = W.EvictStalledThenIdle } echo $ \addr ->
      makesRoomForNewcomers addr echoX

  it "never closes a connection its handler is working for, even under EvictStalledThenIdle" $ do
    -- The handler takes 700 ms over each request, without any I/O.
    let slowEcho s _ = do
          c <- W.recv s 4096
          unless (B.null c) (threadDelay 700000 >> W.sendAll s c >> slowEcho s undefined)
    withWeftServer W.defaultServerConfig { W.serverEviction = W.EvictStalledThenIdle, W.serverMaxClients = 1 } slowEcho $ \addr -> do
      worked <- connectClient addr
      newcomer <- N.socket N.AF_INET N.Stream N.defaultProtocol
      (`finally` mapM_ N.close [worked, newcomer]) $ do
        NB.sendAll worked (BC.pack "w")
        threadDelay 400000
        within 1 "the newcomer's refusal" $ (N.connect newcomer addr >> recvToEnd newcomer) `shouldReturn` B.empty
        within 2 "the slow answer" (recvExactly worked 1) `shouldReturn` BC.pack "w"

  it "slow clients cannot lock fresh ones out at the fd limit; a slow but steady upload is not cut off" $ do
    -- A toy protocol: heads end with a blank line, and each gets "ok".
    let cfg = W.defaultServerConfig { W.serverIdleTimeout = 300000, W.serverMinReceive = 64
                                    , W.serverEviction = W.EvictStalled }
        heads s acc = do
          c <- W.recv s 4096
          unless (B.null c) $ do
            let acc' = acc <> c
            if BC.pack "\r\n\r\n" `B.isInfixOf` acc'
              then W.sendAll s (BC.pack "ok\n") >> heads s B.empty
              else heads s acc'
    startManagers
    fds0 <- countFds
    withWeftServer cfg (\s _ -> heads s B.empty) $ \addr -> do
      -- Every client socket is made before the limit drops.
      slow <- replicateM 10 (N.socket N.AF_INET N.Stream N.defaultProtocol)
      uploader <- N.socket N.AF_INET N.Stream N.defaultProtocol
      fresh <- replicateM 8 (N.socket N.AF_INET N.Stream N.defaultProtocol)
      (`finally` mapM_ N.close (slow ++ uploader : fresh)) $ withFdHeadroom 6 $ \_ -> do
        N.connect uploader addr
        -- Slowloris: one byte of a head every 50 ms, never finished.
        tricklers <- forM slow $ \c -> async $ do
          N.connect c addr
          -- True if the server cut it off before its 3 s of trickling.
          let go k = do
                r <- try (NB.sendAll c (BC.pack "G"))
                case r of
                  Left (_ :: IOException) -> return True
                  Right () | k < (60 :: Int) -> threadDelay 50000 >> go (k + 1)
                           | otherwise -> return False
          go 0
        -- A steady upload: a 48 KiB head at 1 KiB per 20 ms, from a client
        -- that was there before the attack (one that comes with it may be
        -- refused: the attackers have not sent anything yet, so none of
        -- them can be closed for it).
        upload <- async $ labelled "the upload" $ do
          forM_ [1 .. 48 :: Int] $ \_ -> NB.sendAll uploader (BC.replicate 1024 'x') >> threadDelay 20000
          NB.sendAll uploader (BC.pack "\r\n\r\n")
          recvExactly uploader 3
        -- Fresh clients, one every 150 ms, each answered within a second.
        waits <- forM fresh $ \c -> do
          threadDelay 150000
          t0 <- getMonotonicTime
          within 1 "a fresh client's answer" $ labelled "a fresh client" $ do
            N.connect c addr
            NB.sendAll c (BC.pack "GET / HTTP/1.1\r\n\r\n")
            recvExactly c 3 `shouldReturn` BC.pack "ok\n"
          subtract t0 <$> getMonotonicTime
        maximum waits `shouldSatisfy` (< 1)
        within 5 "the upload's answer" (wait upload) `shouldReturn` BC.pack "ok\n"
        -- Every slow client was cut off, long before its 3 s of trickling.
        within 5 "slow clients closed" (mapM wait tricklers) `shouldReturn` replicate 10 True
        forM_ slow $ \c -> do
          r <- try (NB.recv c 10)
          either (\(_ :: IOException) -> return ()) (`shouldBe` B.empty) r
    -- At most where they were: an earlier test's lingering close may end
    -- meanwhile, and a leak would stay above.
    eventually "fds back to where they were" ((<= fds0) <$> countFds)

  it "refuses a connection clearly" $ do
    l <- W.listen loopback
    addr <- W.localAddress l
    W.close l
    W.connect addr `shouldThrow` (\e -> ioe_type e == NoSuchThing)

  it "sends and receives UDP datagrams, batched" $ do
    rx <- W.bindUDP loopback
    tx <- W.openUDP loopback
    to <- W.localAddress rx
    (`finally` (W.close rx >> W.close tx)) $ do
      forM_ [1 .. 10 :: Int] $ \i -> W.sendTo tx (BC.pack ("d" ++ show i)) to
      let collect acc | length acc >= 10 = return acc
                      | otherwise = do
                          got <- W.recvFromMany rx 8 64
                          got `shouldSatisfy` (\g -> not (null g) && length g <= 8)
                          collect (acc ++ map fst got)
      msgs <- within 2 "datagrams" (collect [])
      msgs `shouldBe` [ BC.pack ("d" ++ show i) | i <- [1 .. 10 :: Int] ]
      _ <- W.sendTo tx (BC.pack "one") to
      (m, _) <- within 2 "one datagram" (W.recvFrom rx 64)
      m `shouldBe` BC.pack "one"

  it "converts to and from network's Socket" $ withPair $ \(c, srv) -> do
    ns <- W.toNetworkSocket c
    (`finally` N.close ns) $ do
      W.recv c 1 `shouldThrow` (\e -> ioe_errno e /= Nothing)
      NB.sendAll ns (BC.pack "via network")
      W.recv srv 100 `shouldReturn` BC.pack "via network"
    l <- N.socket N.AF_INET N.Stream N.defaultProtocol
    N.setSocketOption l N.ReuseAddr 1
    N.bind l loopback
    N.listen l 4
    addr <- N.getSocketName l
    c2 <- connectClient addr
    (a, _) <- N.accept l
    w <- W.fromNetworkSocket a
    (`finally` (W.close w >> N.close c2 >> N.close l)) $ do
      NB.sendAll c2 (BC.pack "to weft")
      within 2 "weft recv" (W.recv w 100) `shouldReturn` BC.pack "to weft"

  it "sendMany sends every chunk in order" $ withPair $ \(c, srv) -> do
    let chunks = [ B.replicate n (fromIntegral n) | n <- [1 .. 3000] ]
        expected = B.concat chunks
    _ <- forkIO (W.sendMany c chunks)
    let loop acc n | n >= B.length expected = return (B.concat (reverse acc))
                   | otherwise = W.recv srv 65536 >>= \b -> loop (b : acc) (n + B.length b)
    got <- within 10 "all bytes" (loop [] 0)
    got `shouldBe` expected

  it "sendFile sends a header and a file range, waiting while the peer is slow; 0 past the end" $
    withPair $ \(c, srv) -> do
      tmp <- getTemporaryDirectory
      let path = tmp </> "weft-test-sendfile"
          content = B.pack [ fromIntegral (i * 31 `mod` 253) | i <- [0 .. 2000000 :: Int] ]
          from = 12345
          count = B.length content - from - 100
      B.writeFile path content
      (`finally` removeFile path) $ bracket (openReadOnly path) closeFd $ \fd -> do
        sender <- async $ do
          W.sendManyMore c [BC.pack "head", BC.pack "er:"]
          let go off left = when (left > 0) $ do
                k <- W.sendFile c fd off left
                when (k <= 0) (throwIO (userError "file ended early"))
                go (off + k) (left - k)
          go (fromIntegral from) (fromIntegral count)
          -- Past the end of the file there is nothing to send.
          W.sendFile c fd (fromIntegral (B.length content)) 10
        -- The reader starts late, so the sender must wait for buffer room.
        threadDelay 50000
        let total = 7 + count
            loop acc n | n >= total = return (B.concat (reverse acc))
                       | otherwise = W.recv srv 65536 >>= \b -> loop (b : acc) (n + B.length b)
        got <- within 10 "all bytes" (loop [] 0)
        got `shouldBe` (BC.pack "header:" <> B.take count (B.drop from content))
        within 5 "sender" (wait sender) `shouldReturn` 0
        W.sendFile c fd 0 0 `shouldThrow` (\e -> ioe_type e == InvalidArgument)

  it "a newcomer is served, not refused, when the server stops being full while no one may be closed" $ do
    -- Full at the accept, nothing to close, room again a moment later (a
    -- client left; fds came back after an accept found none).
    looks <- newIORef (0 :: Int)
    let full = atomicModifyIORef' looks (\n -> (n + 1, n == 0))
    l <- W.listen loopback
    addr <- W.localAddress l
    (`finally` W.close l) $
      bracket (S.newAdmission full (return Refuse) (BC.pack "refused")) S.closeAdmission $ \adm ->
        bracket (connectClient addr) N.close $ \c -> do
          (s, _) <- within 2 "admitted" (S.acceptAdmitting adm l)
          (`finally` W.close s) $ do
            _ <- W.send s (BC.pack "served")
            within 2 "recv" (NB.recv c 100) `shouldReturn` BC.pack "served"
          readIORef looks `shouldReturn` 2

  it "tryAccept says would-block with nothing pending, then takes a pending connection" $ do
    l <- W.listen loopback
    addr <- W.localAddress l
    (`finally` W.close l) $ do
      none <- W.tryAccept l
      fmap (W.socketFd . fst) none `shouldBe` Nothing
      bracket (connectClient addr) N.close $ \c -> do
        -- The handshake completes in the kernel; the connection is queued.
        let poll = W.tryAccept l >>= maybe (threadDelay 1000 >> poll) return
        (s, _) <- within 2 "accept" poll
        (`finally` W.close s) $ do
          NB.sendAll c (BC.pack "hi")
          got <- within 2 "recv" (W.recv s 10)
          got `shouldBe` BC.pack "hi"

  it "tryRecv: would-block, bytes, then an end of stream; a reset throws" $ withPair $ \(c, srv) -> do
    W.tryRecv srv 100 `shouldReturn` Nothing
    W.sendAll c (BC.pack "abc")
    let poll = W.tryRecv srv 100 >>= maybe (threadDelay 500 >> poll) return
    within 2 "bytes" poll `shouldReturn` BC.pack "abc"
    W.tryRecv srv 100 `shouldReturn` Nothing
    W.shutdownSend c
    within 2 "end of stream" poll `shouldReturn` B.empty
    (W.tryRecv srv 0 >> return ()) `shouldThrow` (\e -> ioe_type e == InvalidArgument)

  it "tryRecv throws ECONNRESET on a reset" $ withResetPeer $ \s -> do
    let poll = W.tryRecv s 100 >>= maybe (threadDelay 500 >> poll) return
    r <- within 2 "reset" (try poll)
    r `shouldSatisfy` isErrno ResourceVanished

  it "trySendMany takes what fits, then says would-block; every byte taken arrives" $ withPair $ \(c, srv) -> do
    W.trySendMany c [] `shouldReturn` Just 0
    let chunk = B.replicate 65536 7
        fill total = do
          r <- W.trySendMany c [chunk, BC.pack "x"]
          case r of
            Nothing -> return total
            Just n -> fill (total + n)
    sent <- within 5 "fill" (fill 0)
    sent `shouldSatisfy` (> 0)
    -- The socket is full: nothing more goes in.
    W.trySendMany c [chunk] `shouldReturn` Nothing
    let drain got | got >= sent = return got
                  | otherwise = W.recv srv 65536 >>= \b -> drain (got + B.length b)
    within 10 "drain" (drain 0) `shouldReturn` sent

  it "threads blocked on many sockets all wake" $ do
    results <- within 20 "all pairs" $ mapConcurrently (\i -> withPair $ \(c, srv) -> do
      v <- newEmptyMVar
      _ <- forkIO (W.recv srv 10 >>= putMVar v)
      threadDelay 1000
      W.sendAll c (BC.pack (show (i :: Int)))
      takeMVar v) [1 .. 200]
    results `shouldBe` map (BC.pack . show) [1 .. 200 :: Int]
