{-# LANGUAGE CApiFFI, BangPatterns, RecursiveDo, MagicHash, UnboxedTuples #-}
-- | The io_uring backend's completion requests: "Weft.Net"'s receives,
-- sends, accepts and connects performed by the ring ('Completions'), their
-- ids, states, cancellation and leftovers. The readiness side (poll
-- requests, the dispatcher's reap) is "Weft.Event.Internal.Backend.Uring";
-- the C side of both is @cbits/weft_uring.c@.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Over 600 lines: the four kinds of request share one life (submit,
-- complete, cancel, keep, give back), and its Notes sit beside it; split
-- by kind, each part would repeat that life.
--
-- Note [Receives on the ring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A "Weft.Net" receive goes to the ring ('complRecv'): a receive request
-- that completes into a buffer of the ring's provided-buffer group (Note
-- [Ring first]). The dispatcher copies out exactly what came, gives the
-- buffer back at once and fills the waiter's cell, so buffers are held
-- only between a completion and its copy, never by a waiting thread. A
-- receive that finds no free buffer (@ENOBUFS@) is submitted again after
-- the batch, whose buffers are back by then: many more pending receives
-- than buffers lose nothing.
--
-- Each request has an id that its fd's requests do not reuse (its
-- @user_data@, with the fd; Note [Reused requests]), and a
-- state, changed only by atomic updates: 'Waiting', then 'Delivered' by
-- its completion, or 'Cancelled' by its waiter's asynchronous exception,
-- or 'Closing' by a close of the socket. A cancelled request may still
-- complete with bytes (they came before the cancel reached the kernel):
-- they become the socket's leftovers, which the next receive returns
-- first. A socket has at most one request in flight ('Tracker'), and
-- every receive waits for a cancelled one to be resolved before it
-- receives, so leftovers always come before later bytes. An unrequested
-- @-ECANCELED@ (the submitting OS thread exited; Note [Submitting
-- threads]) is submitted again, as a poll request is. A close cancels the
-- request and waits until its completion was handled, so no request
-- outlives its fd.
--
-- Note [Sends on the ring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A "Weft.Net" send (or gather send) goes to the ring ('complSend') when
-- the dispatcher is busy (Note [Ring first]), and when the socket's own
-- @send@ said @EAGAIN@: then as a request that polls first, so the kernel
-- sends when the socket drains, with no readiness report and no retried
-- @send@. Its bytes are the caller's strings themselves,
-- not a copy: the request holds them (and a gather send's message header
-- and iovecs) until it is resolved, so a send interrupted by an
-- asynchronous exception, whose request the kernel may still be reading,
-- never reads freed memory. Such a send is cancelled like a receive; the
-- bytes it may have sent before the cancel are gone to the peer, as with
-- any interrupted send. A socket has at most one send in flight, and
-- every send on the socket waits for it to be resolved first, so bytes
-- leave in the order they were sent. (Two threads sending on one socket
-- at once: the second waits for readiness instead, as does a second
-- concurrent receiver.) A send completes with the count the
-- kernel took, perhaps short of the whole (the caller sends the rest).
--
-- Note [Ring first]
-- ~~~~~~~~~~~~~~~~~
-- A receive goes to the ring without trying the socket's own @recv@
-- first: in a request-reply protocol the receive after a reply almost
-- always finds nothing yet, and trying first costs a @recv@ that says
-- @EAGAIN@ before the request. The request is submitted with the
-- dispatcher's next batch and tried then; it polls only if nothing has
-- come. A send goes to the ring first only while the dispatcher is not
-- blocked in the kernel ('managerBlocked'): the dispatcher submits it with
-- its next batch, at no system call of the sender's own. While the
-- dispatcher is blocked, the ring would cost a wakeup (a write) and a
-- round trip through the dispatcher before the send, where the socket's
-- own @send@ costs one call and returns at once; so an idle server's
-- replies go out directly, and a busy one's go in batches (the
-- measurements behind both rules: docs/design.md, "The io_uring
-- backend").
--
-- Note [Accepts on the ring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A "Weft.Net" accept tries the listener's own @accept4@ first: a busy
-- listener has connections queued, and one call takes one at once. When
-- it says @EAGAIN@ the accept goes to the ring ('complAccept'), whose
-- request completes with the next connection's fd (and its peer's address,
-- in a buffer the request holds): no readiness report and no second
-- @accept4@. An accept occupies the listener's receiving slot, is
-- cancelled, resubmitted and closed as a receive is, and a connection that
-- a cancelled accept accepted anyway is kept, with its address, for the
-- listener's next accept, as a cancelled receive's bytes are: nothing
-- accepted is lost. Closing the listener closes the connections so kept
-- (nobody can accept them any more; the kernel resets the ones still
-- queued the same way).
--
-- Note [Connects on the ring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A "Weft.Net" connect goes to the ring at once ('complConnect'): the
-- request makes the handshake and completes when it ends, with 0 or the
-- connect's errno, where readiness costs a @connect@ that says
-- @EINPROGRESS@, a wait for writability and a @getsockopt@ for the
-- outcome. It is a request of the send kind (it waits for the socket's
-- room, and takes nothing a reader waits for): it occupies the socket's
-- sending slot, and is cancelled and closed as a send is. One case goes
-- back to readiness: the OS thread that submitted it exited, and the
-- kernel cancelled it (Note [Submitting threads] in
-- "Weft.Event.Internal.Backend.Uring"). The handshake may be
-- under way then, so the request is not submitted again (a second connect
-- would say @EALREADY@); its waiter is told 'RingBusy', and waits for
-- writability as under epoll.
--
-- A multishot accept (one request, a completion per connection) is not
-- used: its connections come whether or not anyone accepts them, so they
-- would need a queue of their own, beside the kernel's backlog, and a
-- bound on it; and a listener busy enough to gain from it has connections
-- queued, which the first @accept4@ takes without the ring.
module Weft.Event.Internal.Backend.Uring.Requests
  ( Ring
  , Table
  , newTable
  , tableCompletions
  , completed
  , abandonAll
  , setUringReceiveBuffers
  ) where

import Control.Exception (mask, onException, uninterruptibleMask_)
import Control.Concurrent.MVar
import Control.Monad (forM_, when, (<$!>))
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.Bits (shiftL, shiftR, (.&.), (.|.))
import Data.IORef
import Data.Word (Word32, Word64, Word8)
import Foreign.C.Error (Errno (..), eINVAL, eNOBUFS, eSHUTDOWN)
import Foreign.C.Types (CChar, CInt (..), CSize, CUInt (..))
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.ForeignPtr.Unsafe (unsafeForeignPtrToPtr)
import Foreign.Marshal.Utils (copyBytes, fillBytes)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (pokeByteOff)
import GHC.Exts (casMutVar##, isTrue##, lazy, readMutVar##, reallyUnsafePtrEquality##)
import GHC.IO (IO (..))
import GHC.IORef (IORef (..))
import GHC.STRef (STRef (..))
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Types (Fd (..))

import Weft.Event.Internal.Completions
import qualified Weft.Event.Internal.FdTable as FT
import Weft.Internal.Counters

#define _GNU_SOURCE
#include <errno.h>
#include <sys/socket.h>
#include <linux/io_uring.h>

-- | A ring (@struct weft_uring@).
data Ring

-- | A ring's completion requests. 'Nothing' if the ring has no
-- provided buffers (the kernel refused them): it performs no receives, and
-- "Weft.Net" uses readiness.
newTable :: Ptr Ring -> IO (Maybe Table)
newTable ring = do
  nbufs <- readIORef receiveBuffers
  ok <- (== 0) <$> c_setup_buffers ring (fromIntegral nbufs) receiveBufferBytes
  if not ok then return Nothing else do
    -- Every request starts with this tracker; a submission sets its own.
    idle <- newTracker (\_ -> return ()) (\_ -> return ())
    rec let t = Table ring reqs counts wake
        reqs <- FT.new (newFdReqs t idle . fromIntegral)
        counts <- newCounters nCounts
        wake <- newIORef Nothing
    return (Just t)

-- | The requests the ring performs, and their counts added to what the
-- ring's C side counts (its poll requests' resubmissions, and whether it
-- is cooperative). A ring without a table performs none: every request
-- says 'RingBusy', so the socket uses readiness.
tableCompletions :: Maybe Table -> IO RingStats -> Completions
tableCompletions (Just t) ring = Completions (submitRecv t) (submitSend t) (submitAccept t) (submitConnect t) $ do
  let r = readCounter (tblCounts t)
  base <- ring
  RingStats <$> ((ringResubmits base +) <$> r cResubmits) <*> r cKept <*> r cNoBuffer
            <*> r cReceives <*> r cSends <*> r cAccepts <*> r cConnects <*> requestsOnRing t
            <*> pure (ringCooperative base)
tableCompletions Nothing ring = Completions
  { complRecv = \_ _ _ _ _ -> return RingBusy
  , complSend = \_ _ _ _ _ _ -> return RingBusy
  , complAccept = \_ _ _ _ _ -> return RingBusy
  , complConnect = \_ _ _ _ _ _ -> return RingBusy
  , complStats = ring
  }

-- | Provided buffers per ring (a power of two; 256 unless a test changed
-- it), of 'receiveBufferBytes' each: 4 MiB per ring.
{-# NOINLINE receiveBuffers #-}
receiveBuffers :: IORef Int
receiveBuffers = unsafePerformIO (newIORef 256)

receiveBufferBytes :: CUInt
receiveBufferBytes = 16384

-- | Test hook: rings set up from now on get this many receive buffers (a
-- power of two; 256 by default), to make them run out.
setUringReceiveBuffers :: Int -> IO ()
setUringReceiveBuffers = writeIORef receiveBuffers

data Table = Table
  { tblRing :: !(Ptr Ring)
  , tblReqs :: !(FT.FdTable FdReqs)
  , tblCounts :: !Counters
    -- ^ The next id, and the receives' and sends' counts (the poll
    -- requests' resubmissions are the C side's).
  , tblWake :: !(IORef (Maybe (IO ())))
    -- ^ Wakes the ring's dispatcher: its manager's wake, as the first
    -- request brought it (every request on a ring comes from its manager).
  }

-- | An fd's receive (or accept) and its send, on this ring: one of each is
-- enough, as a socket has at most one of each in flight ('Tracker'), and
-- its close waits for them before the fd number can be reused. (Two
-- sockets made from one fd find the request taken, and wait for readiness
-- instead.)
data FdReqs = FdReqs
  { frRecv :: !Req
  , frSend :: !Req
  }

-- Counters in 'tblCounts' (cNext: records made).
cNext, cResubmits, cKept, cNoBuffer, cReceives, cSends, cAccepts, cConnects, nCounts :: Int
cNext = 0; cResubmits = 1; cKept = 2; cNoBuffer = 3; cReceives = 4; cSends = 5; cAccepts = 6
cConnects = 7; nCounts = 8

-- Note [Reused requests]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- A request's record, its cells and its state are made once per fd number
-- and kind (receive or send) on a ring, and reused by every request of
-- that kind on that fd. Made afresh for every request, they would be young
-- objects that every minor collection finds alive (a busy server has a
-- request in flight on most of its sockets) and copies. Reused, they live
-- in the old generation, and a request only writes to them.
--
-- A request's words say whether it is in use, its id and its state. Its
-- id is the record's previous one plus one (29 bits, and a kind bit; the
-- first is drawn from a counter of the ring's records): one is reused
-- only after 2^29 newer requests on the same fd number and kind, and no
-- request outlives its fd (a close waits for its completion), so a
-- completion always finds its own request. A submission writes no word
-- that other sockets' submissions write: the ids are the record's own,
-- and the requests on the ring are counted by a walk over the records
-- when the statistics are read. It is
-- taken (in use) by a submission, and given back only once its outcome is
-- out of its done cell: by its waiter, which empties the cell after it
-- read it; or by the dispatcher, if the waiter had already gone
-- (cancelled). So a later request on the same fd (another socket's, once
-- this one is closed) never finds an old outcome in the cell, and never
-- has its own taken by a late waiter. "Resolved" (the completion handled:
-- the socket's slot is free, and a close or a receive waiting on it may go
-- on) comes before that, with the outcome.
--
-- The path of a request allocates little else: the socket's slot is taken
-- by a compare-and-swap ('claimSlot'), the cells are written only when
-- their content changes ('setUnlessSame', which keeps the collector's
-- list of written old objects short), and the closures a request hands to
-- the guard and to its exception handler hold the request whole
-- ('claimAndSubmit', 'abandon').

-- Note [Publishing a request's words]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A request's words are written with 'releaseCounter' (a plain store on
-- x86-64), not with a fenced write. Each write only has to become visible
-- after what was written before it: the id, state and length before the
-- submission that a completion answers; "resolved" after the outcome's
-- bookkeeping; "not in use" after the cells were emptied, as a lock's
-- release (Note [Releasing a lock word] in "Weft.Internal.Counters").
-- None of them has to be visible before a later load of the same thread:
-- after its writes 'claimAndSubmit' reads only the request's own cells
-- before it takes the resolved 'MVar' and bumps a counter (locked
-- operations, full barriers), 'complete' bumps a counter next, and only
-- the compare-and-swap that takes a request reads "in use". So a fence
-- per write would order nothing.
data Req = Req
  { reqWords :: !Counters
    -- ^ 'rwUsed', 'rwId', 'rwState', 'rwLength'.
  , reqFd :: !Fd
  , reqIsSend :: !Bool
  , reqOp :: !(IORef Op)
  , reqTracker :: !(IORef Tracker)
  , reqDone :: !(MVar Outcome)
  , reqResolved :: !(MVar ())
  , reqInflight :: !(Maybe Inflight)
    -- ^ What the socket's slot holds while it is in flight (made once).
  }

-- Words of a request.
rwUsed, rwId, rwState, rwLength :: Int
rwUsed = 0; rwId = 1; rwState = 2; rwLength = 3
  -- ^ A receive's most bytes.

-- Its states.
sWaiting, sDelivered, sCancelled, sClosing, sResolved :: Int
sWaiting = 0; sDelivered = 1; sCancelled = 2; sClosing = 3; sResolved = 4

newFdReqs :: Table -> Tracker -> Fd -> IO FdReqs
newFdReqs t idle fd = FdReqs <$> newReq False <*> newReq True
  where
    newReq send = do
      w <- newCounters 4
      writeCounter w rwState sResolved
      -- Apart from other records' ids, though they need not be.
      k <- addCounter (tblCounts t) cNext 1
      writeCounter w rwId ((k `shiftL` 16) .&. 0x1fffffff)
      op <- newIORef OpNone
      trk <- newIORef idle
      done <- newEmptyMVar
      resolved <- newMVar ()
      let req = Req w fd send op trk done resolved (Just inflight)
          inflight = Inflight (() <$ cancelFor t req sClosing) resolved
      return req

-- | What a request does. A send holds its bytes (and a gather send its
-- message header and iovecs) until it is resolved: the kernel reads them
-- until the completion.
data Op
  = OpNone
  | OpRecv
    -- ^ Its most bytes are in the request's words, so that a receive,
    -- which waits longest, allocates nothing the request holds.
  | OpAccept !(ForeignPtr ())
    -- ^ The address buffer ('newAcceptAddress').
  | OpConnect !(ForeignPtr ()) !Int
    -- ^ The address to connect to, and its length.
  | OpSend !Bool !Outgoing !(Maybe (ForeignPtr ()))
    -- ^ Poll first (the socket had no room), the bytes, a gather send's
    -- header.

data Outcome = Got !B.ByteString | Sent !Int | Conn !Fd | Connected | Failed !Errno | Closed | Busy

submitRecv :: Table -> (IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> Int -> Tracker -> IO (RingResult B.ByteString)
submitRecv t whileOpen wake fd n trk =
  resultOf (\o -> case o of Got bs -> Just bs; _ -> Nothing)
    <$!> onRing t whileOpen wake fd (min n (fromIntegral receiveBufferBytes)) OpRecv trk

submitAccept :: Table -> (IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> ForeignPtr () -> Tracker -> IO (RingResult Fd)
submitAccept t whileOpen wake fd address trk =
  resultOf (\o -> case o of Conn c -> Just c; _ -> Nothing)
    <$!> onRing t whileOpen wake fd 0 (OpAccept address) trk

submitConnect :: Table -> (IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> ForeignPtr () -> Int -> Tracker -> IO (RingResult ())
submitConnect t whileOpen wake fd address len trk =
  resultOf (\o -> case o of Connected -> Just (); _ -> Nothing)
    <$!> onRing t whileOpen wake fd 0 (OpConnect address len) trk

submitSend :: Table -> (IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> Bool -> Outgoing -> Tracker -> IO (RingResult Int)
submitSend t whileOpen wake fd full o trk = do
  header <- case o of
    OutBytes _ -> return Nothing
    OutGather _ bss -> Just <$> messageHeader bss
  let !op = OpSend full o header
  resultOf (\out -> case out of Sent k -> Just k; _ -> Nothing)
    <$!> onRing t whileOpen wake fd 0 op trk

-- | What a request's outcome says, given what its kind's success is.
resultOf :: (Outcome -> Maybe a) -> Outcome -> RingResult a
resultOf done out = case out of
  Failed e -> RingFailed e
  Busy -> RingBusy
  _ -> maybe RingClosed RingDone (done out)

-- | A @struct msghdr@ followed by the strings' iovecs.
messageHeader :: [B.ByteString] -> IO (ForeignPtr ())
messageHeader bss = do
  let n = length bss
  fp <- mallocForeignPtrBytes (#{size struct msghdr} + n * #{size struct iovec})
  withForeignPtr fp $ \m -> do
    let iov = m `plusPtr` #{size struct msghdr}
    fillBytes m 0 #{size struct msghdr}
    #{poke struct msghdr, msg_iov} m iov
    #{poke struct msghdr, msg_iovlen} m (fromIntegral n :: CSize)
    forM_ (zip [0 ..] bss) $ \(i, BI.PS bfp off len) -> do
      let e = iov `plusPtr` (i * #{size struct iovec})
      #{poke struct iovec, iov_base} e (unsafeForeignPtrToPtr bfp `plusPtr` off)
      #{poke struct iovec, iov_len} e (fromIntegral len :: CSize)
  return fp

-- | Submit a request and wait for its outcome (Note [Receives on the
-- ring], Note [Sends on the ring], Note [Reused requests]).
onRing :: Table -> (IO Bool -> IO (Maybe Bool)) -> IO () -> Fd -> Int -> Op -> Tracker -> IO Outcome
onRing t whileOpen wake !fd !len !op !trk = mask $ \restore -> do
  known <- readIORef (tblWake t)
  case known of
    Nothing -> writeIORef (tblWake t) (Just wake)
    Just _ -> return ()
  frs <- FT.lookupOrCreate (tblReqs t) (fromIntegral fd)
  -- A connect waits for the socket's room to send, as a send does.
  let !sending = case op of OpSend {} -> True; OpConnect {} -> True; _ -> False
      !req = if sending then frSend frs else frRecv frs
  submitted <- whileOpen (claimAndSubmit t req len op trk)
  case submitted of
    Nothing -> return Closed
    Just False -> return Busy
    Just True -> do
      wake
      -- readMVar, not takeMVar: an exception that lands after the read,
      -- still inside restore, finds the outcome in the cell and keeps it.
      out <- restore (readMVar (reqDone req)) `onException` abandon t req
      giveBack req
      return out

-- | A request's waiter was interrupted: cancel the request, or, if its
-- outcome was delivered already, keep what it brought and give it back.
-- (A function of its own so that the handler every request installs is a
-- small closure.)
abandon :: Table -> Req -> IO ()
abandon t req0 = do
  -- 'lazy': the handler holds the request whole, not its fields.
  let req = lazy req0
  owned <- cancelFor t req sCancelled
  -- Delivered already: the outcome is in the cell, or about to be.
  when (not owned) $ do
    out <- uninterruptibleMask_ (readMVar (reqDone req))
    keep t req True out
    giveBack req
{-# NOINLINE abandon #-}

-- | Put the request's in-flight mark in the socket's slot if the slot is
-- empty; whether it did. (A compare-and-swap: the slot's 'Nothing' is
-- the one static 'Nothing', and the mark is made once per request, so
-- pointer equality is value equality here; it allocates nothing, where an
-- 'atomicModifyIORef'' allocates its thunks on every request.)
claimSlot :: IORef (Maybe Inflight) -> Maybe Inflight -> IO Bool
claimSlot (IORef (STRef ref)) mark = IO $ \s0 -> case readMutVar## ref s0 of
  (## s1, cur ##) -> case cur of
    Just _ -> (## s1, False ##)
    Nothing -> case casMutVar## ref cur mark s1 of
      (## s2, 0##, _ ##) -> (## s2, True ##)
      (## s2, _, _ ##) -> (## s2, False ##)
{-# INLINE claimSlot #-}

-- | Take the socket's slot and the request, and submit it; whether it
-- was free. Run under the socket's guard ('onRing'). (A function of its
-- own so that the action handed to the guard is a small closure.)
claimAndSubmit :: Table -> Req -> Int -> Op -> Tracker -> IO Bool
claimAndSubmit t req len op trk = do
  let w = reqWords req
      slot = slotOf req trk
  claimed <- claimSlot slot (reqInflight req)
  free <- if claimed then (== 0) <$> casCounter w rwUsed 0 1 else return False
  if free
    then do
      -- The record's next id (Note [Reused requests]).
      prev <- readCounter w rwId
      -- Released, not fenced (Note [Publishing a request's words]).
      releaseCounter w rwId (((prev + 1) .&. 0x1fffffff) .|. (if reqIsSend req then sendBit else 0))
      releaseCounter w rwState sWaiting
      releaseCounter w rwLength len
      setUnlessSame (reqOp req) op
      setUnlessSame (reqTracker req) trk
      _ <- tryTakeMVar (reqResolved req)
      submit t req
    else when claimed $ writeIORef slot Nothing
  return free
{-# NOINLINE claimAndSubmit #-}

-- | The socket's slot a request occupies: its sending or its receiving one.
slotOf :: Req -> Tracker -> IORef (Maybe Inflight)
slotOf req = if reqIsSend req then trkSending else trkReceiving
{-# INLINE slotOf #-}

-- | Empty a request's done cell and give the request back for the next
-- one (Note [Reused requests]).
giveBack :: Req -> IO ()
giveBack req = do
  _ <- tryTakeMVar (reqDone req)
  -- Only a send or an accept holds memory (static 'OpRecv' is left, so
  -- the next receive need not write it: 'setUnlessSame').
  op <- readIORef (reqOp req)
  case op of
    OpSend {} -> writeIORef (reqOp req) OpNone
    OpAccept _ -> writeIORef (reqOp req) OpNone
    OpConnect _ _ -> writeIORef (reqOp req) OpNone
    _ -> return ()
  releaseCounter (reqWords req) rwUsed 0

-- | Write to a request's cell unless it holds this very object already.
-- The cells live in the old generation (Note [Reused requests]), and the
-- first write to one after a collection puts it on the collector's list
-- of old objects to scan at the next: a busy server's receives keep
-- writing the same 'OpRecv' and the same socket's tracker, so skipping
-- those writes keeps that list short. (Pointer equality: a miss only
-- costs the write.)
setUnlessSame :: IORef a -> a -> IO ()
setUnlessSame ref x = do
  cur <- readIORef ref
  if isTrue## (reallyUnsafePtrEquality## cur x) then return () else writeIORef ref x
{-# INLINE setUnlessSame #-}

-- | Cancel the request if it is still waiting, for a waiter that left or
-- for a close; returns whether it was waiting.
cancelFor :: Table -> Req -> Int -> IO Bool
cancelFor t req to = do
  let w = reqWords req
  was <- (== sWaiting) <$> casCounter w rwState sWaiting to
  when was $ do
    i <- readCounter w rwId
    _ <- c_cancel (tblRing t) (reqFd req) (fromIntegral i)
    readIORef (tblWake t) >>= sequence_
  return was

-- | Marks a send's id (as the C side's @ID_SEND@).
sendBit :: Int
sendBit = 0x20000000

submit :: Table -> Req -> IO ()
submit t req = do
  let ring = tblRing t
      fd = reqFd req
  ud <- fromIntegral <$> readCounter (reqWords req) rwId
  op <- readIORef (reqOp req)
  r <- case op of
    OpNone -> return (negate (errnoCInt eINVAL))
    OpRecv -> c_recv ring fd ud . fromIntegral =<< readCounter (reqWords req) rwLength
    -- The kernel writes the address's length over the room: readied on
    -- every submission (a resubmission too).
    OpAccept address -> withForeignPtr address $ \p ->
      uncurry (c_accept ring fd ud) =<< readyAcceptAddress p
    OpConnect address len -> withForeignPtr address $ \p -> c_connect ring fd ud p (fromIntegral len)
    OpSend full (OutBytes (BI.PS fp off len)) _ ->
      c_send ring fd ud (unsafeForeignPtrToPtr fp `plusPtr` off) (fromIntegral len) 0 (flag full)
    OpSend full (OutGather more _) (Just header) ->
      c_sendmsg ring fd ud (unsafeForeignPtrToPtr header) (flag more) (flag full)
    OpSend _ (OutGather _ _) Nothing -> return (negate (errnoCInt eINVAL))
  when (r /= 0) $ complete t req (Failed (Errno (negate r)))

-- | A request's completion (its fd, id, result and flags), on the
-- dispatcher.
completed :: Table -> Int -> Int -> Int -> Word32 -> IO ()
completed t0 !fd !i !res !flags = do
  frs <- FT.lookup (tblReqs t) fd
  forM_ frs $ \rs -> do
    let req = if i .&. sendBit /= 0 then frSend rs else frRecv rs
        w = reqWords req
    cur <- readCounter w rwId
    st <- readCounter w rwState
    when (cur == i && st /= sResolved) $ do
      op <- readIORef (reqOp req)
      let noBuffer = res == negate (errnoInt eNOBUFS) && case op of OpRecv -> True; _ -> False
      let connecting = case op of OpConnect _ _ -> True; _ -> False
      if res == negate (errnoInt eCANCELED) || noBuffer
        then if st == sWaiting && connecting
          -- The submitting thread exited: the handshake may be under
          -- way, and a second connect would say EALREADY. The caller
          -- waits for it through readiness.
          then complete t req Busy
        else if st == sWaiting
          -- Not cancelled by weft: the submitting thread exited; or no
          -- buffer was free. Submit it again.
          then do
            count t (if res == negate (errnoInt eCANCELED) then cResubmits else cNoBuffer)
            submit t req
          else complete t req Closed
        else do
          out <- if res < 0 then return (Failed (Errno (fromIntegral (negate res)))) else
            case op of
              OpRecv -> Got <$> copyOut res
              OpAccept _ -> return (Conn (Fd (fromIntegral res)))
              OpConnect _ _ -> return Connected
              _ -> return (Sent res)
          complete t req out
  where
    -- 'lazy': the table is passed on whole, not taken apart by the
    -- compiler and made again on every completion.
    t = lazy t0
    -- Whatever comes with a buffer gives it back, an end of stream (0
    -- bytes) too: io_uring's contract allows one there, though this
    -- kernel (6.18) sets none.
    copyOut k
      | flags .&. #{const IORING_CQE_F_BUFFER} == 0 = return B.empty
      | otherwise = do
          let bid = fromIntegral (flags `shiftR` #{const IORING_CQE_BUFFER_SHIFT})
          p <- c_buffer (tblRing t) bid
          bs <- if k > 0 then BI.create k (\d -> copyBytes d (castChars p) k) else return B.empty
          c_recycle (tblRing t) bid
          return bs
    castChars :: Ptr CChar -> Ptr Word8
    castChars = castPtr

-- | Resolve a request (Note [Reused requests]) and hand its outcome to its
-- waiter, or, if the waiter is gone, keep what it received or accepted
-- for the socket's next receive or accept, and give the request back.
complete :: Table -> Req -> Outcome -> IO ()
complete t req out = do
  trk <- readIORef (reqTracker req)
  case out of
    Got bs | not (B.null bs) -> do
      trkProgress trk (B.length bs)
      count t cReceives
    Sent k | k > 0 -> do
      trkSent trk k
      count t cSends
    Conn _ -> count t cAccepts
    Connected -> count t cConnects
    _ -> return ()
  let w = reqWords req
  st <- casCounter w rwState sWaiting sDelivered
  if st == sCancelled then keep t req False out else return ()
  releaseCounter w rwState sResolved
  -- Resolved: the socket's slot is free, and whoever waits for that may go on.
  writeIORef (slotOf req trk) Nothing
  _ <- tryPutMVar (reqResolved req) ()
  if st == sCancelled
    then giveBack req
    else do
      let !told = if st == sClosing then (case out of Failed _ -> Closed; _ -> out) else out
      putMVar (reqDone req) told

-- | Keep what a request whose waiter is gone received (or accepted) for
-- the socket's next receive (or accept): first, if the waiter was
-- interrupted after its outcome came (nothing newer can have come since);
-- last, if the request completed after its waiter left.
keep :: Table -> Req -> Bool -> Outcome -> IO ()
keep t req first out = do
  trk <- readIORef (reqTracker req)
  op <- readIORef (reqOp req)
  let add ref x = do
        atomicModifyIORef' ref (\l -> (if first then x : l else l ++ [x], ()))
        count t cKept
  case (out, op) of
    (Got bs, _) | not (B.null bs) -> add (trkLeftover trk) bs
    (Conn fd, OpAccept address) -> add (trkAccepted trk) (fd, address)
    _ -> return ()

-- | Requests on the ring: submitted, and their completions not yet handled.
requestsOnRing :: Table -> IO Int
requestsOnRing t = do
  cells <- FT.elems (tblReqs t)
  let unresolved req = (/= sResolved) <$> readCounter (reqWords req) rwState
  length . filter id <$> mapM unresolved (concat [ [frRecv frs, frSend frs] | (_, frs) <- cells ])

-- | The ring is being closed (its manager shut down): fail every request
-- still in flight.
abandonAll :: Table -> IO ()
abandonAll t = do
  cells <- FT.elems (tblReqs t)
  forM_ cells $ \(_, frs) -> forM_ [frRecv frs, frSend frs] $ \req -> do
    st <- readCounter (reqWords req) rwState
    when (st /= sResolved) $ complete t req (Failed eSHUTDOWN)

-- | Base has no name for it.
eCANCELED :: Errno
eCANCELED = Errno #{const ECANCELED}

count :: Table -> Int -> IO ()
count t c = () <$ addCounter (tblCounts t) c 1

errnoInt :: Errno -> Int
errnoInt (Errno e) = fromIntegral e

errnoCInt :: Errno -> CInt
errnoCInt (Errno e) = e

flag :: Bool -> CInt
flag b = if b then 1 else 0

foreign import ccall unsafe "weft_uring_setup_buffers"
  c_setup_buffers :: Ptr Ring -> CUInt -> CUInt -> IO CInt
foreign import ccall unsafe "weft_uring_recv"
  c_recv :: Ptr Ring -> Fd -> Word64 -> CUInt -> IO CInt
foreign import ccall unsafe "weft_uring_send"
  c_send :: Ptr Ring -> Fd -> Word64 -> Ptr Word8 -> CUInt -> CInt -> CInt -> IO CInt
foreign import ccall unsafe "weft_uring_sendmsg"
  c_sendmsg :: Ptr Ring -> Fd -> Word64 -> Ptr () -> CInt -> CInt -> IO CInt
foreign import ccall unsafe "weft_uring_accept"
  c_accept :: Ptr Ring -> Fd -> Word64 -> Ptr () -> Ptr Word32 -> IO CInt
foreign import ccall unsafe "weft_uring_connect"
  c_connect :: Ptr Ring -> Fd -> Word64 -> Ptr () -> Word32 -> IO CInt
foreign import ccall unsafe "weft_uring_cancel"
  c_cancel :: Ptr Ring -> Fd -> Word64 -> IO CInt
foreign import ccall unsafe "weft_uring_buffer"
  c_buffer :: Ptr Ring -> CUInt -> IO (Ptr CChar)
foreign import ccall unsafe "weft_uring_recycle"
  c_recycle :: Ptr Ring -> CUInt -> IO ()
