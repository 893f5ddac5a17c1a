{-# LANGUAGE BangPatterns, MagicHash, UnliftedFFITypes #-}
-- | weft's socket: an fd, its close guard, and how its threads wait. The
-- syscalls themselves are in @cbits/weft_net.c@.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Socket waits]
-- ~~~~~~~~~~~~~~~~~~~
-- A socket is not watched until a syscall on it first says @EAGAIN@. Then
-- it is registered once, edge-triggered, with the manager of the capability
-- the thread runs on (Note [Edge-triggered watches] in
-- "Weft.Event.Internal.Registry"); every later wait is a take of a readiness token,
-- with no @epoll_ctl@. A socket that never has to wait is never registered.
-- Under the poll backend, which has no edge-triggered readiness, waits are
-- ordinary one-shot waits ('waitOn') on the caller's system manager. Under
-- the uring backend, a receive that would block is no wait at all: the
-- ring performs it ('receiveOnRing'; Note [Two ways to wait] in
-- "Weft.Event.Internal.Completions", Note [Receives on the ring] in
-- "Weft.Event.Internal.Backend.Uring.Requests").
--
-- Note [Socket close and fd reuse]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Closing a socket while another thread uses it must never let that thread
-- touch a reused fd number. Each socket has a guard word: every syscall adds
-- 2 to it for its duration (inside one unsafe C call, so no async exception
-- can split the pair), and 'close' sets bit 0, after which syscalls fail
-- with @EBADF@ without touching the fd. 'close' then waits for the
-- syscalls in flight to finish (they never block: the fd is non-blocking),
-- and closes the fd through the managers, which ends its watch and every
-- other registration of it: the blocked threads wake, and their retried
-- syscalls fail. A thread blocked in a wait holds no guard.
module Weft.Net.Internal.Socket
  ( Socket
  , socketFd
  , newSocket
  , Direction (..)
    -- * Guarded syscalls
  , recvRaw
  , sendBuf
  , sendVector
  , sendFileRaw
  , acceptRaw
  , connectRaw
  , shutdownRaw
  , sendToRaw
  , recvFromRaw
  , recvManyRaw
    -- * The ring's side ("Weft.Net.Internal.Socket.Ring")
  , mayUseRing
  , sockTracker
  , whileOpen
  , settleSend
    -- * Waiting, errors
  , waitReady
  , retryOrThrow
  , socketError
  , closedSocketError
  , errnoLong
  , isIdleTimeoutError
    -- * Idle timeouts
  , setIdleTimeout
  , idleTimerKey
  , idleTimerFired
  , setMinimumReceive
  , trackProgress
  , lastProgress
  , connectionStanding
  , awaitingPeer
    -- * Closing
  , close
  , detach
  , isClosed
    -- * Unguarded set-up calls
  , c_socket
  , c_bind
  , c_listen
  , c_set_nodelay
  , c_socket_error
  , c_local_addr
  , c_close
  , throwIfNegative
  ) where

import Control.Concurrent (yield)
import Control.Concurrent.MVar
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Int (Int64)
import Data.Word (Word8, Word64)
import Foreign.C.Error
import Foreign.C.Types
import Foreign.Ptr (Ptr)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Exts (MutableByteArray#, RealWorld)
import GHC.IO.Exception (IOErrorType (..))
import System.IO (fixIO)
import System.Posix.Types (Fd (..))


import Weft.Event.Internal (evtRead, evtWrite)
import Weft.Event.Internal.Completions (Inflight (..), Tracker (..), newTracker)
import Weft.Event.Internal.Core
import Weft.Event.Internal.System (getSystemManager, systemCompletes, systemManagers)
import qualified Weft.Timer as T
import Weft.Internal.Counters
import Weft.Internal.Error (idleTimedOut, isIdleTimeoutError, syscallError, weftError)
import Weft.Net.Internal.Eviction (Standing (..))

-- | A socket owned by weft: TCP or UDP, always non-blocking. Use it from
-- any number of threads; 'close' is safe at any time
-- (Note [Socket close and fd reuse]).
data Socket = Socket
  { sockFd     :: {-# UNPACK #-} !CInt
  , sockGuard  :: !Counters
  , sockWaiter :: !(IORef Waiter)
  , sockLock   :: !(MVar ())
    -- ^ Serialises setting up the waiter, the idle timer and closing.
  , sockIdle   :: !(IORef (Maybe TimeoutKey))
  , sockTracker :: !(Maybe Tracker)
    -- ^ Its requests on a ring, if it was made while the system managers
    -- perform completions; 'Nothing' (and no ring check on any call)
    -- otherwise (Note [Two ways to wait] in
    -- "Weft.Event.Internal.Completions").
  }

instance Eq Socket where
  a == b = sockWaiter a == sockWaiter b

instance Show Socket where
  show s = "<weft socket, fd " ++ show (sockFd s) ++ ">"

-- | How a socket's threads wait: not set up yet; on an edge-triggered
-- watch; or, on a backend without edge-triggered readiness (poll), with a
-- one-shot registration per wait.
data Waiter = Unwatched | Watched !Watch | OneShotWaits

-- | Which way a thread waits.
data Direction = Reading | Writing
  deriving (Eq, Show)

-- Guard words; all but gTimedOut are shared with cbits/weft_net.c.
gUse, gActivity, gTrack, gTimedOut, gMinReceive, gReceived, gState, nGuard :: Int
gUse = 0; gActivity = 1; gTrack = 2; gTimedOut = 3; gMinReceive = 4; gReceived = 5; gState = 6; nGuard = 7

-- | The fd, for syscalls weft does not wrap. It stays valid until 'close'.
socketFd :: Socket -> Fd
socketFd = Fd . sockFd

-- | Adopt an open, non-blocking fd.
newSocket :: CInt -> IO Socket
newSocket fd = do
  guard' <- newCounters nGuard
  let progress received k = case guard' of Counters a -> c_note_progress a (fromIntegral k) received
  ring <- systemCompletes
  tracker <- if ring then Just <$> newTracker (progress 1) (progress 0) else return Nothing
  Socket fd guard' <$> newIORef Unwatched <*> newMVar () <*> newIORef Nothing <*> pure tracker

------------------------------------------------------------------------------
-- Guarded syscalls

guardArr :: Socket -> MutableByteArray# RealWorld
guardArr s = case sockGuard s of Counters a -> a
{-# INLINE guardArr #-}

recvRaw :: Socket -> Ptr Word8 -> Int -> IO CLong
recvRaw s p n = c_recv (guardArr s) (sockFd s) p (fromIntegral n)
{-# INLINE recvRaw #-}

-- Every send first waits for the socket's send on a ring, if one is in
-- flight ('settleSend').

sendBuf :: Socket -> Ptr Word8 -> Int -> IO CLong
sendBuf s p n = settleSend s >> c_send (guardArr s) (sockFd s) p (fromIntegral n)
{-# INLINE sendBuf #-}

-- | A gather write of @count@ iovecs; with @more@, flagged @MSG_MORE@
-- (more data follows at once).
sendVector :: Socket -> Ptr () -> Int -> Bool -> IO CLong
sendVector s iov count more = settleSend s >>
  c_sendv (guardArr s) (sockFd s) iov (fromIntegral count) (if more then 1 else 0)

-- | One @sendfile@ of at most @count@ bytes of the file from @offset@.
sendFileRaw :: Socket -> Fd -> Int64 -> Int64 -> IO CLong
sendFileRaw s (Fd file) offset count = settleSend s >>
  c_sendfile (guardArr s) (sockFd s) file offset (fromIntegral count)

acceptRaw :: Socket -> Ptr () -> Ptr CInt -> IO CLong
acceptRaw s = c_accept (guardArr s) (sockFd s)

connectRaw :: Socket -> Ptr () -> CInt -> IO CLong
connectRaw s = c_connect (guardArr s) (sockFd s)

shutdownRaw :: Socket -> CInt -> IO CLong
shutdownRaw s = c_shutdown (guardArr s) (sockFd s)

sendToRaw :: Socket -> Ptr Word8 -> Int -> Ptr () -> CInt -> IO CLong
sendToRaw s p n = c_sendto (guardArr s) (sockFd s) p (fromIntegral n)

recvFromRaw :: Socket -> Ptr Word8 -> Int -> Ptr () -> Ptr CInt -> IO CLong
recvFromRaw s p n = c_recvfrom (guardArr s) (sockFd s) p (fromIntegral n)

recvManyRaw :: Socket -> Ptr Word8 -> Int -> Int -> Ptr CInt -> Ptr () -> IO CLong
recvManyRaw s bufs size count =
  c_recvmany (guardArr s) (sockFd s) bufs (fromIntegral size) (fromIntegral count)

------------------------------------------------------------------------------
-- The ring's side: what the rest of it ("Weft.Net.Internal.Socket.Ring")
-- needs of the socket

-- | Whether the socket was made ready for a completion backend (Note [Two
-- ways to wait] in "Weft.Event.Internal.Completions"). 'False': every call
-- on it takes the readiness path, and none of the functions of
-- "Weft.Net.Internal.Socket.Ring" needs to be asked.
mayUseRing :: Socket -> Bool
mayUseRing s = case sockTracker s of
  Just _ -> True
  Nothing -> False
{-# INLINE mayUseRing #-}

-- | Run an action as a guarded syscall runs (counted in the guard's use
-- word, which a close waits to drain): 'Nothing', without running it, if
-- the socket is closed. For submissions to a ring, which must never name
-- an fd that a close has given up (Note [Socket close and fd reuse]).
-- The action must not throw, and runs with asynchronous exceptions masked
-- (a ring's submission is atomic updates and unsafe calls): a close would
-- wait for ever for a guard it left behind.
whileOpen :: Socket -> IO a -> IO (Maybe a)
whileOpen s act = do
  let g = sockGuard s
  prev <- addCounter g gUse 2
  if odd prev then Nothing <$ addCounter g gUse (-2) else do
    a <- act
    _ <- addCounter g gUse (-2)
    return (Just a)

-- | Wait until the socket's send on a ring, if one is in flight (its
-- sender was interrupted), is resolved, so that bytes leave in order
-- (Note [Sends on the ring]). Cheap when there is none: one read.
settleSend :: Socket -> IO ()
settleSend s = forM_ (sockTracker s) $ \trk -> do
  inflight <- readIORef (trkSending trk)
  forM_ inflight (readMVar . inflResolved)
{-# INLINE settleSend #-}


------------------------------------------------------------------------------
-- Waiting

-- | Block until the socket may be ready, after a syscall said @EAGAIN@
-- (Note [Socket waits]). Throws an 'IOError' if weft's managers were shut
-- down; a socket closed meanwhile makes it return (the retried syscall
-- fails).
waitReady :: Direction -> Socket -> IO ()
waitReady dir s = do
  w <- readIORef (sockWaiter s)
  case w of
    Watched watch -> case dir of
      Reading -> awaitReadable watch
      Writing -> awaitWritable watch
    OneShotWaits -> do
      mgr <- getSystemManager
      waitOn mgr (if dir == Reading then evtRead else evtWrite) (socketFd s)
        `catch` \e -> do
          closed <- isClosed s
          unless closed (throwIO (e :: IOException))
    Unwatched -> do
      setUpWaiter s
      waitReady dir s

setUpWaiter :: Socket -> IO ()
setUpWaiter s = withMVar (sockLock s) $ \_ -> do
  w <- readIORef (sockWaiter s)
  closed <- isClosed s
  case w of
    -- Checked under the lock that 'close' takes after marking the socket
    -- closed, so a closed fd is never watched.
    Unwatched | not closed -> do
      mgr <- getSystemManager
      watch <- watchFdWaits mgr (socketFd s)
      writeIORef (sockWaiter s) (maybe OneShotWaits Watched watch)
    _ -> return ()

-- | What to do with a negative syscall result: wait and retry on @EAGAIN@,
-- retry on @EINTR@, else throw ('socketError').
retryOrThrow :: String -> Direction -> Socket -> CLong -> IO a -> IO a
retryOrThrow loc dir s r again
  | r == negate (errnoLong eAGAIN) = waitReady dir s >> again
  | r == negate (errnoLong eINTR) = again
  | otherwise = socketError loc s r
{-# INLINE retryOrThrow #-}

errnoLong :: Errno -> CLong
errnoLong (Errno e) = fromIntegral e
{-# INLINE errnoLong #-}

-- | Throw the 'IOError' for a failed syscall (its result is @-errno@), or
-- for an end of stream that an idle timeout caused. The error says so when
-- the socket was closed by weft or timed out.
socketError :: String -> Socket -> CLong -> IO a
socketError loc s r = do
  timedOut <- (/= 0) <$> readCounter (sockGuard s) gTimedOut
  closed <- isClosed s
  let errno = Errno (fromIntegral (negate r))
  throwIO $ if timedOut
    then idleTimedOut loc
    else if closed && errno == eBADF
      then closedSocketError loc
      else syscallError loc errno

-- | The 'IOError' of a call on a socket closed with 'close' (or handed
-- over with 'detach'): @EBADF@, as the kernel would say.
closedSocketError :: String -> IOError
closedSocketError loc = weftError InvalidArgument eBADF loc "socket is closed"

------------------------------------------------------------------------------
-- Idle timeouts

-- Note [Idle timeouts]
-- ~~~~~~~~~~~~~~~~~~~~~
-- A timer per socket, on weft's timers, that is not moved on every
-- syscall: each syscall that makes progress stamps the time in the guard
-- block (in C, only while a timeout is set), and when the timer fires it
-- compares the stamp with the clock and re-arms itself for the rest of the
-- period, or expires the socket: marks it timed out and shuts it down both
-- ways, which wakes its blocked threads. Their syscalls then see the end
-- of the stream or an error, which they report as an idle-timeout
-- 'IOError'. A socket that keeps talking costs one timer firing per period.
--
-- A peer that sends one byte every few seconds (slowloris) would reset
-- such a timer for ever, and hold its fd. So a socket may have a minimum
-- receive ('setMinimumReceive'): received bytes are added up in the guard
-- block, and a receive stamps progress only once the sum since the last
-- stamp reaches the minimum (then the sum starts again). A steady upload
-- at any useful rate reaches it many times a period; a trickle does not,
-- and times out. Sends always count: a server answering requests is
-- making progress however small they are.

-- | Give the socket an idle timeout of the given number of microseconds
-- (replacing any earlier one; 0 or less removes it): if no recv or send on
-- it makes progress for that long, its threads' recv and send calls fail
-- with an 'IOError' that 'isIdleTimeoutError' recognises, now and later.
-- The owner must still 'close' it.
setIdleTimeout :: Socket -> Int -> IO ()
setIdleTimeout s us = mask_ $ withMVar (sockLock s) $ \_ -> do
  cancelIdle s
  if us <= 0 then writeCounter g gTrack 0 else do
    now <- getMonotonicTimeNSec
    writeCounter g gActivity (fromIntegral now)
    writeCounter g gTrack 1
    mgr <- getSystemManager
    armIdle mgr s (fromIntegral us * 1000) us Nothing
  where
    g = sockGuard s

-- Note [Idle timers are the socket's only while they are its key]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- The timer's check runs on the timer thread, outside the socket's lock,
-- and may be under way while 'setIdleTimeout' removes or replaces the
-- timeout: that cancels the key the socket holds, which is the key whose
-- check is running, and cancelling a timer that has fired does nothing.
-- So a check acts only if the socket still holds its key, and swaps in
-- its successor, or clears the key as it expires the socket, in one
-- atomic update of 'sockIdle'; a check whose key was taken away cancels
-- the timer it has just registered and does nothing else. Otherwise a
-- removed timeout could re-arm itself and, no longer fed by progress
-- stamps, expire a connection that no longer has one.

-- | Register the socket's idle timer to fire after @delay@ us, and make it
-- the socket's key if the socket still holds @expected@ (Note [Idle
-- timers are the socket's only while they are its key]).
armIdle :: T.TimerManager -> Socket -> Word64 -> Int -> Maybe T.TimeoutKey -> IO ()
armIdle mgr s period delay expected = do
  k <- fixIO $ \k -> T.registerTimeout mgr delay (idleTimerFired mgr s period k)
  ours <- atomicModifyIORef' (sockIdle s) $ \cur ->
    if cur == expected then (Just k, True) else (cur, False)
  if not ours then void (T.cancelTimeout k) else do
    -- A close that began meanwhile may have missed this key.
    closed <- isClosed s
    when closed (cancelIdle s)

-- | The socket's idle timer (key @self@) fired: re-arm it for the rest of
-- the period if the socket made progress, else expire the socket; either
-- only while @self@ is still the socket's key.
idleTimerFired :: T.TimerManager -> Socket -> Word64 -> T.TimeoutKey -> IO ()
idleTimerFired mgr s period self = do
  closed <- isClosed s
  unless closed $ do
    stamp <- fromIntegral <$> readCounter g gActivity
    now <- getMonotonicTimeNSec
    let idle = now - min now stamp
    if idle < period
      then armIdle mgr s period (fromIntegral ((period - idle) `quot` 1000) + 1) (Just self)
      else do
        ours <- atomicModifyIORef' (sockIdle s) $ \cur ->
          if cur == Just self then (Nothing, True) else (cur, False)
        when ours $ do
          writeCounter g gTimedOut 1
          void (shutdownRaw s 2) -- SHUT_RDWR
  where
    g = sockGuard s

-- | The socket's idle timer's key, if it has an idle timeout.
idleTimerKey :: Socket -> IO (Maybe T.TimeoutKey)
idleTimerKey s = readIORef (sockIdle s)

-- | Make received bytes count as progress for the idle timeout only once
-- at least the given number have arrived since the last progress (Note
-- [Idle timeouts]); sends always count. 0 (the default) makes every
-- received byte count. With an idle timeout of T and a minimum of N, a
-- peer must send at least N bytes per T (or be sent to) to keep its
-- connection. Has no effect without an idle timeout.
setMinimumReceive :: Socket -> Int -> IO ()
setMinimumReceive s bytes = do
  writeCounter (sockGuard s) gReceived 0
  writeCounter (sockGuard s) gMinReceive (max 0 bytes)

-- | Stamp progress on every syscall from now on, even without an idle
-- timeout, so that 'lastProgress' tells how long the socket has made none.
trackProgress :: Socket -> IO ()
trackProgress s = do
  now <- getMonotonicTimeNSec
  writeCounter (sockGuard s) gActivity (fromIntegral now)
  writeCounter (sockGuard s) gTrack 1

-- Note [What a connection waits for]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A full server must tell a client that holds its connection without
-- using it from one the server is busy with. For a tracked socket the
-- guarded calls keep a state word in the guard block, in C, beside the
-- progress stamp: a receive that got bytes makes it "received" (the
-- server has something to act on), a send that moved bytes "answered";
-- a receive that said EAGAIN (or a receive handed to a ring) makes it
-- "waiting for more" if bytes came since the last send, and "waiting for
-- the next request" if none did (also for a connection that has sent
-- nothing yet); a send that said EAGAIN makes it "waiting for the reader".
-- So a handler working on a request, however long, is never taken for
-- an idle or stalled client, and the state costs the hot path one load
-- and a store only when it changes. 'connectionStanding' reads it.

-- | Tell weft that the server now waits for the peer's bytes on this
-- socket, as a receive that says EAGAIN does (Note [What a connection
-- waits for]): for a server that waits for readiness without such a
-- receive (one that reads less than a full buffer and re-arms).
awaitingPeer :: Socket -> IO ()
awaitingPeer s = c_note_wait (guardArr s) 1

-- | What the connection is doing, if it is tracked ('trackProgress';
-- untracked sockets count as 'Working'): Note [What a connection waits
-- for].
connectionStanding :: Socket -> IO Standing
connectionStanding s = do
  tracked <- readCounter (sockGuard s) gTrack
  if tracked == 0 then return Working else do
    st <- readCounter (sockGuard s) gState
    t <- fromIntegral <$> readCounter (sockGuard s) gActivity
    return $ case st of
      2 -> Idle t
      3 -> Stalled t
      4 -> Stalled t
      _ -> Working

-- | When the socket last made progress (monotonic nanoseconds), if it is
-- tracked ('trackProgress', 'setIdleTimeout'); 0 otherwise.
lastProgress :: Socket -> IO Word64
lastProgress s = do
  tracked <- readCounter (sockGuard s) gTrack
  if tracked == 0 then return 0 else fromIntegral <$> readCounter (sockGuard s) gActivity

cancelIdle :: Socket -> IO ()
cancelIdle s = do
  k <- atomicModifyIORef' (sockIdle s) (\k -> (Nothing, k))
  mapM_ T.cancelTimeout k

------------------------------------------------------------------------------
-- Closing

-- | Has 'close' (or 'detach') been called?
isClosed :: Socket -> IO Bool
isClosed s = odd <$> readCounter (sockGuard s) gUse
{-# INLINE isClosed #-}

-- | Close the socket (Note [Socket close and fd reuse]). Threads blocked
-- on it wake up with an 'IOError' (@EBADF@, "socket is closed"), as do
-- later calls. The fd is closed through the system managers
-- ('closeFdOn'), so that whatever else was registered on it there (a
-- 'Weft.Color.onReadable', a 'Weft.Event.registerFd') ends with it, with
-- 'evtClose', and can never fire for a later socket given the same fd
-- number. Idempotent; never throws.
close :: Socket -> IO ()
close s = do
  open <- stopUsing s False
  when open $ do
    mgrs <- systemManagers
    closeFdOn mgrs (\_ -> void (c_close (sockFd s))) (socketFd s)

-- | Stop weft from using the socket, as 'close' does, but return the fd
-- open instead of closing it ('Nothing' if it was closed already). The
-- caller owns it. (It marks the socket closed, ends its watch and idle
-- timer, waits for the syscalls and ring requests in flight, and closes
-- the connections a listener's cancelled accepts kept.)
detach :: Socket -> IO (Maybe CInt)
detach s = do
  open <- stopUsing s True
  return (if open then Just (sockFd s) else Nothing)

-- | Mark the socket closed, cancel its idle timer, end its watch if asked
-- (a close ends it with the fd), and wait for the syscalls in flight.
-- Returns whether this call was the one that closed it.
stopUsing :: Socket -> Bool -> IO Bool
stopUsing s unwatch = uninterruptibleMask_ $ do
  first <- markClosed
  when first $ do
    cancelIdle s
    when unwatch $ do
      w <- withMVar (sockLock s) $ \_ -> readIORef (sockWaiter s)
      case w of
        Watched watch -> endWatch watch
        _ -> return ()
    drain
    forM_ (sockTracker s) $ \trk -> do
      -- A request on a ring holds the file: cancel it and wait for its end.
      forM_ [trkReceiving, trkSending] $ \slot -> do
        inflight <- readIORef (slot trk)
        forM_ inflight $ \i -> inflClose i >> readMVar (inflResolved i)
      -- Connections a listener's cancelled accepts kept: nobody can accept
      -- them now (Note [Accepts on the ring]).
      kept <- atomicModifyIORef' (trkAccepted trk) (\l -> ([], l))
      forM_ kept $ \(Fd fd, _) -> c_close fd
  return first
  where
    g = sockGuard s
    markClosed = do
      v <- readCounter g gUse
      if odd v then return False else do
        old <- casCounter g gUse v (v + 1)
        if old == v then return True else markClosed
    drain = do
      v <- readCounter g gUse
      when (v > 1) (yield >> drain)

------------------------------------------------------------------------------
-- Helpers

-- | Throw the 'IOError' for a negative result of an unguarded call.
throwIfNegative :: String -> IO CLong -> IO CLong
throwIfNegative loc act = do
  r <- act
  if r < 0 then throwIO (syscallError loc (Errno (fromIntegral (negate r))))
    else return r

------------------------------------------------------------------------------
-- Foreign calls (cbits/weft_net.c); all return -errno on failure.

foreign import ccall unsafe "weft_net_note_wait"
  c_note_wait :: MutableByteArray# RealWorld -> CInt -> IO ()
foreign import ccall unsafe "weft_net_note_progress"
  c_note_progress :: MutableByteArray# RealWorld -> CLong -> CInt -> IO ()
foreign import ccall unsafe "weft_net_recv"
  c_recv :: MutableByteArray# RealWorld -> CInt -> Ptr Word8 -> CSize -> IO CLong
foreign import ccall unsafe "weft_net_send"
  c_send :: MutableByteArray# RealWorld -> CInt -> Ptr Word8 -> CSize -> IO CLong
foreign import ccall unsafe "weft_net_sendv"
  c_sendv :: MutableByteArray# RealWorld -> CInt -> Ptr () -> CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_sendfile"
  c_sendfile :: MutableByteArray# RealWorld -> CInt -> CInt -> Int64 -> CSize -> IO CLong
foreign import ccall unsafe "weft_net_accept"
  c_accept :: MutableByteArray# RealWorld -> CInt -> Ptr () -> Ptr CInt -> IO CLong
foreign import ccall unsafe "weft_net_connect"
  c_connect :: MutableByteArray# RealWorld -> CInt -> Ptr () -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_shutdown"
  c_shutdown :: MutableByteArray# RealWorld -> CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_sendto"
  c_sendto :: MutableByteArray# RealWorld -> CInt -> Ptr Word8 -> CSize -> Ptr () -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_recvfrom"
  c_recvfrom :: MutableByteArray# RealWorld -> CInt -> Ptr Word8 -> CSize -> Ptr () -> Ptr CInt -> IO CLong
foreign import ccall unsafe "weft_net_recvmany"
  c_recvmany :: MutableByteArray# RealWorld -> CInt -> Ptr Word8 -> CInt -> CInt -> Ptr CInt -> Ptr () -> IO CLong

foreign import ccall unsafe "weft_net_socket"
  c_socket :: CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_bind"
  c_bind :: CInt -> Ptr () -> CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_listen"
  c_listen :: CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_set_nodelay"
  c_set_nodelay :: CInt -> CInt -> IO CLong
foreign import ccall unsafe "weft_net_socket_error"
  c_socket_error :: CInt -> IO CLong
foreign import ccall unsafe "weft_net_local_addr"
  c_local_addr :: CInt -> Ptr () -> Ptr CInt -> IO CLong
foreign import ccall unsafe "weft_net_close"
  c_close :: CInt -> IO CLong
