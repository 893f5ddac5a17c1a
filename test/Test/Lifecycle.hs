-- | Capabilities changing under load, shutdown, backend choice and wakeups.
module Test.Lifecycle (spec) where

import Control.Concurrent hiding (threadDelay, threadWaitRead)
import Control.Exception
import Control.Monad
import Data.IORef
import System.Environment (setEnv, unsetEnv)
import Test.Hspec

import Support
import Weft (closeFdWith, threadWaitRead, threadDelay)
import qualified Weft
import qualified Weft.Event as E
import qualified Weft.Timer as T
import qualified Control.Concurrent as GHC
import Weft.Event.Internal.Backends (backendKindFromEnv)
import Weft.Event.Internal.Wakeup
import Weft.Internal.Error (hasErrno)
import Foreign.C.Error (eINVAL)
import GHC.IO.Exception (IOErrorType (..), IOException (..))

spec :: E.BackendKind -> Spec
spec kind = do
  describe "setNumCapabilities" $
    it "1 -> 2 -> 1 (three times) while waits are in flight: every wait completes" $ do
      caps0 <- getNumCapabilities
      (r1, w1) <- newPipe
      (r2, w2) <- newPipe
      let trips = 20000 :: Int
      -- Unpinned threads, so they migrate as capabilities come and go.
      a <- newEmptyMVar
      b <- newEmptyMVar
      _ <- forkIO (try (replicateM_ trips (writeByte w1 >> threadWaitRead r2 >> readByte r2)) >>= putMVar a)
      _ <- forkIO (try (replicateM_ trips (threadWaitRead r1 >> readByte r1 >> writeByte w2)) >>= putMVar b)
      forM_ (take 6 (cycle [1, 2])) $ \n -> Weft.setNumCapabilities n >> threadDelay 20000
      Weft.setNumCapabilities caps0
      outs <- within 120 "ping-pong across capability changes" (mapM takeMVar [a, b])
      forM_ outs (either (throwIO :: SomeException -> IO ()) return)
      mapM_ closePipe [(r1, w1), (r2, w2)]

  describe "shutdown" $
    it "fails pending waits, releases every manager fd, and managers restart on demand" $ do
      E.shutdownSystemManagers
      fds0 <- openFdCount
      withPipe $ \(r, _) -> do
        waiters <- forM [0, 1] $ \c -> snd <$> forkResult c (threadWaitRead r)
        sleeper <- snd <$> forkResult 0 (threadDelay 10000000)
        eventually "both managers running" ((== 2) . length <$> E.systemManagers)
        eventually "waits registered" ((== 2) <$> liveRegistrations)
        -- The sleeper's timer too: one registered after the shutdown would
        -- start a fresh manager and sleep out its 10 s.
        eventually "sleeper's timer registered" ((>= 1) <$> pendingTimers)
        E.shutdownSystemManagers
        outs <- within 5 "waiters after shutdown" (mapM takeMVar (waiters ++ [sleeper]))
        forM_ outs $ \o -> either (const (return ())) (const (expectationFailure "a wait survived shutdown")) o
      openFdCount `shouldReturn` fds0
      -- Waits made afterwards start fresh managers.
      withPipe $ \(r, w) -> do
        writeByte w
        within 5 "wait after restart" (threadWaitRead r)
      E.systemBackendKind `shouldReturn` kind

  describe "wakeups" $ do
    it "cost at most one wakeup-fd write per blocking poll, however many wakers" $ do
      mgr <- E.getSystemManager
      -- Many timers, each earlier than the last, registered while the
      -- dispatcher may be blocked: each one asks to wake it.
      forM_ [1000, 999 .. 1] $ \us -> void (Weft.timeout (us * 1000) (return ()))
      s <- E.getManagerStats mgr
      E.statWakeups s `shouldSatisfy` (<= E.statBlockingPolls s + 1)

    -- A build without eventfd (the portable one, where epoll is missing
    -- too) gives a pipe when asked for an eventfd.
    it "an eventfd channel coalesces many signals into one read" $
      coalesces EventFdWakeup (if E.EPollBackend `elem` E.availableBackendKinds then EventFdWakeup else PipeWakeup)
    it "a pipe channel (the fallback) coalesces many signals into one drain" $ coalesces PipeWakeup PipeWakeup

  describe "spinning" $
    it "an idle manager blocks soon after its last event, stops spinning and stays blocked" $ do
      -- A private manager, so that nothing else the suite left behind
      -- gives it work; it is watched with GHC's timers.
      mgr <- E.newManager kind 0
      (`finally` E.shutdownManager mgr) $ withPipe $ \(r, w) -> do
        readable <- newEmptyMVar
        let roundTrip = do
              writeByte w
              _ <- E.registerFd mgr (\_ _ -> putMVar readable ()) r E.evtRead E.OneShot
              within 5 "readable" (takeMVar readable)
              readByte r
        replicateM_ 200 roundTrip
        -- Timers ahead, as a server's idle timers are: one in 10 s, and
        -- one 20 ms after the last sample, whose slot in the timing wheel
        -- (67 ms wide at its level) most often starts inside the sampled
        -- window: a dispatcher that slept only until the slot's start
        -- would poll from there on.
        _ <- T.registerTimeout mgr 10000000 (return ())
        _ <- T.registerTimeout mgr 140000 (return ())
        -- Past the 50 us cap, the dispatcher must be in a blocking poll
        -- (counted only when it returns) and stay there: neither polls
        -- nor spins while the timer is far off.
        GHC.threadDelay 20000
        s1 <- E.getManagerStats mgr
        GHC.threadDelay 100000
        s2 <- E.getManagerStats mgr
        E.statSpinNanos s2 `shouldBe` E.statSpinNanos s1
        (E.statNonBlockingPolls s2 - E.statNonBlockingPolls s1) `shouldSatisfy` (< 4)

  describe "backend choice" $ do
    it "WEFT_BACKEND selects epoll, poll or uring, and rejects anything else" $ do
      (setEnv "WEFT_BACKEND" "poll" >> backendKindFromEnv) `shouldReturn` E.PollBackend
      (setEnv "WEFT_BACKEND" "epoll" >> backendKindFromEnv) `shouldReturn` E.EPollBackend
      (setEnv "WEFT_BACKEND" "uring" >> backendKindFromEnv) `shouldReturn` E.UringBackend
      (setEnv "WEFT_BACKEND" "kqueue" >> backendKindFromEnv)
        `shouldThrow` (\e -> ioe_type e == InvalidArgument && hasErrno eINVAL e)
      (unsetEnv "WEFT_BACKEND" >> (: []) <$> backendKindFromEnv) `shouldReturn` take 1 E.availableBackendKinds

    it "a backend this build does not have is refused with UnsupportedOperation" $
      -- Only the portable build (no epoll) has one to refuse.
      forM_ [ k | k <- [minBound .. maxBound], k `notElem` E.availableBackendKinds ] $ \k ->
        E.newManager k 0 `shouldThrow` (\e -> ioe_type e == UnsupportedOperation)

  describe "errors" $
    it "a registration on a manager that was shut down is an IllegalOperation with ESHUTDOWN" $ do
      mgr <- E.newManager kind 0
      E.shutdownManager mgr
      withPipe $ \(r, _) ->
        E.registerFd mgr (\_ _ -> return ()) r E.evtRead E.OneShot
          `shouldThrow` (\e -> E.isManagerShutDownError e && ioe_type e == IllegalOperation)
      -- The predicate tests the type and errno, not the text.
      E.isManagerShutDownError (userError "the I/O manager was shut down") `shouldBe` False

  describe "closeFdWith without waiters" $
    it "just closes the fd" $ do
      (r, w) <- newPipe
      closed <- newIORef (0 :: Int)
      closeFdWith (\_ -> modifyIORef closed (+ 1)) r
      readIORef closed `shouldReturn` 1
      closePipe (r, w)
  where
    coalesces wkind got = do
      w <- newWakeup wkind
      wakeupKind w `shouldBe` got
      replicateM_ 100 (signalWakeup w)
      readByte (wakeupReadFd w) >>= (`shouldSatisfy` (/= Nothing)) . Just
      drainWakeup w
      readByte (wakeupReadFd w) `shouldReturn` Nothing
      closeWakeup w
