{-# LANGUAGE MagicHash #-}
-- | A manager's life: making one, its dispatcher thread (the loop that
-- polls the backend, spins or blocks, and runs expired timers), and
-- shutting it down. Internal and unstable ("Weft.Event.Internal.Core" is the
-- façade).
--
-- Note [Dispatcher loop]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- The dispatcher follows Mio §3.3: poll without blocking; if nothing came,
-- 'yield' to the threads queued on this capability and poll without blocking
-- again; only then make a blocking, safe foreign call. After any poll that
-- delivered events it yields, so the threads it woke run before it polls
-- again. Non-blocking polls are unsafe foreign calls: they cost a syscall but
-- no capability hand-off. Only the blocking poll pays the safe-call hand-off.
--
module Weft.Event.Internal.Dispatcher
  ( newManager
  , managerCapability
  , managerId
  , managerBackendKind
  , shutdownManager
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (labelThread)
import System.Environment (lookupEnv)
import System.IO.Unsafe (unsafePerformIO)

import Weft.Event.Internal.Backends (newBackend)
import qualified Weft.Event.Internal.FdTable as FT
import Weft.Event.Internal
import Weft.Event.Internal.Manager
import Weft.Event.Internal.Registry (endRegistrations, onEvent)
import Weft.Timer.Internal.ManagerTimers (abortTimers, pollTimeout, runExpiredTimers)
import Weft.Event.Internal.Slot
import Weft.Event.Internal.Spin
import Weft.Internal.Capability (currentCapability)
import Weft.Internal.Counters
import qualified Weft.Timer.Internal.Wheel as W

------------------------------------------------------------------------------
-- Life cycle

-- | Make a manager with a fresh backend of the given kind, and start its
-- dispatcher with 'forkOn' on the given capability. Throws an 'IOError' if
-- the backend's fds cannot be had.
newManager :: BackendKind -> Int -> IO Manager
newManager kind cap = do
  backend <- newBackend kind
  ident <- addCounter managerIds 0 1
  table <- FT.new $ \_ -> Slot <$> newMVar () <*> newIORef emptySlotState <*> newEmptyMVar <*> newEmptyMVar
  counters <- newCounters nCounters
  timers <- W.new . W.nowTick =<< getMonotonicTimeNSec
  finished <- newEmptyMVar
  let mgr = Manager ident cap backend table counters timers finished
  startDispatcher mgr
  return mgr

startDispatcher :: Manager -> IO ()
startDispatcher mgr = do
  t <- mask_ $ forkOn (mgrCap mgr) (dispatcher mgr)
  labelThread t ("weft dispatcher " ++ show (mgrCap mgr))

-- | A number no other manager of this process has.
managerId :: Manager -> Int
managerId = mgrId

-- | The capability the manager's dispatcher is pinned to.
managerCapability :: Manager -> Int
managerCapability = mgrCap

-- | The backend the manager polls with.
managerBackendKind :: Manager -> BackendKind
managerBackendKind = backendKind . mgrBackend

-- | Stop the dispatcher and release the backend's fds. Pending waits and
-- 'Weft.threadDelay's on this manager fail with an 'IOError'; pending
-- 'registerTimeout' callbacks are dropped. Later waits on it fail the same
-- way. Returns once the dispatcher has exited. Idempotent.
shutdownManager :: Manager -> IO ()
shutdownManager mgr = do
  writeCounter (mgrCounters mgr) cStop 1
  wakeManager mgr
  readMVar (mgrFinished mgr)

------------------------------------------------------------------------------
-- The dispatcher

data Exit = Finish | HandOff

dispatcher :: Manager -> IO ()
dispatcher mgr = do
  exit <- loop (newSpinPolicy spinAdaptively spinWindowNs) noSpell False False
  case exit of
    HandOff -> startDispatcher mgr
    Finish -> finish mgr
  where
    c = mgrCounters mgr
    backend = mgrBackend mgr
    handler = onEvent mgr
    -- Counters only the dispatcher writes are bumped without a lock.
    pollNow = do
      n <- backendPoll backend NoWait handler
      bumpCounter c cPolls 1
      bumpCounter c cEvents n
      return n
    -- @spell@ is when the current dry spell began ('noSpell' while events
    -- keep coming); @holding@ says whether this dispatcher holds the spin
    -- token now, i.e. is spinning, and @spun@ whether it did in this spell
    -- (Note [Adaptive spinning] in "Weft.Event.Internal.Spin"). The clock is read
    -- only when the loop runs dry and when a spell ends, never on the path
    -- of a busy dispatcher.
    loop policy spell holding spun = do
      halt <- stopped mgr
      if halt then releaseSpin holding >> return Finish else do
        runExpiredTimers mgr
        n <- pollNow
        if n > 0 then eventsCame policy spell holding spun else do
          yield
          n' <- pollNow
          if n' > 0 then eventsCame policy spell holding spun else do
            now <- getMonotonicTimeNSec
            let start = if spell == noSpell then now else spell
            spin <- if now - start >= spinWindow policy then return False
                    else if holding then return True else acquireSpin policy
            if spin then loop policy start True True else do
              when holding $ bumpCounter c cSpinNanos (fromIntegral (now - start))
              releaseSpin holding
              got <- blockingPoll
              placed <- onOwnCapability
              if not placed then return HandOff
                else if got > 0 then eventsCame policy start False spun
                else loop policy start False spun
    eventsCame policy spell holding spun = do
      policy' <- if spell == noSpell then return policy else do
        now <- getMonotonicTimeNSec
        let len = now - min now spell
        when holding $ do
          bumpCounter c cSpinHits 1
          bumpCounter c cSpinNanos (fromIntegral len)
        return (endSpell spun len policy)
      releaseSpin holding
      yield
      loop policy' noSpell False False
    -- The fixed policy spins without the token.
    acquireSpin policy = do
      got <- if spinAdaptive policy then (== 0) <$> casCounter spinToken 0 0 1 else return True
      when got (bumpCounter c cSpins 1)
      return got
    releaseSpin holding = when holding (writeCounter spinToken 0 0)
    noSpell = maxBound :: Word64
    blockingPoll = do
      writeCounter c cState sBlocking
      halt <- stopped mgr
      timeout <- if halt then return NoWait else pollTimeout mgr
      n <- if timeout == NoWait then return 0 else do
        trace "weft:poll:block"#
        n <- backendPoll backend timeout handler
        trace "weft:poll:woke"#
        bumpCounter c cBlockingPolls 1
        bumpCounter c cEvents n
        return n
      writeCounter c cState sRunning
      W.setPlanned (mgrTimers mgr) 0
      return n
    -- After 'setNumCapabilities' shrank and grew again, the dispatcher may
    -- have been moved off its capability; it restarts itself there.
    onOwnCapability = do
      cap <- currentCapability
      n <- getNumCapabilities
      return (cap == mgrCap mgr || mgrCap mgr >= n)

-- Note [Spinning before blocking]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A blocking poll is a safe foreign call: the capability is handed to
-- another OS thread on the way in and taken back on the way out, and the
-- kernel must wake a sleeping thread, often on another core, when an event
-- comes. Under steady traffic that costs far more than a non-blocking poll.
-- So when the polls run dry, the dispatcher may keep to non-blocking polls
-- and 'yield's for a while (threads queued on its capability still run
-- between polls) and only then block. How long is the spin policy's
-- window (Note [Adaptive spinning] in "Weft.Event.Internal.Spin"): at most
-- @WEFT_SPIN_US@ microseconds (default 50; 0 gives the plain Mio loop),
-- shorter while spins keep finding nothing, and only one dispatcher of
-- the process spins at a time. @WEFT_SPIN_POLICY=fixed@ restores the
-- fixed window of earlier versions (every dispatcher spins the full
-- window after every burst), for comparison.

-- | The spin window's cap in nanoseconds, from @WEFT_SPIN_US@
-- (microseconds).
{-# NOINLINE spinWindowNs #-}
spinWindowNs :: Word64
spinWindowNs = unsafePerformIO $ do
  v <- lookupEnv "WEFT_SPIN_US"
  return $ case reads (maybe "" id v) of
    [(us, "")] | us >= (0 :: Int) -> fromIntegral us * 1000
    _ -> defaultSpinWindowUs * 1000
  where defaultSpinWindowUs = 50

-- | Whether the spin policy adapts: unless @WEFT_SPIN_POLICY@ is @fixed@.
{-# NOINLINE spinAdaptively #-}
spinAdaptively :: Bool
spinAdaptively = unsafePerformIO $ (/= Just "fixed") <$> lookupEnv "WEFT_SPIN_POLICY"

-- | Fail every pending wait and timer, then release the backend once no
-- waker can still write to it (Note [Dispatcher states] in
-- "Weft.Event.Internal.Manager").
finish :: Manager -> IO ()
finish mgr = do
  let c = mgrCounters mgr
  endRegistrations mgr
  abortTimers mgr
  let settle = do
        _ <- casCounter c cState sRunning sFinished
        _ <- casCounter c cState sWoken sFinished
        s <- readCounter c cState
        busy <- readCounter c cInflight
        unless (s == sFinished && busy == 0) (yield >> settle)
  settle
  backendClose (mgrBackend mgr)
  putMVar (mgrFinished mgr) ()
