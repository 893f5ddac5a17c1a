{-# LANGUAGE ScopedTypeVariables #-}
-- | What only the io_uring backend has: falling back when the kernel
-- refuses a ring, and requests that outlive the OS thread that submitted
-- them. The rest of the suite runs under every backend (Main).
module Test.Uring (spec) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import Data.List (sort)
import Data.Maybe (isNothing)
import Foreign.C.Error (Errno (..), eCONNREFUSED, eCONNRESET, eINVAL, eNOSYS, eOK, ePERM, ePIPE)
import Foreign.C.Types (CInt (..), CUInt (..))
import GHC.IO.Exception (IOException (..))
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import GHC.Clock (getMonotonicTimeNSec)
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import Test.Hspec

import qualified Weft as W
import qualified Weft.Color as Color
import qualified Weft.Net as W
import qualified Weft.Event as E
import Weft.Event.Internal.Backend.Uring (injectStaleReport, setUringCooperation, setUringReceiveBuffers, setUringSetupFailure)

import Support
import Test.Net (connectClient, withPair)

-- | Given whether the kernel lets this process set up rings.
spec :: Bool -> Spec
spec usable = describe "io_uring backend" $ do
  describe "a kernel that refuses rings" $ do
    it "newManager raises the set-up's errno, and never falls back" $
      withRefusal ePERM $
        E.newManager E.UringBackend 0 `shouldThrow` hasErrno ePERM

    it "the system managers fall back to epoll, once, and record why" $ do
      withRefusal eNOSYS $ do
        E.setSystemBackend E.UringBackend
        startManagers
        mgrs <- E.systemManagers
        map E.managerBackendKind mgrs `shouldBe` map (const E.EPollBackend) mgrs
        E.systemBackendKind `shouldReturn` E.EPollBackend
        why <- E.systemBackendFallback
        fmap ioe_errno why `shouldBe` Just (Just (let Errno e = eNOSYS in e))
        -- They still serve waits.
        withPipe $ \(r, w) -> do
          writeByte w
          within 5 "a wait after the fallback" (W.threadWaitRead r)
      when usable $ do
        E.setSystemBackend E.UringBackend
        startManagers
        E.systemBackendFallback >>= (`shouldSatisfy` isNothing)
        map E.managerBackendKind <$> E.systemManagers
          >>= (`shouldSatisfy` all (== E.UringBackend))

  describe "a kernel without cooperative task running" $
    it "rings run completions cooperatively where the kernel can; refused (EINVAL), rings are set up without it and still serve" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      can <- kernelAtLeast (5, 19)
      let cooperative = map (maybe False E.ringCooperative) <$> (mapM E.getRingStats =<< E.systemManagers)
      forM_ [(eINVAL, False), (eOK, can)] $ \(refusal, expected) -> do
        (setUringCooperation refusal >> E.setSystemBackend E.UringBackend >> startManagers)
          `finally` setUringCooperation eOK
        map E.managerBackendKind <$> E.systemManagers >>= (`shouldSatisfy` all (== E.UringBackend))
        cooperative >>= (`shouldSatisfy` all (== expected))
        -- A receive that has to wait, on every capability's ring.
        n <- getNumCapabilities
        forM_ [0 .. n - 1] $ \cap -> withPair $ \(c, srv) -> do
          (_, got) <- forkResult cap (W.recv srv 10)
          threadDelay 2000
          W.sendAll c (BC.pack "ping")
          within 5 "a receive on the ring" (takeMVar got) >>= either throwIO (`shouldBe` BC.pack "ping")

  describe "readiness reported stale" $
    it "a wait whose fd the ring reports ready while it is not stays waiting, and ends when the fd is ready" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      can <- kernelAtLeast (6, 11)
      unless can $ pendingWith "a kernel before 6.11 cannot inject the report"
      E.setSystemBackend E.UringBackend
      startManagers
      withPipe $ \(r, w) -> do
        -- The pipe is empty, and the ring reports it readable: the report
        -- the kernel makes when a writer's wake-up comes after a reader
        -- took the bytes (Note [Stale readiness on a ring]).
        injectStaleReport r
        (_, woke) <- forkResult 0 (W.threadWaitRead r)
        threadDelay 200000
        tryTakeMVar woke >>= (`shouldSatisfy` isNothing)
        writeByte w
        within 5 "the wait once the pipe is readable" (takeMVar woke) >>= either throwIO return
        readByte r >>= (`shouldBe` Just 7)

  describe "submitting threads that exit" $
    it "waits armed while the RTS makes and retires OS threads are resubmitted, and all complete, once" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      before0 <- resubmits
      -- Ping-pong over pipes keeps both dispatchers submitting from
      -- whichever OS thread holds their capability, while bursts of safe
      -- calls make the RTS hand capabilities between OS threads, make new
      -- ones and retire all but a few spares: sooner or later a thread
      -- that submitted requests exits, and the kernel cancels them.
      stop <- newIORef False
      trips <- forM [0 .. 3 :: Int] $ \k -> do
        (r1, w1) <- newPipe
        (r2, w2) <- newPipe
        let ping n = do
              halt <- readIORef stop
              if halt then return (n :: Int) else do
                writeByte w1
                W.threadWaitRead r2
                _ <- readByte r2
                ping (n + 1)
            pong = forever $ do
              W.threadWaitRead r1
              _ <- readByte r1
              writeByte w2
        pongT <- forkOn ((k + 1) `mod` 2) pong
        (_, done) <- forkResult (k `mod` 2) (ping 0)
        return (pongT, done)
      -- Each round also leaves receives waiting on the ring, on
      -- connections that stay open until the end.
      l <- W.listen (SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
      addr <- W.localAddress l
      let round' = do
            ws <- forM [1 .. 16 :: Int] $ \j -> do
              p@(r, _) <- newPipe
              (_, done) <- forkResult (j `mod` 2) (W.threadWaitRead r)
              return (p, done)
            rs <- forM [1 .. 4 :: Int] $ \j -> do
              c <- W.connect addr
              (srv, _) <- W.accept l
              (_, got) <- forkResult (j `mod` 2) (W.recv srv 100)
              return (c, srv, got)
            dones <- forM [1 .. 64 :: Int] $ \j ->
              snd <$> forkResult (j `mod` 2) (replicateM_ 10 (c_usleep 300 >> yield))
            mapM_ takeMVar dones
            return (ws, rs)
          rounds i acc = do
            (ws, rs) <- round'
            n <- resubmits
            let acc' = (fst acc ++ ws, snd acc ++ rs)
            if n > before0 || i >= (40 :: Int) then return acc' else rounds (i + 1) acc'
      (waits, recvs) <- rounds 1 ([], [])
      W.close l
      after0 <- resubmits
      after0 `shouldSatisfy` (> before0)
      -- The ping-pong lost no readiness: every pair is still going.
      writeIORef stop True
      counts <- within 5 "every ping-pong pair" (mapM (takeMVar . snd) trips)
      [ () | Left _ <- counts ] `shouldBe` []
      mapM_ (killThread . fst) trips
      -- None of the other waits fired early: every pipe is still empty.
      eventually "every wait armed" ((>= length waits) <$> liveRegistrations)
      early <- mapM (tryReadMVar . snd) waits
      length [ () | Just _ <- early ] `shouldBe` 0
      forM_ waits $ \((_, w), _) -> writeByte w
      outcomes <- within 10 "every wait" (mapM (takeMVar . snd) waits)
      length [ () | Right () <- outcomes ] `shouldBe` length waits
      -- Each pipe holds its one byte: no wait read it, none was lost.
      bytes <- mapM (readByte . fst . fst) waits
      length [ () | Just _ <- bytes ] `shouldBe` length waits
      mapM_ (closePipe . fst) waits
      -- Each ring receive gets its own connection's bytes, once.
      forM_ (zip [0 :: Int ..] recvs) $ \(i, (c, _, _)) -> W.sendAll c (BC.pack (show i))
      got <- within 10 "every ring receive" (mapM (\(_, _, g) -> takeMVar g) recvs)
      [ i | (i, Right b) <- zip [0 :: Int ..] got, b == BC.pack (show i) ] `shouldBe` [0 .. length recvs - 1]
      forM_ recvs $ \(c, srv, _) -> W.close c >> W.close srv
  describe "closing a watched socket" $
    it "closed while its edge watch reports events, the socket closes every time: the peer sees it" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      rt <- Color.newRuntime Color.defaultConfig
      (`finally` Color.shutdown rt) $ forM_ [1 .. 200 :: Int] $ \i -> withPair $ \(c, srv) -> do
        let h = Color.handler "watch"
        -- An edge watch: one multishot poll request on c's fd.
        _ <- Color.watchSocket rt c 0 (h, return ()) (h, return ())
        -- The peer sends without a pause from either capability, so the
        -- request is often reporting an event when the close removes it.
        (_, flood) <- forkResult (i `mod` 2) (forever (W.sendAll srv (B.replicate 512 1)) :: IO ())
        threadDelay (100 * (i `mod` 5))
        W.close c
        -- A request left on the ring would hold c's file open: the peer
        -- would see no close, and its sends would block for ever.
        r <- within 3 "the peer's sends failing after the close" (takeMVar flood)
        r `shouldSatisfy` isErrnoOf [eCONNRESET, ePIPE]

  describe "receives on the ring" $ do
    it "a timeout racing every receive, across capabilities: each byte arrives once, in order, and some were kept from cancelled receives" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      kept0 <- ringStat E.ringReceivesKept
      withPair $ \(c, srv) -> do
        -- Rounds of 2,000 bytes, sent one at a time with a short gap,
        -- while the receiver's timeouts of about the same length keep
        -- cancelling its receives; until a cancelled receive had bytes.
        let sender k = forM_ [0 .. 1999 :: Int] $ \i -> do
              W.sendAll c (B.singleton (fromIntegral ((k * 2000 + i) `mod` 251)))
              spinMicros (i `mod` 23)
            receiver want acc
              | B.length acc >= want = return acc
              | otherwise = do
                  r <- W.timeout (1 + B.length acc `mod` 17) (W.recv srv 64)
                  receiver want (maybe acc (acc <>) r)
            rounds k acc = do
              (_, sent) <- forkResult 1 (sender k)
              -- Masked: the timeouts land only where a receive blocks,
              -- never between a receive's return and this loop's use of
              -- its bytes (which no receive can protect).
              (_, got) <- forkResult 0 (mask_ (receiver ((k + 1) * 2000) acc))
              within 20 "the sender" (takeMVar sent) >>= either throwIO return
              acc' <- within 20 "the receiver" (takeMVar got) >>= either throwIO return
              kept <- ringStat E.ringReceivesKept
              if kept > kept0 || k >= 14 then return (k + 1, acc') else rounds (k + 1) acc'
        (n, got) <- rounds 0 B.empty
        got `shouldBe` B.pack [ fromIntegral (i `mod` 251) | i <- [0 .. n * 2000 - 1] ]
      ringStat E.ringReceivesKept >>= (`shouldSatisfy` (> kept0))

    it "close with a receive in flight: the receiver gets EBADF, the peer sees the close, nothing stays on the ring" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      base <- liveRegistrations
      forM_ [1 .. 50 :: Int] $ \_ -> withPair $ \(c, srv) -> do
        (_, res) <- forkResult 0 (W.recv srv 10)
        threadDelay 2000
        W.close srv
        r <- within 2 "the receive" (takeMVar res)
        r `shouldSatisfy` isBadFd
        within 2 "the peer's end of stream" (W.recv c 10) `shouldReturn` B.empty
      liveRegistrations `shouldReturn` base

    it "a socket that reuses a closed socket's fd number gets only its own bytes" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      reused <- forM [1 .. 100 :: Int] $ \i -> do
        (old, oldRes) <- withPair $ \(_, srv) -> do
          (_, res) <- forkResult (i `mod` 2) (W.recv srv 10)
          threadDelay 1000
          return (W.socketFd srv, res)
        withPair $ \(c, srv) -> do
          (_, res) <- forkResult (i `mod` 2) (W.recv srv 10)
          W.sendAll c (BC.pack (show i))
          r <- within 2 "the new socket's receive" (takeMVar res)
          either (const Nothing) Just r `shouldBe` Just (BC.pack (show i))
          -- The old one ended with its socket: the peer's close (end of
          -- stream) or its own (EBADF).
          oldR <- within 2 "the old socket's receive" (takeMVar oldRes)
          oldR `shouldSatisfy` (\x -> isBadFd x || either (const False) B.null x)
          return (W.socketFd srv == old)
      -- The test means something only if numbers were reused.
      length (filter id reused) `shouldSatisfy` (> 50)

    it "more waiting receives than provided buffers: every connection gets its own bytes" $ (`finally` setUringReceiveBuffers 256) $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      -- Rings with 16 buffers each.
      setUringReceiveBuffers 16
      E.setSystemBackend E.UringBackend
      startManagers
      raiseFdLimit 4096
      noBuf0 <- ringStat E.ringReceivesNoBuffer
      l <- W.listen (SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
      addr <- W.localAddress l
      let conns = 700 :: Int
      pairs <- forM [1 .. conns] $ \_ -> do
        c <- W.connect addr
        (srv, _) <- W.accept l
        return (c, srv)
      W.close l
      -- Every receive waits on capability 0's ring.
      waits <- forM pairs $ \(_, srv) -> snd <$> forkResult 0 (recvAll srv 3000)
      threadDelay 50000
      -- Sent from capability 0 without a pause (and without waiting: each
      -- fits), so its dispatcher cannot hand buffers back between the
      -- completions.
      (_, sent) <- forkResult 0 $ forM_ (zip [1 ..] pairs) $ \(i, (c, _)) ->
        W.trySendMany c [payload i] `shouldReturn` Just 3000
      within 10 "the sends" (takeMVar sent) >>= either throwIO return
      got <- within 20 "every receive" (mapM takeMVar waits)
      [ i | (i, Right b) <- zip [1 ..] got, b == payload i ] `shouldBe` [1 .. conns]
      forM_ pairs $ \(c, srv) -> W.close c >> W.close srv
      ringStat E.ringReceivesNoBuffer >>= (`shouldSatisfy` (> noBuf0))

  describe "capabilities coming and going" $
    it "the count going 1, 2, 1, 2... every 10 ms with receives and sends on the rings: every message comes back once, in order, and nothing stays on a ring" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      caps0 <- getNumCapabilities
      received0 <- ringStat E.ringReceives
      let conns = 6 :: Int
          trips = 20000 :: Int
          message k i = BC.pack (show k ++ ":" ++ show i ++ "\n")
          -- One connection: an echoing server thread and a client that
          -- checks every reply. Unpinned, so that both migrate as
          -- capabilities come and go, with their requests on the ring of
          -- the manager they started on.
          connection k = withPair $ \(c, srv) -> do
            let total = sum [ B.length (message k i) | i <- [1 .. trips] ]
                echoing left = when (left > 0) $ do
                  b <- W.recv srv 64
                  when (B.null b) $ throwIO (userError ("connection " ++ show k ++ ": end of stream"))
                  W.sendAll srv b
                  echoing (left - B.length b)
            echo <- newEmptyMVar
            _ <- forkIO (try (echoing total) >>= putMVar echo)
            forM_ [1 .. trips] $ \i -> do
              let m = message k i
              W.sendAll c m
              reply <- recvAll c (B.length m)
              when (reply /= m) $ throwIO (userError ("connection " ++ show k ++ ": sent " ++ show m ++ ", got " ++ show reply))
            takeMVar echo >>= either (throwIO :: SomeException -> IO ()) return
      outs <- forM [1 .. conns] $ \k -> do
        m <- newEmptyMVar
        _ <- forkIO (try (connection k) >>= putMVar m)
        return m
      -- Change the count every 10 ms for as long as the traffic runs
      -- (bounded), counting the changes made while it ran.
      let toggling n changes = do
            running <- or <$> mapM isEmptyMVar outs
            if not running || changes >= (400 :: Int) then return changes else do
              W.setNumCapabilities n
              threadDelay 10000
              toggling (3 - n) (changes + 1)
      changes <- toggling 1 0
      W.setNumCapabilities caps0
      rs <- within 120 "ping-pong across capability changes" (mapM takeMVar outs)
      forM_ rs (either (throwIO :: SomeException -> IO ()) return)
      changes `shouldSatisfy` (>= 6)
      -- The receives went to the rings (else this tests readiness).
      received <- ringStat E.ringReceives
      received - received0 `shouldSatisfy` (>= fromIntegral (conns * trips))
      eventually "no request left on a ring" ((== 0) <$> ringStat E.ringInflight)

  describe "sends on the ring" $ do
    it "a large send to a slow reader goes out in several short ring sends; every byte once, in order" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      sends0 <- ringStat E.ringSends
      withPair $ \(c, srv) -> do
        let big = B.pack [ fromIntegral (i `mod` 253) | i <- [0 .. 8 * 1048576 - 1 :: Int] ]
            -- A gather send of 2,000 strings, each 4 KiB: the ring's
            -- message header must point at each, in order.
            chunks = [ BC.replicate 4096 (toEnum (65 + i `mod` 26)) | i <- [0 .. 1999 :: Int] ]
        (_, sent) <- forkResult 0 (W.sendAll c big >> W.sendMany c chunks)
        (_, got) <- forkResult 1 (slowRead srv (B.length big + 4096 * 2000))
        within 30 "the sends" (takeMVar sent) >>= either throwIO return
        b <- within 30 "the reader" (takeMVar got) >>= either throwIO return
        -- Where the bytes first differ from what was sent (Nothing: nowhere).
        B.length b `shouldBe` B.length big + 4096 * 2000
        firstDifference b (big <> B.concat chunks) `shouldBe` Nothing
      -- Each ring send took only what the drained socket had room for.
      ringStat E.ringSends >>= (`shouldSatisfy` (>= sends0 + 4))
      ringStat E.ringInflight `shouldReturn` 0

    it "a timeout racing sends: the peer gets a prefix of each interrupted message, then the next message whole, in order" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      withPair $ \(c, srv) -> do
        let rounds = 20 :: Int
            msg k len = B.replicate len (fromIntegral k)
            sender = forM [0 .. rounds - 1] $ \k -> do
              -- 4 MiB cannot all go before the timeout: the rest is on
              -- the ring when the timeout cancels it.
              r <- W.timeout (1000 + 500 * (k `mod` 5)) (W.sendAll c (msg (2 * k) 4194304))
              W.sendAll c (msg (2 * k + 1) 65536)
              return (isNothing r)
        (_, sent) <- forkResult (0 :: Int) sender
        (_, got) <- forkResult 1 (slowRead srv (-1))
        interrupted <- within 60 "the sends" (takeMVar sent) >>= either throwIO return
        W.shutdownSend c
        b <- within 60 "the reader" (takeMVar got) >>= either throwIO return
        let check k rest
              | k == rounds = rest `shouldBe` B.empty
              | otherwise = do
                  let (partial, rest1) = B.span (== fromIntegral (2 * k)) rest
                      (whole, rest2) = B.span (== fromIntegral (2 * k + 1)) rest1
                  B.length partial `shouldSatisfy` (<= 4194304)
                  B.length whole `shouldBe` 65536
                  check (k + 1) rest2
        check 0 b
        length (filter id interrupted) `shouldSatisfy` (> 0)
      ringStat E.ringInflight `shouldReturn` 0

    it "a peer reset mid-send: the sender gets ECONNRESET or EPIPE, nothing stays on the ring" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      sends0 <- ringStat E.ringSends
      forM_ [1 .. 20 :: Int] $ \i -> do
        l <- W.listen (SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
        addr <- W.localAddress l
        peer <- connectClient addr
        (srv, _) <- W.accept l
        W.close l
        -- The peer reads 4 MiB of 32, so that some of the sender's ring
        -- sends complete before the reset.
        (_, res) <- forkResult (i `mod` 2) (W.sendAll srv (B.replicate (32 * 1048576) 7))
        let drain k = when (k > 0) $ NB.recv peer 65536 >>= \b -> drain (k - B.length b)
        drain (4 * 1048576 :: Int)
        threadDelay 5000
        N.setSockOpt peer N.Linger (N.StructLinger 1 0)
        N.close peer
        r <- within 5 "the sender" (takeMVar res)
        r `shouldSatisfy` \x -> isErrnoOf [eCONNRESET, ePIPE] x
        W.close srv
      ringStat E.ringSends >>= (`shouldSatisfy` (> sends0))
      ringStat E.ringInflight `shouldReturn` 0

    it "close with a send in flight: the sender gets EBADF, nothing stays on the ring" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      forM_ [1 .. 50 :: Int] $ \i -> withPair $ \(_, srv) -> do
        -- Nobody reads c: the send fills the socket and waits on the ring.
        (_, res) <- forkResult (i `mod` 2) (W.sendAll srv (B.replicate (16 * 1048576) 7))
        threadDelay 5000
        W.close srv
        r <- within 2 "the send" (takeMVar res)
        r `shouldSatisfy` isBadFd
      ringStat E.ringInflight `shouldReturn` 0

  describe "connects on the ring" $
    it "the ring makes a connect; a refused one fails with ECONNREFUSED; a timeout during one leaves nothing on the ring" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      connects0 <- ringStat E.ringConnects
      fds0 <- openFdCount
      l <- W.listen loopback
      addr <- W.localAddress l
      (c, srv) <- (`finally` W.close l) $ do
        c <- within 5 "the connect" (W.connect addr)
        (srv, _) <- within 5 "the accept" (W.accept l)
        return (c, srv)
      W.sendAll c (BC.pack "hi")
      within 5 "the bytes" (W.recv srv 10) >>= (`shouldBe` BC.pack "hi")
      mapM_ W.close [c, srv]
      ringStat E.ringConnects >>= (`shouldSatisfy` (> connects0))
      -- Nobody listens on the closed listener's port now.
      within 5 "a refused connect" (W.connect addr) `shouldThrow` hasErrno eCONNREFUSED
      -- A listener whose accept queue is full drops the SYNs of further
      -- connects, which wait for a retransmission (a second): the timeout
      -- cancels one of them.
      full <- W.listenWith (W.ListenOptions 0 False) loopback
      fullAddr <- W.localAddress full
      let fill k made
            | k >= (8 :: Int) = return (made, False)
            | otherwise = W.timeout 100000 (W.connect fullAddr)
                >>= maybe (return (made, True)) (\c' -> fill (k + 1) (c' : made))
      (made, timedOut) <- fill 0 [] `finally` W.close full
      mapM_ W.close made
      -- The test is about the timeout: had every connect completed, it
      -- would have cancelled nothing.
      unless timedOut $ expectationFailure
        ("all " ++ show (length made) ++ " connects to a listener with a full accept queue completed; none timed out")
      eventually "nothing on the ring" ((== 0) <$> ringStat E.ringInflight)
      eventually "every fd closed" ((<= fds0) <$> openFdCount)

  describe "accepts on the ring" $ do
    it "a timeout racing every accept, across capabilities: each connection is accepted once, some were kept from cancelled accepts, no fd is left open" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      kept0 <- ringStat E.ringReceivesKept
      accepts0 <- ringStat E.ringAccepts
      fds0 <- openFdCount
      l <- W.listen loopback
      addr <- W.localAddress l
      -- Rounds of 200 connections, each sending its number, while the
      -- acceptor's timeouts of about a connect's length keep cancelling
      -- its accepts; until a cancelled accept had a connection.
      let rounds k = do
            let ids = [k * 200 .. k * 200 + 199]
            (_, cs) <- forkResult 1 (mapM (numberedClient addr) ids)
            (_, ss) <- forkResult 0 (mask_ (racingAcceptor l (return False) 200 []))
            cs' <- within 20 "the clients" (takeMVar cs) >>= either throwIO return
            ss' <- within 20 "the acceptor" (takeMVar ss) >>= either throwIO return
            got <- forM ss' $ \srv -> within 2 "a connection's number" (recvNumber srv)
            mapM_ W.close (cs' ++ ss')
            sort got `shouldBe` ids
            kept <- ringStat E.ringReceivesKept
            unless (kept > kept0 || k >= 14) (rounds (k + 1))
      rounds 0 `finally` W.close l
      ringStat E.ringReceivesKept >>= (`shouldSatisfy` (> kept0))
      ringStat E.ringAccepts >>= (`shouldSatisfy` (> accepts0))
      ringStat E.ringInflight `shouldReturn` 0
      eventually "every fd closed" ((<= fds0) <$> openFdCount)

    it "closing a listener closes the connections its cancelled accepts kept: their clients see it" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      fds0 <- openFdCount
      let attempt k = do
            kept0 <- ringStat E.ringReceivesKept
            l <- W.listen loopback
            addr <- W.localAddress l
            let ids = [0 .. 99]
                keptOne = (> kept0) <$> ringStat E.ringReceivesKept
                -- After a cancelled accept: once its request is resolved
                -- (whatever it accepted is kept by then), has one kept a
                -- connection?
                settledKept = do
                  within 2 "the cancelled accept's end" $
                    let go = ringStat E.ringInflight >>= \i -> when (i > 0) (yield >> go) in go
                  keptOne
            (_, cs) <- forkResult 1 (mapM (numberedClient addr) ids)
            -- Stops as soon as a cancelled accept kept a connection, and
            -- leaves it (and those still queued) to the close.
            (_, ss) <- forkResult 0 (mask_ (racingAcceptor l settledKept 100 []))
            cs' <- within 20 "the clients" (takeMVar cs) >>= either throwIO return
            ss' <- within 20 "the acceptor" (takeMVar ss) >>= either throwIO return
            kept <- keptOne
            W.close l
            accepted <- forM ss' $ \srv -> within 2 "a connection's number" (recvNumber srv)
            -- The rest were never accepted by anyone: each client sees its
            -- connection end (a reset: it had sent bytes nobody read).
            forM_ (zip ids cs') $ \(i, c) -> unless (i `elem` accepted) $ do
              r <- within 2 ("the end of connection " ++ show i) (try (W.recv c 10))
              r `shouldSatisfy` either (const True) B.null . (id :: Either IOException B.ByteString -> Either IOException B.ByteString)
            mapM_ W.close (cs' ++ ss')
            if kept || k >= 14 then return kept else attempt (k + 1 :: Int)
      attempt 0 `shouldReturn` True
      eventually "every fd closed" ((<= fds0) <$> openFdCount)

    it "close with an accept in flight: the acceptor gets EBADF, nothing stays on the ring" $ do
      unless usable $ pendingWith "the kernel refuses io_uring here"
      E.setSystemBackend E.UringBackend
      startManagers
      forM_ [1 .. 50 :: Int] $ \i -> do
        l <- W.listen loopback
        (_, res) <- forkResult (i `mod` 2) (W.accept l)
        -- Closed only once the accept is on the ring (a fixed pause may
        -- end before a loaded machine has run the acceptor).
        eventually "the accept on the ring" ((>= 1) <$> ringStat E.ringInflight)
        W.close l
        r <- within 2 "the accept" (takeMVar res)
        r `shouldSatisfy` isBadFd
      ringStat E.ringInflight `shouldReturn` 0

  where
    loopback = SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1))
    -- A client that connects and sends its number and a newline.
    numberedClient addr i = do
      c <- W.connect addr
      W.sendAll c (BC.pack (show (i :: Int) ++ "\n"))
      spinMicros (i `mod` 41)
      return c
    recvNumber srv = go B.empty
      where go acc = case BC.elemIndex '\n' acc of
              Just j -> return (read (BC.unpack (B.take j acc)) :: Int)
              Nothing -> W.recv srv 16 >>= \b ->
                if B.null b then throwIO (userError "end of stream before a number") else go (acc <> b)
    -- Accept n connections under timeouts of about a connect's length,
    -- which cancel many of the accepts; after each cancelled one, stop if
    -- stop says so.
    racingAcceptor l stop n acc
      | length acc >= n = return acc
      | otherwise = do
          r <- W.timeout (1 + length acc `mod` 37) (W.accept l)
          case r of
            Just (srv, _) -> racingAcceptor l stop n (srv : acc)
            Nothing -> do
              done <- stop
              if done then return acc else racingAcceptor l stop n acc
    payload i = BC.pack (take 3000 (cycle (show (i :: Int) ++ ":")))
    recvAll sock n = go B.empty
      where go acc | B.length acc >= n = return acc
                   | otherwise = W.recv sock (n - B.length acc) >>= \b ->
                       if B.null b then return acc else go (acc <> b)
    ringStat f = sum . map (maybe 0 f) <$> (mapM E.getRingStats =<< E.systemManagers)
    -- Read everything (until the end of stream if n < 0, else n bytes),
    -- slowly: 64 KiB at a time with a pause, so the sender's socket fills.
    slowRead sock n = go []
      where go acc = do
              let have = sum (map B.length acc)
              if n >= 0 && have >= n then return (B.concat (reverse acc)) else do
                b <- W.recv sock 65536
                threadDelay 200
                if B.null b then return (B.concat (reverse acc)) else go (b : acc)
    isErrnoOf es (Left e) = case fromException e of
      Just ioe -> ioe_errno ioe `elem` [ Just x | Errno x <- es ]
      Nothing -> False
    isErrnoOf _ (Right _) = False
    firstDifference a b
      | a == b = Nothing
      | otherwise = case [ i | i <- [0 .. min (B.length a) (B.length b) - 1], B.index a i /= B.index b i ] of
          (i : _) -> Just (i :: Int)
          [] -> Just (min (B.length a) (B.length b))
    spinMicros us = do
      t0 <- getMonotonicTimeNSec
      let go = do t <- getMonotonicTimeNSec
                  when (t - t0 < fromIntegral us * 1000) go
      go
    kernelAtLeast want = do
      release <- readFile "/proc/sys/kernel/osrelease"
      let (major, rest) = span (/= '.') release
          minor = takeWhile (`elem` ['0' .. '9']) (drop 1 rest)
      return (case (reads major, reads minor) of
                ([(a, "")], [(b, "")]) -> (a, b) >= (want :: (Int, Int))
                _ -> False)
    withRefusal err act =
      (setUringSetupFailure err >> act) `finally` setUringSetupFailure eOK
    hasErrno (Errno e) (x :: IOException) = ioe_errno x == Just e
    resubmits = sum . map (maybe 0 E.ringResubmits) <$> (mapM E.getRingStats =<< E.systemManagers)

-- A safe call: the capability goes on with other threads, and the RTS
-- gives it another OS thread if need be.
foreign import ccall safe "unistd.h usleep" c_usleep :: CUInt -> IO CInt
