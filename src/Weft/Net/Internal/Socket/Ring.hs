{-# LANGUAGE BangPatterns #-}
-- | A socket's requests on a ring, under a completion backend (Note [Two
-- ways to wait] in "Weft.Event.Internal.Completions"): receives, sends,
-- accepts and connects the ring performs, and what cancelled ones kept.
-- Calls on a socket without a ring ('mayUseRing') never come here.
-- Internal and unstable: weft's own modules and tests use it.
module Weft.Net.Internal.Socket.Ring
  ( takeLeftover
  , receiveOnRing
  , sendOnRing
  , takeAccepted
  , acceptOnRing
  , connectOnRing
  ) where

import Control.Concurrent.MVar (readMVar)
import Control.Monad (forM_)
import Data.IORef
import Foreign.C.Error (Errno (..), eBADF)
import Foreign.C.Types (CInt)
import Foreign.ForeignPtr (ForeignPtr)
import System.Posix.Types (Fd (..))

import qualified Data.ByteString as B

import Weft.Event.Internal.Completions (Completions (..), Inflight (..), Outgoing (..), RingResult (..), Tracker (..))
import Weft.Event.Internal.Core (Manager, managerBlocked, managerCompletions, wakeManager)
import Weft.Event.Internal.System (getSystemManager)
import Weft.Net.Internal.Socket

-- | What a receive must return before it receives anything itself: bytes
-- (at most @n@) that a ring receive cancelled by an asynchronous exception
-- received anyway. Waits first for such a receive still in flight, so
-- that bytes are returned in the order they came (Note [Receives on the
-- ring]). Cheap when there is none: two reads.
takeLeftover :: Socket -> Int -> IO (Maybe B.ByteString)
takeLeftover s n = takeKept s trkLeftover $ \l -> case l of
  [] -> ([], Nothing)
  b : rest
    | B.length b <= n -> (rest, Just b)
    | otherwise -> (B.drop n b : rest, Just (B.take n b))
{-# INLINE takeLeftover #-}

-- | Wait until the socket's receive or accept on a ring, if one is in
-- flight, is resolved; then take from one of the lists of what cancelled
-- ones kept, as the function says ('Nothing' if the list is empty).
takeKept :: Socket -> (Tracker -> IORef [a]) -> ([a] -> ([a], Maybe b)) -> IO (Maybe b)
takeKept s list split = case sockTracker s of
  Nothing -> return Nothing
  Just trk -> do
    inflight <- readIORef (trkReceiving trk)
    forM_ inflight (readMVar . inflResolved)
    kept <- readIORef (list trk)
    if null kept then return Nothing else atomicModifyIORef' (list trk) split
{-# INLINE takeKept #-}

-- | Receive at most @n@ bytes through the ring of the caller's manager,
-- if its backend performs receives: a receive goes to the ring first,
-- without trying its own @recv@ (Note [Ring first] in
-- "Weft.Event.Internal.Backend.Uring.Requests"). 'Nothing' if the backend does not
-- perform receives, or another thread's receive is on the ring: receive
-- with the socket's own @recv@ and readiness instead. An empty result is
-- the end of the stream. Throws as the receive itself would, and @EBADF@
-- if the socket is closed meanwhile.
receiveOnRing :: Socket -> Int -> IO (Maybe B.ByteString)
receiveOnRing s n = withRing "recv" s (\_ -> return True) $ \c open wake fd trk ->
  -- The ring's receive may wait for the peer: say so, as a receive that
  -- says EAGAIN does (Note [What a connection waits for]).
  awaitingPeer s >> complRecv c open wake fd n trk

-- | Run a request on the ring of the caller's manager, if the socket has
-- a tracker, the manager's backend performs completions and the manager
-- is fit ('Nothing' if not), given how to submit while the socket is open,
-- how to wake the manager, the socket's fd and its tracker; its result as
-- 'ringResult' makes it.
withRing :: String -> Socket -> (Manager -> IO Bool)
         -> (Completions -> (IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> Tracker -> IO (RingResult a))
         -> IO (Maybe a)
withRing loc s fit request = case sockTracker s of
  Nothing -> return Nothing
  Just trk -> do
    mgr <- getSystemManager
    case managerCompletions mgr of
      Nothing -> return Nothing
      Just c -> do
        go <- fit mgr
        if not go then return Nothing else do
          let !fd = socketFd s
          request c (whileOpen s) (wakeManager mgr) fd trk >>= ringResult loc s
{-# INLINE withRing #-}

-- | A connection that a listener's accept on a ring, cancelled by an
-- asynchronous exception, accepted anyway: its fd and address buffer
-- (Note [Accepts on the ring] in
-- "Weft.Event.Internal.Backend.Uring.Requests"), to be returned before
-- anything newer. Waits first for such an accept still in flight. Cheap
-- when there is none: two reads.
takeAccepted :: Socket -> IO (Maybe (CInt, ForeignPtr ()))
takeAccepted s = takeKept s trkAccepted $ \l -> case l of
  [] -> ([], Nothing)
  (Fd fd, address) : rest -> (rest, Just (fd, address))

-- | Accept a connection through the ring of the caller's manager, if its
-- backend performs accepts, blocking until one comes: its fd, the peer's
-- address written in the buffer ('newAcceptAddress'). 'Nothing' if the
-- backend does not, or another thread's accept is on the ring: wait for
-- readiness instead. Call after the listener's own @accept4@ said
-- @EAGAIN@ (Note [Accepts on the ring]). Throws as @accept4@ would, and
-- @EBADF@ if the listener is closed meanwhile.
acceptOnRing :: Socket -> ForeignPtr () -> IO (Maybe CInt)
acceptOnRing s address = fmap (\(Fd fd) -> fd) <$>
  withRing "accept" s (\_ -> return True) (\c open wake fd trk ->
    complAccept c open wake fd address trk)

-- | Connect the socket to the address of @len@ bytes in the buffer
-- through the ring of the caller's manager, if its backend performs
-- connects (Note [Connects on the ring] in
-- "Weft.Event.Internal.Backend.Uring.Requests"), blocking until the
-- handshake ends. 'Nothing' if the backend does not, or if the ring
-- handed the connect back: finish it through readiness. Throws as
-- @connect@ would (under the location given), and @EBADF@ if the socket
-- is closed meanwhile.
connectOnRing :: String -> Socket -> ForeignPtr () -> Int -> IO (Maybe ())
connectOnRing loc s address len =
  withRing loc s (\_ -> return True) (\c open wake fd trk -> complConnect c open wake fd address len trk)

-- | Send some of the bytes through the ring of the caller's manager, if
-- its backend performs sends and, unless @always@, its dispatcher is busy
-- (Note [Ring first]): how many the socket took. 'Nothing' if not, or if
-- another thread's send is on the ring: send with the socket's own @send@
-- (and readiness) instead. Throws as the send itself would, and @EBADF@ if
-- the socket is closed meanwhile.
sendOnRing :: Bool -> String -> Socket -> Outgoing -> IO (Maybe Int)
sendOnRing always loc s out =
  withRing loc s (\mgr -> if always then return True else not <$> managerBlocked mgr) $ \c open wake fd trk -> do
    -- A sender interrupted meanwhile may have left one in flight.
    settleSend s
    complSend c open wake fd always out trk

-- | A request's result; 'Nothing' if the ring was busy with another
-- thread's request on the socket.
ringResult :: String -> Socket -> RingResult a -> IO (Maybe a)
ringResult loc s r = case r of
  RingDone a -> return (Just a)
  RingBusy -> return Nothing
  RingFailed (Errno e) -> socketError loc s (negate (fromIntegral e))
  RingClosed -> socketError loc s (negate (errnoLong eBADF))
