-- | weft's timers, all of them: 'threadDelay', 'registerDelay' and
-- 'timeout' (which "Weft" re-exports with the types of "GHC.Conc" and
-- "System.Timeout"), socket idle timeouts, and callbacks with
-- "GHC.Event"'s timer API. They live on per-capability timing wheels
-- ("Weft.Timer.Internal.Wheel", driven by each manager's dispatcher
-- through "Weft.Timer.Internal.ManagerTimers"). A timer lives on the wheel of the capability
-- that registered it and is fired by that capability's dispatcher, so
-- capabilities never contend for one queue, and a long callback holds up
-- only its own capability's timers. Register, update and cancel are O(1)
-- under a per-wheel lock; a timer in another capability's wheel is
-- cancelled through its key, under that wheel's lock, with no global lock.
-- None of them makes a syscall unless the new deadline is earlier than the
-- one the sleeping dispatcher set its alarm for.
--
-- Delays are in microseconds. Resolution: a timer never fires early. The
-- wheel ticks every 16.384 µs, and the dispatcher sleeps with a nanosecond
-- timeout (@epoll_pwait2@, or @ppoll@ for the poll backend; kernels before
-- 5.11 fall back to whole milliseconds), so a timer normally fires within
-- one tick plus the kernel's timer slack (50 µs by default) and scheduling
-- noise. Sub-millisecond delays are not rounded up to a millisecond.
--
-- Callbacks run on the dispatcher thread, one after another, each guarded:
-- one that throws is reported on stderr and counted
-- ('Weft.Event.statCallbackErrors'), and the rest still run. A callback
-- must not block for long: it delays its capability's I/O and timers.
--
-- For example, an idle timer that each request pushes back (the
-- \"tickle\" of an HTTP server). Pushing a deadline later is two array
-- writes, so it is cheap to do on every request:
--
-- > import qualified Weft.Timer as T
-- >
-- > -- Run closeIt after 30 s without a tickle; returns (tickle, cancel).
-- > idleTimer :: IO () -> IO (IO (), IO ())
-- > idleTimer closeIt = do
-- >   tm <- T.getSystemTimerManager
-- >   key <- T.registerTimeout tm 30000000 closeIt
-- >   return (T.updateTimeout tm key 30000000, T.unregisterTimeout tm key)
module Weft.Timer
  ( -- * Sleeping and time limits (re-exported by "Weft")
    threadDelay
  , registerDelay
  , timeout
  , Timeout
    -- * Timers with callbacks, as "GHC.Event" has them
  , TimerManager
  , getSystemTimerManager
  , TimeoutKey
  , TimeoutCallback
  , registerTimeout
  , updateTimeout
  , unregisterTimeout
  , cancelTimeout
  , registerDelayWithKey
  ) where

import Control.Concurrent (ThreadId, forkIOWithUnmask, myThreadId)
import Control.Concurrent.MVar
import Control.Concurrent.STM (TVar)
import Control.Exception
import Control.Monad (void)
import Data.Maybe (fromMaybe)

import Weft.Event.Internal.Core (Manager, TimeoutCallback, TimeoutKey, delayOn, managerId, nextKey, registerDelayOn)
import qualified Weft.Event.Internal.Core as M
import Weft.Event.Internal.System (getSystemManager)

-- | The timer side of a manager.
type TimerManager = Manager

-- | The timer manager of the calling thread's capability.
getSystemTimerManager :: IO TimerManager
getSystemTimerManager = getSystemManager

-- | Run the callback on the calling capability's dispatcher after at least
-- the given number of microseconds (a negative delay counts as 0). If it
-- throws, the exception is reported and counted, and the dispatcher carries
-- on. If the manager is shut down first, the callback is dropped.
registerTimeout :: TimerManager -> Int -> TimeoutCallback -> IO TimeoutKey
registerTimeout = M.registerTimeout

-- | Move a pending timer to the given number of microseconds from now.
-- Moving it later costs two array writes (the timer is moved lazily, when
-- its old slot comes due); moving it earlier relinks it. Does nothing if it
-- already fired or was cancelled. The manager argument is ignored (the key names its own manager); it is kept
-- so that code written against "GHC.Event" ports by an import change.
updateTimeout :: TimerManager -> TimeoutKey -> Int -> IO ()
updateTimeout _ = M.updateTimeout

-- | Cancel a pending timer; nothing happens if it already fired. The
-- manager argument is ignored, as for 'updateTimeout'.
unregisterTimeout :: TimerManager -> TimeoutKey -> IO ()
unregisterTimeout _ = M.unregisterTimeout

-- | Cancel a pending timer and say whether this call did it: 'True' means
-- the callback has not run and never will; 'False' means it already fired
-- (or is firing) or was cancelled before. Exactly one of the callback and a
-- 'True' happens.
cancelTimeout :: TimeoutKey -> IO Bool
cancelTimeout = M.unregisterTimeout_

-- | 'Weft.registerDelay' with the key that cancels it: after
-- 'unregisterTimeout', the 'TVar' stays 'False'.
registerDelayWithKey :: TimerManager -> Int -> IO (TVar Bool, TimeoutKey)
registerDelayWithKey = registerDelayOn

-- | Sleep for at least the given number of microseconds (none if it is not
-- positive), on the calling capability's timer wheel: no other capability
-- is involved, and sub-millisecond delays are kept (see "Weft.Timer" for
-- the resolution). Throws an 'IOError' if weft's managers are shut down
-- meanwhile. An async exception ends the sleep and cancels its timer.
threadDelay :: Int -> IO ()
threadDelay us = do
  mgr <- getSystemManager
  delayOn mgr us

-- | A 'TVar' that becomes 'True' after at least the given number of
-- microseconds. To be able to cancel it, use
-- 'Weft.Timer.registerDelayWithKey' and 'Weft.Timer.cancelTimeout'.
registerDelay :: Int -> IO (TVar Bool)
registerDelay us = do
  mgr <- getSystemManager
  fst <$> registerDelayOn mgr us

-- | The exception 'timeout' throws to interrupt its action; unique per call,
-- so nested timeouts each catch only their own. It names the manager that
-- made it and a number from that manager's key supply, so making one takes
-- no global lock (unlike "Data.Unique").
data Timeout = Timeout {-# UNPACK #-} !Int {-# UNPACK #-} !Int
  deriving Eq

instance Show Timeout where
  show _ = "<<timeout>>"

-- Like System.Timeout's, it hides from 'SomeAsyncException' handlers.
instance Exception Timeout where
  toException = asyncExceptionToException
  fromException = asyncExceptionFromException

-- | @timeout n act@ runs @act@ and returns @Just@ its result, or 'Nothing'
-- if it takes more than @n@ microseconds. A negative @n@ waits forever; 0
-- returns 'Nothing' at once. As in "System.Timeout", the action is
-- interrupted by an asynchronous exception, so it must be interruptible
-- (weft's waits are). Unlike "System.Timeout", an expiry that races the
-- action's completion is never lost into the caller: the result is then
-- 'Nothing' or 'Just', never an escaped 'Timeout'; and an action that
-- returned is 'Just' its result even if the limit expired as it did (so
-- @mask_ (timeout n (recv s k))@ never drops received bytes). The timer lives on the
-- calling capability's wheel; registering and cancelling it wakes no other
-- thread.
timeout :: Int -> IO a -> IO (Maybe a)
timeout n act
  | n < 0 = Just <$> act
  | n == 0 = return Nothing
  | otherwise = do
      mgr <- getSystemManager
      me <- myThreadId
      ex <- Timeout (managerId mgr) <$> nextKey mgr
      thrown <- newEmptyMVar
      handleJust (\e -> if e == ex then Just () else Nothing) (\_ -> return Nothing) $
        mask $ \restore -> do
          k <- registerTimeout mgr n (interrupt me ex thrown)
          -- Our own Timeout is absorbed by 'settle', not kept as the
          -- first other exception (Note [Settling a timeout]).
          r <- restore act `catch` \e ->
            settle ex thrown k (if fromException e == Just ex then Nothing else Just e) >> throwIO e
          -- The action finished: its result stands, even if the limit
          -- expired meanwhile and its Timeout arrives while settling.
          (Just r <$ settle ex thrown k Nothing) `catch` \e ->
            if fromException e == Just ex then return (Just r) else throwIO e

-- Note [Settling a timeout]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- When 'timeout' ends (its action returned or threw), it cancels its timer.
-- If the timer already fired, its 'Timeout' is on its way, thrown by the
-- thread 'interrupt' forked, and must be absorbed here, or it would hit the
-- caller later, outside every handler. So 'settle' waits (interruptibly,
-- as 'throwTo' needs) until either the thrower reports that it is done or
-- the 'Timeout' arrives. Other exceptions may arrive meanwhile: an outer
-- 'timeout' firing, or a 'killThread'. The first of those, or the action's
-- own exception, wins and is rethrown once this call's 'Timeout' has been
-- absorbed; so an outer limit is never swallowed by an inner one. When the
-- action was ended by this call's own 'Timeout', that is not such an
-- exception: an outer 'Timeout' arriving while 'settle' waits for the
-- thrower must still win, or the outer limit is lost when both fire in
-- the same tick.

-- | Cancel the timer; if it had fired, absorb its exception and rethrow
-- the first other exception (Note [Settling a timeout]).
settle :: Timeout -> MVar () -> TimeoutKey -> Maybe SomeException -> IO ()
settle ex thrown k first = do
  pending <- cancelTimeout k
  if pending then return () else await first
  where
    await other = do
      r <- try (takeMVar thrown)
      case r of
        Right () -> mapM_ throwIO other
        Left e
          | fromException e == Just ex -> throwIO (fromMaybe e other)
          | otherwise -> await (Just (fromMaybe e other))

-- | Throw from a fresh thread: 'throwTo' blocks while the target is masked,
-- and must not hold up the dispatcher.
interrupt :: ThreadId -> Timeout -> MVar () -> IO ()
interrupt target ex thrown =
  void $ forkIOWithUnmask $ \unmask ->
    unmask (throwTo target ex) `finally` putMVar thrown ()
