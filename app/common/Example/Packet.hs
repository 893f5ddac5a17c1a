-- | What weft's packet tools share: opening a device named on the command
-- line, ixy's UDP test packet with a sequence number, option parsing and
-- stopping on a signal or a deadline.
module Example.Packet
  ( openNamedDevice
  , templateSrcPort
  , templateDstPort
  , writeTemplate
  , writeSequence
  , readTemplateSequence
  , Options
  , parseOptions
  , optionInt
  , optionDouble
  , optionFlag
  , die'
  , progress
  , newStopFlag
  , stopAfter
  ) where

import Control.Concurrent (forkIO)
import Control.Exception
import Control.Monad (void, when)
import Data.IORef
import Data.Word
import Foreign.Marshal.Utils (fillBytes)
import Foreign.Ptr
import System.Exit
import System.IO
import System.Posix.Signals
import Text.Read (readMaybe)

import Weft (threadDelay)
import Weft.Packet

-- | Opens a device, or exits with status 2 and the reason.
openNamedDevice :: String -> IO Device
openNamedDevice name = do
  r <- try (openDevice name)
  case r of
    Right dev -> pure dev
    Left e -> die' ("cannot open " ++ name ++ ": " ++ displayException (e :: SomeException))

-- | ixy's generator sends from UDP port 42 to port 1337.
templateSrcPort, templateDstPort :: Word16
templateSrcPort = 42
templateDstPort = 1337

-- | Writes ixy's test packet of @size@ bytes (at least 'minFrameLength',
-- at most 'maxDataLength'): Ethernet from 10:10:10:10:10:10 to
-- 01:02:03:04:05:06, IPv4 10.0.0.1 to 10.0.0.2 with its checksum, UDP 42
-- to 1337 without a checksum, a zero payload whose last 4 bytes will hold
-- the sequence number.
writeTemplate :: Ptr Word8 -> Int -> IO ()
writeTemplate p size = do
  fillBytes p 0 size
  writeEth p EthHeader { ethDst = MacAddress 0x010203040506, ethSrc = MacAddress 0x101010101010
                       , ethType = etherTypeIPv4 }
  writeIpv4 p Ipv4Header { ipTos = 0, ipTotalLength = fromIntegral (size - ethHeaderLength)
                         , ipIdent = 0, ipTtl = 64, ipProto = ipProtoUdp, ipChecksum = 0
                         , ipSrc = ipv4 10 0 0 1, ipDst = ipv4 10 0 0 2 }
  writeUdp p UdpHeader { udpSrcPort = templateSrcPort, udpDstPort = templateDstPort
                       , udpLength = fromIntegral (size - udpOffset), udpChecksumField = 0 }

-- | Stores a sequence number in the last 4 bytes of a packet of @size@
-- bytes, big-endian.
writeSequence :: Ptr Word8 -> Int -> Word32 -> IO ()
writeSequence p size = pokeBE32 p (size - 4)
{-# INLINE writeSequence #-}

-- | The sequence number of a test packet of @len@ bytes, or 'Nothing' for
-- any other packet (too short, not IPv4/UDP, or other ports).
readTemplateSequence :: Ptr Word8 -> Int -> IO (Maybe Word32)
readTemplateSequence p len
  | len < udpPayloadOffset + 4 = pure Nothing
  | otherwise = do
      et <- peekBE16 p 12
      sp <- peekBE16 p udpOffset
      dp <- peekBE16 p (udpOffset + 2)
      if et == etherTypeIPv4 && sp == templateSrcPort && dp == templateDstPort
        then Just <$> peekBE32 p (len - 4)
        else pure Nothing
{-# INLINE readTemplateSequence #-}

-- | Positional arguments and @--name value@ options.
type Options = ([String], [(String, String)])

-- | Splits the arguments; a flag listed in @flags@ takes no value.
parseOptions :: [String] -> [String] -> Either String Options
parseOptions flags = go [] []
 where
  go pos opts [] = Right (reverse pos, opts)
  go pos opts (('-' : '-' : name) : rest)
    | name `elem` flags = go pos ((name, "") : opts) rest
    | (v : rest') <- rest = go pos ((name, v) : opts) rest'
    | otherwise = Left ("--" ++ name ++ " needs a value")
  go pos opts (a : rest) = go (a : pos) opts rest

-- | An integer option within bounds, or its default.
optionInt :: Options -> String -> Int -> (Int, Int) -> IO Int
optionInt (_, opts) name def (lo, hi) = case lookup name opts of
  Nothing -> pure def
  Just v -> case readMaybe v of
    Just n | n >= lo && n <= hi -> pure n
    _ -> die' ("--" ++ name ++ " must be an integer from " ++ show lo ++ " to " ++ show hi)

-- | A non-negative number option, or its default.
optionDouble :: Options -> String -> Double -> IO Double
optionDouble (_, opts) name def = case lookup name opts of
  Nothing -> pure def
  Just v -> case readMaybe v of
    Just x | x >= 0 -> pure x
    _ -> die' ("--" ++ name ++ " must be a non-negative number")

optionFlag :: Options -> String -> Bool
optionFlag (_, opts) name = any ((== name) . fst) opts

-- | Prints a progress line to stdout. A stdout that is closed or gone
-- (a caller that does not read it) is no reason to stop forwarding or
-- sending, so a failed write is ignored.
progress :: String -> IO ()
progress line = (putStrLn line >> hFlush stdout) `catch` \e -> let _ = e :: IOException in pure ()

-- | Prints to stderr and exits with status 2.
die' :: String -> IO a
die' msg = hPutStrLn stderr msg >> exitWith (ExitFailure 2)

-- | A flag raised by SIGINT and SIGTERM.
newStopFlag :: IO (IORef Bool)
newStopFlag = do
  stop <- newIORef False
  let raise = CatchOnce (writeIORef stop True)
  void (installHandler sigINT raise Nothing)
  void (installHandler sigTERM raise Nothing)
  pure stop

-- | Raises the flag after @s@ seconds (never when @s@ is 0).
stopAfter :: IORef Bool -> Double -> IO ()
stopAfter stop s = when (s > 0) $ void $ forkIO $ do
  threadDelay (round (s * 1e6))
  writeIORef stop True
