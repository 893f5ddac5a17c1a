-- | The device interface every packet backend implements: ixy's
-- @ixy_device@ as a record of functions.
-- Internal and unstable: import "Weft.Packet", which re-exports what users need.
--
-- Ownership of buffers (Note [Batch ownership]) is the contract that keeps
-- pools leak-free, so every backend and every application follows it.
module Weft.Packet.Internal.Device
  ( QueueId
  , Device (..)
  , DeviceStats (..)
  , zeroStats
  , statsDelta
  , DeviceError (..)
  ) where

import Control.Exception (Exception)
import Data.Word (Word64)
import Weft.Packet.Internal.Headers (MacAddress)
import Weft.Packet.Internal.MemPool (BufferArray, MemPool)

-- Note [Batch ownership]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- rxBatch dev q arr n writes k <= n received buffers to arr[0..k) and
-- returns k. Those buffers now belong to the caller; they come from the
-- queue's pool (rxPool dev q) and the caller must eventually free them or
-- hand them to txBatch.
--
-- txBatch dev q arr n takes the first k <= n buffers of arr[0..n) and
-- returns k. Those k now belong to the device, which frees them to their
-- pool once sent (a ring backend copies and frees at once; a DMA backend
-- frees when it cleans the descriptor). The rest, arr[k..n), still belong
-- to the caller, which must retry or free them. ixy's C code follows this
-- rule; a send that returns nothing and keeps nothing leaks buffers
-- whenever the ring is full.
--
-- Both calls never block: an empty queue gives 0, a full ring takes 0.
-- Waiting is waitRx's job (see Weft.Packet.Internal.Hybrid).

-- | A queue index, from 0.
type QueueId = Int

-- | Counters since the device was opened.
data DeviceStats = DeviceStats
  { statRxPackets :: !Word64
  , statTxPackets :: !Word64
  , statRxBytes   :: !Word64  -- ^ frame bytes without the CRC
  , statTxBytes   :: !Word64
  , statRxDropped :: !Word64  -- ^ frames the device lost for want of room (ring or pool full)
  } deriving (Eq, Show)

-- | All zero.
zeroStats :: DeviceStats
zeroStats = DeviceStats 0 0 0 0 0

-- | @statsDelta new old@: what happened between two readings.
statsDelta :: DeviceStats -> DeviceStats -> DeviceStats
statsDelta a b = DeviceStats
  { statRxPackets = statRxPackets a - statRxPackets b
  , statTxPackets = statTxPackets a - statTxPackets b
  , statRxBytes = statRxBytes a - statRxBytes b
  , statTxBytes = statTxBytes a - statTxBytes b
  , statRxDropped = statRxDropped a - statRxDropped b
  }

-- | A packet device: one port with receive and transmit queues.
--
-- Each queue has a single owner: one thread calls 'rxBatch' (or
-- 'txBatch') on it at a time. Different queues may be driven from
-- different threads.
data Device = Device
  { deviceName   :: String
    -- ^ the name it was opened with, e.g. @afpacket:veth0@ or @model:0@
  , rxQueueCount :: !Int
  , txQueueCount :: !Int
  , rxBatch      :: QueueId -> BufferArray -> Int -> IO Int
    -- ^ receive up to @n@ packets without waiting; see Note [Batch ownership]
  , txBatch      :: QueueId -> BufferArray -> Int -> IO Int
    -- ^ send up to @n@ packets without waiting, returning how many it took
  , rxPool       :: QueueId -> MemPool
    -- ^ the pool a receive queue allocates from
  , waitRx       :: QueueId -> IO ()
    -- ^ blocks the calling thread (in weft's I/O manager where there is
    -- an fd) until the queue may have packets; may return early
  , readStats    :: IO DeviceStats
    -- ^ totals since open. A backend with clear-on-read hardware counters
    -- folds them in on each call, as ixy's @read_stats@ does.
  , setPromisc   :: Bool -> IO ()
  , linkSpeed    :: IO Int
    -- ^ Mbit/s; 0 while the link is down
  , macAddress   :: IO MacAddress
  , closeDevice  :: IO ()
    -- ^ releases the device; buffers it held go back to their pools
  }

-- | A device that cannot be opened or has failed. The text says what was
-- expected and what was found.
data DeviceError
  = BadDeviceName !String !String  -- ^ the name, and why
  | DeviceInitFailed !String !String  -- ^ the device, and the step that failed
  | DeviceFault !String !String  -- ^ the device, and what went wrong while running
  deriving (Eq, Show)

instance Exception DeviceError
