-- | A manager's statistics: a snapshot of its counters. Internal and
-- unstable ("Weft.Event" is the façade).
module Weft.Event.Internal.Stats
  ( ManagerStats (..)
  , getManagerStats
  , RingStats (..)
  , getRingStats
  ) where

import Weft.Event.Internal
import Weft.Event.Internal.Completions (Completions (..), RingStats (..))
import Weft.Event.Internal.Manager
import Weft.Internal.Counters
import qualified Weft.Timer.Internal.Wheel as W

-- | A snapshot of a manager's counters. All counts are since the manager
-- started.
data ManagerStats = ManagerStats
  { statBlockingPolls     :: !Int -- ^ blocking (safe-call) polls made
  , statNonBlockingPolls  :: !Int -- ^ non-blocking polls made
  , statEvents            :: !Int -- ^ fd events delivered by polls
  , statWakeups           :: !Int -- ^ wakeup-fd writes (at most one per blocking poll)
  , statLiveRegistrations :: !Int -- ^ registrations and waits pending now
  , statCallbackErrors    :: !Int -- ^ callbacks that threw
  , statArms              :: !Int -- ^ one-shot arms and disarms asked of the backend
  , statKernelCalls       :: !Int -- ^ calls that changed the kernel's interest set: every @epoll_ctl@ (arms, their retries, watches, forgets); 0 for poll
  , statTimersFired       :: !Int -- ^ timers that expired
  , statPendingTimers     :: !Int -- ^ timers pending now
  , statWatches           :: !Int -- ^ edge-triggered watches ('watchFdWaits', 'watchFdNotify') live now
  , statSpins             :: !Int -- ^ dry spells the dispatcher spun through (Note [Adaptive spinning])
  , statSpinHits          :: !Int -- ^ of those, spells that events ended while it spun
  , statSpinNanos         :: !Int -- ^ nanoseconds spent spinning
  } deriving (Eq, Show)

-- | Read a manager's counters.
getManagerStats :: Manager -> IO ManagerStats
getManagerStats mgr = do
  let r = readCounter (mgrCounters mgr)
  pending <- W.size (mgrTimers mgr)
  ManagerStats <$> r cBlockingPolls <*> r cPolls <*> r cEvents <*> r cWakeups
               <*> r cLive <*> r cCallbackErrors <*> r cArms <*> backendKernelCalls (mgrBackend mgr) <*> r cTimersFired
               <*> pure pending <*> r cWatches <*> r cSpins <*> r cSpinHits <*> r cSpinNanos

-- | Read the counts of a manager's ring: what its completion backend did
-- that a readiness backend does not ('Nothing' for epoll and poll).
getRingStats :: Manager -> IO (Maybe RingStats)
getRingStats mgr = traverse complStats (backendCompletions (mgrBackend mgr))
