{-# LANGUAGE ScopedTypeVariables #-}
module Test.Timers (spec) where

import Control.Concurrent (forkIO, newEmptyMVar, putMVar, takeMVar, tryReadMVar)
import qualified Control.Concurrent as GHC
import Control.Concurrent.STM hiding (registerDelay)
import Control.Exception
import Control.Monad
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import Test.Hspec

import Support
import Weft
import qualified Weft.Event as E
import qualified Weft.Timer as T

-- | Elapsed microseconds of an action.
timed :: IO a -> IO (a, Double)
timed act = do
  t0 <- getMonotonicTimeNSec
  a <- act
  t1 <- getMonotonicTimeNSec
  return (a, fromIntegral (t1 - t0) / 1000)

spec :: Spec
spec = do
  describe "threadDelay" $ do
    it "never returns early" $ forM_ [1, 500, 1000, 5000, 20000] $ \us -> do
      (_, took) <- timed (within 5 "threadDelay" (threadDelay us))
      took `shouldSatisfy` (>= fromIntegral us)

    it "returns promptly (within 100 ms of the deadline)" $ do
      (_, took) <- timed (threadDelay 20000)
      took `shouldSatisfy` (< 120000)

    it "returns at once for 0 and negative delays" $ do
      within 1 "threadDelay 0" (threadDelay 0)
      within 1 "threadDelay (-5)" (threadDelay (-5))

    it "many concurrent sleepers all wake, and no timer is left" $ do
      done <- newIORef (0 :: Int)
      forM_ [1 .. 2000 :: Int] $ \i -> forkIO (threadDelay (i `mod` 50 * 100) >> atomicModifyIORef' done (\n -> (n + 1, ())))
      eventually "2,000 sleepers woke" ((== 2000) <$> readIORef done)
      pendingTimers `shouldReturn` 0

    it "is interrupted by killThread, leaving no timer" $ do
      (t, res) <- forkResult 0 (threadDelay 10000000)
      eventually "sleeper registered" ((> 0) <$> pendingTimers)
      GHC.killThread t
      _ <- within 5 "killed sleeper" (takeMVar res)
      pendingTimers `shouldReturn` 0

  describe "timeout" $ do
    it "returns Just for an action that finishes in time" $
      timeout 1000000 (return (42 :: Int)) `shouldReturn` Just 42

    it "returns Nothing, promptly, for an action that overruns" $ do
      (r, took) <- timed (within 5 "timeout" (timeout 20000 (threadDelay 5000000)))
      r `shouldBe` Nothing
      took `shouldSatisfy` (>= 20000)
      took `shouldSatisfy` (< 1000000)

    it "follows System.Timeout for 0 and negative limits" $ do
      timeout 0 (return ()) `shouldReturn` Nothing
      timeout (-1) (return 'x') `shouldReturn` Just 'x'

    it "lets the action's own exceptions through" $
      timeout 1000000 (throwIO (userError "boom") :: IO ()) `shouldThrow` anyIOException

    it "nests: the inner, shorter timeout fires alone" $
      timeout 2000000 (timeout 10000 (threadDelay 3000000)) `shouldReturn` Just Nothing

    it "nests: the outer, shorter timeout fires through the inner one" $
      timeout 10000 (timeout 2000000 (threadDelay 3000000)) `shouldReturn` Nothing

    it "leaves no timer behind, whether it fired or not" $ do
      replicateM_ 1000 (timeout 1000000 (return ()))
      replicateM_ 20 (timeout 100 (threadDelay 100000))
      pendingTimers `shouldReturn` 0

    it "never lets its exception escape when expiry races completion" $
      forM_ [1 .. 2000 :: Int] $ \i -> do
        r <- try (timeout (i `mod` 7 + 1) (replicateM_ (i `mod` 300) (return ())))
        case r of
          Left (e :: SomeException) -> expectationFailure ("escaped: " ++ show e)
          Right _ -> return ()

  describe "registerDelay" $ do
    it "turns its TVar True after the delay, not before" $ do
      tv <- registerDelay 30000
      readTVarIO tv `shouldReturn` False
      (_, took) <- timed (within 5 "registerDelay" (atomically (readTVar tv >>= check)))
      took `shouldSatisfy` (> 15000)

    it "can be cancelled through the timer API" $ do
      mgr <- T.getSystemTimerManager
      (tv, key) <- T.registerDelayWithKey mgr 20000
      T.unregisterTimeout mgr key
      GHC.threadDelay 60000
      readTVarIO tv `shouldReturn` False

  describe "registerTimeout (Weft.Timer)" $ do
    it "runs the callback, and a throwing one does not stop the dispatcher" $ do
      mgr <- T.getSystemTimerManager
      errors0 <- E.statCallbackErrors <$> E.getManagerStats mgr
      _ <- T.registerTimeout mgr 1000 (throwIO (userError "timer failure (expected by this test)"))
      fired <- newEmptyMVar
      _ <- T.registerTimeout mgr 5000 (putMVar fired ())
      within 5 "timer after a throwing one" (takeMVar fired)
      E.statCallbackErrors <$> E.getManagerStats mgr `shouldReturn` errors0 + 1

    it "updateTimeout moves the deadline" $ do
      mgr <- T.getSystemTimerManager
      fired <- newEmptyMVar
      key <- T.registerTimeout mgr 5000000 (putMVar fired ())
      T.updateTimeout mgr key 10000
      within 5 "updated timer" (takeMVar fired)

    it "unregisterTimeout cancels" $ do
      mgr <- T.getSystemTimerManager
      fired <- newEmptyMVar
      key <- T.registerTimeout mgr 10000 (putMVar fired ())
      T.unregisterTimeout mgr key
      GHC.threadDelay 50000
      tryReadMVar fired `shouldReturn` Nothing
