-- | What a completion backend (io_uring) adds to readiness: receives,
-- sends and accepts it performs itself, the per-socket record of those in
-- flight ('Tracker'), and their counts. A readiness backend (epoll, poll)
-- has none of this, and neither has a socket that lives under one.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Two ways to wait]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- A socket waits in one of two ways. Under a readiness backend, a syscall
-- that says EAGAIN waits for the manager to report the fd ready, then runs
-- again. Under a completion backend, the request itself goes to the ring
-- and the thread waits for its completion. The socket layer chooses once,
-- when a socket is made: a socket made while the system managers perform
-- completions carries a 'Tracker' and asks the caller's manager for its
-- 'Completions' on each request that may wait (a manager without them,
-- after a backend change, sends it down the readiness path); any other
-- socket carries nothing of the ring and never asks.
--
-- The requests call back into the socket layer through three closures,
-- because only the socket knows them: whether it is still open (a
-- submission must never name an fd that a close has given up; the guard
-- word that says so is the socket's), how to wake the caller's dispatcher,
-- and how to count bytes for the socket's idle timeout ('trkProgress',
-- 'trkSent'). Passing them down keeps the ring ignorant of the socket's
-- guard layout.
module Weft.Event.Internal.Completions
  ( -- * Requests
    Completions (..)
  , Outgoing (..)
  , RingResult (..)
    -- * A socket's requests in flight
  , Tracker (..)
  , Inflight (..)
  , newTracker
    -- * Accept addresses
  , newAcceptAddress
  , readyAcceptAddress
  , addressRoom
    -- * Counts
  , RingStats (..)
  , noRingStats
  ) where

import Control.Concurrent.MVar (MVar)
import Data.ByteString (ByteString)
import Data.IORef (IORef, newIORef)
import Data.Word (Word32)
import Foreign.C.Error (Errno)
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (poke)
import System.Posix.Types (Fd)

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
  , ringConnects :: !Int
    -- ^ Connections the ring made.
  , ringInflight :: !Int
    -- ^ Receives, sends and accepts on the ring now: submitted, and their
    -- completions not yet handled.
  , ringCooperative :: !Bool
    -- ^ Completions are run when the ring's threads enter the kernel, not
    -- by interrupting them (Note [Completions without interrupts] in
    -- "Weft.Event.Internal.Backend.Uring"); 'False' on kernels before 5.19.
  }

-- | A backend without a ring.
noRingStats :: RingStats
noRingStats = RingStats 0 0 0 0 0 0 0 0 False

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
  , complConnect :: !((IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> ForeignPtr () -> Int -> Tracker -> IO (RingResult ()))
    -- ^ @complConnect whileOpen wake fd address len tracker@ connects the
    -- socket @fd@ to the address of @len@ bytes at @address@, blocking
    -- until the handshake ends. The buffer is kept alive until the
    -- request completes. Interrupted by an asynchronous exception, it
    -- cancels the request. Uses the tracker's sending slot: 'RingBusy'
    -- with a send in flight already, or if the submitting thread exited
    -- under it (the connect may be under way, and readiness tells when
    -- it ends).
  , complStats :: !(IO RingStats)
    -- ^ The ring's counts.
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
