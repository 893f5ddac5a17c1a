{-# LANGUAGE CApiFFI #-}
-- | The channel a manager's dispatcher is woken through: an eventfd, or a
-- pipe where eventfd is missing.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Coalesced wakeups]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- Writers never write more than once per blocking poll: the manager only
-- signals after winning the Blocking -> Woken transition of its dispatcher
-- state (see Note [Dispatcher states] in "Weft.Event.Internal.Core"). Whatever
-- was written, one 'drainWakeup' resets it: an eventfd read returns and
-- clears the whole counter, and a pipe is read until it is empty.
module Weft.Event.Internal.Wakeup
  ( Wakeup
  , WakeupKind (..)
  , newWakeup
  , wakeupKind
  , wakeupReadFd
  , signalWakeup
  , drainWakeup
  , closeWakeup
  ) where

import Control.Monad (when, void)
import Data.Word (Word64, Word8)
import Foreign.C.Error (eAGAIN, getErrno, throwErrnoIfMinus1_, eINTR, throwErrno)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Marshal.Alloc (allocaBytes, alloca)
import Foreign.Marshal.Array (allocaArray, peekArray)
import Foreign.Ptr (Ptr, castPtr)
import Foreign.Storable (poke)
import System.Posix.Types (CSsize (..), Fd (..))

#include <sys/eventfd.h>
#include <fcntl.h>
#include <unistd.h>

-- | Which kernel object carries the wakeups.
data WakeupKind = EventFdWakeup | PipeWakeup
  deriving (Eq, Show)

data Wakeup = Wakeup
  { wakeupKind    :: !WakeupKind
  , wakeupReadFd  :: !Fd   -- ^ Watch this fd for readability.
  , wakeupWriteFd :: !Fd
  }

-- | Open a wakeup channel of the preferred kind; 'EventFdWakeup' falls back
-- to a pipe if the kernel has no eventfd. Both ends are non-blocking and
-- close-on-exec. Throws an 'IOError' if no fd can be had (e.g. @EMFILE@).
newWakeup :: WakeupKind -> IO Wakeup
newWakeup EventFdWakeup = do
  fd <- c_eventfd 0 (#{const EFD_NONBLOCK} + #{const EFD_CLOEXEC})
  if fd >= 0
    then return (Wakeup EventFdWakeup (Fd fd) (Fd fd))
    else newWakeup PipeWakeup
newWakeup PipeWakeup = allocaArray 2 $ \fds -> do
  throwErrnoIfMinus1_ "weft: pipe2" $
    c_pipe2 fds (#{const O_NONBLOCK} + #{const O_CLOEXEC})
  [r, w] <- peekArray 2 fds
  return (Wakeup PipeWakeup (Fd r) (Fd w))

-- | Make the read end readable. Never blocks: a full pipe is already readable.
signalWakeup :: Wakeup -> IO ()
signalWakeup w = case wakeupKind w of
  EventFdWakeup -> alloca $ \p -> do
    poke p (1 :: Word64)
    retryEINTR (c_write (wakeupWriteFd w) (castPtr p) 8)
  PipeWakeup -> alloca $ \p -> do
    poke p (1 :: Word8)
    retryEINTR (c_write (wakeupWriteFd w) p 1)
  where
    retryEINTR act = do
      n <- act
      when (n < 0) $ do
        err <- getErrno
        if err == eINTR then retryEINTR act
        else if err == eAGAIN then return ()
        else throwErrno "weft: wakeup write"

-- | Consume every pending signal with one read (eventfd) or until empty (pipe).
drainWakeup :: Wakeup -> IO ()
drainWakeup w = allocaBytes 64 $ \buf -> case wakeupKind w of
  EventFdWakeup -> void (c_read (wakeupReadFd w) buf 8)
  PipeWakeup -> let go = do n <- c_read (wakeupReadFd w) buf 64
                            when (n == 64) go
                in go

-- | Close both ends.
closeWakeup :: Wakeup -> IO ()
closeWakeup w = do
  void (c_close (wakeupReadFd w))
  when (wakeupWriteFd w /= wakeupReadFd w) $ void (c_close (wakeupWriteFd w))

foreign import ccall unsafe "sys/eventfd.h eventfd"
  c_eventfd :: CInt -> CInt -> IO CInt
foreign import ccall unsafe "unistd.h pipe2"
  c_pipe2 :: Ptr CInt -> CInt -> IO CInt
foreign import ccall unsafe "unistd.h write"
  c_write :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h read"
  c_read :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h close"
  c_close :: Fd -> IO CInt
