{-# LANGUAGE ScopedTypeVariables #-}
-- | Waits on fds through the 'Weft' API, on the system managers of whichever
-- backend the caller selected.
module Test.Waits (spec) where

import Control.Concurrent hiding (threadDelay, threadWaitRead, threadWaitWrite, threadWaitReadSTM, threadWaitWriteSTM)
import Control.Concurrent.STM
import qualified GHC.Conc as GHCConc
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Maybe (isNothing)
import Foreign.C.Types (CInt (..))
import qualified Foreign.C.String
import System.Posix.Types (Fd (..))
import Test.Hspec

import Support
import Weft
import qualified Weft.Event as E
import qualified Weft.Event.Internal.Core as M

spec :: E.BackendKind -> Spec
spec kind = do
  describe "threadWaitRead and threadWaitWrite" $ do
    it "block until data arrives, then return" $ withPipe $ \(r, w) -> do
      (_, res) <- forkResult 0 (threadWaitRead r)
      threadDelayGHC 20000
      isNothing <$> tryReadMVar res `shouldReturn` True
      writeByte w
      out <- within 5 "waiter" (takeMVar res)
      either (\e -> expectationFailure (show e)) return out

    it "return at once for a writable pipe" $ withPipe $ \(_, w) ->
      within 5 "threadWaitWrite" (threadWaitWrite w)

    it "wake waiters on the other capability, 2,000 times" $ withPipe $ \(r, w) ->
      forM_ [1 .. 2000 :: Int] $ \i -> do
        (_, res) <- forkResult (i `mod` 2) (threadWaitRead r >> readByte r)
        writeByte w
        within 5 "cross-capability wakeup" (takeMVar res) >>= either throwIO (`shouldBe` Just 7)

    it "serve 5,000 concurrent waiters on their own pipes, leaving no registration" $ do
      raiseFdLimit 10500
      base <- liveRegistrations
      pipes <- replicateM 5000 newPipe
      (do results <- forM (zip [0 ..] pipes) $ \(i, (r, _)) ->
            snd <$> forkResult (i `mod` 2) (threadWaitRead r >> readByte r)
          eventually "5,000 waiters registered" ((== base + 5000) <$> liveRegistrations)
          mapM_ (writeByte . snd) pipes
          outs <- within 30 "5,000 waiters" (mapM takeMVar results)
          [ () | Right (Just 7) <- outs ] `shouldBe` replicate 5000 ()
          liveRegistrations `shouldReturn` base)
        `finally` mapM_ closePipe pipes

    it "fail with an IOError for an fd that is not open" $ do
      res <- try (within 5 "invalid fd" (threadWaitRead (Fd 40000)))
      (res :: Either SomeException ()) `shouldSatisfy` isBadFd

    it "return at once for a regular file" $ do
      fd <- c_open "/proc/self/stat"
      (within 5 "regular file" (threadWaitRead (Fd fd))) `finally` c_close fd

  describe "closeFdWith" $ do
    it "wakes every waiter on the fd with an IOError, on every capability" $ do
      (r, w) <- newPipe
      base <- liveRegistrations
      waiters <- forM [0 .. 3] $ \i -> snd <$> forkResult (i `mod` 2) (threadWaitRead r)
      (waitSTM, _) <- threadWaitReadSTM r
      stmWaiter <- snd <$> forkResult 1 (atomically waitSTM)
      eventually "waiters registered" ((== base + 5) <$> liveRegistrations)
      closed <- newIORef False
      closeFdWith (\fd -> c_close' fd >> writeIORef closed True) r
      readIORef closed `shouldReturn` True
      outs <- within 5 "closed waiters" (mapM takeMVar (waiters ++ [stmWaiter]))
      map isBadFd outs `shouldBe` replicate 5 True
      liveRegistrations `shouldReturn` base
      void (c_close' w)

    it "keeps the waits when the close action throws" $ withPipe $ \(r, w) -> do
      (_, res) <- forkResult 0 (threadWaitRead r)
      eventually "waiter registered" ((>= 1) <$> liveRegistrations)
      closeFdWith (\_ -> throwIO (userError "refused")) r `shouldThrow` anyIOException
      writeByte w
      within 5 "waiter after failed close" (takeMVar res) >>= either throwIO return

  describe "fd reuse" $ do
    it "a number reused after closeFdWith never wakes the old waiter" $ do
      (r, w) <- newPipe
      (_, old) <- forkResult 1 (threadWaitRead r)
      eventually "old waiter registered" ((>= 1) <$> liveRegistrations)
      closeFdWith (void . c_close') r
      void (c_close' w)
      within 5 "old waiter" (takeMVar old) >>= (`shouldSatisfy` isBadFd)
      (r2, w2) <- newPipe
      r2 `shouldBe` r   -- the lowest free number comes back
      (_, new) <- forkResult 1 (threadWaitRead r2 >> readByte r2)
      threadDelayGHC 10000
      isNothing <$> tryReadMVar new `shouldReturn` True
      writeByte w2
      within 5 "new waiter" (takeMVar new) >>= either throwIO (`shouldBe` Just 7)
      closePipe (r2, w2)

    -- poll keeps no interest set in the kernel, so it cannot tell a reused
    -- number from the old fd; only epoll gives this guarantee.
    when (kind == E.EPollBackend) $ it "an fd closed behind weft's back and reused: the old waiter never sees readiness, the new one works" $ do
      (r, w) <- newPipe
      (_, old) <- forkResult 0 (threadWaitRead r)
      eventually "old waiter registered" ((>= 1) <$> liveRegistrations)
      void (c_close' r) >> void (c_close' w)   -- plain close: weft is not told
      (r2, w2) <- newPipe
      r2 `shouldBe` r
      (_, new) <- forkResult 0 (threadWaitRead r2 >> readByte r2)
      writeByte w2
      within 5 "new waiter on the reused number" (takeMVar new) >>= either throwIO (`shouldBe` Just 7)
      -- The old waiter may still be blocked, or have failed; it must never
      -- return as if its (dead) fd were readable.
      oldOut <- tryReadMVar old
      case oldOut of
        Nothing -> return ()
        Just o -> o `shouldSatisfy` isBadFd
      closePipe (r2, w2)

  describe "async exceptions during a wait" $ do
    it "killThread leaves the live-registration count where it was" $ withPipe $ \(r, _) -> do
      base <- liveRegistrations
      (t, res) <- forkResult 1 (threadWaitRead r)
      eventually "waiter registered" ((== base + 1) <$> liveRegistrations)
      killThread t
      within 5 "killed waiter" (takeMVar res) >>= \o -> either (const (return ())) (const (expectationFailure "wait returned")) o
      liveRegistrations `shouldReturn` base

    it "timeout around a wait leaves the live-registration count where it was" $ withPipe $ \(r, _) -> do
      base <- liveRegistrations
      within 5 "timeout" (timeout 20000 (threadWaitRead r)) `shouldReturn` Nothing
      liveRegistrations `shouldReturn` base

    it "a wait killed as its data arrives never leaves a stale wakeup for the next waiter" $ withPipe $ \(r, w) -> do
      base <- liveRegistrations
      forM_ [1 .. 3000 :: Int] $ \i -> do
        (t, res) <- forkResult (i `mod` 2) (threadWaitRead r)
        replicateM_ (i `mod` 3) yield
        -- Kill from the waiter's own capability, just after the data lands,
        -- so the kill and the dispatcher's wakeup race on one capability.
        killer <- newEmptyMVar
        _ <- forkOn (i `mod` 2) (writeByte w >> replicateM_ (i `div` 2 `mod` 3) yield >> killThread t >> putMVar killer ())
        takeMVar killer
        _ <- within 5 "killed waiter" (takeMVar res)
        _ <- readByte r   -- drain, so the fd is not readable
        -- A new waiter must block: nothing is readable now.
        (t2, res2) <- forkResult (i `mod` 2) (threadWaitRead r)
        threadDelayGHC 300
        early <- tryReadMVar res2
        killThread t2
        _ <- within 5 "second waiter" (takeMVar res2)
        case early of
          Just (Right ()) -> expectationFailure ("stale wakeup on round " ++ show i)
          _ -> return ()
      liveRegistrations `shouldReturn` base

  describe "callbacks (Weft.Event)" $ do
    it "a throwing callback is counted and the dispatcher keeps serving" $ withPipe $ \(r, w) -> do
      mgr <- E.getSystemManager
      errors0 <- E.statCallbackErrors <$> E.getManagerStats mgr
      _ <- E.registerFd mgr (\_ _ -> throwIO (userError "callback failure (expected by this test)")) w E.evtWrite E.OneShot
      eventually "error counted" ((> errors0) . E.statCallbackErrors <$> E.getManagerStats mgr)
      (_, res) <- forkResult 0 (threadWaitRead r)
      writeByte w
      within 5 "wait after a throwing callback" (takeMVar res) >>= either throwIO return

    it "an edge-triggered notify watch gets edges, survives a throwing callback, and ends" $ withPipe $ \(r, w) -> do
      mgr <- E.getSystemManager
      edges <- newIORef (0 :: Int)
      let notify _ = do
            n <- atomicModifyIORef' edges (\k -> (k + 1, k + 1))
            when (n == 1) $ throwIO (userError "notify failure (expected by this test)")
      found <- M.watchFdNotify mgr r notify
      case (kind, found) of
        (E.PollBackend, Nothing) -> return ()
        (E.PollBackend, Just _) -> expectationFailure "poll has no edge-triggered watches"
        (_, Nothing) -> expectationFailure "epoll refused an edge-triggered watch"
        (_, Just watch) -> do
          errors0 <- E.statCallbackErrors <$> E.getManagerStats mgr
          writeByte w
          eventually "the first edge" ((== 1) <$> readIORef edges)
          eventually "its error counted" ((> errors0) . E.statCallbackErrors <$> E.getManagerStats mgr)
          -- Edge-triggered: unread data makes no more reports, new data does.
          threadDelayGHC 20000
          readIORef edges `shouldReturn` 1
          writeByte w
          eventually "the second edge" ((== 2) <$> readIORef edges)
          M.endWatch watch
          writeByte w
          threadDelayGHC 20000
          readIORef edges `shouldReturn` 2

    it "registerFd and threadWaitRead share an fd" $ withPipe $ \(r, w) -> do
      base <- liveRegistrations
      mgr <- E.getSystemManager
      hits <- newIORef (0 :: Int)
      key <- E.registerFd mgr (\_ _ -> atomicModifyIORef' hits (\n -> (n + 1, ()))) r E.evtRead E.MultiShot
      (_, res) <- forkResult 0 (threadWaitRead r)
      threadDelayGHC 5000
      writeByte w
      within 5 "waiter sharing the fd" (takeMVar res) >>= either throwIO return
      eventually "callback ran" ((> 0) <$> readIORef hits)
      _ <- readByte r
      E.unregisterFd_ mgr key `shouldReturn` True
      E.unregisterFd_ mgr key `shouldReturn` False
      liveRegistrations `shouldReturn` base

    it "a MultiShot callback fires while the fd stays readable, and stops after unregisterFd" $ withPipe $ \(r, w) -> do
      mgr <- E.getSystemManager
      hits <- newIORef (0 :: Int)
      key <- E.registerFd mgr (\_ _ -> atomicModifyIORef' hits (\n -> (n + 1, ()))) r E.evtRead E.MultiShot
      writeByte w
      eventually "several hits" ((>= 3) <$> readIORef hits)
      E.unregisterFd mgr key
      threadDelayGHC 5000
      n1 <- readIORef hits
      threadDelayGHC 20000
      readIORef hits `shouldReturn` n1

    it "a OneShot callback fires once and receives its key" $ withPipe $ \(_, w) -> do
      mgr <- E.getSystemManager
      got <- newEmptyMVar
      key <- E.registerFd mgr (\k e -> putMVar got (k, e)) w E.evtWrite E.OneShot
      (k, e) <- within 5 "one-shot callback" (takeMVar got)
      k `shouldBe` key
      E.keyFd k `shouldBe` w
      e `shouldSatisfy` (`E.eventIs` E.evtWrite)
      threadDelayGHC 10000
      isNothing <$> tryReadMVar got `shouldReturn` True

    it "registerFd refuses an invalid fd with an IOError" $ do
      mgr <- E.getSystemManager
      E.registerFd mgr (\_ _ -> return ()) (Fd 40001) E.evtRead E.OneShot `shouldThrow` anyIOException

  describe "threadWaitReadSTM" $ do
    it "its STM action retries until the fd is readable" $ withPipe $ \(r, w) -> do
      (waitSTM, _) <- threadWaitReadSTM r
      ready <- atomically ((waitSTM >> return True) `orElse` return False)
      ready `shouldBe` False
      writeByte w
      within 5 "STM wait" (atomically waitSTM)

    it "its cancel action removes the registration" $ withPipe $ \(r, _) -> do
      base <- liveRegistrations
      (_, cancel) <- threadWaitReadSTM r
      liveRegistrations `shouldReturn` base + 1
      cancel
      liveRegistrations `shouldReturn` base

  describe "stress" $
    it "200,000 ping-pong waits across two capabilities all finish (no lost wakeup)" $ do
      (r1, w1) <- newPipe
      (r2, w2) <- newPipe
      let trips = 100000 :: Int
      a <- snd <$> forkResult 0 (replicateM_ trips (writeByte w1 >> threadWaitRead r2 >> readByte r2))
      b <- snd <$> forkResult 1 (replicateM_ trips (threadWaitRead r1 >> readByte r1 >> writeByte w2))
      within 120 "ping-pong" (mapM takeMVar [a, b]) >>= mapM_ (either throwIO return)
      mapM_ closePipe [(r1, w1), (r2, w2)]

threadDelayGHC :: Int -> IO ()
threadDelayGHC = GHCConc.threadDelay

c_close' :: Fd -> IO CInt
c_close' (Fd fd) = c_close fd

foreign import ccall unsafe "fcntl.h open" c_open_raw :: Ptr' -> CInt -> IO CInt
foreign import ccall unsafe "unistd.h close" c_close :: CInt -> IO CInt

type Ptr' = Foreign.C.String.CString

c_open :: String -> IO CInt
c_open path = Foreign.C.String.withCString path (\p -> c_open_raw p 0)
