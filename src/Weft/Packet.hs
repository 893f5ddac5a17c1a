{-# LANGUAGE CPP #-}
-- | User-space packet I/O in the style of ixy: devices with batched,
-- non-blocking receive and transmit queues over pools of fixed-size
-- buffers.
--
-- Two backends implement 'Device':
--
--   * @afpacket:IFNAME[:QUEUES]@: real traffic on a Linux interface
--     through AF_PACKET mmap rings ("Weft.Packet.Internal.AfPacket"). More than one
--     queue spreads receiving over a hash fanout group.
--   * @model:N[:OPTIONS]@: weft's ixgbe (Intel 82599) driver running
--     against a software model of the device ("Weft.Packet.Internal.Ixgbe",
--     "Weft.Packet.Internal.Ixgbe.Model"), port N, with the model's DMA engine on
--     its own thread. The driver is written against an abstract register
--     window and DMA memory; real hardware would need VFIO, which this
--     package does not set up (and this VM does not have). OPTIONS, comma
--     separated: @loop@ (the default: the port is cabled to itself),
--     @wire=IFNAME@ (cabled to a real interface through AF_PACKET), and
--     @fault=link-down|stuck-reset|bad-rx-desc|bad-tx-desc@ (inject a
--     fault, see 'Model.Fault').
--
-- A receive loop is one thread per queue; "Weft.Packet.Internal.Hybrid" makes it
-- poll while busy and block in weft's I/O manager while idle. Buffers
-- move between pools and devices under the rule of Note [Batch ownership]
-- in "Weft.Packet.Internal.Device".
--
-- For example, forwarding everything one device receives on queue 0 out of
-- another's queue 0 (one direction):
--
-- > import Weft.Packet
-- >
-- > forward :: Device -> Device -> IO ()
-- > forward a b = do
-- >   hybrid <- newHybrid defaultHybridConfig
-- >   bufs <- newBufferArray 32
-- >   let loop = do
-- >         n <- receive hybrid a 0 bufs 32        -- polls while busy, blocks in weft while idle
-- >         sent <- txBatch b 0 bufs n             -- the device owns what it took...
-- >         freeBatch (rxPool a 0) bufs sent (n - sent)  -- ...the rest is still ours
-- >         loop
-- >   loop
--
-- with the devices from, e.g., @openDevice \"afpacket:veth0\"@ or
-- @openDevice \"model:0\"@.
module Weft.Packet
  ( -- * Opening devices
    openDevice
  , openModelDevice
  , DeviceName (..)
  , parseDeviceName
    -- * Devices
  , module Weft.Packet.Internal.Device
    -- * Buffers and pools
  , module Weft.Packet.Internal.MemPool
    -- * Receiving under the hybrid rule
  , module Weft.Packet.Internal.Hybrid
    -- * Headers
  , module Weft.Packet.Internal.Headers
    -- * The ixgbe driver and its device model, driven directly
  , IxgbeConfig (..)
  , defaultIxgbeConfig
  , openIxgbe
  , module Weft.Packet.Internal.Ixgbe.Model
  ) where

import Control.Exception (onException, throwIO)
import Data.Char (isDigit)

#ifdef WEFT_LINUX
import Weft.Packet.Internal.AfPacket (defaultAfPacketConfig, openAfPacket)
#endif
import Weft.Packet.Internal.Device
import Weft.Packet.Internal.Headers
import Weft.Packet.Internal.Hybrid
import Weft.Packet.Internal.Ixgbe (IxgbeConfig (..), defaultIxgbeConfig, openIxgbe)
import Weft.Packet.Internal.Ixgbe.Model
import qualified Weft.Packet.Internal.Ixgbe.Model as Model
import Weft.Packet.Internal.MemPool

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
  Right (AfPacketName ifname queues) -> openAfPacketDevice ifname queues
  Right (ModelName port opts) -> openModelDevice name port opts

-- | An AF_PACKET device on the interface, with this many queues. AF_PACKET
-- is Linux's: elsewhere (and in the @portable@ build) it throws
-- 'DeviceInitFailed'.
openAfPacketDevice :: String -> Int -> IO Device
#ifdef WEFT_LINUX
openAfPacketDevice = openAfPacket defaultAfPacketConfig
#else
openAfPacketDevice ifname _ =
  throwIO (DeviceInitFailed ("afpacket:" ++ ifname) "AF_PACKET is Linux's; this build has the model device only")
#endif

-- | The model's options (see the module's description).
data ModelOptions = ModelOptions { moWire :: Maybe String, moFault :: Maybe Model.Fault }

parseModelOptions :: String -> Either String ModelOptions
parseModelOptions = go (ModelOptions Nothing Nothing) . splitCommas
  where
    go o [] = Right o
    go o ("" : rest) = go o rest
    go o ("loop" : rest) = go o { moWire = Nothing } rest
    go o (opt : rest) = case break (== '=') opt of
      ("wire", '=' : ifname) | not (null ifname) -> go o { moWire = Just ifname } rest
      ("fault", '=' : f) -> case lookup f faults of
        Just fault -> go o { moFault = Just fault } rest
        Nothing -> Left ("unknown fault " ++ show f ++ "; expected one of " ++ unwords (map fst faults))
      _ -> Left ("unknown model option " ++ show opt ++ "; expected loop, wire=IFNAME or fault=NAME")
    faults = [ ("link-down", Model.LinkStaysDown), ("stuck-reset", Model.ResetStuck)
             , ("bad-rx-desc", Model.CorruptRxWriteBack), ("bad-tx-desc", Model.CorruptTxDescriptor) ]
    splitCommas str = case break (== ',') str of
      (a, ',' : b) -> a : splitCommas b
      (a, _) -> [a]

-- | @openModelDevice name port options@: a fresh model of port @port@ with
-- its DMA engine running, and the ixgbe driver opened on it. Closing the
-- device stops the engine (and closes the interface of a @wire=@ option).
-- Throws 'BadDeviceName' for bad options, and the driver's
-- 'DeviceInitFailed' when the (possibly faulty) model does not come up.
openModelDevice :: String -> Int -> String -> IO Device
openModelDevice name port optText = case parseModelOptions optText of
  Left why -> throwIO (BadDeviceName name why)
  Right opts -> do
    (wire, closeWire) <- case moWire opts of
      Nothing -> (\w -> (w, pure ())) <$> Model.loopWire 4096
      Just ifname -> do
        dev <- openAfPacketDevice ifname 1
        pool <- newMemPool defaultPoolConfig { poolSize = 1024 } `onException` closeDevice dev
        w <- Model.deviceWire dev pool
        pure (w, closeDevice dev)
    model <- Model.newModel Model.defaultModelConfig { Model.mcPort = port, Model.mcFault = moFault opts } wire
    Model.startModelEngine model
    let stop = Model.stopModelEngine model >> closeWire
    dev <- openIxgbe defaultIxgbeConfig name (Model.modelWindow model) `onException` stop
    -- The engine stops first: the driver's close releases the rings it reads.
    pure dev { closeDevice = stop >> closeDevice dev }
