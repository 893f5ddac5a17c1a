-- | weft-bench: weft's benchmarks, each measured side by side with its
-- baselines in one run.
module Main (main) where

import Control.Monad (forM)
import Data.Time.Clock (getCurrentTime)
import System.Environment (getArgs)
import System.Exit (exitFailure)
import System.IO
import System.FilePath ((</>))

import Bench.Kv (kvMain)
import Bench.Color (colorChild, colorMain)
import Bench.Headline (headlineTable)
import Bench.Net
import Bench.Packet (packetMain, packetModelChild)
import Bench.Report (resultsRoot)
import Bench.Spin (spinBench, spinBenchWithoutWait)
import Bench.Sws (parseSwsArgs, swsBench)
import Bench.Timers (timersChild, timersMain)
import Bench.Warp (warpBench)
import Bench.Wait (waitChild, waitMain)

main :: IO ()
main = do
  hSetBuffering stdout LineBuffering
  args <- getArgs
  case args of
    ("wait" : rest) -> () <$ waitMain rest
    ("wait-child" : rest) -> waitChild rest
    ("timers" : rest) -> () <$ timersMain rest
    ("timers-child" : rest) -> timersChild rest
    ("color" : rest) -> () <$ colorMain rest
    ("color-child" : rest) -> colorChild rest
    ("simple" : rest) -> () <$ (simpleBench =<< parseSettings "simple" rest)
    ("echo" : rest) -> () <$ (echoBench =<< parseSettings "echo" rest)
    ("pong" : rest) -> () <$ (pongBench =<< parseSettings "pong" rest)
    ("idle" : rest) -> () <$ (idleBench =<< parseSettings "idle" rest)
    ("warp" : rest) -> () <$ (warpBench =<< parseSettings "warp" rest)
    ("spin" : rest) -> () <$ (spinBench =<< parseSettings "spin" rest)
    ("sws" : rest) -> () <$ (uncurry swsBench =<< parseSwsArgs rest)
    ("kv" : rest) -> () <$ kvMain rest
    ("packet" : rest) -> () <$ packetMain rest
    ("packet-model-child" : rest) -> packetModelChild rest
    ("all" : rest) -> runAll rest
    _ -> do
      hPutStrLn stderr $ unlines
        [ "usage: weft-bench COMMAND [--long] [--reps N] [--duration SECONDS]"
        , ""
        , "  simple  SimpleServer: weft, GHC's manager, C; concurrency 1/16/64/400; -N1 and -N2"
        , "  echo    one-connection ping-pong latency: GHC non-threaded, GHC threaded, weft, C"
        , "  pong    HTTP keep-alive pong under wrk (-N1, -N2), and a new connection per request: weft, GHC's manager, nginx"
        , "  idle    64 active connections beside 0..20k idle ones: weft, GHC's manager"
        , "  spin    the dispatcher's spin policy: adaptive vs fixed 50 us vs none vs GHC's manager, on"
        , "          simple (c=1..400), pong (c=16..400), -N1 and -N2, echo and wait; counters; an idle check"
        , "  warp    a WAI pong on Weft.Warp vs stock warp vs nginx under wrk (-N1, -N2), and HTTP/2"
        , "          under h2load: Weft.Warp vs stock warp"
        , "  sws     a 1 KiB file under wrk: weft-sws (Weft.Color) under every policy, weft-pong,"
        , "          nginx (option: --quick, 64 connections only)"
        , "  wait    pipe ping-pong of fd waits (options: --reps N --round-trips N --caps 1,2)"
        , "  kv      weft-kv vs redis-server under redis-benchmark, -P 1, 16 and 64, on one core and on two"
        , "          (options: --quick -n REQUESTS --reps N --tests set,get,... --depths 1,16,64 --no-n2;"
        , "          -r KEYSPACE: random keys, so that weft-kv -N2 spreads them over both cores)"
        , "  timers  timeout, threadDelay scaling and memory, updateTimeout: weft vs GHC's timers"
        , "          (options: --reps N --long --timeouts N --updates N --timers N --delay-threads N,N,..."
        , "          --bytes-threads N --caps 1,2 --only timeout,delay,bytes,tickle)"
        , "  color   Mely's colored-event microbenchmarks (unbalanced, balanced, penalty, cache-efficient,"
        , "          unbalanced on a simulated 8-core machine), every stealing policy side by side"
        , "          (options: --quick --reps N --duration SECONDS --only NAME,.. --policies NAME,..;"
        , "          --max-others PERCENT --retries N --nursery SIZE|default; default 5 s runs, --quick 0.5-1.5 s)"
        , "  packet  Weft.Packet: weft-fwd vs a C forwarder over AF_PACKET on veth (batch sweep), the kernel's"
        , "          bridge and tc mirred, a zero-loss check, and the ixgbe driver loop vs its C port on the"
        , "          device model (options: --quick --reps N --duration S --batches 1,8,.. --only veth,peers,loss,model;"
        , "          the veth parts need root)"
        , "  all     the headline benchmarks (what make bench runs, under 15 minutes), then"
        , "          bench-results/summary.md, the headline table first; --full: every benchmark (make bench-full)"
        , ""
        , "Default: 3 repetitions of 1.5 s runs (what make bench runs); --long: 5 of 5 s."
        , "Results, CSV and plots go to bench-results/ (or $WEFT_BENCH_RESULTS)."
        ]
      exitFailure

-- | The headline benchmarks (or, with @--full@, every benchmark), then
-- one summary of all the tables, the headline table first.
--
-- Without @--full@ (what @make bench@ runs, under 15 minutes here), each
-- section measures only what the headline table and the README quote:
-- SimpleServer and pong at 16 and 400 connections, idle at 0 and the most
-- connections the fd limit allows, every warp cell, echo and fd waits,
-- @timeout@ at -N2 and a million @threadDelay@s at -N1, five redis tests,
-- and the unbalanced colored-events benchmark. The spin, sws and packet
-- sections, the other configurations and the other timers and colored
-- benchmarks run with @--full@ (@make bench-full@). Arms are interleaved
-- either way.
runAll :: [String] -> IO ()
runAll args0 = do
  let full = "--full" `elem` args0
  st0 <- parseSettings "all" (filter (/= "--full") args0)
  started <- getCurrentTime
  let st = st0 { setHeadline = not full }
      reps = ["--reps", show (setReps st)]
      waitArgs = if setLong st then [] else ["--reps", "3"]
      timerArgs = [ "--long" | setLong st ] ++ reps
      kvArgs = [ "--quick" | not (setLong st) ] ++ reps
      colorArgs = [ "--quick" | not (setLong st) ] ++ reps
      packetArgs = [ "--quick" | not (setLong st) ] ++ [ "--reps" | setLong st ] ++ [ show (setReps st) | setLong st ]
      -- What both runs measure, first.
      common =
        [ ("simple: SimpleServer, requests/s and server CPU per request", simpleBench st)
        , ("echo: one-connection round trip", echoBench st)
        , ("pong: HTTP keep-alive under wrk", pongBench st)
        , ("idle: 64 active connections beside idle ones", idleBench st)
        , ("warp: a WAI application on Weft.Warp, stock warp and nginx", warpBench st) ]
      headline = common ++
        [ ("wait: fd waits in one process", waitMain waitArgs)
        , ("timers: timeout at -N2", timersMain (["--only", "timeout", "--caps", "2"] ++ reps))
        , ("timers: a million threadDelay sleepers at -N1", timersMain ["--only", "delay", "--caps", "1", "--delay-threads", "1000000", "--reps", "1"])
        , ("kv: weft-kv vs redis-server under redis-benchmark", kvMain (kvArgs ++ ["--tests", "get,set,incr,lpush,mset"]))
        , ("color: the unbalanced microbenchmark on Weft.Color, every stealing policy", colorMain (colorArgs ++ ["--only", "unbalanced"])) ]
      everything = common ++
        [ ("spin: the dispatcher's spin policy", spinBenchWithoutWait (if setLong st then st else st { setDuration = 1 }))
        , ("sws: the Mely paper's web server, a 1 KiB file under wrk", swsBench (not (setLong st)) st)
        , ("wait: fd waits in one process", waitMain waitArgs)
        , ("timers: timeout, threadDelay scaling, updateTimeout", timersMain timerArgs)
        , ("kv: weft-kv vs redis-server under redis-benchmark", kvMain kvArgs)
        , ("color: Mely's microbenchmarks on Weft.Color, every stealing policy", colorMain colorArgs)
        , ("packet: Weft.Packet forwarding on veth and on the device model", packetMain packetArgs) ]
  sections <- forM (if full then everything else headline) $ \(title, run) -> do
      table <- run
      return ("## " ++ title ++ "\n\n```\n" ++ table ++ "```\n")
  heads <- headlineTable
  machine <- readFile "/proc/cpuinfo"
  let model = case [ drop 2 (dropWhile (/= ':') l) | l <- lines machine, take 10 l == "model name" ] of
        (m : _) -> m
        [] -> "unknown CPU"
      cores = length [ () | l <- lines machine, take 9 l == "processor" ]
      about = "Run started " ++ show started ++ " on " ++ show cores ++ " cores (" ++ model ++ "); "
              ++ show (setReps st) ++ " repetitions of " ++ show (setDuration st) ++ " s per cell, arms interleaved"
              ++ (if full then "." else "; the headline configurations only (--full: everything).")
  writeFile (resultsRoot </> "summary.md") $ unlines
    [ "# weft-bench all", ""
    , about
    , "Servers on core 0, load generators on core 1 (-N2 servers get both cores). Medians; ratios of medians."
    , "", "## Headline", "", "```", heads ++ "```", "" ] ++ unlines sections
  putStrLn ("\n== weft-bench all: headline (medians; the full tables are in " ++ resultsRoot ++ "/summary.md) ==\n")
  putStr heads
  putStrLn ("\nsummary: " ++ resultsRoot ++ "/summary.md")
