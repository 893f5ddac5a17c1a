{-# LANGUAGE BangPatterns #-}
-- | The portable @poll(2)@ backend: the fallback where epoll is missing, and
-- run by the test suite next to epoll and io_uring.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Emulated one-shot]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- poll has no interest set in the kernel, so this backend keeps one: a map
-- from fd to the watch, rebuilt into a @pollfd@ array on every poll. Each
-- arm stamps its watch with a fresh sequence number. A one-shot watch that
-- is reported is removed only if its stamp is still the one the poll saw:
-- a waiter that re-armed the fd while the poll was running keeps its watch.
-- That gives the same disarm-on-report rule as @EPOLLONESHOT@.
--
-- Arms made while a poll blocks are invisible to it, so the manager wakes
-- the dispatcher after each arm ('backendWakeOnArm').
module Weft.Event.Internal.Backend.Poll
  ( newPollBackend
  ) where

import Control.Monad (forM_, when)
import Data.Bits ((.&.), (.|.))
import Data.IORef
import qualified Data.IntMap.Strict as IM
import Data.Int (Int64)
import Data.Word (Word32)
import Foreign.C.Error (eINTR, getErrno)
import Foreign.C.Types (CInt (..), CShort (..), CULong (..))
import Foreign.Marshal.Alloc (allocaBytes)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (pokeByteOff, peekByteOff)
import System.Posix.Types (Fd (..))

import Weft.Event.Internal
import Weft.Event.Internal.Wakeup
import Weft.Internal.Error (syscallError)

#include <poll.h>
#include <fcntl.h>

data Watch = Watch
  { watchInterest :: !Interest
  , watchTag      :: {-# UNPACK #-} !Word32
  , watchStamp    :: {-# UNPACK #-} !Int
  }

data PollState = PollState
  { psWatches :: !(IORef (IM.IntMap Watch))
  , psStamp   :: !(IORef Int)
  }

-- | Make a poll backend with its own wakeup channel.
newPollBackend :: WakeupKind -> IO Backend
newPollBackend wkind = do
  wake <- newWakeup wkind
  st <- PollState <$> newIORef IM.empty <*> newIORef 0
  return Backend
    { backendKind = PollBackend
    , backendPoll = pollOnce st wake
    , backendArm = arm st
    , backendEdges = False
    , backendForget = \(Fd fd) -> atomicModifyIORef' (psWatches st) (\m -> (IM.delete (fromIntegral fd) m, ()))
    , backendWake = signalWakeup wake
    , backendExactReports = True
    , backendWakeOnArm = True
    , backendClose = closeWakeup wake
    , backendKernelCalls = return 0
    , backendCompletions = Nothing
    }

arm :: PollState -> Fd -> Word32 -> Interest -> Bool -> IO ArmResult
arm st (Fd fd) tag interest _known
  | interestEvents interest /= evtNothing = do
      -- poll would accept any number; refuse a closed fd as epoll does.
      valid <- c_fcntl_getfd (Fd fd) #{const F_GETFD}
      if valid < 0 then ArmFailed <$> getErrno else watch
  | otherwise = watch
  where
  watch = do
   stamp <- atomicModifyIORef' (psStamp st) (\s -> (s + 1, s))
   let key = fromIntegral fd
       update m
         | interestEvents interest == evtNothing = IM.delete key m
         | otherwise = IM.insert key (Watch interest tag stamp) m
   atomicModifyIORef' (psWatches st) (\m -> (update m, ()))
   return Armed

pollfdSize :: Int
pollfdSize = #{size struct pollfd}

pollOnce :: PollState -> Wakeup -> PollTimeout -> EventHandler -> IO Int
pollOnce st wake timeout handler = do
  watches <- IM.toList <$> readIORef (psWatches st)
  let n = length watches + 1
  allocaBytes (n * pollfdSize) $ \arr -> do
    setPollFd arr 0 (wakeupReadFd wake) #{const POLLIN}
    forM_ (zip [1 ..] watches) $ \(i, (fd, w)) ->
      setPollFd arr i (Fd (fromIntegral fd)) (toPoll (interestEvents (watchInterest w)))
    r <- case timeout of
      NoWait       -> c_poll_unsafe arr (fromIntegral n) 0
      WaitNanos t  -> c_poll_ns arr (fromIntegral n) (fromIntegral t)
      WaitForever  -> c_poll_ns arr (fromIntegral n) (-1)
    if r < 0
      then do err <- getErrno
              if err == eINTR then return 0 else ioError (syscallError "poll" err)
      else do
        wakeRevents <- revents arr 0
        when (wakeRevents /= 0) (drainWakeup wake)
        let go !_ [] !delivered = return delivered
            go i ((fd, w) : rest) !delivered = do
              re <- revents arr i
              if re == 0 then go (i + 1) rest delivered else do
                let persistent = interestPersistent (watchInterest w)
                when (not persistent) $
                  atomicModifyIORef' (psWatches st) (\m -> (IM.update (keepIfRestamped w) fd m, ()))
                handler (Fd (fromIntegral fd)) (watchTag w) (fromPoll re)
                go (i + 1) rest (delivered + 1)
        go 1 watches 0
  where
    keepIfRestamped seen now
      | watchStamp now == watchStamp seen = Nothing
      | otherwise = Just now

setPollFd :: Ptr () -> Int -> Fd -> CShort -> IO ()
setPollFd arr i fd evs = do
  let p = arr `plusPtr` (i * pollfdSize)
  #{poke struct pollfd, fd} p fd
  #{poke struct pollfd, events} p evs
  #{poke struct pollfd, revents} p (0 :: CShort)

revents :: Ptr () -> Int -> IO CShort
revents arr i = #{peek struct pollfd, revents} (arr `plusPtr` (i * pollfdSize))

toPoll :: Event -> CShort
toPoll ev = (if ev `eventIs` evtRead then #{const POLLIN} else 0)
        .|. (if ev `eventIs` evtWrite then #{const POLLOUT} else 0)

-- | An invalid fd (closed behind weft's back) reports 'evtClose'.
fromPoll :: CShort -> Event
fromPoll re
  | re .&. #{const POLLNVAL} /= 0 = evtClose
  | otherwise = (if re .&. (#{const POLLIN} .|. errHup) /= 0 then evtRead else mempty)
             <> (if re .&. (#{const POLLOUT} .|. errHup) /= 0 then evtWrite else mempty)
             <> (if re .&. errHup /= 0 then evtHangup else mempty)
  where errHup = #{const POLLERR} .|. #{const POLLHUP}

foreign import ccall unsafe "fcntl.h fcntl"
  c_fcntl_getfd :: Fd -> CInt -> IO CInt

foreign import ccall safe "weft_poll_ns"
  c_poll_ns :: Ptr () -> CULong -> Int64 -> IO CInt
foreign import ccall unsafe "poll.h poll"
  c_poll_unsafe :: Ptr () -> CULong -> CInt -> IO CInt
