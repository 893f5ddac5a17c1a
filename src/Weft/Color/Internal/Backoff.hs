-- | When a thief should not steal: the back-off that keeps stealing from
-- costing where it gains nothing (Note [Stealing back-off]). Pure, so
-- that a test can check its decisions against a model.
-- Internal and unstable: import "Weft.Color".
module Weft.Color.Internal.Backoff
  ( stealPaid
  , nextLevel
  , backoffNanos
  , maxLevel
  , fixedStealNanos
  , firstBackoffNanos
  ) where

import Data.Bits (shiftL)

-- Note [Stealing back-off]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A steal costs more than its own pass shows: the thief is often woken
-- for it (a futex wake and a context switch, on both cores), the stolen
-- color's data moves to the thief's caches, and on a machine whose
-- cores also run other processes (the load generator, say) the thief
-- takes a core they wanted. On a balanced load the colors stolen are
-- short queues that their owner would have run a few microseconds later,
-- and every policy then serves fewer requests than no stealing at all.
--
-- So each worker judges its steals by what they brought. After a steal,
-- it times the batches of the stolen color it runs until it is idle
-- again (its own colors' work would have run anyway): the steal paid if
-- that work ran for at least twice the steal pass ('stealPaid') plus
-- 'fixedStealNanos' (20 us) for the costs the pass does not see. Each
-- steal that did not pay raises the worker's back-off level by one; one
-- that paid lowers it by two ('nextLevel'). At level l > 0 the worker
-- does not steal for 'backoffNanos' l (20 us, doubling per level, up to
-- 5.12 ms at 'maxLevel' 9) after its last steal: it neither steals when
-- idle nor is woken by busy workers to steal, and when it sleeps it sets
-- a timer for the end of its back-off, so that a victim stuck in a long
-- handler is still relieved (at worst one color per 5 ms).
--
-- A worker at level 0 steals as the policy says, so an imbalanced load,
-- whose steals pay, keeps the policy's behaviour; two paying steals undo
-- four that did not.

-- | The fixed costs of a steal that its own timing does not see, in ns.
fixedStealNanos :: Int
fixedStealNanos = 20000

-- | Did a steal pay? @stealPaid took ran@: the steal pass took @took@ ns,
-- and the work the thief then ran before it was idle again took @ran@ ns.
stealPaid :: Int -> Int -> Bool
stealPaid took ran = ran >= 2 * took + fixedStealNanos

-- | The back-off level after a steal: lower by two if it paid, else
-- higher by one; always within [0, 'maxLevel'].
nextLevel :: Bool -> Int -> Int
nextLevel paid level
  | paid = max 0 (level - 2)
  | otherwise = min maxLevel (level + 1)

-- | The highest back-off level.
maxLevel :: Int
maxLevel = 9

-- | The back-off at level 1, in ns.
firstBackoffNanos :: Int
firstBackoffNanos = 20000

-- | How long a worker at this level waits after a steal before it steals
-- again, in ns: none at level 0, then 'firstBackoffNanos' doubling per
-- level.
backoffNanos :: Int -> Int
backoffNanos level
  | level <= 0 = 0
  | otherwise = firstBackoffNanos `shiftL` (min maxLevel level - 1)
