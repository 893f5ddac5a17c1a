{-# LANGUAGE BangPatterns, MagicHash, UnboxedTuples #-}
-- | One I/O manager: an fd-indexed waiter table, a backend, a timer queue
-- and a dispatcher thread pinned to one capability.
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
-- Note [Dispatcher states]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A counter holds Running, Blocking, Woken or Finished. The dispatcher
-- publishes Blocking (a full barrier) and only then reads what could make it
-- want to stay awake: the stop flag and the timer queue (and, for the poll
-- backend, the watch map). A waker first writes its change (a full barrier)
-- and then tries Blocking -> Woken; only the winner writes the wakeup fd. So
-- either the dispatcher sees the change before it blocks, or the waker sees
-- Blocking and wakes it, and one blocking poll costs at most one wakeup
-- write, however many wakers come (Note [Coalesced wakeups]). The wakeup fd
-- is closed at shutdown only after the dispatcher published Finished and no
-- waker is between its state check and its write (the in-flight count).
--
-- Note [Reusable wait cells]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Each slot owns one read cell and one write cell (empty 'MVar's), reused by
-- the common case of one reader and one writer per fd. Waiters and the
-- dispatcher only fill or drain a cell while holding the slot lock. So a
-- cell that no registration refers to and that is empty has no owner: its
-- last waiter took its value, or drained it when cancelled. A waiter claims
-- a cell only in that state, under the lock; any other waiter on the same fd
-- and direction gets a fresh 'MVar'. So a value left in a cell by a waiter
-- that was cancelled just as its registration fired can never wake the next
-- waiter early: a full cell is never claimed. The cancelled waiter also
-- drains the cell, so it can be claimed again.
--
-- Note [Arm generations]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- Every arm bumps the slot's tag, and the backend reports the tag an event
-- was armed with. The dispatcher may harvest an event, and only then find
-- that the slot was re-armed meanwhile (a waiter left, the fd was drained,
-- a new waiter came): that event describes a readiness that may be gone, so
-- it is dropped. Nothing is lost: the re-arm itself makes the kernel check
-- readiness again and report it under the new tag. 'closeSlot' bumps the tag
-- too, which also silences events of a dup'ed, closed fd still in the set.
--
-- Note [Fds closed behind weft's back]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- When a user closes an fd with plain @close@, the kernel drops it from the
-- epoll set; waiters on it are not told. If the number is reused and waited
-- on, the arm finds the fd gone ('ArmedAfterVanish'): the registrations made
-- before belong to the dead file and fail with 'evtClose', which their
-- waiters see as an 'IOError'. Until such an arm, a waiter on a closed fd
-- waits, as with GHC's manager: use 'closeFdWith' to close watched fds.
-- The poll backend sees a closed fd at once as @POLLNVAL@ and fails its
-- waiters the same way.
module Weft.Event.Manager
  ( -- * Managers
    Manager
  , newManager
  , managerCapability
  , managerId
  , nextKey
  , managerBackendKind
  , shutdownManager
  , wakeManager
    -- * Waiting and registering
  , IOCallback
  , FdKey (..)
  , waitOn
  , waitSTMOn
  , registerFd
  , unregisterFd
  , unregisterFd_
  , closeFdOn
    -- * Edge-triggered watches
  , Watch
  , watchedFd
  , watchFd
  , watchFdNotify
  , awaitReadable
  , awaitWritable
  , unwatchFd
    -- * Timers
  , TimeoutKey
  , TimeoutCallback
  , registerTimeout
  , updateTimeout
  , unregisterTimeout
  , unregisterTimeout_
  , delayOn
  , registerDelayOn
    -- * Statistics
  , ManagerStats (..)
  , getManagerStats
  ) where

import Control.Concurrent
import Control.Concurrent.STM
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Bits ((.&.), (.|.))
import Data.Word (Word32, Word64)
import Foreign.C.Error (Errno, eBADF, ePERM, errnoToIOError)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (labelThread)
import GHC.Exts (Addr#, traceEvent#)
import GHC.IO (IO (..))
import System.Environment (lookupEnv)
import System.IO (hPutStrLn, stderr)
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Types (Fd (..))

import Weft.Event.Backend (newBackend)
import qualified Weft.Event.FdTable as FT
import Weft.Event.Internal
import Weft.Event.Slot
import Weft.Event.Spin
import Weft.Internal.Counters
import Weft.Internal.Error (managerShutDown)
import qualified Weft.Timer.Wheel as W

------------------------------------------------------------------------------
-- Types

-- | A callback for 'registerFd', run on the dispatcher thread. It must not
-- block for long: other fds of its manager wait meanwhile. If it throws, the
-- exception is reported on stderr and counted ('statCallbackErrors'), and the
-- dispatcher carries on.
type IOCallback = FdKey -> Event -> IO ()

-- | Names one registration made by 'registerFd'.
data FdKey = FdKey
  { keyFd     :: {-# UNPACK #-} !Fd
  , keyUnique :: {-# UNPACK #-} !Int
  } deriving (Eq, Show)

data Target
  = WakeCell !(MVar Event)   -- ^ a blocked 'waitOn'; filled under the slot lock
  | RunCallback (Event -> IO ())  -- ^ a 'registerFd' callback; run after unlocking

data Slot = Slot
  { slotLock      :: !(MVar (SlotState Target))
  , slotReadCell  :: !(MVar Event)
  , slotWriteCell :: !(MVar Event)
  }

-- | What a timer does when it expires.
data TimerAction
  = TimerCallback (IO ())
  | TimerWake !(MVar Bool)   -- ^ 'True' on expiry, 'False' if the manager stops


-- | A callback for 'registerTimeout', run on the dispatcher thread; the same
-- rules as for 'IOCallback' apply.
type TimeoutCallback = IO ()

-- | An I/O manager. Each capability has one ('Weft.Event.getSystemManager');
-- more can be made with 'newManager'.
data Manager = Manager
  { mgrId       :: {-# UNPACK #-} !Int
  , mgrCap      :: {-# UNPACK #-} !Int
  , mgrBackend  :: !Backend
  , mgrTable    :: !(FT.FdTable Slot)
  , mgrWatches  :: !(FT.FdTable (IORef (Maybe Watch)))
  , mgrCounters :: !Counters
  , mgrTimers   :: !(W.Wheel TimerAction)
  , mgrFinished :: !(MVar ())
  }

instance Eq Manager where
  a == b = mgrId a == mgrId b

-- | Names one timer: its manager, and its wheel entry and generation
-- ("Weft.Timer.Wheel"). A key outlives its timer harmlessly.
data TimeoutKey = TimeoutKey !Manager {-# UNPACK #-} !Int {-# UNPACK #-} !Int

instance Eq TimeoutKey where
  TimeoutKey m a g == TimeoutKey n b h = a == b && g == h && m == n
instance Ord TimeoutKey where
  compare (TimeoutKey m a g) (TimeoutKey n b h) = compare (mgrId m, a, g) (mgrId n, b, h)

-- Counter indices.
cState, cStop, cKeys, cInflight, cBlockingPolls, cPolls, cEvents, cWakeups,
  cLive, cCallbackErrors, cArms, cTimersFired, cWatches, cWatchTags, cSpins,
  cSpinHits, cSpinNanos, nCounters :: Int
cState = 0; cStop = 1; cKeys = 2; cInflight = 3; cBlockingPolls = 4
cPolls = 5; cEvents = 6; cWakeups = 7; cLive = 8; cCallbackErrors = 9
cArms = 10; cTimersFired = 11; cWatches = 12; cWatchTags = 13; cSpins = 14
cSpinHits = 15; cSpinNanos = 16; nCounters = 17

-- Dispatcher states, Note [Dispatcher states].
sRunning, sBlocking, sWoken, sFinished :: Int
sRunning = 0; sBlocking = 1; sWoken = 2; sFinished = 3

-- | The spin token: 1 while some dispatcher of this process spins through
-- a dry spell (Note [Adaptive spinning] in "Weft.Event.Spin").
{-# NOINLINE spinToken #-}
spinToken :: Counters
spinToken = unsafePerformIO (newCounters 1)

{-# NOINLINE managerIds #-}
managerIds :: Counters
managerIds = unsafePerformIO (newCounters 1)

------------------------------------------------------------------------------
-- Life cycle

-- | Make a manager with a fresh backend of the given kind, and start its
-- dispatcher with 'forkOn' on the given capability. Throws an 'IOError' if
-- the backend's fds cannot be had.
newManager :: BackendKind -> Int -> IO Manager
newManager kind cap = do
  backend <- newBackend kind
  ident <- addCounter managerIds 0 1
  table <- FT.new $ \_ -> Slot <$> newMVar emptySlotState <*> newEmptyMVar <*> newEmptyMVar
  watches <- FT.new $ \_ -> newIORef Nothing
  counters <- newCounters nCounters
  timers <- W.new . W.nowTick =<< getMonotonicTimeNSec
  finished <- newEmptyMVar
  let mgr = Manager ident cap backend table watches counters timers finished
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

-- | Make the dispatcher return from a blocking poll, if it is in one.
-- Cheap when it is not: one read.
wakeManager :: Manager -> IO ()
wakeManager mgr = do
  let c = mgrCounters mgr
  s <- readCounter c cState
  when (s == sBlocking) $ do
    _ <- addCounter c cInflight 1
    old <- casCounter c cState sBlocking sWoken
    when (old == sBlocking) $ do
      trace "weft:wakeup"#
      backendWake (mgrBackend mgr)
      void (addCounter c cWakeups 1)
    void (addCounter c cInflight (-1))

stopped :: Manager -> IO Bool
stopped mgr = (/= 0) <$> readCounter (mgrCounters mgr) cStop
{-# INLINE stopped #-}

managerStoppedError :: String -> IOError
managerStoppedError = managerShutDown

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
    -- (Note [Adaptive spinning] in "Weft.Event.Spin"). The clock is read
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
      (cap, _) <- threadCapability =<< myThreadId
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
-- window (Note [Adaptive spinning] in "Weft.Event.Spin"): at most
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
-- waker can still write to it (Note [Dispatcher states]).
finish :: Manager -> IO ()
finish mgr = do
  let c = mgrCounters mgr
  slots <- FT.elems (mgrTable mgr)
  forM_ slots $ \(fd, slot) -> do
    callbacks <- modifyMVarMasked (slotLock slot) $ \st -> do
      let (regs, st') = closeSlot st
      (st'', cbs, _) <- settleSlot mgr (Fd (fromIntegral fd)) Nothing st [ (r, evtClose) | r <- regs ] st'
      return (st'', cbs)
    runCallbacks mgr callbacks
  watches <- FT.elems (mgrWatches mgr)
  forM_ watches $ \(_, ref) -> do
    found <- atomicModifyIORef' ref (\w -> (Nothing, w))
    forM_ found $ \w -> do
      _ <- addCounter c cWatches (-1)
      wakeWatchers w
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

-- | How long the blocking poll may wait: until the start of the tick when
-- 'runExpiredTimers' next has work ('W.earliest'), in nanoseconds. Called
-- after the dispatcher published 'sBlocking'; it records that tick as the
-- planned wake-up, under the wheel lock, so that a timer registered later
-- and due earlier wakes the dispatcher (Note [Waking the dispatcher for a
-- timer]).
--
-- Not the wheel's earliest occupied slot ('W.nextExpiry'): a slot of a
-- higher level starts up to a whole slot span (67 ms at level 2) before the
-- deadlines in it, and 'runExpiredTimers' only expires once the earliest
-- deadline is due. Sleeping until the slot's start made the dispatcher
-- poll without blocking from then until the deadline: a busy loop of up
-- to 67 ms for every timer of 1 ms or more.
pollTimeout :: Manager -> IO PollTimeout
pollTimeout mgr = do
  let w = mgrTimers mgr
  next <- W.withLock w $ do
    t <- W.earliest w
    W.setPlanned w t
    return t
  if next == W.noExpiry then return WaitForever else do
    now <- getMonotonicTimeNSec
    let due = W.tickStartNs next
    return (if due <= now then NoWait else WaitNanos (fromIntegral (due - now)))

-- | The backend's handler: apply one reported event to its watch or slot.
onEvent :: Manager -> EventHandler
onEvent mgr fd tag ev
  | isWatchTag tag = do
      found <- FT.lookup (mgrWatches mgr) (fdInt fd)
      case found of
        Nothing -> return ()
        Just ref -> do
          current <- readIORef ref
          case current of
            -- Note [Edge-triggered watches]: a tag of an ended watch is stale.
            Just w | watchTag w == tag -> case watchNotify w of
              Nothing -> do
                when (ev `eventIs` evtRead) $ void (tryPutMVar (watchReadable w) ())
                when (ev `eventIs` evtWrite) $ void (tryPutMVar (watchWritable w) ())
              Just notify -> runCallbacks mgr [notify ev]
            _ -> return ()
  | otherwise = do
  found <- FT.lookup (mgrTable mgr) (fdInt fd)
  case found of
    Nothing -> return ()
    Just slot -> do
      -- The dispatcher runs masked, and holds the lock only for pure steps,
      -- a backend arm and non-blocking cell fills: a plain take/put is safe.
      st <- takeMVar (slotLock slot)
      if ssTag st /= tag then putMVar (slotLock slot) st else do
        let (fired, st1) = fireSlot ev st
        (st2, callbacks, _) <- settleSlot mgr fd Nothing st (map (\r -> (r, ev)) fired) st1
        putMVar (slotLock slot) st2
        runCallbacks mgr callbacks

------------------------------------------------------------------------------
-- Arming

-- | What became of the registration being added.
data Fresh = FreshArmed | FreshReady | FreshFailed !Errno

-- | Bring the backend in line with the slot's registrations. Returns the new
-- state, the registrations that must be completed (with the event to complete
-- them with) because they can no longer be watched, and the fate of the
-- registration with the given key, if one is being added.
syncArm :: Manager -> Fd -> Maybe Int -> SlotState Target
        -> IO (SlotState Target, [(Reg Target, Event)], Fresh)
syncArm mgr fd fresh st
  -- A new registration always arms, even if the watch seems to cover it:
  -- the arm is what finds an fd closed behind weft's back (Note [Fds closed
  -- behind weft's back]). Only the dispatcher and cancellations skip it.
  | Nothing <- fresh, not (needsArm want (ssArmed st)) = return (st, [], FreshArmed)
  | otherwise = do
      _ <- addCounter (mgrCounters mgr) cArms 1
      -- Note [Arm generations]
      let st' = st { ssTag = nextSlotTag (ssTag st) }
      r <- backendArm (mgrBackend mgr) fd (ssTag st') want (ssKnown st')
      case r of
        Armed -> return (armedWith want st', [], FreshArmed)
        ArmedAfterVanish -> do
          -- Note [Fds closed behind weft's back]
          let (mine, orphans) = span isFresh (ssRegs st')
          (st'', more, outcome) <- syncArm mgr fd Nothing (armedWith want st') { ssRegs = mine }
          return (st'', [ (o, evtClose) | o <- orphans ] ++ more, outcome)
        ArmUnsupported ->
          -- Always ready (a regular file): one-shots complete now.
          return ( clear st'
                 , [ (o, if regLifetime o == OneShot then regEvents o else evtClose) | o <- others ]
                 , FreshReady )
        ArmFailed err -> return (clear st', [ (o, evtClose) | o <- others ], FreshFailed err)
  where
    !want = wantedInterest (ssRegs st)
    isFresh reg = Just (regKey reg) == fresh
    others = filter (not . isFresh) (ssRegs st)
    clear s = s { ssRegs = [], ssArmed = noInterest, ssKnown = False }

-- | Finish a change made to a slot under its lock: arm the backend for the
-- changed registrations, complete the given ones and those the arm failed,
-- and count. @before@ is the state the lock was taken with. Returns the
-- state to store, the callbacks to run once unlocked, and the fate of the
-- registration being added, if any. A backend that only sees arms after a
-- wakeup (poll) gets one here, whatever path armed.
settleSlot :: Manager -> Fd -> Maybe Int -> SlotState Target
           -> [(Reg Target, Event)] -> SlotState Target
           -> IO (SlotState Target, [IO ()], Fresh)
settleSlot mgr fd fresh before completed st = do
  (st', failed, outcome) <- syncArm mgr fd fresh st
  callbacks <- completeAll mgr (completed ++ failed)
  adjustLive mgr before st'
  when (backendWakeOnArm (mgrBackend mgr)) (wakeManager mgr)
  return (st', callbacks, outcome)

-- | Complete registrations: fill wait cells now (the caller holds the slot
-- lock, Note [Reusable wait cells]) and return the callbacks to run after
-- unlocking.
completeAll :: Manager -> [(Reg Target, Event)] -> IO [IO ()]
completeAll _ [] = return []
completeAll mgr ((reg, ev) : rest) = case regTarget reg of
  WakeCell cell -> do
    _ <- tryPutMVar cell ev
    completeAll mgr rest
  RunCallback cb -> do
    more <- completeAll mgr rest
    return (cb ev : more)

-- | Run callbacks, each guarded: an exception is reported and counted.
runCallbacks :: Manager -> [IO ()] -> IO ()
runCallbacks mgr = mapM_ guarded
  where
    guarded act = act `catch` \e -> do
      _ <- addCounter (mgrCounters mgr) cCallbackErrors 1
      hPutStrLn stderr ("weft: a callback threw an exception (the dispatcher "
                        ++ "carries on): " ++ show (e :: SomeException))

adjustLive :: Manager -> SlotState t -> SlotState t -> IO ()
adjustLive mgr before after =
  let d = length (ssRegs after) - length (ssRegs before)
  in when (d /= 0) $ void (addCounter (mgrCounters mgr) cLive d)
{-# INLINE adjustLive #-}

-- | A number this manager never returned before (one atomic add).
nextKey :: Manager -> IO Int
nextKey mgr = addCounter (mgrCounters mgr) cKeys 1
{-# INLINE nextKey #-}

fdInt :: Fd -> Int
fdInt (Fd n) = fromIntegral n
{-# INLINE fdInt #-}

------------------------------------------------------------------------------
-- Waiting

-- | The 'IOError' a waiter gets when its fd is closed under it.
closedFdError :: String -> IOError
closedFdError loc = errnoToIOError loc eBADF Nothing Nothing

-- | Block until the fd is ready for one of the events, on this manager.
-- Throws an 'IOError' (@EBADF@) if the fd is closed with 'closeFdOn' or
-- 'Weft.closeFdWith' meanwhile, or is not a valid fd; an fd epoll cannot
-- watch (a regular file) is always ready. Async exceptions interrupt the
-- wait and leave no registration behind.
waitOn :: Manager -> Event -> Fd -> IO ()
waitOn mgr ev fd = mask_ $ do
  (slot, key, cell, fresh) <- register "threadWait" mgr fd ev OneShot $ \slot st _ -> do
    cell <- chooseCell slot ev st
    return (WakeCell cell, cell)
  case fresh of
    FreshReady -> return ()
    FreshFailed err -> throwIO (errnoToIOError "threadWait" err Nothing (Just (show fd)))
    FreshArmed -> do
      got <- takeMVar cell `onException` cancelWait mgr fd slot key cell
      when (got `eventIs` evtClose) $ do
        halt' <- stopped mgr
        throwIO (if halt' then managerStoppedError "threadWait" else closedFdError "threadWait")

-- | Add a registration, whose target @makeTarget@ makes from the slot, its
-- state and the key, and arm the fd. Runs masked. Throws an 'IOError' if
-- the manager was shut down.
register :: String -> Manager -> Fd -> Event -> Lifetime
         -> (Slot -> SlotState Target -> Int -> IO (Target, a))
         -> IO (Slot, Int, a, Fresh)
register loc mgr fd ev lifetime makeTarget = do
  slot <- FT.lookupOrCreate (mgrTable mgr) (fdInt fd)
  key <- nextKey mgr
  st <- takeMVar (slotLock slot)
  halt <- stopped mgr
  when halt $ putMVar (slotLock slot) st >> throwIO (managerStoppedError loc)
  (target, extra) <- makeTarget slot st key
  (st1, callbacks, fresh) <- settleSlot mgr fd (Just key) st [] (addReg (Reg key ev lifetime target) st)
  putMVar (slotLock slot) st1
  runCallbacks mgr callbacks
  return (slot, key, extra, fresh)
{-# INLINE register #-}

-- Note [Reusable wait cells]
chooseCell :: Slot -> Event -> SlotState Target -> IO (MVar Event)
chooseCell slot ev st
  | ev == evtRead = reuse (slotReadCell slot)
  | ev == evtWrite = reuse (slotWriteCell slot)
  | otherwise = newEmptyMVar
  where
    reuse cell = do
      empty <- isEmptyMVar cell
      if empty && not (any (usesCell cell) (ssRegs st)) then return cell else newEmptyMVar
    usesCell cell reg = case regTarget reg of
      WakeCell c -> c == cell
      RunCallback _ -> False

cancelWait :: Manager -> Fd -> Slot -> Int -> MVar Event -> IO ()
cancelWait mgr fd slot key cell = uninterruptibleMask_ $ do
  st <- takeMVar (slotLock slot)
  case removeReg key st of
    (Just _, st0) -> do
      (st1, callbacks, _) <- settleSlot mgr fd Nothing st [] st0 `onException` putMVar (slotLock slot) st
      putMVar (slotLock slot) st1
      runCallbacks mgr callbacks
    (Nothing, _) -> do
      _ <- tryTakeMVar cell
      putMVar (slotLock slot) st

-- | Like 'waitOn', but returns at once: an STM action that retries until the
-- fd is ready (and throws the 'IOError' 'waitOn' would), and an action that
-- cancels the registration.
waitSTMOn :: Manager -> Event -> Fd -> IO (STM (), IO ())
waitSTMOn mgr ev fd = do
  result <- newTVarIO Nothing
  key <- registerFd mgr (\_ e -> atomically (writeTVar result (Just e))) fd ev OneShot
  let wait = do
        r <- readTVar result
        case r of
          Nothing -> retry
          Just e -> when (e `eventIs` evtClose) (throwSTM (closedFdError "threadWaitSTM"))
  return (wait, unregisterFd mgr key)

-- | Register a callback for events on an fd. 'OneShot' registrations fire
-- once; 'MultiShot' ones are level-triggered and fire after every poll that
-- finds the fd ready, until 'unregisterFd'. Any number of registrations, and
-- waits, may share an fd. The callback runs on the dispatcher thread (see
-- 'IOCallback'); it receives 'evtClose' if the fd is closed through weft.
-- Throws an 'IOError' if the fd cannot be watched: @EBADF@ for an invalid fd,
-- @EPERM@ for a regular file under epoll.
registerFd :: Manager -> IOCallback -> Fd -> Event -> Lifetime -> IO FdKey
registerFd mgr cb fd ev lifetime = mask_ $ do
  (_, key, (), fresh) <- register "registerFd" mgr fd ev lifetime $ \_ _ key ->
    return (RunCallback (cb (FdKey fd key)), ())
  case fresh of
    FreshArmed -> return (FdKey fd key)
    FreshReady -> throwIO (errnoToIOError "registerFd (a regular file cannot be watched)"
                             ePERM Nothing (Just (show fd)))
    FreshFailed err -> throwIO (errnoToIOError "registerFd" err Nothing (Just (show fd)))

-- | Cancel a registration. Does nothing if it already fired or was cancelled.
unregisterFd :: Manager -> FdKey -> IO ()
unregisterFd mgr k = void (unregisterFd_ mgr k)

-- | 'unregisterFd', returning whether the registration was still there.
unregisterFd_ :: Manager -> FdKey -> IO Bool
unregisterFd_ mgr (FdKey fd key) = mask_ $ do
  found <- FT.lookup (mgrTable mgr) (fdInt fd)
  case found of
    Nothing -> return False
    Just slot -> do
      (removed, callbacks) <- modifyMVarMasked (slotLock slot) $ \st ->
        case removeReg key st of
          (Nothing, _) -> return (st, (False, []))
          (Just _, st0) -> do
            (st1, cbs, _) <- settleSlot mgr fd Nothing st [] st0
            return (st1, (True, cbs))
      runCallbacks mgr callbacks
      return removed

-- | Close an fd watched by these managers: drop it from each one's interest
-- set, run the close action, then fail every waiter on it with an 'IOError'
-- and give every callback 'evtClose'. The fd's slots stay locked while the
-- action runs, so no wait can slip in between. If the action throws, nothing
-- is failed and the exception propagates.
closeFdOn :: [Manager] -> (Fd -> IO ()) -> Fd -> IO ()
closeFdOn mgrs close fd = mask_ $ do
  slots <- fmap concat . forM mgrs $ \m ->
    maybe [] (\s -> [(m, s)]) <$> FT.lookup (mgrTable m) (fdInt fd)
  states <- lockAll slots
  -- If the close action throws, the fd stays open: re-arm what was removed.
  let restore = forM_ (zip slots states) $ \((m, s), st) -> do
        (st', cbs, _) <- settleSlot m fd Nothing st [] st { ssArmed = noInterest, ssKnown = False }
        putMVar (slotLock s) st'
        runCallbacks m cbs
  (`onException` restore) $ do
    forM_ (zip slots states) $ \((m, _), st) ->
      when (ssKnown st) $ withLiveBackend m (backendForget (mgrBackend m) fd)
    close fd
  callbacks <- forM (zip slots states) $ \((m, s), st) -> do
    let (regs, st') = closeSlot st
    (st'', cbs, _) <- settleSlot m fd Nothing st [ (r, evtClose) | r <- regs ] st'
    putMVar (slotLock s) st''
    return (m, cbs)
  mapM_ (uncurry runCallbacks) callbacks
  where
    lockAll [] = return []
    lockAll ((_, s) : rest) = do
      st <- takeMVar (slotLock s)
      sts <- lockAll rest `onException` putMVar (slotLock s) st
      return (st : sts)

------------------------------------------------------------------------------
-- Edge-triggered watches

-- Note [Edge-triggered watches]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A socket that weft owns ("Weft.Net") is registered once, edge-triggered,
-- for reads and writes, and never re-armed: a wait costs no @epoll_ctl@.
-- Each direction has a readiness token, an @MVar ()@. The dispatcher puts
-- the token on every report (a no-op if it is already there); a thread whose
-- syscall said @EAGAIN@ takes it, blocking if it is not there, and then
-- retries the syscall. A token put before the take (data came between the
-- @EAGAIN@ and the take) makes the take return at once, so no edge is lost.
-- A token left over from an edge that a syscall already consumed costs one
-- extra @EAGAIN@ and nothing else. The edge that an fd already ready at
-- registration needs is given by @EPOLL_CTL_ADD@, which reports readiness
-- at once.
--
-- Each watch has its own tag, with the top bit set (slot tags keep it
-- clear, 'nextSlotTag'), carried in the event data. The dispatcher acts on
-- an event only if the watch now stored for the fd has that tag, so an
-- event harvested for a socket that was then closed, and whose fd number
-- was reused by a new socket, never wakes the new socket's threads (Go's
-- fdseq). Ending a watch puts both tokens, so blocked threads retry and
-- find the socket closed; at shutdown they are woken too, and the await
-- throws.

-- | An fd registered once with a manager, edge-triggered for reads and
-- writes (Note [Edge-triggered watches]).
data Watch = Watch
  { watchTag      :: {-# UNPACK #-} !Word32
  , watchedFd     :: {-# UNPACK #-} !Fd
    -- ^ The fd being watched.
  , watchReadable :: !(MVar ())
  , watchWritable :: !(MVar ())
  , watchManager  :: !Manager
  , watchNotify   :: !(Maybe (Event -> IO ()))
    -- ^ Called by the dispatcher with each report instead of putting the
    -- tokens ('watchFdNotify').
  }

isWatchTag :: Word32 -> Bool
isWatchTag t = t >= 0x80000000
{-# INLINE isWatchTag #-}

-- | Register an fd with the manager, edge-triggered, once for its whole
-- life, for use with 'awaitReadable' and 'awaitWritable'. Returns 'Nothing'
-- if the backend has no edge-triggered readiness (poll): use 'waitOn' then.
-- Throws an 'IOError' if the fd cannot be watched (@EBADF@; @EPERM@ for a
-- regular file; @EEXIST@ if it is already in the manager's interest set) or
-- the manager was shut down. The fd must not also be given to 'waitOn' or
-- 'registerFd' on the same manager, and must be unwatched with 'unwatchFd'
-- before it is closed.
watchFd :: Manager -> Fd -> IO (Maybe Watch)
watchFd mgr fd = newWatch mgr fd Nothing

-- | Like 'watchFd', but each report goes to the callback, on the
-- dispatcher's thread, instead of to the tokens: 'awaitReadable' and
-- 'awaitWritable' are not for such a watch. The callback gets every edge
-- (a report may carry both directions, and a direction that was already
-- ready), must not block, and is guarded: an exception it throws is
-- reported and counted, and the dispatcher carries on. A report the
-- dispatcher harvested before 'unwatchFd' may still reach the callback
-- just after it returns, so what the callback acts on must tolerate a late
-- call (a closed connection ignoring it); a later watch of the same fd
-- number never gets the old watch's reports (its tag differs).
watchFdNotify :: Manager -> Fd -> (Event -> IO ()) -> IO (Maybe Watch)
watchFdNotify mgr fd notify = newWatch mgr fd (Just notify)

newWatch :: Manager -> Fd -> Maybe (Event -> IO ()) -> IO (Maybe Watch)
newWatch mgr fd notify = case backendWatch (mgrBackend mgr) of
  Nothing -> return Nothing
  Just add -> mask_ $ do
    ref <- FT.lookupOrCreate (mgrWatches mgr) (fdInt fd)
    n <- addCounter (mgrCounters mgr) cWatchTags 1
    -- Top bit set; 0xffffffff stays free for the epoll wakeup fd.
    let tag = 0x80000000 .|. (fromIntegral n .&. 0x7ffffffe)
    w <- Watch tag fd <$> newEmptyMVar <*> newEmptyMVar <*> pure mgr <*> pure notify
    -- Published before the add, so the first report finds it.
    atomicWriteIORef ref (Just w)
    failed <- add fd tag
    case failed of
      Just err -> do
        atomicWriteIORef ref Nothing
        throwIO (errnoToIOError "weft: watchFd" err Nothing (Just (show fd)))
      Nothing -> do
        _ <- addCounter (mgrCounters mgr) cWatches 1
        -- Checked after publishing: a shutdown that began before has set
        -- the stop flag, and one that begins after will end this watch.
        halt <- stopped mgr
        when halt $ do
          unwatchFd w
          throwIO (managerStoppedError "watchFd")
        return (Just w)

-- | Block until the watched fd may have become readable since the last
-- 'awaitReadable' returned, or the watch ended: then retry the syscall that
-- said @EAGAIN@. Returns at once if that happened meanwhile. Throws an
-- 'IOError' if the manager was shut down. Async exceptions interrupt it and
-- leave nothing behind.
awaitReadable :: Watch -> IO ()
awaitReadable w = awaitToken w (watchReadable w)
{-# INLINE awaitReadable #-}

-- | 'awaitReadable' for writability.
awaitWritable :: Watch -> IO ()
awaitWritable w = awaitToken w (watchWritable w)
{-# INLINE awaitWritable #-}

awaitToken :: Watch -> MVar () -> IO ()
awaitToken w token = do
  takeMVar token
  halt <- stopped (watchManager w)
  when halt $ do
    -- Leave the token for the other waiters, who must fail too.
    _ <- tryPutMVar token ()
    throwIO (managerStoppedError "await")
{-# INLINE awaitToken #-}

-- | End a watch: drop the fd from the interest set and wake the threads
-- blocked on it, whose awaits return. Idempotent. Call it before closing
-- the fd.
unwatchFd :: Watch -> IO ()
unwatchFd w = mask_ $ do
  let mgr = watchManager w
  found <- FT.lookup (mgrWatches mgr) (fdInt (watchedFd w))
  ended <- case found of
    Nothing -> return False
    Just ref -> atomicModifyIORef' ref $ \cur -> case cur of
      Just v | watchTag v == watchTag w -> (Nothing, True)
      _ -> (cur, False)
  when ended $ do
    withLiveBackend mgr (backendForget (mgrBackend mgr) (watchedFd w))
    void (addCounter (mgrCounters mgr) cWatches (-1))
  wakeWatchers w

wakeWatchers :: Watch -> IO ()
wakeWatchers w = do
  _ <- tryPutMVar (watchReadable w) ()
  void (tryPutMVar (watchWritable w) ())

-- | Run an operation on the backend unless it was released, and keep it
-- from being released meanwhile (the in-flight count of Note [Dispatcher
-- states]).
withLiveBackend :: Manager -> IO () -> IO ()
withLiveBackend mgr act = do
  let c = mgrCounters mgr
  _ <- addCounter c cInflight 1
  s <- readCounter c cState
  (unless (s == sFinished) act) `finally` addCounter c cInflight (-1)

------------------------------------------------------------------------------
-- Timers

-- Note [Waking the dispatcher for a timer]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A dispatcher about to block publishes 'sBlocking', then, under the wheel
-- lock, reads the next expiry and records it as its planned wake-up; once
-- awake it resets the plan to 0. A registrar inserts under the same lock
-- and then compares its deadline with the plan: only a timer due before the
-- plan calls 'wakeManager'. Either the registrar's insert precedes the
-- dispatcher's read (which then sees the timer), or it follows it, and then
-- the registrar sees both the plan and 'sBlocking' (or a later plan, or 0
-- because the dispatcher is awake again; either is harmless). While the dispatcher is
-- running the plan is 0 and nobody wakes it: it expires timers on every
-- pass. So a register, an update or a cancel that does not move the
-- earliest deadline earlier costs no syscall.

-- | Run a callback on the manager's dispatcher after at least the given
-- number of microseconds (a negative delay counts as 0). The timer never
-- fires early, and normally fires within one tick ('W.tickNs', 16.4 µs) of
-- its deadline plus the kernel's timer slack and scheduling. If the manager
-- is shut down first, the callback is dropped.
registerTimeout :: Manager -> Int -> TimeoutCallback -> IO TimeoutKey
registerTimeout mgr us cb = registerTimer mgr us (TimerCallback cb)

registerTimer :: Manager -> Int -> TimerAction -> IO TimeoutKey
registerTimer mgr us action = do
  t <- deadlineAfter us
  let w = mgrTimers mgr
  k <- W.withLock w (W.insert w t action (TimeoutKey mgr))
  -- Read after the insert (Note [Waking the dispatcher for a timer]).
  p <- W.planned w
  halt <- stopped mgr
  if halt
    then abortTimers mgr
    else when (t < p) (wakeManager mgr)
  return k
{-# INLINE registerTimer #-}

-- | The deadline tick of a delay in microseconds from now.
deadlineAfter :: Int -> IO Int
deadlineAfter us = do
  now <- getMonotonicTimeNSec
  -- Clamp so that maxBound microseconds does not wrap around.
  let ns = fromIntegral (min (max 0 us) (maxBound `quot` 1000)) * 1000 :: Word64
  return $! W.deadlineTick (now + min ns (maxBound - now))
{-# INLINE deadlineAfter #-}

-- | Move a pending timer's deadline to the given number of microseconds from
-- now. Does nothing if it already fired or was cancelled.
updateTimeout :: TimeoutKey -> Int -> IO ()
updateTimeout (TimeoutKey mgr i g) us = do
  t <- deadlineAfter us
  let w = mgrTimers mgr
  found <- W.withLock w (W.reschedule w i g t)
  p <- W.planned w
  when (found && t < p) (wakeManager mgr)

-- | Cancel a pending timer. Does nothing if it already fired.
unregisterTimeout :: TimeoutKey -> IO ()
unregisterTimeout k = void (unregisterTimeout_ k)

-- | 'unregisterTimeout', returning whether the timer was still pending (so
-- it will now never fire).
unregisterTimeout_ :: TimeoutKey -> IO Bool
unregisterTimeout_ (TimeoutKey mgr i g) =
  let w = mgrTimers mgr in W.withLock w (W.cancel w i g)

-- | Fire the timers that are due, outside the wheel lock, each guarded.
runExpiredTimers :: Manager -> IO ()
runExpiredTimers mgr = do
  let w = mgrTimers mgr
  first <- W.earliest w
  when (first /= W.noExpiry) $ do
    now <- W.nowTick <$> getMonotonicTimeNSec
    when (first <= now) $ do
      expired <- W.withLock w (W.expire w now)
      bumpCounter (mgrCounters mgr) cTimersFired (length expired)
      runCallbacks mgr (map fire expired)
  where
    fire (TimerCallback cb) = cb
    fire (TimerWake cell) = void (tryPutMVar cell True)

abortTimers :: Manager -> IO ()
abortTimers mgr = do
  let w = mgrTimers mgr
  pending <- W.withLock w (W.drain w)
  forM_ pending $ \a -> case a of
    TimerWake cell -> void (tryPutMVar cell False)
    TimerCallback _ -> return ()

-- | Sleep at least the given number of microseconds on this manager's timers.
-- Throws an 'IOError' if the manager is shut down meanwhile.
delayOn :: Manager -> Int -> IO ()
delayOn mgr us = mask_ $ do
  cell <- newEmptyMVar
  k <- registerTimer mgr us (TimerWake cell)
  expired <- takeMVar cell `onException` unregisterTimeout k
  unless expired $ throwIO (managerStoppedError "threadDelay")

-- | A 'TVar' that becomes 'True' after at least the given number of
-- microseconds, and the key that cancels it (the 'TVar' then stays 'False').
registerDelayOn :: Manager -> Int -> IO (TVar Bool, TimeoutKey)
registerDelayOn mgr us = do
  tv <- newTVarIO False
  k <- registerTimeout mgr us (atomically (writeTVar tv True))
  return (tv, k)

------------------------------------------------------------------------------
-- Statistics

-- | A snapshot of a manager's counters. All counts are since the manager
-- started.
data ManagerStats = ManagerStats
  { statBlockingPolls     :: !Int -- ^ blocking (safe-call) polls made
  , statNonBlockingPolls  :: !Int -- ^ non-blocking polls made
  , statEvents            :: !Int -- ^ fd events delivered by polls
  , statWakeups           :: !Int -- ^ wakeup-fd writes (at most one per blocking poll)
  , statLiveRegistrations :: !Int -- ^ registrations and waits pending now
  , statCallbackErrors    :: !Int -- ^ callbacks that threw
  , statArms              :: !Int -- ^ one-shot arms and disarms asked of the backend
  , statKernelCalls       :: !Int -- ^ calls that changed the kernel's interest set: every @epoll_ctl@ (arms, their retries, watches, forgets); 0 for poll
  , statTimersFired       :: !Int -- ^ timers that expired
  , statPendingTimers     :: !Int -- ^ timers pending now
  , statWatches           :: !Int -- ^ edge-triggered watches ('watchFd') live now
  , statSpins             :: !Int -- ^ dry spells the dispatcher spun through (Note [Adaptive spinning])
  , statSpinHits          :: !Int -- ^ of those, spells that events ended while it spun
  , statSpinNanos         :: !Int -- ^ nanoseconds spent spinning
  } deriving (Eq, Show)

-- | Read a manager's counters.
getManagerStats :: Manager -> IO ManagerStats
getManagerStats mgr = do
  let r = readCounter (mgrCounters mgr)
  pending <- W.size (mgrTimers mgr)
  ManagerStats <$> r cBlockingPolls <*> r cPolls <*> r cEvents <*> r cWakeups
               <*> r cLive <*> r cCallbackErrors <*> r cArms <*> backendKernelCalls (mgrBackend mgr) <*> r cTimersFired
               <*> pure pending <*> r cWatches <*> r cSpins <*> r cSpinHits <*> r cSpinNanos

------------------------------------------------------------------------------
-- Eventlog

-- | Emit an eventlog user event from a static string: no allocation, and
-- next to nothing when the eventlog is off.
trace :: Addr# -> IO ()
trace msg = IO (\s -> (# traceEvent# msg s, () #))
{-# INLINE trace #-}
