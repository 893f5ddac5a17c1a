{-# LANGUAGE CApiFFI #-}
-- | The channel a manager's dispatcher is woken through: an eventfd on
-- Linux, else a pipe (@cbits/weft_wakeup.c@).
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [Coalesced wakeups]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- Writers never write more than once per blocking poll: the manager only
-- signals after winning the Blocking -> Woken transition of its dispatcher
-- state (see Note [Dispatcher states] in "Weft.Event.Internal.Manager"). Whatever
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
import Foreign.C.Error (Errno (..), eAGAIN, eINTR, getErrno)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Marshal.Alloc (allocaBytes, alloca)
import Foreign.Marshal.Array (allocaArray, peekArray)
import Foreign.Ptr (Ptr, castPtr)
import Foreign.Storable (poke)
import System.Posix.Types (CSsize (..), Fd (..))

import Weft.Internal.Error (syscallError)

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
newWakeup kind = allocaArray 2 $ \fds -> do
  r <- c_weft_wakeup_open fds (if kind == EventFdWakeup then 1 else 0)
  when (r < 0) $ ioError (syscallError "newWakeup" (Errno (negate r)))
  [rd, wr] <- peekArray 2 fds
  return (Wakeup (if r == 1 then EventFdWakeup else PipeWakeup) (Fd rd) (Fd wr))

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
        else ioError (syscallError "signalWakeup" err)

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

foreign import ccall unsafe "weft_wakeup_open"
  c_weft_wakeup_open :: Ptr CInt -> CInt -> IO CInt
foreign import ccall unsafe "unistd.h write"
  c_write :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h read"
  c_read :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h close"
  c_close :: Fd -> IO CInt
