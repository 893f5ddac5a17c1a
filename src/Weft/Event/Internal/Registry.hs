{-# LANGUAGE BangPatterns #-}
-- | A manager's fd registrations: one-shot and multi-shot registrations
-- and the waits built on them, kept per fd in a slot and armed on the
-- backend; edge-triggered watches; closing watched fds; and the
-- dispatcher's handler for what the backend reports. Internal and
-- unstable ("Weft.Event.Manager" is the façade).
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
module Weft.Event.Internal.Registry
  ( -- * Waiting and registering
    waitOn
  , waitSTMOn
  , registerFd
  , unregisterFd
  , unregisterFd_
  , closeFdOn
    -- * Edge-triggered watches
  , watchFd
  , watchFdNotify
  , awaitReadable
  , awaitWritable
  , unwatchFd
    -- * For the dispatcher
  , onEvent
  , endRegistrations
  ) where

import Control.Concurrent
import Control.Concurrent.STM
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Bits ((.&.), (.|.))
import Foreign.C.Error (Errno, eBADF, ePERM, errnoToIOError)
import System.Posix.Types (Fd (..))

import qualified Weft.Event.FdTable as FT
import Weft.Event.Internal
import Weft.Event.Internal.Manager
import Weft.Event.Slot
import Weft.Internal.Counters

------------------------------------------------------------------------------
-- Events from the backend

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

-- | At shutdown: complete every registration with 'evtClose' (its waiter
-- fails, its callback sees the close) and end every watch (its blocked
-- threads wake and throw).
endRegistrations :: Manager -> IO ()
endRegistrations mgr = do
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
      _ <- addCounter (mgrCounters mgr) cWatches (-1)
      wakeWatchers w

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


adjustLive :: Manager -> SlotState t -> SlotState t -> IO ()
adjustLive mgr before after =
  let d = length (ssRegs after) - length (ssRegs before)
  in when (d /= 0) $ void (addCounter (mgrCounters mgr) cLive d)
{-# INLINE adjustLive #-}

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
