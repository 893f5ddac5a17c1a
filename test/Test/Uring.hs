{-# LANGUAGE ScopedTypeVariables #-}
-- | What only the io_uring backend has: falling back when the kernel
-- refuses a ring, and requests that outlive the OS thread that submitted
-- them. The rest of the suite runs under every backend (Main).
module Test.Uring (spec) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Maybe (isNothing)
import Foreign.C.Error (Errno (..), eNOSYS, eOK, ePERM)
import Foreign.C.Types (CInt (..), CUInt (..))
import GHC.IO.Exception (IOException (..))
import Test.Hspec

import qualified Weft as W
import qualified Weft.Event as E
import Weft.Event.Internal.Backend.Uring (setUringSetupFailure)

import Support

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
        _ <- forkOn ((k + 1) `mod` 2) pong
        snd <$> forkResult (k `mod` 2) (ping 0)
      let round' = do
            ws <- forM [1 .. 16 :: Int] $ \j -> do
              p@(r, _) <- newPipe
              (_, done) <- forkResult (j `mod` 2) (W.threadWaitRead r)
              return (p, done)
            dones <- forM [1 .. 64 :: Int] $ \j ->
              snd <$> forkResult (j `mod` 2) (replicateM_ 10 (c_usleep 300 >> yield))
            mapM_ takeMVar dones
            return ws
          rounds i acc = do
            ws <- round'
            n <- resubmits
            if n > before0 || i >= (40 :: Int) then return (acc ++ ws) else rounds (i + 1) (acc ++ ws)
      waits <- rounds 1 []
      after0 <- resubmits
      after0 `shouldSatisfy` (> before0)
      -- The ping-pong lost no readiness: every pair is still going.
      writeIORef stop True
      counts <- within 5 "every ping-pong pair" (mapM takeMVar trips)
      [ () | Left _ <- counts ] `shouldBe` []
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
  where
    withRefusal err act =
      (setUringSetupFailure err >> act) `finally` setUringSetupFailure eOK
    hasErrno (Errno e) (x :: IOException) = ioe_errno x == Just e
    resubmits = sum . map E.statResubmits <$> (mapM E.getManagerStats =<< E.systemManagers)

-- A safe call: the capability goes on with other threads, and the RTS
-- gives it another OS thread if need be.
foreign import ccall safe "unistd.h usleep" c_usleep :: CUInt -> IO CInt
