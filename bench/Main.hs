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
    ("all" : rest) -> runAll =<< parseSettings "all" rest
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
        , "          (options: --quick -n REQUESTS --reps N --tests set,get,... --no-n2)"
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
        , "  all     everything, then bench-results/summary.md"
        , ""
        , "Default: 3 repetitions of 1.5 s runs (what make bench runs); --long: 5 of 5 s."
        , "Results, CSV and plots go to bench-results/ (or $WEFT_BENCH_RESULTS)."
        ]
      exitFailure

-- | Every benchmark, then one summary of all the tables.
runAll :: Settings -> IO ()
runAll st = do
  started <- getCurrentTime
  let waitArgs = if setLong st then [] else ["--reps", "3"]
      timerArgs = [ "--long" | setLong st ] ++ ["--reps", show (setReps st)]
      kvArgs = [ "--quick" | not (setLong st) ] ++ ["--reps", show (setReps st)]
      colorArgs = [ "--quick" | not (setLong st) ] ++ ["--reps", show (setReps st)]
      packetArgs = [ "--quick" | not (setLong st) ] ++ [ "--reps" | setLong st ] ++ [ show (setReps st) | setLong st ]
  sections <- forM
    [ ("simple: SimpleServer, requests/s and server CPU per request", simpleBench st)
    , ("echo: one-connection round trip", echoBench st)
    , ("pong: HTTP keep-alive under wrk", pongBench st)
    , ("idle: 64 active connections beside idle ones", idleBench st)
    , ("warp: a WAI application on Weft.Warp, stock warp and nginx", warpBench st)
    , ("spin: the dispatcher's spin policy", spinBenchWithoutWait (if setLong st then st else st { setDuration = 1 }))
    , ("sws: the Mely paper's web server, a 1 KiB file under wrk", swsBench (not (setLong st)) st)
    , ("wait: fd waits in one process", waitMain waitArgs)
    , ("timers: timeout, threadDelay scaling, updateTimeout", timersMain timerArgs)
    , ("kv: weft-kv vs redis-server under redis-benchmark", kvMain kvArgs)
    , ("color: Mely's microbenchmarks on Weft.Color, every stealing policy", colorMain colorArgs)
    , ("packet: Weft.Packet forwarding on veth and on the device model", packetMain packetArgs) ] $ \(title, run) -> do
      table <- run
      return ("## " ++ title ++ "\n\n```\n" ++ table ++ "```\n")
  machine <- readFile "/proc/cpuinfo"
  let model = case [ drop 2 (dropWhile (/= ':') l) | l <- lines machine, take 10 l == "model name" ] of
        (m : _) -> m
        [] -> "unknown CPU"
      cores = length [ () | l <- lines machine, take 9 l == "processor" ]
  writeFile (resultsRoot </> "summary.md") $ unlines
    [ "# weft-bench all", ""
    , "Run started " ++ show started ++ " on " ++ show cores ++ " cores (" ++ model ++ "); "
      ++ show (setReps st) ++ " repetitions of " ++ show (setDuration st) ++ " s per cell, arms interleaved."
    , "Servers on core 0, load generators on core 1 (-N2 servers get both cores). Medians; ratios of medians."
    , "" ] ++ unlines sections
  putStrLn ("\nsummary: " ++ resultsRoot ++ "/summary.md")
