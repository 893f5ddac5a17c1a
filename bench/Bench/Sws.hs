-- | The web server benchmark of the Mely paper (§5.3.1) on this machine:
-- one 1 KiB file served over HTTP/1.1 keep-alive to wrk by
--
-- * weft-sws, the colored server ("Weft.Color"), under every policy;
-- * weft-pong with a 1024-byte body: weft's thread-per-connection
--   server, parsing the same requests, answering from memory too;
-- * nginx serving the same file from the same directory.
--
-- Placement follows "Bench.Net": wrk (one thread) on core 1; servers on
-- core 0 at one core (@N1@: -N1, one nginx worker), or on both cores at
-- two (@N2@: -N2, two nginx workers), where they share core 1 with wrk.
-- Work stealing needs two workers, so only @N2@ runs every policy; @N1@
-- runs weft-sws once (all policies are the same with one worker) as the
-- per-core reference. Arms are interleaved within each repetition; the
-- table has medians and ratios of medians against weft-sws without
-- stealing and against nginx.
--
-- Two loads: keep-alive (each connection stays open), and reconnecting,
-- the paper's: each connection closes after 'reconnectAfter' requests on
-- average and wrk opens a new one, so that weft-sws's Accept handler, on
-- its one color, keeps working.
--
-- The responses are not byte-identical: weft-sws sends
-- @Server@, @Content-Type@ and @Content-Length@ (prebuilt, no @Date@);
-- weft-pong only @Content-Length@; nginx adds @Date@, @Last-Modified@,
-- @ETag@ and @Accept-Ranges@. Every body is 1024 bytes.
module Bench.Sws (swsBench, parseSwsArgs) where

import Control.Exception
import Control.Monad
import qualified Data.ByteString.Char8 as C
import Data.List (isPrefixOf)
import qualified Data.Map.Strict as Map
import System.Directory
import System.FilePath
import Text.Printf (printf)

import Bench.Net
import Bench.Report (median)

-- | @[--quick] [--long] [--reps N] [--duration SECONDS]@: whether to run
-- the quick set (what @make bench@ runs), and the settings.
parseSwsArgs :: [String] -> IO (Bool, Settings)
parseSwsArgs args = (,) ("--quick" `elem` args) <$> parseSettings "sws" (filter (/= "--quick") args)

-- | Requests per connection on the reconnecting load, as the paper's
-- virtual clients made (§5.3.1).
reconnectAfter :: Int
reconnectAfter = 150

-- | The policies, by their command-line names, in 'Weft.Color.Policy'
-- order: the baseline first.
policies :: [String]
policies = ["NoStealing", "LibasyncSmp", "MelyBase", "TimeLeft", "PenaltyAware", "LocalityAware", "Mely"]

-- | Run the benchmark; returns the table. Quick: wrk with 64 connections
-- only; otherwise also 16 and 256 at two cores.
swsBench :: Bool -> Settings -> IO String
swsBench quick st = do
  _ <- raiseFdLimit
  bin <- binDir
  dir <- makeAbsolute =<< resultsDir
  wrkRun <- newWrkRun st
  let root = dir </> "sws-root"
      file = "file-1k.html"
  createDirectoryIfMissing True root
  C.writeFile (root </> file) (C.pack (take 1024 (cycle "weft-sws serves this 1 KiB file.\n")))
  let arms = policies ++ ["weft-pong", "nginx"]
      concsN2 = if quick then [64] else [16, 64, 256] :: [Int]
      sws n policy =
        ( "sws-N" ++ show n ++ "-" ++ policy, serverCores n
        , \p -> [bin </> "weft-sws", show p, root, "--policy", policy, "+RTS", "-N" ++ show n, "-RTS"] )
      pong n =
        ( "sws-pong-N" ++ show n, serverCores n
        , \p -> [bin </> "weft-pong", show p, "--manager", "weft", "--body-bytes", "1024", "+RTS", "-N" ++ show n, "-RTS"] )
      site n = NginxSite ("sws-nginx-N" ++ show n) (serverCores n) n
        ("root " ++ root ++ "; default_type text/html; open_file_cache max=100 inactive=60s;")
      n1 = [sws 1 "NoStealing", pong 1]
      n2 = map (sws 2) policies ++ [pong 2]
  printf "weft-bench sws: one %d-byte file over HTTP/1.1 keep-alive, wrk (1 thread) on core 1\n" (1024 :: Int)
  loadBefore <- loadAverage
  res <- withServers (n1 ++ n2) $ \srvs -> withNginx (site 1) $ \ngx1 -> withNginx (site 2) $ \ngx2 -> do
    let (srv1, srv2) = splitAt (length n1) srvs
        n1Arms = zip ["NoStealing", "weft-pong", "nginx"] (srv1 ++ [ngx1])
        n2Arms = zip arms (srv2 ++ [ngx2])
        cell g (a, srv) c = Cell g a (wrkSample wrkRun srv c ("/" ++ file))
        reconnecting g (a, srv) c = Cell g a (wrkSampleReconnecting wrkRun reconnectAfter srv c ("/" ++ file))
        cells = [ cell "N1 c=64" arm 64 | arm <- n1Arms ]
             ++ [ reconnecting "N1 c=64 reconnect" arm 64 | arm <- n1Arms ]
             ++ [ cell ("N2 c=" ++ show c) arm c | c <- concsN2, arm <- n2Arms ]
             ++ [ reconnecting "N2 c=64 reconnect" arm 64 | arm <- n2Arms ]
    interleave "sws" (setReps st) cells
  loadAfter <- loadAverage
  -- The servers have stopped and logged their runtimes' statistics.
  steals' <- forM policies $ \p -> stealSummary (dir </> ("server-sws-N2-" ++ p ++ ".log"))
  let groups = ["N1 c=64", "N1 c=64 reconnect"] ++ [ "N2 c=" ++ show c | c <- concsN2 ] ++ ["N2 c=64 reconnect"]
  table <- reportWith ["NoStealing", "nginx"] "sws" groups arms False res
  let stealLines = unlines $
        "weft-sws at N2, whole run (warm-ups included), from its statistics at exit:" :
        [ printf "  %-14s %s" p s | (p, s) <- zip policies steals' ] ++
        [ "load average (1 min) before " ++ loadBefore ++ ", after " ++ loadAfter
          ++ " (the benchmark itself keeps about 2 busy; more means other processes shared the cores)" ]
  let targetLines = swsTargets res
  putStr ("\n" ++ stealLines ++ "\n" ++ targetLines)
  return (table ++ "\n" ++ stealLines ++ "\n" ++ targetLines)

-- | The PASS/MISS lines of the stealing targets at N2 (medians of req/s):
-- every weft policy at least 0.97x NoStealing on keep-alive (64
-- connections), and Mely at least 1.05x NoStealing on the reconnecting
-- load.
swsTargets :: Map.Map (String, String) [Sample] -> String
swsTargets res = unlines $ "== targets ==" :
  [ check "N2 c=64" p (>= 0.97) (p ++ " >= 0.97x NoStealing on keep-alive, N2 c=64")
  | p <- ["TimeLeft", "PenaltyAware", "LocalityAware", "Mely"] ] ++
  [ check "N2 c=64 reconnect" "Mely" (>= 1.05) "Mely >= 1.05x NoStealing on the reconnecting load, N2 c=64" ]
  where
    rps g a = case Map.lookup (g, a) res of
      Just ss@(_ : _) -> Just (median (map smRps ss))
      _ -> Nothing
    check g a ok what = case (rps g a, rps g "NoStealing") of
      (Just x, Just y) | y > 0 ->
        let r = x / y in printf "%s %s: %.3fx" (if ok r then "PASS" else "MISS" :: String) what r
      _ -> "SKIP " ++ what ++ ": not measured"

-- | The 1-minute load average, as @/proc/loadavg@ says it.
loadAverage :: IO String
loadAverage = do
  text <- either (\e -> const "" (e :: IOException)) id <$> try (readFile "/proc/loadavg" >>= \t -> length t `seq` return t)
  return (case words text of
            (one : _) -> one
            [] -> "?")

-- | Events run, steals (and those that did not pay) and lock waits, summed over the cores, and the
-- final steal-cost estimate, from a weft-sws log (printed when it stops).
stealSummary :: FilePath -> IO String
stealSummary path = do
  text <- either (\e -> const "" (e :: IOException)) id <$> try (readFile path >>= \t -> length t `seq` return t)
  let cores = [ l | l <- lines text, "  core " `isPrefixOf` l ]
      field name = sum [ value | l <- cores, value <- fieldOf name (words l) ]
      stealCost = [ w | l <- lines text, (w : "ns" : _) <- [drop 1 (dropWhile (/= "cost") (words l))] ]
  return $ if null cores then "(no statistics in " ++ path ++ ")"
    else printf "%10d events  %8d steals (%d unpaid)  %8d events stolen (%4.1f%%)  %6.0f ms waiting for queue locks  steal cost %s ns"
           (field "csEventsRun") (field "csSteals") (field "csUnpaidSteals") (field "csEventsStolen")
           (100 * fromIntegral (field "csEventsStolen") / max 1 (fromIntegral (field "csEventsRun")) :: Double)
           (fromIntegral (field "csLockWaitNanos") / 1e6 :: Double)
           (concat (take 1 stealCost))
  where
    fieldOf :: String -> [String] -> [Int]
    fieldOf name ws = [ n | (k : "=" : v : _) <- tails' ws, dropWhile (== '{') k == name
                          , [(n, _)] <- [reads v] ]
    tails' [] = []
    tails' xs@(_ : rest) = xs : tails' rest
