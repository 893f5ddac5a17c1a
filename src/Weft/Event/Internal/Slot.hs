{-# LANGUAGE BangPatterns #-}
-- | The state of one fd in one manager, and its transitions. Pure, so the
-- rules can be tested against a model; the manager applies them while it
-- holds the slot's lock.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [One registration per fd]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Everything that waits for one fd on one manager is a registration in the
-- fd's slot: a blocked 'Weft.threadWaitRead' (one-shot), a
-- 'Weft.Event.registerFd' callback (one-shot or level-triggered), a
-- "Weft.Net" socket's readiness tokens and a "Weft.Color" watch
-- (edge-triggered). The kernel sees one registration, armed for what they
-- want together ('wantedInterest'):
--
--   * with no edge-triggered registration, the union of their events,
--     level-triggered if any is, else one-shot;
--   * with one, reads and writes, edge-triggered. Edge-triggered
--     registrations get every report, lock-free; the others fire on the
--     reports that carry their events ('fireSlot'). A new one-shot arms
--     again, which makes the kernel report the fd if it is ready already
--     (no edge would announce that), and so does a level-triggered one
--     after it fired, which makes it fire on every poll while the fd stays
--     ready, as without an edge. Those arms cost an @epoll_ctl@; the
--     edge-triggered users never do.
--
-- So any two users of one fd work together, and a fd closed through weft
-- ends them all at once.
module Weft.Event.Internal.Slot
  ( Reg (..)
  , SlotState (..)
  , emptySlotState
  , wantedInterest
  , addReg
  , removeReg
  , fireSlot
  , needsArm
  , armedWith
  , closeSlot
  , nextSlotTag
  , isEdgeReg
  ) where

import Data.Bits ((.&.))
import Data.Word (Word32)

import Weft.Event.Internal

-- | One registration: a waiter, a callback or a watch, with what it waits
-- for and how it wants to be told.
data Reg t = Reg
  { regKey     :: {-# UNPACK #-} !Int
  , regEvents  :: {-# UNPACK #-} !Event
  , regTrigger :: !Trigger
  , regTarget  :: !t
  }

data SlotState t = SlotState
  { ssRegs  :: ![Reg t]
  , ssArmed :: !Interest
    -- ^ What the kernel watches now, as far as weft knows.
  , ssKnown :: !Bool
    -- ^ Whether the fd is in the backend's interest set.
  , ssTag   :: {-# UNPACK #-} !Word32
    -- ^ Generation: bumped by every arm and when the fd is closed through
    -- weft, so events armed before are recognised as stale.
  }

emptySlotState :: SlotState t
emptySlotState = SlotState [] noInterest False 0

isEdgeReg :: Reg t -> Bool
isEdgeReg r = regTrigger r == Edge
{-# INLINE isEdgeReg #-}

-- | What the registrations need (Note [One registration per fd]).
wantedInterest :: [Reg t] -> Interest
wantedInterest = go evtNothing Once
  where
    go !evs !trig [] = Interest evs trig
    go !evs !trig (r : rest) = case regTrigger r of
      Edge -> Interest (evtRead <> evtWrite) Edge
      Level -> go (evs <> regEvents r) Level rest
      Once -> go (evs <> regEvents r) trig rest

addReg :: Reg t -> SlotState t -> SlotState t
addReg r st = st { ssRegs = r : ssRegs st }

-- | Take out the registration with this key, if it is still there.
removeReg :: Int -> SlotState t -> (Maybe (Reg t), SlotState t)
removeReg key st = go [] (ssRegs st)
  where
    go _ [] = (Nothing, st)
    go seen (r : rest)
      | regKey r == key = let !regs = reverse seen ++ rest in (Just r, st { ssRegs = regs })
      | otherwise = go (r : seen) rest

-- | Apply a reported event to the registrations that are not
-- edge-triggered (the dispatcher tells those itself): return the ones it
-- fires and the new state. Fired one-shots leave; level-triggered ones
-- stay. A one-shot arm is disarmed by its report. 'evtClose' fires every
-- registration, edge-triggered ones too, and empties the slot.
fireSlot :: Event -> SlotState t -> ([Reg t], SlotState t)
fireSlot ev st
  | ev `eventIs` evtClose = (ssRegs st, st { ssRegs = [], ssArmed = noInterest })
  | otherwise = go [] [] (ssRegs st)
  where
    go fired kept [] =
      let !armed' | interestPersistent (ssArmed st) = ssArmed st
                  | otherwise = noInterest
      in (fired, st { ssRegs = kept, ssArmed = armed' })
    go fired kept (r : rest)
      | isEdgeReg r || not (regEvents r `eventIs` ev) = go fired (r : kept) rest
      | regTrigger r == Level = go (r : fired) (r : kept) rest
      | otherwise = go (r : fired) kept rest

-- | Must the backend be told, to go from the armed interest to the wanted one?
-- A one-shot arm of more events than wanted is left alone (it costs at
-- most one spurious report); a persistent one must match exactly, or it
-- would report events nobody waits for on every poll.
needsArm :: Interest -> Interest -> Bool
needsArm want armed
  | interestPersistent armed = want /= armed
  | otherwise = interestEvents want /= evtNothing
                && (interestPersistent want || not (interestEvents want `eventSubset` interestEvents armed))

-- | The state after the backend armed this interest.
armedWith :: Interest -> SlotState t -> SlotState t
armedWith i st =
  st { ssArmed = i, ssKnown = ssKnown st || interestEvents i /= evtNothing }

-- | Forget everything about the fd (it is being closed): return every
-- registration, and bump the generation.
closeSlot :: SlotState t -> ([Reg t], SlotState t)
closeSlot st = (ssRegs st, SlotState [] noInterest False (nextSlotTag (ssTag st)))

-- | The tag after this one. Tags keep the top bit clear, so that no tag is
-- the wakeup fd's @0xffffffff@.
nextSlotTag :: Word32 -> Word32
nextSlotTag t = (t + 1) .&. 0x7fffffff
{-# INLINE nextSlotTag #-}
