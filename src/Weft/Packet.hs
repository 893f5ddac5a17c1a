-- | User-space packet I/O in the style of ixy: devices with batched,
-- non-blocking receive and transmit queues over pools of fixed-size
-- buffers.
--
-- Two backends implement 'Device':
--
--   * @afpacket:IFNAME[:QUEUES]@: real traffic on a Linux interface
--     through AF_PACKET mmap rings ("Weft.Packet.AfPacket"). More than one
--     queue spreads receiving over a hash fanout group.
--   * @model:N[:OPTIONS]@: weft's ixgbe (Intel 82599) driver running
--     against a software model of the device ("Weft.Packet.Ixgbe",
--     "Weft.Packet.Ixgbe.Model"). The driver is written against an
--     abstract register window and DMA memory; real hardware would need
--     VFIO, which this package does not set up.
--
-- A receive loop is one thread per queue; "Weft.Packet.Hybrid" makes it
-- poll while busy and block in weft's I/O manager while idle. Buffers
-- move between pools and devices under the rule of Note [Batch ownership]
-- in "Weft.Packet.Device".
module Weft.Packet
  ( -- * Opening devices
    openDevice
  , DeviceName (..)
  , parseDeviceName
    -- * Devices
  , module Weft.Packet.Device
    -- * Buffers and pools
  , module Weft.Packet.MemPool
    -- * Receiving under the hybrid rule
  , module Weft.Packet.Hybrid
    -- * Headers
  , module Weft.Packet.Headers
  ) where

import Control.Exception (throwIO)
import Data.Char (isDigit)

import Weft.Packet.AfPacket (defaultAfPacketConfig, openAfPacket)
import Weft.Packet.Device
import Weft.Packet.Headers
import Weft.Packet.Hybrid
-- TEMP import qualified Weft.Packet.Ixgbe.Model as Model
import Weft.Packet.MemPool

-- | A parsed device name.
data DeviceName
  = AfPacketName String Int      -- ^ interface, number of queues
  | ModelName Int String         -- ^ port index, the model's options as given
  deriving (Eq, Show)

-- | Parses @afpacket:IFNAME[:QUEUES]@ or @model:N[:OPTIONS]@.
parseDeviceName :: String -> Either String DeviceName
parseDeviceName name = case break (== ':') name of
  ("afpacket", ':' : rest) -> case break (== ':') rest of
    ("", _) -> Left "afpacket needs an interface name"
    (ifname, "") -> Right (AfPacketName ifname 1)
    (ifname, ':' : q)
      | not (null q), all isDigit q, let n = read q, n >= 1, n <= 64 -> Right (AfPacketName ifname n)
      | otherwise -> Left ("the queue count must be 1 to 64, not " ++ show q)
    _ -> Left "unreachable"
  ("model", ':' : rest) -> case break (== ':') rest of
    (n, opts)
      | not (null n), all isDigit n, length n <= 4 -> Right (ModelName (read n) (drop 1 opts))
      | otherwise -> Left ("the model port must be a number, not " ++ show n)
  _ -> Left "expected afpacket:IFNAME[:QUEUES] or model:N[:OPTIONS]"

-- | Opens a device by name. Throws 'BadDeviceName' for a name that does
-- not parse, and the backend's 'DeviceInitFailed' when the device cannot
-- be set up (no such interface, not permitted, the model refusing to come
-- up).
openDevice :: String -> IO Device
openDevice name = case parseDeviceName name of
  Left why -> throwIO (BadDeviceName name why)
  Right (AfPacketName ifname queues) -> openAfPacket defaultAfPacketConfig ifname queues
  Right (ModelName _ _) -> throwIO (BadDeviceName name "TEMP")
