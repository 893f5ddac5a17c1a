{-# LANGUAGE ScopedTypeVariables #-}
-- | Colored I/O: one-shot readiness events ('onReadable'), persistent
-- watches ('FdWatch'), and "Weft.Net" sockets watched and closed
-- gracefully as colored events ("Weft.Color" is the façade).
-- Internal and unstable (everything is exported; the façade picks the
-- API): import "Weft.Color".
module Weft.Color.Internal.Io where

import Control.Exception hiding (Handler)
import Control.Monad
import Data.IORef
import System.Posix.Types (Fd)
import Weft.Event (Lifetime (..), evtRead, evtWrite, eventIs, evtClose, evtHangup, registerFd,
                   getSystemManager)
import qualified Weft.Event as E
import qualified Weft.Event.Internal.Core as M
import qualified Weft.Net as Net
import qualified Weft.Timer as T
import Weft.Internal.Counters
import Weft.Color.Internal.Runtime

------------------------------------------------------------------------------
-- I/O

-- | When the fd becomes readable, post @body@ as an @h@ event of color @c@,
-- once. Call it again (from the handler, after a read says @EAGAIN@) to
-- keep watching. The watch uses the calling capability's manager.
--
-- Close a watched fd with 'Weft.closeFdWith': then a watch that has not
-- fired posts nothing. A plain @close@ leaves the watch in the manager,
-- where it could fire for the next file that reuses the fd number. Throws
-- an 'IOError' if the fd cannot be watched (closed, or a regular file).
onReadable :: Runtime -> Fd -> Color -> Handler -> IO () -> IO ()
onReadable rt = onReady rt evtRead

-- | Like 'onReadable', for writability.
onWritable :: Runtime -> Fd -> Color -> Handler -> IO () -> IO ()
onWritable rt = onReady rt evtWrite

onReady :: Runtime -> E.Event -> Fd -> Color -> Handler -> IO () -> IO ()
onReady rt ev fd c h body = do
  mgr <- getSystemManager
  void $ registerFd mgr fire fd ev OneShot
  where
    fire _ e
      | e `eventIs` evtClose = return ()
      | otherwise = post rt c h body `catch` \RuntimeClosed -> return ()

-- Note [Persistent watches]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- 'onReadable' arms the fd one-shot, which costs an @epoll_ctl@ per wait.
-- An 'FdWatch' registers the fd once, edge-triggered (the manager's
-- 'M.watchFdNotify'), and turns edges into posts with a small state
-- machine per direction, held in one atomic word:
--
--   * Idle: nobody asked. An edge makes it Pending.
--   * Armed: a handler asked ('rearmRead' after its read said @EAGAIN@).
--     An edge makes it Idle and posts the body.
--   * Pending: an edge came while Idle. 'rearmRead' makes it Idle and
--     posts the body at once.
--
-- So the body is posted once per rearm and never for an edge nobody asked
-- for, and no edge is lost: data that arrives after the handler's last
-- read and before its rearm leaves the state Pending. Edge-triggered
-- readiness reports every arrival, and a report carries whatever
-- directions are ready, so without the Armed state a watched socket would
-- post its write body on every incoming packet.
--
-- A rearm after a short read (fewer bytes than asked) is as safe as one
-- after @EAGAIN@ for data: whatever arrives after that read is a new edge.
-- Not for the end of stream: a peer that sends and then shuts down can
-- have both arrive before one edge is reported; the read returns the data
-- only, and no edge will announce the end behind it. So the read
-- direction has a fourth state:
--
--   * Over: an edge carried 'evtHangup' (the peer shut down its side, or
--     the socket failed). Reads no longer block, so every rearm posts the
--     body at once, and the state stays Over.
--
-- After a read that filled its buffer there may be data left that no edge
-- will announce, so such a handler posts its next read itself.
--
-- With the poll backend, which has no edge-triggered readiness, a rearm
-- registers the fd one-shot, as 'onReadable' does.

-- | A persistent watch of an fd that posts colored events
-- (Note [Persistent watches]).
data FdWatch = FdWatch
  { fwRuntime :: !Runtime
  , fwFd      :: !Fd
  , fwColor   :: !Color
  , fwRead    :: !(IORef (Handler, IO ()))
    -- ^ Replaced by a lingering close's drain ('lingerClose').
  , fwWrite   :: !(Handler, IO ())
  , fwStates  :: !Counters
    -- ^ slot 0 the read direction, slot 1 the write direction
  , fwEdge    :: !(Maybe M.Watch)
    -- ^ 'Nothing' on a backend without edge-triggered readiness
  }

stIdle, stArmed, stPending, stOver :: Int
stIdle = 0
stArmed = 1
stPending = 2
stOver = 3

-- | Watch an fd for the rest of its life with the calling capability's
-- manager: @watchFd rt fd c (hr, onRead) (hw, onWrite)@. Nothing is
-- posted until a rearm; then, once the fd is ready in that direction, the
-- body is posted once as an event of color @c@ (possibly at once: a rearm
-- does not know whether the fd became ready meanwhile, so the body must
-- cope with a read that says @EAGAIN@). Call 'unwatchFd' before closing
-- the fd. Throws an 'IOError' if the fd cannot be watched: closed
-- (@EBADF@), or a regular file (@EPERM@). Under the poll backend, which
-- checks an fd only when it polls, the first 'rearmRead' or 'rearmWrite'
-- fails instead. An fd that weft's socket layer also watches can be
-- watched here too: both share the fd's one registration.
watchFd :: Runtime -> Fd -> Color -> (Handler, IO ()) -> (Handler, IO ()) -> IO FdWatch
watchFd rt fd c onRead onWrite = do
  states <- newCounters 2
  readBody <- newIORef onRead
  mgr <- getSystemManager
  let fw = FdWatch rt fd c readBody onWrite states Nothing
  edge <- M.watchFdNotify mgr fd (\ev -> do
            if ev `eventIs` evtHangup then readOver fw
              else when (ev `eventIs` evtRead) (edgeCame fw 0)
            when (ev `eventIs` evtWrite) (edgeCame fw 1))
  return fw { fwEdge = edge }

-- | The dispatcher saw an edge in one direction: Armed -> Idle (and
-- post), Idle -> Pending, Pending and Over stay. A lost exchange means
-- the rearm moved the state meanwhile; the edge is then applied to the
-- new state.
edgeCame :: FdWatch -> Int -> IO ()
edgeCame fw dir = go =<< readCounter (fwStates fw) dir
  where
    go st
      | st == stArmed = step st stIdle (postBody fw dir)
      | st == stIdle = step st stPending (return ())
      | otherwise = return ()
    step from to done = do
      seen <- casCounter (fwStates fw) dir from to
      if seen == from then done else go seen

-- | A read edge carried 'evtHangup': the read direction is Over for good
-- (posting the body if it was Armed).
readOver :: FdWatch -> IO ()
readOver fw = go =<< readCounter (fwStates fw) 0
  where
    go st
      | st == stOver = return ()
      | otherwise = do
          seen <- casCounter (fwStates fw) 0 st stOver
          if seen /= st then go seen else when (st == stArmed) (postBody fw 0)

-- | Ask for the read body to be posted once the fd is readable: call it
-- after a read said @EAGAIN@ or returned fewer bytes than asked
-- (Note [Persistent watches]). Posts at once if an edge came meanwhile.
-- Throws an 'IOError' if the fd cannot be watched any more (poll backend).
rearmRead :: FdWatch -> IO ()
rearmRead fw = rearm fw 0 evtRead

-- | 'rearmRead' for the write body, after a write said @EAGAIN@.
rearmWrite :: FdWatch -> IO ()
rearmWrite fw = rearm fw 1 evtWrite

rearm :: FdWatch -> Int -> E.Event -> IO ()
rearm fw dir ev = case fwEdge fw of
  Nothing -> do
    (h, body) <- bodyOf fw dir
    onReady (fwRuntime fw) ev (fwFd fw) (fwColor fw) h body
  -- Idle -> Armed, Pending -> Idle (and post), Armed stays, Over stays
  -- (and post); a lost exchange means an edge moved the state meanwhile.
  Just _ -> go =<< readCounter (fwStates fw) dir
  where
    go st
      | st == stIdle = step st stArmed (return ())
      | st == stPending = step st stIdle (postBody fw dir)
      | st == stOver = postBody fw dir
      | otherwise = return ()
    step from to done = do
      seen <- casCounter (fwStates fw) dir from to
      if seen == from then done else go seen

postBody :: FdWatch -> Int -> IO ()
postBody fw dir = do
  (h, body) <- bodyOf fw dir
  post (fwRuntime fw) (fwColor fw) h body `catch` \RuntimeClosed -> return ()

bodyOf :: FdWatch -> Int -> IO (Handler, IO ())
bodyOf fw dir = if dir == 0 then readIORef (fwRead fw) else return (fwWrite fw)
{-# INLINE bodyOf #-}

-- | End the watch. A body already posted still runs, and one edge
-- harvested just before may still post (the body of a closed connection
-- must ignore it). Closing the fd through weft ('Weft.Net.close',
-- 'Weft.closeFdWith') ends the watch too, so a watch of a socket needs no
-- 'unwatchFd'; an fd closed with a plain @close@ must be unwatched first.
-- Idempotent; never throws.
unwatchFd :: FdWatch -> IO ()
unwatchFd fw = forM_ (fwEdge fw) M.endWatch

------------------------------------------------------------------------------
-- Sockets

-- | Watch a "Weft.Net" socket, as 'watchFd' does its fd: rearm after a
-- non-blocking call ('Net.tryRecv', 'Net.trySendMany') says the socket
-- would block. 'Net.close' ends the watch with the socket (bodies already
-- posted still run, and find the socket closed), and 'lingerClose' closes
-- it gracefully. The socket's own blocking calls ('Net.recv') work beside
-- the watch. Throws an 'IOError' if the socket is closed.
watchSocket :: Runtime -> Net.Socket -> Color -> (Handler, IO ()) -> (Handler, IO ()) -> IO FdWatch
watchSocket rt sock = watchFd rt (Net.socketFd sock) 

-- | Close a watched socket without losing what was just sent, as colored
-- events: shut its sending side down, discard what the peer still sends
-- until it closes (at most 'Net.lingerBytes', and for at most the given
-- microseconds), then 'Net.close' it and run @done@. Call it from an
-- event of the watch's color; the drain, the close and @done@ run as
-- events of that color too. From then on the watch posts the drain, not
-- its read body; a write body posted or armed before may still run, and
-- must see that the connection is closing. If the runtime shuts down
-- first, the socket is closed when the time is up, and @done@ is not run.
-- Never throws.
lingerClose :: FdWatch -> Net.Socket -> Int -> IO () -> IO ()
lingerClose fw sock micros done = do
  ended <- newIORef False
  timer <- newIORef Nothing
  let rt = fwRuntime fw
      finish = do
        already <- atomicModifyIORef' ended (\e -> (True, e))
        unless already $ do
          mapM_ T.cancelTimeout =<< readIORef timer
          Net.close sock
          done
      drain left = do
        r <- Net.discardInput sock left
        case r of
          Just left' -> do
            writeIORef (fwRead fw) (hLinger, drain left')
            rearmRead fw `catch` \(_ :: IOException) -> finish
          Nothing -> finish
  shut <- try (Net.shutdownSend sock)
  case shut of
    Left (_ :: IOException) -> finish
    Right () -> do
      mgr <- getSystemManager
      key <- T.registerTimeout mgr micros $
        post rt (fwColor fw) hLinger finish `catch` \RuntimeClosed -> Net.close sock
      writeIORef timer (Just key)
      drain Net.lingerBytes
  where
    hLinger = handler "linger"
