{-# LANGUAGE GeneralizedNewtypeDeriving #-}
-- | The core's types: events, lifetimes, the interest the kernel is asked
-- to watch, and the backend interface. The requests a completion backend
-- performs are in "Weft.Event.Internal.Completions".
-- Internal and unstable: weft's own modules and tests use it.
module Weft.Event.Internal
  ( -- * Events
    Event (..)
  , evtNothing, evtRead, evtWrite, evtClose, evtHangup
  , evtTaken, withoutTaken
  , eventIs, eventSubset
    -- * Lifetimes
  , Lifetime (..)
    -- * Interest, as the kernel sees it
  , Trigger (..)
  , Interest (..)
  , interestPersistent
  , noInterest
    -- * Backends
  , Backend (..)
  , BackendKind (..)
  , backendKindName
  , EventHandler
  , PollTimeout (..)
  , ArmResult (..)
  ) where

import Data.Bits (complement, (.&.), (.|.))
import Data.List (intercalate)
import Data.Word (Word32)
import Foreign.C.Error (Errno)
import System.Posix.Types (Fd)

import Weft.Event.Internal.Completions (Completions)

-- | A set of I/O events: 'evtRead', 'evtWrite', 'evtClose', 'evtHangup', combined with
-- '<>'.
newtype Event = Event Int
  deriving (Eq, Ord)

evtNothing, evtRead, evtWrite, evtClose, evtHangup :: Event
-- | No event.
evtNothing = Event 0
-- | The fd is readable (or has hung up, or has an error pending).
evtRead = Event 1
-- | The fd is writable (or has hung up, or has an error pending).
evtWrite = Event 2
-- | The fd was closed through weft ('Weft.closeFdWith') or vanished from
-- the kernel's interest set; waiters fail with an 'IOError'.
evtClose = Event 4
-- | Reported with 'evtRead' (never asked for): the peer has shut down its
-- sending side, or the fd hung up or has an error pending, so reads will
-- not block again (they return end of stream or the error). An
-- edge-triggered watcher needs it: the end of stream may have arrived
-- before its last read, which returned data, and no edge follows it.
evtHangup = Event 8

-- | Internal, never handed to users ('withoutTaken'): a report that a
-- one-shot waiter must not confirm by looking at the fd (Note [Confirmed
-- waits] in "Weft.Event.Internal.Registry"), because the backend's own
-- receive or accept on the fd may have taken what came (a ring's, Note
-- [Stale readiness on a ring] in "Weft.Event.Internal.Backend.Uring").
evtTaken :: Event
evtTaken = Event 16

-- | The event as users see it: without 'evtTaken'.
withoutTaken :: Event -> Event
withoutTaken (Event a) = Event (a .&. complement 16)
{-# INLINE withoutTaken #-}

instance Semigroup Event where
  Event a <> Event b = Event (a .|. b)

instance Monoid Event where
  mempty = evtNothing

instance Show Event where
  show e = "[" ++ intercalate "," names ++ "]"
    where names = [ n | (f, n) <- [ (evtRead, "evtRead"), (evtWrite, "evtWrite")
                                  , (evtClose, "evtClose"), (evtHangup, "evtHangup") ], e `eventIs` f ]

-- | Does the first set contain any event of the second?
eventIs :: Event -> Event -> Bool
eventIs (Event a) (Event b) = a .&. b /= 0
{-# INLINE eventIs #-}

-- | Is every event of the first set also in the second?
eventSubset :: Event -> Event -> Bool
eventSubset (Event a) (Event b) = a .&. b == a
{-# INLINE eventSubset #-}

-- | How long a registration lives.
data Lifetime
  = OneShot    -- ^ Fires once, then is gone.
  | MultiShot  -- ^ Level-triggered and persistent: fires on every poll that
               --   finds the fd ready, until 'Weft.Event.unregisterFd'.
  deriving (Eq, Show)

-- | The longer lifetime wins, as in "GHC.Event".
instance Semigroup Lifetime where
  OneShot <> OneShot = OneShot
  _ <> _ = MultiShot

-- | How the kernel reports an fd it watches.
data Trigger
  = Once
    -- ^ One-shot: the first report disarms the fd until it is armed again.
  | Level
    -- ^ Level-triggered: reported by every poll while the fd is ready.
  | Edge
    -- ^ Edge-triggered: reported when the fd becomes ready (and when an
    -- arm finds it ready), for reads and writes together; never disarmed.
  deriving (Eq, Show)

-- | What the backend is asked to watch for one fd: an event set and how it
-- is reported.
data Interest = Interest
  { interestEvents  :: {-# UNPACK #-} !Event
  , interestTrigger :: !Trigger
  } deriving (Eq, Show)

-- | Does the watch stay armed after it reports?
interestPersistent :: Interest -> Bool
interestPersistent i = interestTrigger i /= Once
{-# INLINE interestPersistent #-}

-- | Nothing armed.
noInterest :: Interest
noInterest = Interest evtNothing Once

-- | Receives each ready fd from 'backendPoll': the fd, the generation tag it
-- was armed with, and the events.
type EventHandler = Fd -> Word32 -> Event -> IO ()

-- | How long 'backendPoll' may block.
data PollTimeout
  = NoWait                        -- ^ Return at once (an unsafe foreign call).
  | WaitNanos {-# UNPACK #-} !Int  -- ^ Block at most this many nanoseconds
                                  --   (backends without sub-millisecond
                                  --   timeouts round up).
  | WaitForever                   -- ^ Block until an event or a wakeup.
  deriving (Eq, Show)

-- | The outcome of arming an fd.
data ArmResult
  = Armed
    -- ^ The kernel now watches the requested interest.
  | ArmedAfterVanish
    -- ^ Armed, but the kernel had forgotten an fd weft had registered:
    -- the fd was closed behind weft's back (and its number maybe reused).
    -- Registrations made before this arm belong to the dead file.
  | ArmUnsupported
    -- ^ The fd cannot be watched (epoll refuses regular files and
    -- directories); it is always ready.
  | ArmFailed !Errno
    -- ^ The fd could not be armed (e.g. @EBADF@).

-- | The backends weft ships.
data BackendKind
  = EPollBackend  -- ^ Linux's epoll: the default there.
  | PollBackend   -- ^ POSIX @poll@: everywhere, the only one in portable builds.
  | UringBackend  -- ^ Linux's io_uring, readiness through poll requests on a
                  --   ring (Note [Deferred submission] in
                  --   "Weft.Event.Internal.Backend.Uring").
  deriving (Eq, Show, Enum, Bounded)

-- | The name used by @WEFT_BACKEND@: @"epoll"@, @"poll"@ or @"uring"@.
backendKindName :: BackendKind -> String
backendKindName EPollBackend = "epoll"
backendKindName PollBackend = "poll"
backendKindName UringBackend = "uring"

-- | A polling backend: a record of operations over OS state, one module
-- per OS mechanism. Every operation on one fd is made by the manager while
-- it holds that fd's slot lock, so a backend needs no per-fd locking.
data Backend = Backend
  { backendKind :: !BackendKind
  , backendPoll :: !(PollTimeout -> EventHandler -> IO Int)
    -- ^ Wait for events and hand each to the handler; returns how many were
    -- handed over. Wakeups are drained inside and never handed over.
  , backendArm :: !(Fd -> Word32 -> Interest -> Bool -> IO ArmResult)
    -- ^ @backendArm fd tag interest known@ makes the kernel watch @interest@
    -- on @fd@, reporting @tag@ with it. @known@ says whether weft believes the
    -- fd is already registered. A one-shot interest is disarmed by the first
    -- report of it; 'noInterest' disarms. Every arm makes the kernel check
    -- the fd's readiness at once, whatever the trigger.
  , backendEdges :: !Bool
    -- ^ Whether the backend can arm 'Edge' interests (epoll); one that
    -- cannot (poll) is never asked to.
  , backendForget :: !(Fd -> IO ())
    -- ^ Drop the fd from the interest set, ignoring errors (it may be gone).
  , backendWake :: !(IO ())
    -- ^ Make a blocked or the next 'backendPoll' return promptly.
  , backendWakeOnArm :: !Bool
    -- ^ Whether an arm made during a blocking poll is only seen after a
    -- wakeup (poll, and uring, which submits at its next poll), or at once
    -- (epoll).
  , backendExactReports :: !Bool
    -- ^ Whether a reported event is always still there when reported
    -- (epoll, poll), or may be stale (uring, Note [Stale readiness on a
    -- ring] in "Weft.Event.Internal.Backend.Uring"): a one-shot wait then
    -- confirms it.
  , backendClose :: !(IO ())
    -- ^ Release the backend's fds. No other operation may follow.
  , backendKernelCalls :: !(IO Int)
    -- ^ How many calls that change the kernel's interest set (epoll_ctl)
    -- the backend has made so far, every one counted: arms, watches,
    -- forgets and retries. 0 for a backend that keeps its interest set in
    -- user space (poll). The uring backend counts the poll requests and
    -- removals it queues.
  , backendCompletions :: !(Maybe Completions)
    -- ^ The requests the backend performs itself, beside reporting
    -- readiness, and their counts (uring); 'Nothing' for the others. The
    -- one place where a completion backend differs from a readiness one
    -- (Note [Two ways to wait] in "Weft.Event.Internal.Completions").
  }

