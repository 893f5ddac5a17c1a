{-# LANGUAGE BangPatterns, MagicHash, UnboxedTuples #-}
-- | What the parts of a manager share: the 'Manager' record and the
-- records it holds (fd slots and their registrations, timers), its
-- counters, and the few operations every part uses (waking the
-- dispatcher, running guarded callbacks). Internal and unstable; the
-- parts are "Weft.Event.Internal.Dispatcher" (the loop and the life
-- cycle), "Weft.Event.Internal.Registry" (fd registrations, waits and
-- watches), "Weft.Timer.Internal.ManagerTimers" and "Weft.Event.Internal.Stats",
-- put together by "Weft.Event.Internal.Core".
--
-- Note [Dispatcher states]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A counter holds Running, Blocking, Woken or Finished. The dispatcher
-- publishes Blocking (a full barrier) and only then reads what could make it
-- want to stay awake: the stop flag and the timer queue (and, for the poll
-- backend, the registrations). A waker first writes its change (a full barrier)
-- and then tries Blocking -> Woken; only the winner writes the wakeup fd. So
-- either the dispatcher sees the change before it blocks, or the waker sees
-- Blocking and wakes it, and one blocking poll costs at most one wakeup
-- write, however many wakers come (Note [Coalesced wakeups]). The wakeup fd
-- is closed at shutdown only after the dispatcher published Finished and no
-- waker is between its state check and its write (the in-flight count).
--
module Weft.Event.Internal.Manager
  ( -- * Managers
    Manager (..)
  , IOCallback
  , FdKey (..)
  , Target (..)
  , Slot (..)
  , TimerAction (..)
  , TimeoutCallback
  , TimeoutKey (..)
  , Watch (..)
    -- * Counters and dispatcher states
  , cState, cStop, cKeys, cInflight, cBlockingPolls, cPolls, cEvents, cWakeups
  , cLive, cCallbackErrors, cArms, cTimersFired, cWatches, cSpins
  , cSpinHits, cSpinNanos, nCounters
  , sRunning, sBlocking, sWoken, sFinished
  , spinToken
  , managerIds
    -- * Shared operations
  , wakeManager
  , managerBlocked
  , managerCompletions
  , stopped
  , runCallbacks
  , runCallback
  , nextKey
  , fdInt
  , withLiveBackend
  , trace
  ) where

import Control.Concurrent.MVar
import Control.Exception
import Control.Monad
import Data.IORef
import GHC.Exts (Addr#, traceEvent#)
import GHC.IO (IO (..))
import System.IO (hPutStrLn, stderr)
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Types (Fd (..))

import qualified Weft.Event.Internal.FdTable as FT
import Weft.Event.Internal
import Weft.Event.Internal.Completions (Completions)
import Weft.Event.Internal.Slot
import Weft.Internal.Counters
import qualified Weft.Timer.Internal.Wheel as W

------------------------------------------------------------------------------
-- Types

-- | A callback for 'registerFd', run on the dispatcher thread. It must not
-- block for long: other fds of its manager wait meanwhile. If it throws, the
-- exception is reported on stderr and counted ('statCallbackErrors'), and the
-- dispatcher carries on.
type IOCallback = FdKey -> Event -> IO ()

-- | Names one registration made by 'registerFd'.
data FdKey = FdKey
  { keyFd     :: {-# UNPACK #-} !Fd
  , keyUnique :: {-# UNPACK #-} !Int
  } deriving (Eq, Show)

-- | What a registration does when its fd is reported (Note [One
-- registration per fd] in "Weft.Event.Internal.Slot").
data Target
  = WakeCell !(MVar Event)
    -- ^ A blocked 'waitOn' (one-shot); filled under the slot lock.
  | RunCallback (Event -> IO ())
    -- ^ A 'registerFd' callback (one-shot or level-triggered); run after
    -- unlocking.
  | PutTokens !(MVar ()) !(MVar ())
    -- ^ An edge-triggered watch's read and write tokens; put by the
    -- dispatcher without the lock (Note [Edge-triggered watches] in
    -- "Weft.Event.Internal.Registry").
  | Notify (Event -> IO ())
    -- ^ An edge-triggered watch's callback; run by the dispatcher without
    -- the lock.

-- | One fd's registrations in one manager. The state is written only
-- under the lock, and read without it by the dispatcher,
-- which tells edge-triggered registrations lock-free.
data Slot = Slot
  { slotLock      :: !(MVar ())
  , slotState     :: !(IORef (SlotState Target))
  , slotReadCell  :: !(MVar Event)
  , slotWriteCell :: !(MVar Event)
  }

-- | What a timer does when it expires.
data TimerAction
  = TimerCallback (IO ())
  | TimerWake !(MVar Bool)   -- ^ 'True' on expiry, 'False' if the manager stops


-- | A callback for 'registerTimeout', run on the dispatcher thread; the same
-- rules as for 'IOCallback' apply.
type TimeoutCallback = IO ()

-- | An I/O manager. Each capability has one ('Weft.Event.getSystemManager');
-- more can be made with 'newManager'.
data Manager = Manager
  { mgrId       :: {-# UNPACK #-} !Int
  , mgrCap      :: {-# UNPACK #-} !Int
  , mgrBackend  :: !Backend
  , mgrTable    :: !(FT.FdTable Slot)
  , mgrCounters :: !Counters
  , mgrTimers   :: !(W.Wheel TimerAction)
  , mgrFinished :: !(MVar ())
  }

instance Eq Manager where
  a == b = mgrId a == mgrId b

-- | Names one timer: its manager, and its wheel entry and generation
-- ("Weft.Timer.Internal.Wheel"). A key outlives its timer harmlessly.
data TimeoutKey = TimeoutKey !Manager {-# UNPACK #-} !Int {-# UNPACK #-} !Int

instance Eq TimeoutKey where
  TimeoutKey m a g == TimeoutKey n b h = a == b && g == h && m == n
instance Ord TimeoutKey where
  compare (TimeoutKey m a g) (TimeoutKey n b h) = compare (mgrId m, a, g) (mgrId n, b, h)

-- Counter indices.
cState, cStop, cKeys, cInflight, cBlockingPolls, cPolls, cEvents, cWakeups,
  cLive, cCallbackErrors, cArms, cTimersFired, cWatches, cSpins,
  cSpinHits, cSpinNanos, nCounters :: Int
cState = 0; cStop = 1; cKeys = 2; cInflight = 3; cBlockingPolls = 4
cPolls = 5; cEvents = 6; cWakeups = 7; cLive = 8; cCallbackErrors = 9
cArms = 10; cTimersFired = 11; cWatches = 12; cSpins = 13
cSpinHits = 14; cSpinNanos = 15; nCounters = 16

-- Dispatcher states, Note [Dispatcher states].
sRunning, sBlocking, sWoken, sFinished :: Int
sRunning = 0; sBlocking = 1; sWoken = 2; sFinished = 3

-- | The spin token: 1 while some dispatcher of this process spins through
-- a dry spell (Note [Adaptive spinning] in "Weft.Event.Internal.Spin").
{-# NOINLINE spinToken #-}
spinToken :: Counters
spinToken = unsafePerformIO (newCounters 1)

{-# NOINLINE managerIds #-}
managerIds :: Counters
managerIds = unsafePerformIO (newCounters 1)

-- | An edge-triggered registration of an fd, made once for the fd's life
-- (Note [Edge-triggered watches] in "Weft.Event.Internal.Registry").
data Watch = Watch
  { watchKey     :: {-# UNPACK #-} !Int
  , watchedFd    :: {-# UNPACK #-} !Fd
    -- ^ The fd being watched.
  , watchSlot    :: !Slot
  , watchTarget  :: !Target
    -- ^ 'PutTokens' or 'Notify'.
  , watchManager :: !Manager
  }

------------------------------------------------------------------------------
-- Shared operations

-- | Make the dispatcher return from a blocking poll, if it is in one.
-- Cheap when it is not: one read.
wakeManager :: Manager -> IO ()
wakeManager mgr = do
  let c = mgrCounters mgr
  s <- readCounter c cState
  when (s == sBlocking) $ do
    _ <- addCounter c cInflight 1
    old <- casCounter c cState sBlocking sWoken
    when (old == sBlocking) $ do
      trace "weft:wakeup"#
      backendWake (mgrBackend mgr)
      void (addCounter c cWakeups 1)
    void (addCounter c cInflight (-1))

-- | The requests the manager's backend performs itself (Note [Two ways to
-- wait] in "Weft.Event.Internal.Completions"); 'Nothing' for a readiness
-- backend.
managerCompletions :: Manager -> Maybe Completions
managerCompletions = backendCompletions . mgrBackend
{-# INLINE managerCompletions #-}

-- | Whether the dispatcher is blocked in the kernel now (a moment later
-- it may not be): what it is not blocked for, it will see at its next poll
-- without a wakeup.
managerBlocked :: Manager -> IO Bool
managerBlocked mgr = (== sBlocking) <$> readCounter (mgrCounters mgr) cState
{-# INLINE managerBlocked #-}

stopped :: Manager -> IO Bool
stopped mgr = (/= 0) <$> readCounter (mgrCounters mgr) cStop
{-# INLINE stopped #-}

-- | Run callbacks, each guarded ('runCallback').
runCallbacks :: Manager -> [IO ()] -> IO ()
runCallbacks mgr = mapM_ (runCallback mgr)

-- | Run a callback on the dispatcher, guarded: an exception is reported
-- and counted, and the dispatcher carries on.
runCallback :: Manager -> IO () -> IO ()
runCallback mgr act = act `catch` \e -> do
  _ <- addCounter (mgrCounters mgr) cCallbackErrors 1
  hPutStrLn stderr ("weft: a callback threw an exception (the dispatcher "
                    ++ "carries on): " ++ show (e :: SomeException))

-- | A number this manager never returned before (one atomic add).
nextKey :: Manager -> IO Int
nextKey mgr = addCounter (mgrCounters mgr) cKeys 1
{-# INLINE nextKey #-}

fdInt :: Fd -> Int
fdInt (Fd n) = fromIntegral n
{-# INLINE fdInt #-}

-- | Run an operation on the backend unless it was released, and keep it
-- from being released meanwhile (the in-flight count of Note [Dispatcher
-- states]).
withLiveBackend :: Manager -> IO () -> IO ()
withLiveBackend mgr act = do
  let c = mgrCounters mgr
  _ <- addCounter c cInflight 1
  s <- readCounter c cState
  (unless (s == sFinished) act) `finally` addCounter c cInflight (-1)

-- | Emit an eventlog user event from a static string: no allocation, and
-- next to nothing when the eventlog is off.
trace :: Addr# -> IO ()
trace msg = IO (\s -> (# traceEvent# msg s, () #))
{-# INLINE trace #-}
