{-# LANGUAGE ScopedTypeVariables #-}
-- | One fd, two users on one manager: every pair of a 'Weft.threadWaitRead',
-- a "Weft.Net" socket's own recv, a "Weft.Color" watch and a
-- 'Weft.Event.registerFd' callback works together (Note [One registration
-- per fd] in "Weft.Event.Internal.Slot"), and closing the socket ends both.
module Test.Mixing (spec) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import qualified Data.ByteString.Char8 as BC
import GHC.Clock (getMonotonicTime)
import Test.Hspec

import Support
import Test.Net (liveWatches, withPair)
import qualified Weft
import qualified Weft.Color as Color
import qualified Weft.Event as E
import qualified Weft.Net as W

-- | The users of a socket's fd.
data User = ThreadWait | NetRecv | ColorWatch | Callback
  deriving (Eq, Show, Enum, Bounded)

-- | What a user saw: readiness, the bytes it read, a close, or an error.
data Seen = Ready | Read String | Closed | Failed SomeException

instance Show Seen where
  show Ready = "Ready"
  show (Read s) = "Read " ++ show s
  show Closed = "Closed"
  show (Failed e) = "Failed (" ++ show e ++ ")"

-- | Everything runs on capability 0, so that all users share its manager.
cap :: Int
cap = 0

-- | Start a user of the server socket on capability 0; returns its
-- outcome, and how it adds to the live registrations and watches.
start :: Color.Runtime -> W.Socket -> User -> IO (MVar Seen, (Int, Int))
start rt srv user = do
  seen <- newEmptyMVar
  let report = void . tryPutMVar seen
      failed e = report (if isBadFd (Left e :: Either SomeException ()) then Closed else Failed e)
      onCap act = do
        done <- newEmptyMVar
        _ <- forkOn cap ((act >> putMVar done Nothing) `catch` \(e :: SomeException) -> putMVar done (Just e))
        maybe (return ()) throwIO =<< takeMVar done
  case user of
    ThreadWait -> do
      _ <- forkOn cap ((Weft.threadWaitRead (W.socketFd srv) >> report Ready) `catch` failed)
      return (seen, (1, 0))
    NetRecv -> do
      _ <- forkOn cap ((W.recv srv 10 >>= report . Read . BC.unpack) `catch` failed)
      return (seen, (0, 1))
    ColorWatch -> do
      onCap $ do
        fw <- Color.watchFd rt (W.socketFd srv) 0 (Color.handler "read", report Ready)
                (Color.handler "write", return ())
        Color.rearmRead fw
      return (seen, (0, 1))
    Callback -> do
      onCap $ do
        mgr <- E.getSystemManager
        void $ E.registerFd mgr (\_ ev -> report (if ev `E.eventIs` E.evtClose then Closed else Ready))
                 (W.socketFd srv) E.evtRead E.OneShot
      return (seen, (1, 0))

counts :: IO (Int, Int)
counts = (,) <$> liveRegistrations <*> liveWatches

-- | The counts once the registrations that earlier tests left ending have
-- ended: the same twice, 20 ms apart.
settledCounts :: IO (Int, Int)
settledCounts = go (100 :: Int)
  where
    go k = do
      a <- counts
      threadDelay 20000
      b <- counts
      if a == b || k == 0 then return b else go (k - 1)

-- | The poll backend has no edge-triggered watches: a Color watch and a
-- socket's waits are one-shot registrations there. Under uring, a
-- receive that waits is a request on the ring, registered nowhere.
expectedCounts :: E.BackendKind -> User -> (Int, Int) -> (Int, Int)
expectedCounts E.PollBackend _ (l, w) = (l + w, 0)
expectedCounts E.UringBackend NetRecv _ = (0, 0)
expectedCounts _ _ c = c

-- | Set up both users, one after the other, each registered before the
-- next starts; run the body with their outcomes.
withUsers :: E.BackendKind -> (User, User) -> (W.Socket -> W.Socket -> (MVar Seen, MVar Seen) -> (Int, Int) -> IO ())
          -> IO ()
withUsers kind (a, b) body = do
  rt <- Color.newRuntime Color.defaultConfig
  (`finally` Color.shutdown rt) $ withPair $ \(c, srv) -> do
    base <- settledCounts
    (sa, ca) <- start rt srv a
    let (l1, w1) = expectedCounts kind a ca
    eventually (show a ++ " registered") ((== (fst base + l1, snd base + w1)) <$> counts)
    (sb, cb) <- start rt srv b
    let (l2, w2) = expectedCounts kind b cb
    eventually (show b ++ " registered") ((== (fst base + l1 + l2, snd base + w1 + w2)) <$> counts)
    body c srv (sa, sb) base

spec :: E.BackendKind -> Spec
spec kind = do
 lingerSpec
 describe "one fd, two users on one manager" $ do
  let pairs = [ (a, b) | a <- [minBound .. maxBound], b <- [minBound .. maxBound], a /= b ]
  forM_ pairs $ \(a, b) -> do
    it (show a ++ " then " ++ show b ++ ": both see the data") $
      withUsers kind (a, b) $ \c _ (sa, sb) _ -> do
        W.sendAll c (BC.pack "x")
        forM_ [(a, sa), (b, sb)] $ \(u, s) -> do
          got <- within 2 (show u ++ " sees the data") (takeMVar s)
          case (u, got) of
            (NetRecv, Read "x") -> return ()
            (NetRecv, other) -> expectationFailure ("recv saw " ++ show other)
            (_, Ready) -> return ()
            (_, other) -> expectationFailure (show u ++ " saw " ++ show other)

    it (show a ++ " then " ++ show b ++ ": closing the socket ends both, leaving nothing registered") $
      withUsers kind (a, b) $ \_ srv (sa, sb) base -> do
        W.close srv
        forM_ [(a, sa), (b, sb)] $ \(u, s) ->
          if u == ColorWatch
            -- A watch of a closed fd posts nothing.
            then do
              threadDelay 100000
              got <- tryTakeMVar s
              maybe (return ()) (\g -> expectationFailure ("the watch posted " ++ show g)) got
            else do
              got <- within 2 (show u ++ " sees the close") (takeMVar s)
              case got of
                Closed -> return ()
                other -> expectationFailure (show u ++ " saw " ++ show other)
        eventually "nothing left registered" ((== base) <$> counts)

-- | 'Color.lingerClose' on a socket whose peer sent input the server never
-- read: the last reply still arrives (a plain close would reset the
-- connection), and the socket closes when the peer closes, or at the
-- deadline if it never does.
lingerSpec :: Spec
lingerSpec = describe "Color.lingerClose" $ do
  let scenario deadline peerCloses = do
        rt <- Color.newRuntime Color.defaultConfig
        (`finally` Color.shutdown rt) $ withPair $ \(c, srv) -> do
          W.sendAll c (BC.replicate 3000 'q')
          threadDelay 10000
          done <- newEmptyMVar
          let h = Color.handler "test"
          fw <- Color.watchSocket rt srv 7 (h, return ()) (h, return ())
          Color.post rt 7 h $ do
            W.sendAll srv (BC.pack "last reply")
            Color.lingerClose fw srv deadline (putMVar done ())
          reply <- within 2 "the last reply" (recvAll c)
          reply `shouldBe` BC.pack "last reply"
          when peerCloses (W.sendAll c (BC.pack "more") >> W.close c)
          within 2 "the linger's end" (takeMVar done)
  it "delivers the last reply despite unread input, and ends when the peer closes" $ do
    t0 <- getMonotonicTime
    scenario 5000000 True
    t1 <- getMonotonicTime
    (t1 - t0) `shouldSatisfy` (< 2)
  it "ends at its deadline when the peer never closes" $
    scenario 200000 False
  where
    recvAll c = do
      chunk <- W.recv c 100
      if BC.null chunk then return chunk else (chunk <>) <$> recvAll c
