{-# LANGUAGE CApiFFI, BangPatterns #-}
-- | The Linux epoll backend, weft's default.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Arming with a known flag]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A one-shot arm is an @EPOLL_CTL_MOD@ when weft believes the fd is in the
-- interest set (it stays there, disarmed, after firing), and an
-- @EPOLL_CTL_ADD@ otherwise. Each falls back to the other: @MOD@ failing
-- with @ENOENT@ means the kernel forgot the fd, which only happens when the
-- file was closed behind weft's back; the @ADD@ that follows registers the
-- new file behind the same number and reports 'ArmedAfterVanish', so the
-- manager can fail the registrations that belonged to the dead file.
-- @ADD@ failing with @EEXIST@ means weft's belief was stale the other way;
-- @MOD@ then fixes it. This is why mixing 'Weft.Event.registerFd' and
-- 'Weft.threadWaitRead' on one fd never dies of @EEXIST@.
--
-- The event data carries the fd in its low 32 bits and the slot's generation
-- tag in its high 32 bits, so an event armed before a 'Weft.closeFdWith' is
-- recognised as stale after it.
module Weft.Event.Internal.Backend.EPoll
  ( newEPollBackend
  ) where

import Control.Monad (when)
import Data.Bits ((.&.), (.|.), shiftL, shiftR)
import Data.Int (Int64)
import Data.Word (Word32, Word64)
import Foreign.C.Error (Errno (..), eNOENT, eEXIST, ePERM, eINTR, getErrno)
import Foreign.C.Types (CInt (..))
import Foreign.ForeignPtr (mallocForeignPtrBytes, withForeignPtr)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (peekByteOff)
import System.Posix.Types (Fd (..))

import Weft.Event.Internal
import Weft.Event.Internal.Wakeup
import Weft.Internal.Counters (addCounter, newCounters, readCounter)
import Weft.Internal.Error (syscallError)

#include <sys/epoll.h>

-- | Events fetched per @epoll_wait@; the rest wait for the next poll.
eventBufferSize :: Int
eventBufferSize = 256

-- | Open an epoll instance with its own wakeup channel. Throws an 'IOError'
-- if the fds cannot be had.
newEPollBackend :: WakeupKind -> IO Backend
newEPollBackend wkind = do
  epfd <- c_epoll_create1 #{const EPOLL_CLOEXEC}
  when (epfd == -1) $ getErrno >>= ioError . syscallError "epoll_create1"
  wake <- newWakeup wkind
  let wakeData = wakeupData (wakeupReadFd wake)
  -- Every epoll_ctl goes through 'ctl', which counts it.
  calls <- newCounters 1
  let ctl op fd flags dat = do
        _ <- addCounter calls 0 1
        c_weft_epoll_ctl epfd op fd flags dat
  r <- ctl #{const EPOLL_CTL_ADD} (wakeupReadFd wake) #{const EPOLLIN} wakeData
  when (r /= 0) $ ioError (syscallError "newEPollBackend (epoll_ctl)" (Errno (negate r)))
  buf <- mallocForeignPtrBytes (eventBufferSize * #{size struct epoll_event})
  let poll :: PollTimeout -> EventHandler -> IO Int
      poll timeout handler = withForeignPtr buf $ \p -> do
        n <- case timeout of
          NoWait       -> c_epoll_wait_unsafe epfd p (fromIntegral eventBufferSize) 0
          WaitNanos t  -> c_epoll_wait_ns epfd p (fromIntegral eventBufferSize) (fromIntegral t)
          WaitForever  -> c_epoll_wait_ns epfd p (fromIntegral eventBufferSize) (-1)
        if n < 0
          then do err <- getErrno
                  if err == eINTR then return 0
                    else ioError (syscallError "epoll_wait" err)
          else dispatch p (fromIntegral n) 0 0
        where
          dispatch :: Ptr () -> Int -> Int -> Int -> IO Int
          dispatch p n i !delivered
            | i >= n = return delivered
            | otherwise = do
                let e = p `plusPtr` (i * #{size struct epoll_event})
                flags <- #{peek struct epoll_event, events} e :: IO Word32
                dat <- #{peek struct epoll_event, data} e :: IO Word64
                if dat == wakeData
                  then drainWakeup wake >> dispatch p n (i + 1) delivered
                  else do
                    handler (Fd (fromIntegral (dat .&. 0xffffffff)))
                            (fromIntegral (dat `shiftR` 32)) (fromEPoll flags)
                    dispatch p n (i + 1) (delivered + 1)
  return Backend
    { backendKind = EPollBackend
    , backendPoll = poll
    , backendArm = arm ctl
    , backendEdges = True
    , backendForget = \fd -> () <$ ctl #{const EPOLL_CTL_DEL} fd 0 0
    , backendWake = signalWakeup wake
    , backendExactReports = True
    , backendWakeOnArm = False
    , backendClose = do
        closeWakeup wake
        _ <- c_close epfd
        return ()
    , backendKernelCalls = readCounter calls 0
    , backendCompletions = Nothing
    }

-- | See Note [Arming with a known flag]. @ctl op fd flags data@ makes (and
-- counts) one epoll_ctl.
arm :: (CInt -> Fd -> Word32 -> Word64 -> IO CInt) -> Fd -> Word32 -> Interest -> Bool -> IO ArmResult
arm epollCtl fd tag (Interest ev trigger) known
  | ev == evtNothing =
      -- Disarm: a one-shot watch of nothing stays in the set, quiet.
      if known then ctl #{const EPOLL_CTL_MOD} >> return Armed else return Armed
  | known = do
      r <- ctl #{const EPOLL_CTL_MOD}
      if r == 0 then return Armed
      else if Errno (negate r) == eNOENT then do
        r' <- ctl #{const EPOLL_CTL_ADD}
        return (if r' == 0 then ArmedAfterVanish else failure r')
      else return (failure r)
  | otherwise = do
      r <- ctl #{const EPOLL_CTL_ADD}
      if r == 0 then return Armed
      else if Errno (negate r) == eEXIST then do
        r' <- ctl #{const EPOLL_CTL_MOD}
        return (if r' == 0 then Armed else failure r')
      else return (failure r)
  where
    flags = toEPoll ev .|. case trigger of
      Once -> #{const EPOLLONESHOT}
      Level -> 0
      -- A hang-up must reach an edge-triggered reader: it may come with
      -- the data of its last read, and no edge follows it.
      Edge -> #{const EPOLLET} .|. #{const EPOLLRDHUP}
    ctl op = epollCtl op fd flags (eventData fd tag)
    failure r
      | Errno (negate r) == ePERM = ArmUnsupported
      | otherwise = ArmFailed (Errno (negate r))

-- | An event's data: the tag in the high 32 bits, the fd in the low ones.
eventData :: Fd -> Word32 -> Word64
eventData (Fd fd) tag = (fromIntegral tag `shiftL` 32) .|. fromIntegral (fromIntegral fd :: Word32)

-- | The wakeup fd's event data: a tag no slot uses.
wakeupData :: Fd -> Word64
wakeupData (Fd fd) = (0xffffffff `shiftL` 32) .|. fromIntegral (fromIntegral fd :: Word32)

toEPoll :: Event -> Word32
toEPoll ev = (if ev `eventIs` evtRead then #{const EPOLLIN} else 0)
         .|. (if ev `eventIs` evtWrite then #{const EPOLLOUT} else 0)

-- | Errors and hang-ups wake readers and writers alike: their next syscall
-- reports what happened. A hang-up of either kind is also 'evtHangup'.
fromEPoll :: Word32 -> Event
fromEPoll f = (if f .&. (#{const EPOLLIN} .|. #{const EPOLLRDHUP} .|. errHup) /= 0 then evtRead else mempty)
           <> (if f .&. (#{const EPOLLOUT} .|. errHup) /= 0 then evtWrite else mempty)
           <> (if f .&. (#{const EPOLLRDHUP} .|. errHup) /= 0 then evtHangup else mempty)
  where errHup = #{const EPOLLERR} .|. #{const EPOLLHUP}


foreign import ccall unsafe "sys/epoll.h epoll_create1"
  c_epoll_create1 :: CInt -> IO CInt
foreign import ccall unsafe "weft_epoll_ctl"
  c_weft_epoll_ctl :: CInt -> CInt -> Fd -> Word32 -> Word64 -> IO CInt
-- A blocking wait is a safe call, so the capability keeps running threads.
foreign import ccall safe "weft_epoll_wait_ns"
  c_epoll_wait_ns :: CInt -> Ptr () -> CInt -> Int64 -> IO CInt
foreign import ccall unsafe "sys/epoll.h epoll_wait"
  c_epoll_wait_unsafe :: CInt -> Ptr () -> CInt -> CInt -> IO CInt
foreign import ccall unsafe "unistd.h close"
  c_close :: CInt -> IO CInt
