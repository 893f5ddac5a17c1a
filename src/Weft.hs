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

import Control.Concurrent (ThreadId, forkIOWithUnmask, myThreadId)
import Control.Concurrent.MVar
import Control.Concurrent.STM (STM, TVar)
import Control.Exception
import Control.Monad (void)
import Data.Maybe (fromMaybe)
import System.Posix.Types (Fd)

import Weft.Event.Internal (evtRead, evtWrite)
import Weft.Event.Internal.Core
import Weft.Event.Internal.System

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

-- | Sleep for at least the given number of microseconds (none if it is not
-- positive), on the calling capability's timer wheel: no other capability
-- is involved, and sub-millisecond delays are kept (see "Weft.Timer" for
-- the resolution). Throws an 'IOError' if weft's managers are shut down
-- meanwhile. An async exception ends the sleep and cancels its timer.
threadDelay :: Int -> IO ()
threadDelay us = do
  mgr <- getSystemManager
  delayOn mgr us

-- | A 'TVar' that becomes 'True' after at least the given number of
-- microseconds. To be able to cancel it, use
-- 'Weft.Timer.registerDelayWithKey' and 'Weft.Timer.cancelTimeout'.
registerDelay :: Int -> IO (TVar Bool)
registerDelay us = do
  mgr <- getSystemManager
  fst <$> registerDelayOn mgr us

-- | The exception 'timeout' throws to interrupt its action; unique per call,
-- so nested timeouts each catch only their own. It names the manager that
-- made it and a number from that manager's key supply, so making one takes
-- no global lock (unlike "Data.Unique").
data Timeout = Timeout {-# UNPACK #-} !Int {-# UNPACK #-} !Int
  deriving Eq

instance Show Timeout where
  show _ = "<<timeout>>"

-- Like System.Timeout's, it hides from 'SomeAsyncException' handlers.
instance Exception Timeout where
  toException = asyncExceptionToException
  fromException = asyncExceptionFromException

-- | @timeout n act@ runs @act@ and returns @Just@ its result, or 'Nothing'
-- if it takes more than @n@ microseconds. A negative @n@ waits forever; 0
-- returns 'Nothing' at once. As in "System.Timeout", the action is
-- interrupted by an asynchronous exception, so it must be interruptible
-- (weft's waits are). Unlike "System.Timeout", an expiry that races the
-- action's completion is never lost into the caller: the result is then
-- 'Nothing' or 'Just', never an escaped 'Timeout'; and an action that
-- returned is 'Just' its result even if the limit expired as it did (so
-- @mask_ (timeout n (recv s k))@ never drops received bytes). The timer lives on the
-- calling capability's wheel; registering and cancelling it wakes no other
-- thread.
timeout :: Int -> IO a -> IO (Maybe a)
timeout n act
  | n < 0 = Just <$> act
  | n == 0 = return Nothing
  | otherwise = do
      mgr <- getSystemManager
      me <- myThreadId
      ex <- Timeout (managerId mgr) <$> nextKey mgr
      thrown <- newEmptyMVar
      handleJust (\e -> if e == ex then Just () else Nothing) (\_ -> return Nothing) $
        mask $ \restore -> do
          k <- registerTimeout mgr n (interrupt me ex thrown)
          -- Our own Timeout is absorbed by 'settle', not kept as the
          -- first other exception (Note [Settling a timeout]).
          r <- restore act `catch` \e ->
            settle ex thrown k (if fromException e == Just ex then Nothing else Just e) >> throwIO e
          -- The action finished: its result stands, even if the limit
          -- expired meanwhile and its Timeout arrives while settling.
          (Just r <$ settle ex thrown k Nothing) `catch` \e ->
            if fromException e == Just ex then return (Just r) else throwIO e

-- Note [Settling a timeout]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- When 'timeout' ends (its action returned or threw), it cancels its timer.
-- If the timer already fired, its 'Timeout' is on its way, thrown by the
-- thread 'interrupt' forked, and must be absorbed here, or it would hit the
-- caller later, outside every handler. So 'settle' waits (interruptibly,
-- as 'throwTo' needs) until either the thrower reports that it is done or
-- the 'Timeout' arrives. Other exceptions may arrive meanwhile: an outer
-- 'timeout' firing, or a 'killThread'. The first of those, or the action's
-- own exception, wins and is rethrown once this call's 'Timeout' has been
-- absorbed; so an outer limit is never swallowed by an inner one. When the
-- action was ended by this call's own 'Timeout', that is not such an
-- exception: an outer 'Timeout' arriving while 'settle' waits for the
-- thrower must still win (it was once dropped there, losing the outer
-- limit when both fired in the same tick).

-- | Cancel the timer; if it had fired, absorb its exception and rethrow
-- the first other exception (Note [Settling a timeout]).
settle :: Timeout -> MVar () -> TimeoutKey -> Maybe SomeException -> IO ()
settle ex thrown k first = do
  pending <- unregisterTimeout_ k
  if pending then return () else await first
  where
    await other = do
      r <- try (takeMVar thrown)
      case r of
        Right () -> mapM_ throwIO other
        Left e
          | fromException e == Just ex -> throwIO (fromMaybe e other)
          | otherwise -> await (Just (fromMaybe e other))

-- | Throw from a fresh thread: 'throwTo' blocks while the target is masked,
-- and must not hold up the dispatcher.
interrupt :: ThreadId -> Timeout -> MVar () -> IO ()
interrupt target ex thrown =
  void $ forkIOWithUnmask $ \unmask ->
    unmask (throwTo target ex) `finally` putMVar thrown ()
