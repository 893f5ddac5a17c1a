-- | A manager's timers: a timing wheel ("Weft.Timer.Internal.Wheel") of callbacks
-- and sleeps, expired by the dispatcher, which sleeps no longer than the
-- next deadline. Internal and unstable ("Weft.Timer" is the façade).
module Weft.Timer.Internal.ManagerTimers
  ( registerTimeout
  , updateTimeout
  , unregisterTimeout
  , unregisterTimeout_
  , delayOn
  , registerDelayOn
    -- * For the dispatcher
  , runExpiredTimers
  , abortTimers
  , pollTimeout
  ) where

import Control.Concurrent.MVar
import Control.Concurrent.STM
import Control.Exception
import Control.Monad
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)

import Weft.Event.Internal
import Weft.Event.Internal.Manager
import Weft.Internal.Counters
import Weft.Internal.Error (managerShutDown)
import qualified Weft.Timer.Internal.Wheel as W

-- Note [Waking the dispatcher for a timer]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A dispatcher about to block publishes 'sBlocking', then, under the wheel
-- lock, reads the next expiry and records it as its planned wake-up; once
-- awake it resets the plan to 0. A registrar inserts under the same lock
-- and then compares its deadline with the plan: only a timer due before the
-- plan calls 'wakeManager'. Either the registrar's insert precedes the
-- dispatcher's read (which then sees the timer), or it follows it, and then
-- the registrar sees both the plan and 'sBlocking' (or a later plan, or 0
-- because the dispatcher is awake again; either is harmless). While the dispatcher is
-- running the plan is 0 and nobody wakes it: it expires timers on every
-- pass. So a register, an update or a cancel that does not move the
-- earliest deadline earlier costs no syscall.

-- | Run a callback on the manager's dispatcher after at least the given
-- number of microseconds (a negative delay counts as 0). The timer never
-- fires early, and normally fires within one tick ('W.tickNs', 16.4 µs) of
-- its deadline plus the kernel's timer slack and scheduling. If the manager
-- is shut down first, the callback is dropped.
registerTimeout :: Manager -> Int -> TimeoutCallback -> IO TimeoutKey
registerTimeout mgr us cb = registerTimer mgr us (TimerCallback cb)

registerTimer :: Manager -> Int -> TimerAction -> IO TimeoutKey
registerTimer mgr us action = do
  t <- deadlineAfter us
  let w = mgrTimers mgr
  k <- W.withLock w (W.insert w t action (TimeoutKey mgr))
  -- Read after the insert (Note [Waking the dispatcher for a timer]).
  p <- W.planned w
  halt <- stopped mgr
  if halt
    then abortTimers mgr
    else when (t < p) (wakeManager mgr)
  return k
{-# INLINE registerTimer #-}

-- | The deadline tick of a delay in microseconds from now.
deadlineAfter :: Int -> IO Int
deadlineAfter us = do
  now <- getMonotonicTimeNSec
  -- Clamp so that maxBound microseconds does not wrap around.
  let ns = fromIntegral (min (max 0 us) (maxBound `quot` 1000)) * 1000 :: Word64
  return $! W.deadlineTick (now + min ns (maxBound - now))
{-# INLINE deadlineAfter #-}

-- | Move a pending timer's deadline to the given number of microseconds from
-- now. Does nothing if it already fired or was cancelled.
updateTimeout :: TimeoutKey -> Int -> IO ()
updateTimeout (TimeoutKey mgr i g) us = do
  t <- deadlineAfter us
  let w = mgrTimers mgr
  found <- W.withLock w (W.reschedule w i g t)
  p <- W.planned w
  when (found && t < p) (wakeManager mgr)

-- | Cancel a pending timer. Does nothing if it already fired.
unregisterTimeout :: TimeoutKey -> IO ()
unregisterTimeout k = void (unregisterTimeout_ k)

-- | 'unregisterTimeout', returning whether the timer was still pending (so
-- it will now never fire).
unregisterTimeout_ :: TimeoutKey -> IO Bool
unregisterTimeout_ (TimeoutKey mgr i g) =
  let w = mgrTimers mgr in W.withLock w (W.cancel w i g)

-- | Fire the timers that are due, outside the wheel lock, each guarded.
runExpiredTimers :: Manager -> IO ()
runExpiredTimers mgr = do
  let w = mgrTimers mgr
  first <- W.earliest w
  when (first /= W.noExpiry) $ do
    now <- W.nowTick <$> getMonotonicTimeNSec
    when (first <= now) $ do
      expired <- W.withLock w (W.expire w now)
      bumpCounter (mgrCounters mgr) cTimersFired (length expired)
      runCallbacks mgr (map fire expired)
  where
    fire (TimerCallback cb) = cb
    fire (TimerWake cell) = void (tryPutMVar cell True)

abortTimers :: Manager -> IO ()
abortTimers mgr = do
  let w = mgrTimers mgr
  pending <- W.withLock w (W.drain w)
  forM_ pending $ \a -> case a of
    TimerWake cell -> void (tryPutMVar cell False)
    TimerCallback _ -> return ()

-- | Sleep at least the given number of microseconds on this manager's timers.
-- Throws an 'IOError' if the manager is shut down meanwhile.
delayOn :: Manager -> Int -> IO ()
delayOn mgr us = mask_ $ do
  cell <- newEmptyMVar
  k <- registerTimer mgr us (TimerWake cell)
  expired <- takeMVar cell `onException` unregisterTimeout k
  unless expired $ throwIO (managerShutDown "threadDelay")

-- | A 'TVar' that becomes 'True' after at least the given number of
-- microseconds, and the key that cancels it (the 'TVar' then stays 'False').
registerDelayOn :: Manager -> Int -> IO (TVar Bool, TimeoutKey)
registerDelayOn mgr us = do
  tv <- newTVarIO False
  k <- registerTimeout mgr us (atomically (writeTVar tv True))
  return (tv, k)

-- | How long the blocking poll may wait: until the start of the tick when
-- 'runExpiredTimers' next has work ('W.earliest'), in nanoseconds. Called
-- after the dispatcher published 'sBlocking'; it records that tick as the
-- planned wake-up, under the wheel lock, so that a timer registered later
-- and due earlier wakes the dispatcher (Note [Waking the dispatcher for a
-- timer]).
--
-- Not the wheel's earliest occupied slot ('W.nextExpiry'): a slot of a
-- higher level starts up to a whole slot span (67 ms at level 2) before the
-- deadlines in it, and 'runExpiredTimers' only expires once the earliest
-- deadline is due. Sleeping until the slot's start made the dispatcher
-- poll without blocking from then until the deadline: a busy loop of up
-- to 67 ms for every timer of 1 ms or more.
pollTimeout :: Manager -> IO PollTimeout
pollTimeout mgr = do
  let w = mgrTimers mgr
  next <- W.withLock w $ do
    t <- W.earliest w
    W.setPlanned w t
    return t
  if next == W.noExpiry then return WaitForever else do
    now <- getMonotonicTimeNSec
    let due = W.tickStartNs next
    return (if due <= now then NoWait else WaitNanos (fromIntegral (due - now)))
