{-# LANGUAGE BangPatterns #-}
-- | The state of one fd in one manager, and its transitions. Pure, so the
-- rules can be tested against a model; the manager applies them while it
-- holds the slot's lock.
module Weft.Event.Slot
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
  ) where

import Data.Bits ((.&.))
import Data.Word (Word32)

import Weft.Event.Internal

-- | One registration: a waiter or a callback, with what it waits for.
data Reg t = Reg
  { regKey      :: {-# UNPACK #-} !Int
  , regEvents   :: {-# UNPACK #-} !Event
  , regLifetime :: !Lifetime
  , regTarget   :: !t
  }

data SlotState t = SlotState
  { ssRegs  :: ![Reg t]
  , ssArmed :: !Interest
    -- ^ What the kernel watches now, as far as weft knows.
  , ssKnown :: !Bool
    -- ^ Whether the fd is in the backend's interest set.
  , ssTag   :: {-# UNPACK #-} !Word32
    -- ^ Generation: bumped when the fd is closed through weft, so events
    -- armed before are recognised as stale.
  }

emptySlotState :: SlotState t
emptySlotState = SlotState [] noInterest False 0

-- | What the registrations need: the union of their events, persistent if
-- any is 'MultiShot'.
wantedInterest :: [Reg t] -> Interest
wantedInterest = go evtNothing False
  where
    go !evs !multi [] = Interest evs multi
    go !evs !multi (r : rest) =
      go (evs <> regEvents r) (multi || regLifetime r == MultiShot) rest

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

-- | Apply a reported event: return the registrations it fires and the new
-- state. Fired one-shots leave; multi-shots stay. A one-shot watch is
-- disarmed by its report. 'evtClose' fires every registration and empties
-- the slot.
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
      | not (regEvents r `eventIs` ev) = go fired (r : kept) rest
      | regLifetime r == MultiShot = go (r : fired) (r : kept) rest
      | otherwise = go (r : fired) kept rest

-- | Must the backend be told, to go from the armed interest to the wanted one?
-- A one-shot watch of more events than wanted is left alone (it costs at
-- most one spurious report); a persistent one must match exactly, or it
-- would report events nobody waits for on every poll.
needsArm :: Interest -> Interest -> Bool
needsArm (Interest want wantP) (Interest armed armedP)
  | armedP = not wantP || want /= armed
  | otherwise = want /= evtNothing && (wantP || not (want `eventSubset` armed))

-- | The state after the backend armed this interest.
armedWith :: Interest -> SlotState t -> SlotState t
armedWith i st =
  st { ssArmed = i, ssKnown = ssKnown st || interestEvents i /= evtNothing }

-- | Forget everything about the fd (it is being closed): return every
-- registration, and bump the generation.
closeSlot :: SlotState t -> ([Reg t], SlotState t)
closeSlot st = (ssRegs st, SlotState [] noInterest False (nextSlotTag (ssTag st)))

-- | The tag after this one. Slot tags keep the top bit clear: tags with it
-- set name edge-triggered watches (Note [Edge-triggered watches] in
-- "Weft.Event.Manager").
nextSlotTag :: Word32 -> Word32
nextSlotTag t = (t + 1) .&. 0x7fffffff
{-# INLINE nextSlotTag #-}
