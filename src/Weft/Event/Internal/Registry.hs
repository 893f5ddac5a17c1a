{-# LANGUAGE BangPatterns #-}
-- | A manager's fd registrations, one slot per fd holding all of them
-- (Note [One registration per fd] in "Weft.Event.Internal.Slot"): one-shot waits,
-- callbacks, edge-triggered watches; arming the slot on the backend;
-- closing registered fds; and the dispatcher's handler for what the
-- backend reports. Internal and unstable ("Weft.Event.Internal.Core" is the
-- façade).
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
-- too, which also silences events of a dup'ed, closed fd still in the set,
-- and events harvested for a socket that was then closed, and whose fd
-- number was reused by a new one (Go's fdseq).
--
-- Note [Confirmed waits]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- A one-shot wait returns only when its fd is ready, as under GHC's
-- manager: a caller may read once and treat @EAGAIN@ as an error. A
-- backend whose reports may be stale ('backendExactReports' is 'False':
-- uring, Note [Stale readiness on a ring] in
-- "Weft.Event.Internal.Backend.Uring") makes the woken waiter check with
-- one @poll(2)@ of its own, and wait again if the readiness is gone. An
-- error or hang-up counts as ready, as a failed check does, so the check
-- never keeps a waiter that its caller would see fail. A report marked
-- 'evtTaken' is not confirmed: the backend's own receive or accept on the
-- fd may have taken what came (a ring's receive tells a readiness waiter
-- on the same socket what came, Note [Receives on the ring]), and the
-- waiter is woken because something came, as when two readers share an
-- fd under epoll; confirmed, it would wait for ever.
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
  , watchFdWaits
  , watchFdNotify
  , awaitReadable
  , awaitWritable
  , endWatch
    -- * For the dispatcher
  , onEvent
  , endRegistrations
  ) where

import Control.Concurrent
import Control.Concurrent.STM
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Word (Word32)
import Foreign.C.Types (CInt (..))
import Foreign.C.Error (Errno, eBADF, ePERM)
import GHC.IO.Exception (IOException (..))
import System.Posix.Types (Fd (..))

import qualified Weft.Event.Internal.FdTable as FT
import Weft.Event.Internal
import Weft.Event.Internal.Manager
import Weft.Event.Internal.Slot
import Weft.Internal.Counters
import Weft.Internal.Error (invalidArgument, managerShutDown, syscallError)

------------------------------------------------------------------------------
-- Slot locking

-- | Take the slot's lock and read its state. The caller is masked.
lockSlot :: Slot -> IO (SlotState Target)
lockSlot slot = takeMVar (slotLock slot) >> readIORef (slotState slot)
{-# INLINE lockSlot #-}

-- | Store the state and release the lock. The dispatcher also reads the
-- state without the lock: a read that misses this store sees an older tag
-- or older registrations, and either falls back to the lock ('onEvent')
-- or tells an edge-triggered registration that is just ending, which is
-- harmless, so a plain store suffices.
unlockSlot :: Slot -> SlotState Target -> IO ()
unlockSlot slot st = writeIORef (slotState slot) st >> putMVar (slotLock slot) ()
{-# INLINE unlockSlot #-}

-- | Release the lock, the state unchanged.
releaseSlot :: Slot -> IO ()
releaseSlot slot = putMVar (slotLock slot) ()
{-# INLINE releaseSlot #-}

-- | Change the slot under its lock, masked; the lock is released if the
-- change throws.
withSlot :: Slot -> (SlotState Target -> IO (SlotState Target, a)) -> IO a
withSlot slot change = mask_ $ do
  st <- lockSlot slot
  (st', a) <- change st `onException` releaseSlot slot
  unlockSlot slot st'
  return a

------------------------------------------------------------------------------
-- Events from the backend

-- | The backend's handler: apply one reported event to its slot. A report
-- of the edge-triggered arm goes to the edge-triggered registrations
-- without the lock; the lock is taken only if another registration wants
-- it (Note [One registration per fd] in "Weft.Event.Internal.Slot"), or if the
-- state read shows another tag: the report may come from an arm whose
-- state is not published yet, and the lock waits for it.
onEvent :: Manager -> EventHandler
onEvent mgr fd tag ev = do
  found <- FT.lookup (mgrTable mgr) (fdInt fd)
  case found of
    Nothing -> return ()
    Just slot -> do
      st <- readIORef (slotState slot)
      if ssTag st == tag && interestTrigger (ssArmed st) == Edge
        then do
          runCallbacks mgr =<< tellEdges ev (ssRegs st)
          when (othersWant ev (ssRegs st)) (fireLocked mgr fd slot tag ev False)
        else fireLocked mgr fd slot tag ev True

-- | Tell the edge-triggered registrations of a report: put their tokens
-- now, and return their callbacks, for the caller to run (after
-- unlocking, if it holds the slot's lock).
tellEdges :: Event -> [Reg Target] -> IO [IO ()]
tellEdges _ [] = return []
tellEdges ev (r : rest) = case regTarget r of
  PutTokens readable writable -> putTokens ev readable writable >> tellEdges ev rest
  Notify notify -> (notify (withoutTaken ev) :) <$> tellEdges ev rest
  _ -> tellEdges ev rest

-- | Does a registration that is not edge-triggered want the event?
othersWant :: Event -> [Reg Target] -> Bool
othersWant ev = any (\r -> not (isEdgeReg r) && regEvents r `eventIs` ev)
{-# INLINE othersWant #-}

putTokens :: Event -> MVar () -> MVar () -> IO ()
putTokens ev readable writable = do
  when (ev `eventIs` evtRead) $ void (tryPutMVar readable ())
  when (ev `eventIs` evtWrite) $ void (tryPutMVar writable ())
{-# INLINE putTokens #-}

-- | Fire the registrations the event is for, under the slot's lock, and
-- the edge-triggered ones too if asked (their callbacks run after
-- unlocking). Does nothing if the event's tag is stale (Note [Arm
-- generations]). The dispatcher runs masked, and holds the lock only for
-- pure steps, a backend arm and non-blocking cell fills.
fireLocked :: Manager -> Fd -> Slot -> Word32 -> Event -> Bool -> IO ()
fireLocked mgr fd slot tag ev withEdges = do
  st <- lockSlot slot
  if ssTag st /= tag then releaseSlot slot else do
    notified <- if withEdges && interestTrigger (ssArmed st) == Edge
      then tellEdges ev (ssRegs st) else return []
    let (fired, st1) = fireSlot ev st
        -- A level-triggered registration served by an edge-triggered arm
        -- fires again on the next poll only if the fd is checked again.
        recheck = interestTrigger (ssArmed st1) == Edge && any ((== Level) . regTrigger) fired
    (st2, callbacks, _) <- settleSlot mgr fd Nothing recheck st (map (\r -> (r, ev)) fired) st1
    unlockSlot slot st2
    runCallbacks mgr (notified ++ callbacks)

-- | At shutdown: complete every registration with 'evtClose' (a waiter
-- fails, a callback sees the close, a watch's blocked threads wake and
-- throw).
endRegistrations :: Manager -> IO ()
endRegistrations mgr = do
  slots <- FT.elems (mgrTable mgr)
  forM_ slots $ \(fd, slot) -> do
    callbacks <- withSlot slot $ \st -> do
      let (regs, st') = closeSlot st
      (st'', cbs, _) <- settleSlot mgr (Fd (fromIntegral fd)) Nothing False st [ (r, evtClose) | r <- regs ] st'
      return (st'', cbs)
    runCallbacks mgr callbacks

------------------------------------------------------------------------------
-- Arming

-- | What became of the registration being added.
data Fresh = FreshArmed | FreshReady | FreshFailed !Errno

-- | Bring the backend in line with the slot's registrations. Returns the new
-- state, the registrations that must be completed (with the event to complete
-- them with) because they can no longer be watched, and the fate of the
-- registration with the given key, if one is being added. @recheck@ arms
-- even if the armed interest is the wanted one, so that the kernel checks
-- the fd's readiness again.
syncArm :: Manager -> Fd -> Maybe Int -> Bool -> SlotState Target
        -> IO (SlotState Target, [(Reg Target, Event)], Fresh)
syncArm mgr fd fresh recheck st
  -- A new registration always arms, even if the armed interest seems to
  -- cover it: the arm is what finds an fd closed behind weft's back (Note
  -- [Fds closed behind weft's back]), and what reports an fd that is ready
  -- already to an edge-triggered arm (Note [One registration per fd]).
  | Nothing <- fresh, not recheck, not (needsArm want (ssArmed st)) = return (st, [], FreshArmed)
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
          (st'', more, outcome) <- syncArm mgr fd Nothing False (armedWith want st') { ssRegs = mine }
          return (st'', [ (o, evtClose) | o <- orphans ] ++ more, outcome)
        ArmUnsupported ->
          -- Always ready (a regular file): one-shots complete now.
          return ( clear st'
                 , [ (o, if regTrigger o == Once then regEvents o else evtClose) | o <- others ]
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
settleSlot :: Manager -> Fd -> Maybe Int -> Bool -> SlotState Target
           -> [(Reg Target, Event)] -> SlotState Target
           -> IO (SlotState Target, [IO ()], Fresh)
settleSlot mgr fd fresh recheck before completed st = do
  (st', failed, outcome) <- syncArm mgr fd fresh recheck st
  callbacks <- completeAll mgr (completed ++ failed)
  adjustLive mgr before st'
  when (backendWakeOnArm (mgrBackend mgr)) (wakeManager mgr)
  return (st', callbacks, outcome)

-- | Complete registrations: fill wait cells and put tokens now (the caller
-- holds the slot lock, Note [Reusable wait cells]) and return the
-- callbacks to run after unlocking. A watch is completed only when it
-- ends: both its tokens are put, so that its blocked threads retry.
completeAll :: Manager -> [(Reg Target, Event)] -> IO [IO ()]
completeAll _ [] = return []
completeAll mgr ((reg, ev) : rest) = case regTarget reg of
  WakeCell cell -> do
    _ <- tryPutMVar cell ev
    completeAll mgr rest
  PutTokens readable writable -> do
    _ <- tryPutMVar readable ()
    _ <- tryPutMVar writable ()
    completeAll mgr rest
  RunCallback cb -> (cb (withoutTaken ev) :) <$> completeAll mgr rest
  Notify notify -> (notify (withoutTaken ev) :) <$> completeAll mgr rest

-- | Count the change in live registrations: watches ('cWatches') apart
-- from the others ('cLive').
adjustLive :: Manager -> SlotState t -> SlotState t -> IO ()
adjustLive mgr before after = do
  let e0 = edges (ssRegs before)
      e1 = edges (ssRegs after)
      n0 = length (ssRegs before) - e0
      n1 = length (ssRegs after) - e1
  when (n1 /= n0) $ void (addCounter (mgrCounters mgr) cLive (n1 - n0))
  when (e1 /= e0) $ void (addCounter (mgrCounters mgr) cWatches (e1 - e0))
  where
    edges = length . filter isEdgeReg
{-# INLINE adjustLive #-}

------------------------------------------------------------------------------
-- Waiting

-- | The 'IOError' a waiter gets when its fd is closed under it.
closedFdError :: String -> IOError
closedFdError loc = syscallError loc eBADF

-- | The 'IOError' for an fd the backend refused to watch, with its errno.
refusedFdError :: String -> Fd -> Errno -> IOError
refusedFdError loc fd err = (syscallError loc err) { ioe_filename = Just (show fd) }

-- | The 'IOError' for a regular file, which epoll cannot watch (@EPERM@).
regularFileError :: String -> Fd -> IOError
regularFileError loc fd = (refusedFdError loc fd ePERM) { ioe_description = "a regular file cannot be watched" }

-- | Block until the fd is ready for one of the events, on this manager.
-- Throws an 'IOError' (@EBADF@) if the fd is closed with 'closeFdOn' or
-- 'Weft.closeFdWith' meanwhile, or is not a valid fd; an fd epoll cannot
-- watch (a regular file) is always ready. Async exceptions interrupt the
-- wait and leave no registration behind.
waitOn :: Manager -> Event -> Fd -> IO ()
waitOn mgr ev fd = mask_ $ do
  (slot, key, cell, fresh) <- register "threadWait" mgr fd ev Once $ \slot st _ -> do
    cell <- chooseCell slot ev st
    return (WakeCell cell, cell)
  case fresh of
    FreshReady -> return ()
    FreshFailed err -> throwIO (refusedFdError "threadWait" fd err)
    FreshArmed -> do
      got <- takeMVar cell `onException` cancelWait mgr fd slot key cell
      when (got `eventIs` evtClose) $ do
        halt' <- stopped mgr
        throwIO (if halt' then managerShutDown "threadWait" else closedFdError "threadWait")
      -- Note [Confirmed waits]
      unless (backendExactReports (mgrBackend mgr) || got `eventIs` evtTaken) $ do
        ready <- c_ready_now fd (if ev `eventIs` evtRead then 0 else 1)
        when (ready == 0) (waitOn mgr ev fd)

-- | Whether the fd is readable (0) or writable (1) now, or has an error or
-- hang-up; nonzero if the check fails (Note [Confirmed waits]).
foreign import ccall unsafe "weft_ready_now" c_ready_now :: Fd -> CInt -> IO CInt

-- | Add a registration, whose target @makeTarget@ makes from the slot, its
-- state and the key, and arm the fd. Runs masked. Throws an 'IOError' if
-- the manager was shut down.
register :: String -> Manager -> Fd -> Event -> Trigger
         -> (Slot -> SlotState Target -> Int -> IO (Target, a))
         -> IO (Slot, Int, a, Fresh)
register loc mgr fd ev trigger makeTarget = do
  slot <- FT.lookupOrCreate (mgrTable mgr) (fdInt fd)
  key <- nextKey mgr
  st <- lockSlot slot
  -- Checked under the lock, which 'endRegistrations' takes after the stop
  -- flag is set: a registration is refused, or ended by the shutdown.
  halt <- stopped mgr
  when halt $ releaseSlot slot >> throwIO (managerShutDown loc)
  (target, extra) <- makeTarget slot st key
  (st1, callbacks, fresh) <- settleSlot mgr fd (Just key) False st [] (addReg (Reg key ev trigger target) st)
  unlockSlot slot st1
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
      _ -> False

cancelWait :: Manager -> Fd -> Slot -> Int -> MVar Event -> IO ()
cancelWait mgr fd slot key cell = uninterruptibleMask_ $ do
  callbacks <- withSlot slot $ \st -> case removeReg key st of
    (Just _, st0) -> do
      (st1, cbs, _) <- settleSlot mgr fd Nothing False st [] st0
      return (st1, cbs)
    (Nothing, _) -> do
      _ <- tryTakeMVar cell
      return (st, [])
  runCallbacks mgr callbacks

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
-- finds the fd ready, until 'unregisterFd'. Any number of registrations,
-- waits and watches may share an fd (Note [One registration per fd] in
-- "Weft.Event.Internal.Slot"). The callback runs on the dispatcher thread (see
-- 'IOCallback'); it receives 'evtClose' if the fd is closed through weft.
-- Throws an 'IOError' if the fd cannot be watched: @EBADF@ for an invalid fd,
-- @EPERM@ for a regular file under epoll.
registerFd :: Manager -> IOCallback -> Fd -> Event -> Lifetime -> IO FdKey
registerFd mgr cb fd ev lifetime = mask_ $ do
  let trigger = case lifetime of OneShot -> Once; MultiShot -> Level
  (_, key, (), fresh) <- register "registerFd" mgr fd ev trigger $ \_ _ key ->
    return (RunCallback (cb (FdKey fd key)), ())
  case fresh of
    FreshArmed -> return (FdKey fd key)
    FreshReady -> throwIO (regularFileError "registerFd" fd)
    FreshFailed err -> throwIO (refusedFdError "registerFd" fd err)

-- | Cancel a registration. Does nothing if it already fired or was cancelled.
unregisterFd :: Manager -> FdKey -> IO ()
unregisterFd mgr k = void (unregisterFd_ mgr k)

-- | 'unregisterFd', returning whether the registration was still there.
unregisterFd_ :: Manager -> FdKey -> IO Bool
unregisterFd_ mgr (FdKey fd key) = do
  found <- FT.lookup (mgrTable mgr) (fdInt fd)
  maybe (return False) (\slot -> removeRegistration mgr fd slot key) found

-- | Take a registration out of its slot and re-arm for the rest; returns
-- whether it was still there.
removeRegistration :: Manager -> Fd -> Slot -> Int -> IO Bool
removeRegistration mgr fd slot key = mask_ $ do
  (removed, callbacks) <- withSlot slot $ \st -> case removeReg key st of
    (Nothing, _) -> return (st, (False, []))
    (Just _, st0) -> do
      (st1, cbs, _) <- settleSlot mgr fd Nothing False st [] st0
      return (st1, (True, cbs))
  runCallbacks mgr callbacks
  return removed

-- | Close an fd registered with these managers: drop it from each one's
-- interest set, run the close action, then fail every waiter on it with an
-- 'IOError', give every callback 'evtClose' and end every watch (its
-- blocked threads wake and retry). The fd's slots stay locked while the
-- action runs, so no registration can slip in between. If the action
-- throws, nothing is ended and the exception propagates.
closeFdOn :: [Manager] -> (Fd -> IO ()) -> Fd -> IO ()
closeFdOn mgrs close fd = mask_ $ do
  slots <- fmap concat . forM mgrs $ \m ->
    maybe [] (\s -> [(m, s)]) <$> FT.lookup (mgrTable m) (fdInt fd)
  states <- lockAll slots
  -- If the close action throws, the fd stays open: re-arm what was removed.
  let restore = forM_ (zip slots states) $ \((m, s), st) -> do
        (st', cbs, _) <- settleSlot m fd Nothing False st [] st { ssArmed = noInterest, ssKnown = False }
        unlockSlot s st'
        runCallbacks m cbs
  (`onException` restore) $ do
    forM_ (zip slots states) $ \((m, _), st) ->
      when (ssKnown st) $ withLiveBackend m (backendForget (mgrBackend m) fd)
    close fd
  callbacks <- forM (zip slots states) $ \((m, s), st) -> do
    let (regs, st') = closeSlot st
    (st'', cbs, _) <- settleSlot m fd Nothing False st [ (r, evtClose) | r <- regs ] st'
    unlockSlot s st''
    return (m, cbs)
  mapM_ (uncurry runCallbacks) callbacks
  where
    lockAll [] = return []
    lockAll ((_, s) : rest) = do
      st <- lockSlot s
      sts <- lockAll rest `onException` releaseSlot s
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
-- extra @EAGAIN@ and nothing else; so does a report caused by another
-- registration's arm (Note [One registration per fd] in "Weft.Event.Internal.Slot").
-- The edge that an fd already ready at registration needs is given by the
-- arm, which reports readiness at once.
--
-- Ending a watch puts both tokens, so blocked threads retry and find the
-- socket closed; at shutdown they are woken too, and the await throws.

-- | Register an fd with the manager, edge-triggered, once for its whole
-- life, for use with 'awaitReadable' and 'awaitWritable'. Returns 'Nothing'
-- if the backend has no edge-triggered readiness (poll): use 'waitOn' then.
-- Throws an 'IOError' if the fd cannot be watched (@EBADF@; @EPERM@ for a
-- regular file) or the manager was shut down. Other registrations and
-- watches of the fd work beside it. End it with 'endWatch', or close the
-- fd with 'closeFdOn', which ends it.
watchFdWaits :: Manager -> Fd -> IO (Maybe Watch)
watchFdWaits mgr fd = newWatch mgr fd (PutTokens <$> newEmptyMVar <*> newEmptyMVar)

-- | Like 'watchFdWaits', but each report goes to the callback, on the
-- dispatcher's thread, instead of to tokens: 'awaitReadable' and
-- 'awaitWritable' are not for such a watch. The callback gets every edge
-- (a report may carry both directions, and a direction that was already
-- ready), must not block, and is guarded: an exception it throws is
-- reported and counted, and the dispatcher carries on. It gets 'evtClose'
-- when the fd is closed through weft. A report the dispatcher harvested
-- before 'endWatch' may still reach the callback just after it returns,
-- so what the callback acts on must tolerate a late call (a closed
-- connection ignoring it); a later registration of the same fd number
-- never gets the old one's reports (Note [Arm generations]).
watchFdNotify :: Manager -> Fd -> (Event -> IO ()) -> IO (Maybe Watch)
watchFdNotify mgr fd notify = newWatch mgr fd (return (Notify notify))

newWatch :: Manager -> Fd -> IO Target -> IO (Maybe Watch)
newWatch mgr fd makeTarget
  | not (backendEdges (mgrBackend mgr)) = return Nothing
  | otherwise = mask_ $ do
      (slot, key, target, fresh) <- register "watchFd" mgr fd (evtRead <> evtWrite) Edge $ \_ _ _ -> do
        t <- makeTarget
        return (t, t)
      case fresh of
        FreshArmed -> return (Just (Watch key fd slot target mgr))
        FreshReady -> throwIO (regularFileError "watchFd" fd)
        FreshFailed err -> throwIO (refusedFdError "watchFd" fd err)

-- | Block until the watched fd may have become readable since the last
-- 'awaitReadable' returned, or the watch ended: then retry the syscall that
-- said @EAGAIN@. Returns at once if that happened meanwhile. Throws an
-- 'IOError' if the manager was shut down, or (@InvalidArgument@) if the
-- watch was made by 'watchFdNotify'. Async exceptions interrupt it and
-- leave nothing behind.
awaitReadable :: Watch -> IO ()
awaitReadable w = case watchTarget w of
  PutTokens readable _ -> awaitToken w readable
  _ -> throwIO (noTokens "awaitReadable")
{-# INLINE awaitReadable #-}

-- | 'awaitReadable' for writability.
awaitWritable :: Watch -> IO ()
awaitWritable w = case watchTarget w of
  PutTokens _ writable -> awaitToken w writable
  _ -> throwIO (noTokens "awaitWritable")
{-# INLINE awaitWritable #-}

noTokens :: String -> IOError
noTokens loc = invalidArgument loc "a watch made by watchFdNotify has no readiness tokens"

awaitToken :: Watch -> MVar () -> IO ()
awaitToken w token = do
  takeMVar token
  halt <- stopped (watchManager w)
  when halt $ do
    -- Leave the token for the other waiters, who must fail too.
    _ <- tryPutMVar token ()
    throwIO (managerShutDown "await")
{-# INLINE awaitToken #-}

-- | End a watch: take it out of the fd's registrations (the fd is re-armed
-- for the others, if any) and wake the threads blocked on it, whose awaits
-- return. Idempotent; a watch ended by 'closeFdOn' is left alone.
endWatch :: Watch -> IO ()
endWatch w = mask_ $ do
  _ <- removeRegistration (watchManager w) (watchedFd w) (watchSlot w) (watchKey w)
  case watchTarget w of
    PutTokens readable writable -> do
      _ <- tryPutMVar readable ()
      void (tryPutMVar writable ())
    _ -> return ()
