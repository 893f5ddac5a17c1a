-- | weft-sws: the SWS static web server of the Mely paper (§5.3.1) on
-- weft's colored runtime ("Weft.Color"). Serves the files under DOCROOT,
-- read into memory at start-up, over HTTP/1.1 keep-alive, GET only, on
-- 0.0.0.0:PORT; see "Sws.Server" for the handlers and their colors.
--
-- On SIGINT or SIGTERM it stops (open connections are cut) and prints the
-- runtime's per-core statistics on stderr.
module Main (main) where

import Control.Concurrent
import Control.Exception (IOException, try)
import Control.Monad
import qualified Data.ByteString.Char8 as C
import Data.List (intercalate)
import Network.Socket (SockAddr (..))
import System.Environment (getArgs, getProgName)
import System.Exit
import System.IO
import System.Posix.Signals

import Sws.Cache
import Sws.Server
import Weft.Color
import qualified Weft.Net as W

usage :: String
usage = unlines
  [ "PORT DOCROOT [options]"
  , "  --policy NAME         work stealing policy: " ++ intercalate ", " (map policyName allPolicies) ++ " (default Mely)"
  , "  --batch N             events of one color run in a row (default 10)"
  , "  --steal-margin US     weft policies leave a core alone while its queued work is below this (default 5000)"
  , "  --cores N             workers (default: one per capability)"
  , "  --max-clients N       open connections at most; more are answered 503 (default: the fd limit less 32)"
  , "  --evict POLICY        which connection a full server closes for a newcomer: none, stalled,"
  , "                        stalled-then-idle (default)"
  , "  --accept-batch N      connections one Accept event takes (default 64)"
  , "  --idle-timeout SECS   close connections silent this long, 0 for never (default 60)"
  , "  --min-receive BYTES   received bytes that count as activity against it (default 1024)"
  , "  --cache-mib N         most MiB of files to load from DOCROOT (default 512)" ]

data Options = Options
  { optServer :: ServerConfig
  , optCache  :: CacheLimits
  }

main :: IO ()
main = do
  hSetBuffering stderr LineBuffering
  name <- getProgName
  args <- getArgs
  let die' msg = hPutStrLn stderr (name ++ ": " ++ msg ++ "\nusage: " ++ name ++ " " ++ usage) >> exitFailure
  case args of
    (portArg : root : rest) | [(port, "")] <- reads portArg, port >= 0 && port < (65536 :: Int) ->
      case parseOptions (Options defaultServerConfig defaultCacheLimits) rest of
        Left msg -> die' msg
        Right opts -> run name port (C.pack root) opts
    _ -> die' "expected PORT and DOCROOT"

parseOptions :: Options -> [String] -> Either String Options
parseOptions o [] = Right o
parseOptions o (flag : value : rest) = case flag of
  "--policy" -> case parsePolicy value of
    Just p -> parseOptions (rt (\c -> c { cfgPolicy = p })) rest
    Nothing -> Left ("unknown policy " ++ value)
  "--batch" -> positive $ \n -> rt (\c -> c { cfgBatch = n })
  "--steal-margin" -> case reads value of
    [(us, "")] | us >= (0 :: Int) -> parseOptions (rt (\c -> c { cfgStealMargin = us * 1000 })) rest
    _ -> Left ("bad --steal-margin " ++ value)
  "--cores" -> positive $ \n -> rt (\c -> c { cfgCores = n })
  "--max-clients" -> positive $ \n -> srv (\c -> c { cfgMaxClients = n })
  "--evict" -> case W.parseEviction value of
    Just e -> parseOptions (srv (\c -> c { cfgEviction = e })) rest
    Nothing -> Left ("unknown eviction policy " ++ value)
  "--accept-batch" -> positive $ \n -> srv (\c -> c { cfgAcceptBatch = n })
  "--idle-timeout" -> case reads value of
    [(secs, "")] | secs >= (0 :: Double) -> parseOptions (srv (\c -> c { cfgIdleTimeout = round (secs * 1e6) })) rest
    _ -> Left ("bad --idle-timeout " ++ value)
  "--min-receive" -> case reads value of
    [(n, "")] | n >= (0 :: Int) -> parseOptions (srv (\c -> c { cfgMinReceive = n })) rest
    _ -> Left ("bad --min-receive " ++ value)
  "--cache-mib" -> positive $ \n -> o { optCache = (optCache o) { limitTotalBytes = n * 1048576 } }
  _ -> Left ("unknown option " ++ flag)
  where
    srv f = o { optServer = f (optServer o) }
    rt f = srv (\c -> c { cfgRuntime = f (cfgRuntime c) })
    positive set = case reads value of
      [(n, "")] | n > (0 :: Int) -> parseOptions (set n) rest
      _ -> Left ("bad " ++ flag ++ " " ++ value)
parseOptions _ [flag] = Left ("missing value for " ++ flag)

run :: String -> Int -> C.ByteString -> Options -> IO ()
run name port root opts = do
  loaded <- try (buildCache (optCache opts) root)
  cache <- case loaded of
    Right c -> return c
    Left e -> hPutStrLn stderr (name ++ ": cannot load " ++ C.unpack root ++ ": " ++ show (e :: IOException))
                >> exitFailure
  let cfg = optServer opts
      policy = policyName (cfgPolicy (cfgRuntime cfg))
  srv <- startServer cfg cache (SockAddrInet (fromIntegral port) 0)
  hPutStrLn stderr $ name ++ ": serving " ++ show (cacheEntries cache) ++ " paths (" ++ show (cacheBytes cache)
    ++ " bytes) from " ++ C.unpack root ++ " on " ++ show (serverAddress srv) ++ ", policy " ++ policy
    ++ ", batch " ++ show (cfgBatch (cfgRuntime cfg))
  stop <- newEmptyMVar
  forM_ [sigINT, sigTERM] $ \sig -> installHandler sig (CatchOnce (void (tryPutMVar stop ()))) Nothing
  takeMVar stop
  stats' <- stats (serverRuntime srv)
  stealCost <- stealCostNanos (serverRuntime srv)
  refused <- serverRefused srv
  stopServer srv
  hPutStrLn stderr (name ++ ": stopped; " ++ show refused ++ " connections refused over the limit; steal cost "
                    ++ show stealCost ++ " ns")
  forM_ (zip [0 :: Int ..] stats') $ \(i, s) -> hPutStrLn stderr ("  core " ++ show i ++ ": " ++ show s)
