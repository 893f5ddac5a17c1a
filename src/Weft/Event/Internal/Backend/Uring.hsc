{-# LANGUAGE CApiFFI, BangPatterns #-}
-- | The Linux io_uring backend (@WEFT_BACKEND=uring@): readiness through
-- poll requests on a ring, and the dispatcher's reap, which hands
-- completions of "Weft.Net"'s requests to
-- "Weft.Event.Internal.Backend.Uring.Requests". The ring, its per-fd table
-- and the reaping are in @cbits/weft_uring.c@.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Deferred submission]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- An arm only queues its requests (a removal of the fd's old poll request
-- and the new one) in the ring's submission queue: no system call. The
-- dispatcher's next poll submits everything queued, in the same
-- @io_uring_enter@ as its wait when it blocks, or in one enter when it
-- does not block. A dispatcher blocked in the kernel does not see what was
-- queued after it went in, so the backend asks for a wakeup on every arm
-- ('backendWakeOnArm'); the manager makes one only when the dispatcher is
-- blocked. A busy server's arms therefore cost no system call of their
-- own, where epoll makes one @epoll_ctl@ per arm.
--
-- Only the dispatcher submits the queue it polls with; the arming thread
-- does not submit for it while it blocks (docs/design.md, "The io_uring
-- backend", says what that would save and what it would cost).
--
-- 'backendForget' is the exception: it submits its removal at once,
-- because a poll request holds a reference to the file, and the close
-- that follows a forget must close the socket now, not at the next poll.
--
-- Note [Submitting threads]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- The kernel cancels a request (@-ECANCELED@) when the OS thread that
-- submitted it exits, and GHC's worker OS threads do exit (the RTS keeps
-- only a few spare ones). Requests here are submitted by whichever OS thread
-- runs the dispatcher (or a forget) at the time. The ring remembers each
-- fd's armed request, and every arm gets a fresh @user_data@ (a
-- generation above the fd; the arm's tag is kept beside it). A request
-- weft removed or replaced completes with @-ECANCELED@ too, but no longer
-- has the fd's armed @user_data@, so a cancelled completion whose request
-- is still the fd's armed one was the thread's exit: the ring submits it
-- again, unchanged, from the dispatcher (counted as 'ringResubmits'). A
-- poll request consumes nothing, so a resubmission loses and duplicates
-- nothing. (Were a re-arm with the same tag to reuse the @user_data@, the
-- removed request's @-ECANCELED@ would be taken for a thread's exit and
-- submitted again beside the new one, and the stray request would hold
-- the file open after a close.)
--
-- Note [Completions without interrupts]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A request that has to wait (a receive before its bytes, a poll before
-- its event) completes as task work of the OS thread that submitted it.
-- By default the kernel interrupts that thread to run it if it is running
-- (an IPI to its core); rings are set up with @COOP_TASKRUN@ instead, so
-- the task work waits until the thread next enters the kernel, and with
-- @TASKRUN_FLAG@, so the ring says when some waits. Nothing can wait for
-- long: a thread asleep in the kernel (a blocking call, a futex) is woken
-- to run it, as before; a running one runs it at its next system call or
-- timer tick. The dispatcher is usually the thread that submitted (it
-- submits the queue, Note [Deferred submission]); its non-blocking poll
-- enters the kernel when the flag is up, so a spinning dispatcher still
-- sees completions at once, and its blocking poll runs them in the wait.
-- A kernel that refuses the flags (before 5.19) gets a ring without them
-- ('ringCooperative' says which).
--
-- @DEFER_TASKRUN@ would go further (task work only when the ring's one
-- issuer asks), but it requires that one OS thread make every submission
-- and wait, and GHC runs a capability's threads on whichever OS thread
-- holds it: only a bound dispatcher could, and a bound thread costs two
-- OS thread switches each time it and the capability's other threads
-- take turns (docs/benchmarks.md, "io_uring against epoll").
--
-- Note [Stale readiness on a ring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A poll request completes with the events its waker announced: the
-- kernel keeps the wake-up's key as the result and does not look at the
-- file again. A waker announces after it has made the fd ready and let go
-- of it (a pipe's writer wakes readers after unlocking the pipe), so a
-- reader on another core can take the bytes in between and arm a new
-- poll request, which the late wake-up then completes: the ring says
-- readable, the pipe is empty. epoll looks at the file again before it
-- reports, and never says this. @bench/c/uring_stale_poll.c@ shows it
-- without weft.
--
-- The backend says so ('backendExactReports' is 'False'), and a one-shot
-- wait ('Weft.threadWaitRead', 'Weft.threadWaitWrite') confirms the
-- readiness it was woken for with one @poll(2)@ of its own before it
-- returns, and waits again if it is gone (Note [Confirmed waits] in
-- "Weft.Event.Internal.Registry"). The check is the waiter's, not the
-- dispatcher's: done in the reap, it made the spinning dispatcher's rounds
-- slower than the waits it serves. A report on an fd whose receives or
-- accepts run on the ring (queued or in flight, or one took something
-- since the arm) is marked 'evtTaken' and not confirmed: the ring's own
-- request may have taken what was reported, and the waiter beside it is
-- woken because something came, as under epoll. Reports to edge-triggered
-- watches, level-triggered callbacks and the STM forms go on unconfirmed:
-- they tell their receiver to try, and a receiver that finds nothing
-- retries on @EAGAIN@. The ring's receives, sends and accepts are
-- operations, not reports, and need no check.
--
-- Note [Fds closed behind weft's back, on a ring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- epoll forgets a closed fd, and weft learns of it at the next arm
-- ('ArmedAfterVanish'). A poll request on a ring instead keeps the file
-- open until the request completes or is removed, so an fd closed with
-- plain @close@ while a wait is pending neither wakes the wait nor closes
-- the socket. Close through 'Weft.closeFdWith' (or "Weft.Net"'s @close@),
-- which forgets first; the uring backend never reports 'ArmedAfterVanish'.
--
module Weft.Event.Internal.Backend.Uring
  ( newUringBackend
  , setUringSetupFailure
  , setUringCooperation
  , setUringReceiveBuffers
  , injectStaleReport
  ) where

import Control.Monad (forM_)
import Data.Bits (testBit, (.&.), (.|.))
import Data.Int (Int32, Int64)
import Data.Word (Word32)
import Foreign.C.Error (Errno (..), eOK)
import Foreign.C.Types (CInt (..), CLong (..), CUInt (..))
import Foreign.ForeignPtr (mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Alloc (alloca)
import Foreign.Ptr (Ptr, nullPtr, plusPtr)
import Foreign.Storable (peek, peekByteOff, poke)
import System.Posix.Types (Fd (..))

import Weft.Event.Internal
import Weft.Event.Internal.Backend.Uring.Requests
import Weft.Event.Internal.Completions (RingStats (..), noRingStats)
import Weft.Internal.Error (syscallError)

#define _GNU_SOURCE
#include <poll.h>

-- | Events fetched per reap; the rest wait for the next poll.
eventBufferSize :: Int
eventBufferSize = 256

-- | Bytes per reaped event (@struct weft_uring_event@).
eventSize :: Int
eventSize = 16

-- | Submission queue entries per ring (completion queue: four times as many).
ringEntries :: CUInt
ringEntries = 4096

-- | Open a ring. Throws an 'IOError' with the set-up's errno if the kernel
-- refuses (@ENOSYS@: no io_uring; @EPERM@: disabled, or a seccomp profile)
-- or the ring's memory or eventfd cannot be had.
newUringBackend :: IO Backend
newUringBackend = do
  ring <- alloca $ \errp -> do
    r <- c_open ringEntries errp
    if r /= nullPtr then return r else do
      err <- peek errp
      ioError (syscallError "io_uring_setup" (Errno err))
  buf <- mallocForeignPtrBytes (eventBufferSize * eventSize)
  table <- newTable ring
  let poll :: PollTimeout -> EventHandler -> IO Int
      poll timeout handler = withForeignPtr buf $ \p -> do
        n <- case timeout of
          NoWait      -> c_poll_unsafe ring p (fromIntegral eventBufferSize) 0
          WaitNanos t -> c_poll_safe ring p (fromIntegral eventBufferSize) (fromIntegral (max 1 t))
          WaitForever -> c_poll_safe ring p (fromIntegral eventBufferSize) (-1)
        if n < 0
          then ioError (syscallError "io_uring_enter" (Errno (negate n)))
          else dispatch p (fromIntegral n) 0
        where
          dispatch :: Ptr () -> Int -> Int -> IO Int
          dispatch p n i
            | i >= n = return n
            | otherwise = do
                let e = p `plusPtr` (i * eventSize)
                fd <- peekByteOff e 0 :: IO Word32
                tag <- peekByteOff e 4 :: IO Word32
                revents <- peekByteOff e 8 :: IO Word32
                if testBit tag 31
                  then do
                    flags <- peekByteOff e 12 :: IO Word32
                    forM_ table $ \t -> completed t (fromIntegral fd) (fromIntegral (tag .&. 0x3fffffff))
                      (fromIntegral (fromIntegral revents :: Int32)) flags
                  else handler (Fd (fromIntegral fd)) tag (fromPoll revents)
                dispatch p n (i + 1)
  return Backend
    { backendKind = UringBackend
    , backendPoll = poll
    , backendArm = \fd tag interest known -> do
        r <- c_arm ring fd tag (toPoll interest) (mode interest) (if known then 1 else 0)
        return (if r == 0 then Armed else ArmFailed (Errno (negate r)))
    , backendEdges = True
    , backendForget = c_forget ring
    , backendWake = () <$ c_wake ring
    , backendWakeOnArm = True
    , backendExactReports = False
    , backendClose = mapM_ abandonAll table >> c_close ring
    , backendKernelCalls = fromIntegral <$> c_interest_changes ring
    , backendCompletions = Just $ tableCompletions table $ do
        n <- c_resubmits ring
        coop <- c_cooperative ring
        return noRingStats { ringResubmits = fromIntegral n, ringCooperative = coop /= 0 }
    }


-- | The poll mask of an interest; 0 for none.
toPoll :: Interest -> Word32
toPoll (Interest ev trigger)
  | ev == evtNothing = 0
  | otherwise = (if ev `eventIs` evtRead then #{const POLLIN} else 0)
            .|. (if ev `eventIs` evtWrite then #{const POLLOUT} else 0)
            -- As with epoll: a hang-up must reach an edge-triggered reader.
            .|. (if trigger == Edge then #{const POLLRDHUP} else 0)

-- | The ring's arming modes: one-shot, one-shot re-armed after every report
-- (level), multishot (edge).
mode :: Interest -> CInt
mode (Interest _ Once) = 0
mode (Interest _ Level) = 1
mode (Interest _ Edge) = 2

-- | As the epoll backend's: errors and hang-ups wake readers and writers.
fromPoll :: Word32 -> Event
fromPoll f = (if f .&. (#{const POLLIN} .|. #{const POLLRDHUP} .|. errHup) /= 0 then evtRead else mempty)
          <> (if f .&. (#{const POLLOUT} .|. errHup) /= 0 then evtWrite else mempty)
          <> (if f .&. (#{const POLLRDHUP} .|. errHup) /= 0 then evtHangup else mempty)
          <> (if f .&. reportTaken /= 0 then evtTaken else mempty)
  where errHup = #{const POLLERR} .|. #{const POLLHUP}
        -- REPORT_TAKEN in cbits/weft_uring.c
        reportTaken = 0x40000000

-- | Test hook: make every later ring set-up fail with this errno ('eOK':
-- succeed again), as a kernel or seccomp profile that refuses io_uring does.
setUringSetupFailure :: Errno -> IO ()
setUringSetupFailure (Errno e) = poke failSetup (if Errno e == eOK then 0 else e)

-- | Test hook: make the cooperative set-up of later rings fail with this
-- errno ('eINVAL': as a kernel before 5.19 does, and the ring is set up
-- without it; 'eOK': try it again).
setUringCooperation :: Errno -> IO ()
setUringCooperation (Errno e) = poke refuseCoop (if Errno e == eOK then 0 else e)

-- | Test hook: make the next arm of this fd be followed by a readiness
-- report the kernel did not make (Note [Stale readiness on a ring]), as
-- the kernel makes for a waker whose readiness a reader took meanwhile.
-- Kernels before 6.11 cannot inject one: the report then says nothing.
injectStaleReport :: Fd -> IO ()
injectStaleReport (Fd fd) = poke injectFd fd

foreign import ccall "&weft_uring_inject_fd" injectFd :: Ptr CInt
foreign import ccall "&weft_uring_fail_setup" failSetup :: Ptr CInt
foreign import ccall "&weft_uring_refuse_coop" refuseCoop :: Ptr CInt
foreign import ccall unsafe "weft_uring_cooperative"
  c_cooperative :: Ptr Ring -> IO CInt
foreign import ccall unsafe "weft_uring_open"
  c_open :: CUInt -> Ptr CInt -> IO (Ptr Ring)
foreign import ccall unsafe "weft_uring_close"
  c_close :: Ptr Ring -> IO ()
foreign import ccall unsafe "weft_uring_arm"
  c_arm :: Ptr Ring -> Fd -> Word32 -> Word32 -> CInt -> CInt -> IO CInt
foreign import ccall unsafe "weft_uring_forget"
  c_forget :: Ptr Ring -> Fd -> IO ()
foreign import ccall unsafe "weft_uring_wake"
  c_wake :: Ptr Ring -> IO CInt
foreign import ccall unsafe "weft_uring_poll"
  c_poll_unsafe :: Ptr Ring -> Ptr () -> CInt -> Int64 -> IO CInt
-- A blocking wait is a safe call, so the capability keeps running threads.
foreign import ccall safe "weft_uring_poll"
  c_poll_safe :: Ptr Ring -> Ptr () -> CInt -> Int64 -> IO CInt
foreign import ccall unsafe "weft_uring_interest_changes"
  c_interest_changes :: Ptr Ring -> IO CLong
foreign import ccall unsafe "weft_uring_resubmits"
  c_resubmits :: Ptr Ring -> IO CLong
