-- | weft's thread API: the names and types of "GHC.Conc.IO" and
-- "System.Timeout", served by weft's per-capability managers. Porting code
-- is an import change.
--
-- Every wait registers with the manager of the capability the calling
-- thread runs on. The program must use the threaded RTS (@-threaded@).
--
-- Code written for "GHC.Conc" and "System.Timeout" keeps its shape; only
-- the imports change. For example, waiting at most a second for standard
-- input to have something to read:
--
-- > import System.Posix.Types (Fd (..))
-- > import Weft (threadWaitRead, timeout)
-- >
-- > stdinReady :: IO Bool
-- > stdinReady = maybe False (const True) <$> timeout 1000000 (threadWaitRead (Fd 0))
module Weft
  ( -- * Waiting on fds
    threadWaitRead
  , threadWaitWrite
  , threadWaitReadSTM
  , threadWaitWriteSTM
  , closeFdWith
    -- * Time
  , threadDelay
  , registerDelay
  , timeout
  , Timeout
    -- * Capabilities
  , setNumCapabilities
  ) where

import Control.Concurrent.STM (STM)
import System.Posix.Types (Fd)

import Weft.Event.Internal (evtRead, evtWrite)
import Weft.Event.Internal.Core
import Weft.Event.Internal.System
import Weft.Timer (Timeout, registerDelay, threadDelay, timeout)

-- | Block until the fd is readable (or hung up, or in error). Throws an
-- 'IOError' (@EBADF@) if the fd is closed with 'closeFdWith' meanwhile or is
-- invalid. A regular file is always readable. Async exceptions ('killThread',
-- 'timeout') interrupt the wait and leave nothing registered.
threadWaitRead :: Fd -> IO ()
threadWaitRead fd = do
  mgr <- getSystemManager
  waitOn mgr evtRead fd
{-# INLINE threadWaitRead #-}

-- | Block until the fd is writable; otherwise as 'threadWaitRead'.
threadWaitWrite :: Fd -> IO ()
threadWaitWrite fd = do
  mgr <- getSystemManager
  waitOn mgr evtWrite fd
{-# INLINE threadWaitWrite #-}

-- | Register interest in the fd becoming readable, and return at once: an STM
-- action that retries until it is (throwing the 'IOError' 'threadWaitRead'
-- would), and an action that cancels the registration.
threadWaitReadSTM :: Fd -> IO (STM (), IO ())
threadWaitReadSTM fd = do
  mgr <- getSystemManager
  waitSTMOn mgr evtRead fd

-- | 'threadWaitReadSTM' for writability.
threadWaitWriteSTM :: Fd -> IO (STM (), IO ())
threadWaitWriteSTM fd = do
  mgr <- getSystemManager
  waitSTMOn mgr evtWrite fd

-- | Close an fd with the given action, after removing it from every system
-- manager. Every thread waiting on it gets an 'IOError' (@EBADF@) promptly,
-- and callbacks registered on it get 'Weft.Event.evtClose'. Waits cannot
-- slip in while the action runs. If the action throws, the waits stay and
-- the exception propagates.
closeFdWith :: (Fd -> IO ()) -> Fd -> IO ()
closeFdWith close fd = do
  mgrs <- systemManagers
  closeFdOn mgrs close fd
