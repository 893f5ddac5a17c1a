{-# LANGUAGE GeneralizedNewtypeDeriving #-}
-- | The types shared by the manager and its backends.
-- Internal and unstable: weft's own modules and tests use it.
module Weft.Event.Internal
  ( -- * Events
    Event (..)
  , evtNothing, evtRead, evtWrite, evtClose, evtHangup
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
  , RingStats (..)
  , noRingStats
    -- * Completions
  , Completions (..)
  , Outgoing (..)
  , RingResult (..)
  , Tracker (..)
  , newAcceptAddress
  , readyAcceptAddress
  , addressRoom
  , Inflight (..)
  , newTracker
  ) where

import Control.Concurrent.MVar (MVar)
import Data.ByteString (ByteString)
import Data.IORef (IORef, newIORef)
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (poke)

import Data.Bits ((.&.), (.|.))
import Data.List (intercalate)
import Data.Word (Word32)
import Foreign.C.Error (Errno)
import System.Posix.Types (Fd)

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

-- | The name used by @WEFT_BACKEND@: @"epoll"@ or @"poll"@.
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
    -- wakeup (poll), or at once (epoll).
  , backendClose :: !(IO ())
    -- ^ Release the backend's fds. No other operation may follow.
  , backendKernelCalls :: !(IO Int)
    -- ^ How many calls that change the kernel's interest set (epoll_ctl)
    -- the backend has made so far, every one counted: arms, watches,
    -- forgets and retries. 0 for a backend that keeps its interest set in
    -- user space (poll). The uring backend counts the poll requests and
    -- removals it queues.
  , backendCompletions :: !(Maybe Completions)
    -- ^ Receives the backend performs itself, instead of reporting
    -- readiness (uring); 'Nothing' for the others.
  , backendRingStats :: !(IO RingStats)
    -- ^ The ring's counts (uring); zeros for the others.
  }

-- | What a ring did that no other backend does.
data RingStats = RingStats
  { ringResubmits :: !Int
    -- ^ Requests the kernel cancelled because the OS thread that submitted
    -- them exited, and that the ring submitted again (Note [Submitting
    -- threads] in "Weft.Event.Internal.Backend.Uring").
  , ringReceivesKept :: !Int
    -- ^ Receives (and accepts) cancelled after they had received (or
    -- accepted): their bytes (or connections) were kept for the socket's
    -- next receive (or accept) (Note [Receives on the ring], Note
    -- [Accepts on the ring]).
  , ringReceivesNoBuffer :: !Int
    -- ^ Receives that found no free provided buffer and were submitted
    -- again.
  , ringReceives :: !Int
    -- ^ Receives the ring performed.
  , ringSends :: !Int
    -- ^ Sends the ring performed.
  , ringAccepts :: !Int
    -- ^ Connections the ring accepted.
  , ringInflight :: !Int
    -- ^ Receives, sends and accepts on the ring now: submitted, and their
    -- completions not yet handled.
  }

-- | A backend without a ring.
noRingStats :: RingStats
noRingStats = RingStats 0 0 0 0 0 0 0

-- | Receives, sends and accepts a backend performs itself (Note [Receives
-- on the ring], Note [Sends on the ring] and Note [Accepts on the ring] in
-- "Weft.Event.Internal.Backend.Uring.Requests").
--
-- Each takes, first, how to submit only while the socket is open:
-- @whileOpen act@ runs @act@ and returns its result unless the socket is
-- closed (then 'Nothing', and @act@ does not run); a close waits for an
-- @act@ under way, so the request it submitted is in the tracker's slot
-- by the time the close looks there.
data Completions = Completions
  { complRecv :: !((IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> Int -> Tracker -> IO (RingResult ByteString))
    -- ^ @complRecv whileOpen wake fd n tracker@ receives at most @n@ bytes on @fd@,
    -- blocking until some come (an empty string: end of stream); @wake@
    -- wakes the backend's dispatcher if it is blocked. Interrupted by an
    -- asynchronous exception, it cancels the request; bytes the request
    -- received anyway go to the tracker's leftovers. Call only with no
    -- leftovers; with a receive in flight already it returns 'RingBusy'.
  , complSend :: !((IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> Bool -> Outgoing -> Tracker -> IO (RingResult Int))
    -- ^ @complSend whileOpen wake fd full out tracker@ sends some of the bytes,
    -- blocking until the socket takes at least one: how many it took.
    -- @full@: the socket just said it has no room (the request waits for
    -- room before it tries). The bytes are
    -- kept alive until the request completes, even if an asynchronous
    -- exception interrupts the wait (which cancels the request). With a
    -- send in flight already it returns 'RingBusy'.
  , complAccept :: !((IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> ForeignPtr () -> Tracker -> IO (RingResult Fd))
    -- ^ @complAccept whileOpen wake fd address tracker@ accepts a
    -- connection on the listener @fd@, blocking until one comes: the new
    -- fd (non-blocking, close-on-exec), its peer's address written at
    -- @address@ (a buffer from 'newAcceptAddress'). The buffer is kept alive until the
    -- request completes. Interrupted by an asynchronous exception, it
    -- cancels the request; a connection accepted anyway goes, with its
    -- address buffer, to the tracker's accepted connections. Uses the
    -- tracker's receiving slot: with a receive or accept in flight
    -- already it returns 'RingBusy'.
  }

-- | A buffer for an accept's peer address: room for any socket address (a
-- @sockaddr_storage@, 128 bytes), then the address's length (a
-- @socklen_t@).
newAcceptAddress :: IO (ForeignPtr ())
newAcceptAddress = mallocForeignPtrBytes (addressRoom + 8)

-- | Ready an accept's address buffer for a call (its length word says how
-- much room there is, as every accept needs afresh): the address's and
-- the length's pointers.
readyAcceptAddress :: Ptr () -> IO (Ptr (), Ptr Word32)
readyAcceptAddress p = do
  let lenp = castPtr (p `plusPtr` addressRoom) :: Ptr Word32
  poke lenp (fromIntegral addressRoom)
  return (p, lenp)

-- | Bytes that hold any socket address (a @sockaddr_storage@).
addressRoom :: Int
addressRoom = 128

-- | Bytes for a send on a ring.
data Outgoing
  = OutBytes !ByteString
    -- ^ One string (not empty).
  | OutGather !Bool ![ByteString]
    -- ^ A gather send (flagged @MSG_MORE@ if the flag is set) of at most
    -- 1024 strings, none empty.

-- | How a request on a ring ended.
data RingResult a
  = RingDone !a           -- ^ What it did.
  | RingFailed !Errno     -- ^ Its error.
  | RingClosed            -- ^ The socket was closed while it waited.
  | RingBusy              -- ^ Not submitted: the socket already has a
                          -- request of its kind in flight (another thread's).

-- | A socket's requests on a ring: at most one receive and one send in
-- flight, and the bytes of receives cancelled after they received, in
-- arrival order.
data Tracker = Tracker
  { trkReceiving :: !(IORef (Maybe Inflight))
  , trkSending :: !(IORef (Maybe Inflight))
  , trkLeftover :: !(IORef [ByteString])
  , trkAccepted :: !(IORef [(Fd, ForeignPtr ())])
    -- ^ Connections accepted by accepts cancelled meanwhile, with their
    -- address buffers, in arrival order.
  , trkProgress :: !(Int -> IO ())
    -- ^ Note bytes received, for idle timeouts.
  , trkSent :: !(Int -> IO ())
    -- ^ Note bytes sent, for idle timeouts.
  }

-- | A request in flight.
data Inflight = Inflight
  { inflClose :: !(IO ())
    -- ^ Cancel it for a close: its waiter gets 'RingClosed'.
  , inflResolved :: !(MVar ())
    -- ^ Full once its completion was handled.
  }

-- | A tracker with nothing in flight and no leftovers, given how to note
-- bytes received and bytes sent.
newTracker :: (Int -> IO ()) -> (Int -> IO ()) -> IO Tracker
newTracker received sent =
  Tracker <$> newIORef Nothing <*> newIORef Nothing <*> newIORef [] <*> newIORef []
          <*> pure received <*> pure sent
