-- | The dispatcher's spin policy: how long to keep polling without
-- blocking once the events stop coming. A pure value, updated by the
-- dispatcher that owns it after every dry spell; unstable, internal.
--
-- Note [Adaptive spinning]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A dry spell is the time from the dispatcher's first poll that finds
-- nothing to the next poll that finds events. Spinning through it
-- (non-blocking polls and 'yield's) saves a blocking poll: a safe foreign
-- call that hands the capability over, and a kernel wakeup of a sleeping
-- thread (in a VM, often an exit from the idle loop) when the event
-- comes, which adds tens of microseconds to the woken request's latency.
-- But every spun microsecond is CPU: on a core the dispatcher has to
-- itself it is only counted against the server; on a core shared with the
-- load generator or other processes it is taken from them.
--
-- A short spell (one connection in ping-pong: the next request ends it)
-- is worth spinning through: the round trip shrinks and the CPU per
-- request barely moves, since the core is busy anyway. A long one (many
-- connections, the load generator sharing the core) is not: a blocking
-- poll and its wakeup cost less CPU than spinning through it, and the
-- spin takes the core from the load. (The spells measured on each side,
-- and what spinning through them cost: docs/results/spin.txt and
-- docs/design.md, "Spinning".)
--
-- So a spell is worth spinning through only if it is short: at most
-- 'breakEvenNs' (15 µs), between the two kinds. The policy keeps a score of the
-- recent spells it spun through: +1 for one that ended within the
-- break-even, -1 for one that did not, clamped to ±'scoreLimit'. While the
-- score is positive the window is the cap (@WEFT_SPIN_US@, 50 µs by
-- default, so a spell that runs a little long is still caught); otherwise
-- the dispatcher blocks at once, as in the Mio loop, except that every
-- 'probeEvery'-th spell it spins for the break-even as a probe, so a
-- change of load is noticed. Spells it blocked through do not count: their
-- length includes the wakeup latency, so they would look long whatever
-- the load. A cap of 0 turns spinning off.
--
-- And across capabilities ('Weft.Event.Internal.Core'), at most one dispatcher
-- spins at a time: a second one that runs dry blocks at once. Two
-- spinning dispatchers keep both cores of a small machine busy.

module Weft.Event.Internal.Spin
  ( SpinPolicy
  , spinAdaptive
  , spinWindow
  , newSpinPolicy
  , endSpell
  , breakEvenNs
  , scoreLimit
  , probeEvery
  ) where

import Data.Word (Word64)

-- | The policy's state. Times are in nanoseconds.
data SpinPolicy = SpinPolicy
  { spinAdaptive :: !Bool
    -- ^ 'False': the fixed window of earlier weft versions (always the
    -- cap, and no limit on how many dispatchers spin at once), kept to
    -- measure against (@WEFT_SPIN_POLICY=fixed@).
  , spinCap      :: {-# UNPACK #-} !Word64
    -- ^ The most the window can be (@WEFT_SPIN_US@).
  , spinScore    :: {-# UNPACK #-} !Int
    -- ^ Recent spun spells within the break-even, less those beyond it.
  , spinProbe    :: {-# UNPACK #-} !Int
    -- ^ Spells until the next probe, while the score is not positive.
  } deriving (Eq, Show)

-- | Spells at most this long are worth spinning through (Note [Adaptive
-- spinning]).
breakEvenNs :: Word64
breakEvenNs = 15000

-- | The score's bound either way: how many spells of the other kind it
-- takes to change the policy's mind.
scoreLimit :: Int
scoreLimit = 4

-- | While not spinning, one spell in this many is a probe.
probeEvery :: Int
probeEvery = 16

-- | An adaptive ('True') or fixed policy with the given cap, starting out
-- spinning.
newSpinPolicy :: Bool -> Word64 -> SpinPolicy
newSpinPolicy adaptive cap = SpinPolicy adaptive cap 1 probeEvery

-- | How long to spin through the next dry spell before blocking: the cap
-- while spinning pays, the break-even on a probe, else 0.
spinWindow :: SpinPolicy -> Word64
spinWindow (SpinPolicy adaptive cap score probe)
  | not adaptive || cap == 0 = cap
  | score > 0 = cap
  | probe <= 0 = min cap breakEvenNs
  | otherwise = 0

-- | A dry spell of the given length ended; the flag says whether the
-- dispatcher spun through it (or through its start), rather than blocking
-- at once (Note [Adaptive spinning]).
endSpell :: Bool -> Word64 -> SpinPolicy -> SpinPolicy
endSpell spun spell p@(SpinPolicy adaptive cap score probe)
  | not adaptive || cap == 0 = p
  | window == 0 = p { spinProbe = probe - 1 }
  | not spun = p
  | spell <= breakEvenNs = p { spinScore = min scoreLimit (max 1 (score + 1)), spinProbe = probeEvery }
  | otherwise = p { spinScore = max (negate scoreLimit) (score - 1), spinProbe = probeEvery }
  where window = spinWindow p
