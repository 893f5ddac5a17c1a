-- | Timers, mirroring "GHC.Event"'s timer API, on per-capability timing
-- wheels ("Weft.Timer.Internal.Wheel"). A timer lives on the wheel of the capability
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
  ( TimerManager
  , getSystemTimerManager
  , TimeoutKey
  , TimeoutCallback
  , registerTimeout
  , updateTimeout
  , unregisterTimeout
  , cancelTimeout
  , registerDelayWithKey
  ) where

import Control.Concurrent.STM (TVar)

import Weft.Event.Internal.Core (Manager, TimeoutCallback, TimeoutKey, registerDelayOn)
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
