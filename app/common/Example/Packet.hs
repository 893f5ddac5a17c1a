-- | What weft's packet tools share: opening a device named on the command
-- line, ixy's UDP test packet with a sequence number, option parsing and
-- stopping on a signal or a deadline.
module Example.Packet
  ( openNamedDevice
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
      if et == etherTypeIPv4 && sp == testPacketSrcPort && dp == testPacketDstPort
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
