{-# LANGUAGE BangPatterns #-}
-- | ixy's hybrid receive rule: poll while a queue is busy, block in weft's
-- I/O manager while it is idle.
-- Internal and unstable: import "Weft.Packet", which re-exports what users need.
--
-- Note [The hybrid rule]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- Polling an empty queue burns a core; blocking on every empty poll costs
-- a wait and a wakeup per batch, which at a million packets per second is
-- most of the budget. ixy (src/interrupts.c) decides per queue from the
-- recent packet rate, and so does weft:
--
--   * Packets are counted per sampling interval ('hcIntervalNanos', 1 ms by
--     default). At the end of each interval the rate in packets per
--     millisecond enters a moving average over the last 'hcWindow' (5)
--     intervals.
--   * The queue is busy, and is polled, while that average is at least
--     'hcThreshold' (1200 packets/ms, i.e. 1.2 Mpps, as in ixy) or the
--     last batch came back full (more is surely waiting).
--   * Otherwise it is idle: an empty poll blocks in 'waitRx' until the
--     device says packets may be there.
--
-- A busy queue that finds nothing yields its capability instead of
-- blocking, so another queue's thread on the same capability runs.
-- Reading the clock costs about 20 ns; it is read once per batch, which
-- is less than a nanosecond per packet at the batch sizes that matter.
module Weft.Packet.Internal.Hybrid
  ( HybridConfig (..)
  , defaultHybridConfig
  , Hybrid
  , newHybrid
  , receive
  , isPolling
  , HybridStats (..)
  , hybridStats
  ) where

import Control.Concurrent (yield)
import Control.Monad (when)
import Data.Primitive.PrimArray
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Exts (RealWorld)
import Weft.Packet.Internal.Device
import Weft.Packet.Internal.MemPool (BufferArray)

-- | The rule's parameters (Note [The hybrid rule]).
data HybridConfig = HybridConfig
  { hcThreshold     :: !Int  -- ^ packets per millisecond at or above which a queue is polled
  , hcWindow        :: !Int  -- ^ intervals in the moving average (at least 1)
  , hcIntervalNanos :: !Int  -- ^ length of a sampling interval, in ns
  }

-- | ixy's values: 1200 packets/ms, 5 intervals, 1 ms intervals.
defaultHybridConfig :: HybridConfig
defaultHybridConfig = HybridConfig { hcThreshold = 1200, hcWindow = 5, hcIntervalNanos = 1000000 }

-- | One queue's state. Owned by the queue's thread.
data Hybrid = Hybrid !HybridConfig !(MutablePrimArray RealWorld Int)

hyState :: Hybrid -> MutablePrimArray RealWorld Int
hyState (Hybrid _ st) = st

-- Cells of hyState; the window's samples follow.
cPackets, cStart, cNext, cFilled, cSum, cPolling, cWaits, cSwitches, cSamples :: Int
cPackets = 0   -- packets in the current interval
cStart = 1     -- when the current interval began (ns)
cNext = 2      -- the window slot the next sample goes to
cFilled = 3    -- how many slots hold samples
cSum = 4       -- sum of the samples in the window
cPolling = 5   -- 1 while polling
cWaits = 6     -- how many times the queue blocked
cSwitches = 7  -- mode changes
cSamples = 8

-- | A new queue state, in the idle (blocking) mode.
newHybrid :: HybridConfig -> IO Hybrid
newHybrid cfg0 = do
  let cfg = cfg0 { hcWindow = max 1 (hcWindow cfg0), hcIntervalNanos = max 1 (hcIntervalNanos cfg0) }
  st <- newPrimArray (cSamples + hcWindow cfg)
  setPrimArray st 0 (cSamples + hcWindow cfg) 0
  now <- getMonotonicTimeNSec
  writePrimArray st cStart (fromIntegral now)
  pure (Hybrid cfg st)

-- | Whether the queue is in the polling mode.
isPolling :: Hybrid -> IO Bool
isPolling h = (/= 0) <$> readPrimArray (hyState h) cPolling

-- | Counters for reporting.
data HybridStats = HybridStats
  { hybridWaits    :: !Int  -- ^ times the queue blocked in 'waitRx'
  , hybridSwitches :: !Int  -- ^ changes between polling and blocking
  } deriving (Eq, Show)

hybridStats :: Hybrid -> IO HybridStats
hybridStats h = HybridStats <$> readPrimArray (hyState h) cWaits
                            <*> readPrimArray (hyState h) cSwitches

-- | @receive h dev q arr n@ is 'rxBatch' under the hybrid rule. It returns
-- the number of buffers received, as 'rxBatch' does. When the queue is idle
-- and empty it blocks first (so a 0 then means the wait returned early,
-- e.g. at a device's timeout); when it is busy and empty it yields and
-- returns 0. The thread must be the queue's owner.
receive :: Hybrid -> Device -> QueueId -> BufferArray -> Int -> IO Int
receive h dev q arr n = do
  k <- rxBatch dev q arr n
  polling <- account h k n
  if k > 0
    then pure k
    else if polling
      then yield >> pure 0
      else do
        bump (hyState h) cWaits
        waitRx dev q
        k' <- rxBatch dev q arr n
        _ <- account h k' n
        pure k'

-- | Counts a batch and updates the mode; returns whether to poll.
account :: Hybrid -> Int -> Int -> IO Bool
account (Hybrid cfg st) k n = do
  pk <- readPrimArray st cPackets
  let pk' = pk + k
  writePrimArray st cPackets pk'
  now <- fromIntegral <$> getMonotonicTimeNSec
  start <- readPrimArray st cStart
  let elapsed = now - start
  when (elapsed >= hcIntervalNanos cfg) $ do
    -- packets per ms over the interval just ended
    let rate = (pk' * 1000000) `quot` max 1 elapsed
    slot <- readPrimArray st cNext
    old <- readPrimArray st (cSamples + slot)
    s <- readPrimArray st cSum
    writePrimArray st cSum (s - old + rate)
    writePrimArray st (cSamples + slot) rate
    writePrimArray st cNext ((slot + 1) `rem` hcWindow cfg)
    filled <- readPrimArray st cFilled
    when (filled < hcWindow cfg) $ writePrimArray st cFilled (filled + 1)
    writePrimArray st cPackets 0
    writePrimArray st cStart now
  s <- readPrimArray st cSum
  filled <- max 1 <$> readPrimArray st cFilled
  let busy = k == n || s `quot` filled >= hcThreshold cfg
  was <- readPrimArray st cPolling
  let now' = if busy then 1 else 0
  when (was /= now') $ do
    writePrimArray st cPolling now'
    bump st cSwitches
  pure busy
{-# INLINE account #-}

bump :: MutablePrimArray RealWorld Int -> Int -> IO ()
bump st i = readPrimArray st i >>= writePrimArray st i . (+ 1)
{-# INLINE bump #-}
