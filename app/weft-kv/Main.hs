-- | weft-kv: a key-value server speaking the Redis protocol (RESP2), built
-- as colored event handlers on "Weft.Color". Commands on a key run as
-- events of the key's color, so commands on one key are serialised
-- without locks, and commands on different keys run in parallel. See
-- "Kv.Server" (connections), "Kv.Conn" (reply order) and "Kv.Batch"
-- (commands on their keys' colors) for the design, and "Kv.Command" for
-- the commands.
module Main (main) where

import Network.Socket (SockAddr (..))
import System.Environment (getArgs, getProgName)
import System.Exit (exitFailure)
import System.IO

import Kv.Request (Limits (..))
import Kv.Server
import Kv.Store (validKeyColors)
import qualified Weft.Color as Color
import qualified Weft.Net as Net

main :: IO ()
main = do
  hSetBuffering stderr LineBuffering
  name <- getProgName
  args <- getArgs
  let usage = "usage: " ++ name ++ " PORT [--max-bulk BYTES] [--timeout SECONDS] [--min-receive BYTES] [--output-limit BYTES] [--send-stall SECONDS] [--max-clients N] [--evict none|stalled|stalled-then-idle] [--key-colors N] [--policy "
              ++ concatMap (\p -> Color.policyName p ++ "|") (init Color.allPolicies)
              ++ Color.policyName (last Color.allPolicies) ++ "]"
      die msg = hPutStrLn stderr (name ++ ": " ++ msg ++ "\n" ++ usage) >> exitFailure
  case parse args defaultServerConfig Nothing of
    Left msg -> die msg
    Right (_, Nothing) -> die "no port given"
    Right (cfg, Just port) -> do
      hPutStrLn stderr (name ++ ": serving on port " ++ show port ++ ", bulk strings up to "
                        ++ show (maxBulk (serverLimits cfg)) ++ " bytes, policy "
                        ++ Color.policyName (Color.cfgPolicy (serverRuntime cfg)))
      runServer cfg (SockAddrInet (fromIntegral port) 0)
  where
    parse :: [String] -> ServerConfig -> Maybe Int -> Either String (ServerConfig, Maybe Int)
    parse [] cfg port = Right (cfg, port)
    parse ("--max-bulk" : n : rest) cfg port = case reads n of
      [(b, "")] | b >= 0 -> parse rest cfg { serverLimits = (serverLimits cfg) { maxBulk = b } } port
      _ -> Left ("bad --max-bulk " ++ n)
    parse ("--timeout" : t : rest) cfg port = case reads t of
      [(secs, "")] | secs >= (0 :: Double) -> parse rest cfg { serverTimeout = round (secs * 1e6) } port
      _ -> Left ("bad --timeout " ++ t)
    parse ("--min-receive" : n : rest) cfg port = case reads n of
      [(b, "")] | b >= (0 :: Int) -> parse rest cfg { serverMinReceive = b } port
      _ -> Left ("bad --min-receive " ++ n)
    parse ("--output-limit" : n : rest) cfg port = case reads n of
      [(b, "")] | b >= (0 :: Int) -> parse rest cfg { serverOutputLimit = b } port
      _ -> Left ("bad --output-limit " ++ n)
    parse ("--send-stall" : t : rest) cfg port = case reads t of
      [(secs, "")] | secs >= (0 :: Double) -> parse rest cfg { serverSendStall = round (secs * 1e6) } port
      _ -> Left ("bad --send-stall " ++ t)
    parse ("--max-clients" : n : rest) cfg port = case reads n of
      [(k, "")] | k >= (0 :: Int) -> parse rest cfg { serverMaxClients = k } port
      _ -> Left ("bad --max-clients " ++ n)
    parse ("--key-colors" : n : rest) cfg port = case reads n of
      [(k, "")] | validKeyColors k -> parse rest cfg { serverKeyColors = k } port
      _ -> Left ("bad --key-colors " ++ n ++ " (a power of two from 1 to 65536)")
    parse ("--evict" : e : rest) cfg port = case Net.parseEviction e of
      Just pol -> parse rest cfg { serverEviction = pol } port
      Nothing -> Left ("unknown eviction policy " ++ e)
    parse ("--policy" : p : rest) cfg port = case Color.parsePolicy p of
      Just pol -> parse rest cfg { serverRuntime = (serverRuntime cfg) { Color.cfgPolicy = pol } } port
      Nothing -> Left ("unknown policy " ++ p)
    parse (opt@('-' : _) : _) _ _ = Left ("unknown option " ++ opt)
    parse (p : rest) cfg Nothing = case reads p of
      [(n, "")] | n >= 0 && n < 65536 -> parse rest cfg (Just n)
      _ -> Left ("bad port " ++ p)
    parse (extra : _) _ _ = Left ("unexpected argument " ++ extra)
