-- | Timers, mirroring "GHC.Event"'s timer API. Each capability's manager
-- keeps its own timer queue, expired by its dispatcher.
--
-- Resolution: a timer never fires early; it fires on the first dispatcher
-- pass after its deadline, and a blocking poll sleeps in whole milliseconds
-- rounded up, so expect up to 1 ms plus scheduling noise of lateness.
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

import Weft.Event.Manager (Manager, TimeoutCallback, TimeoutKey, registerDelayOn)
import qualified Weft.Event.Manager as M
import Weft.Event.System (getSystemManager)

-- | The timer side of a manager.
type TimerManager = Manager

-- | The timer manager of the calling thread's capability.
getSystemTimerManager :: IO TimerManager
getSystemTimerManager = getSystemManager

-- | Run the callback on the dispatcher after at least the given number of
-- microseconds. If it throws, the exception is reported and counted, and
-- the dispatcher carries on.
registerTimeout :: TimerManager -> Int -> TimeoutCallback -> IO TimeoutKey
registerTimeout = M.registerTimeout

-- | Move a pending timer to the given number of microseconds from now. The
-- manager argument is ignored (the key names its own manager); it is kept
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
