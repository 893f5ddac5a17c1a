{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE NumericUnderscores #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | @weft-bench color@: the microbenchmarks of the Mely paper (Gaud et al.,
-- 2010, §5.2, Tables 3-6) on "Weft.Color", every stealing policy side by
-- side.
--
-- * __unbalanced__ (Tables 3 and 4): fork/join rounds. A round's start
--   event, on core 0, posts 50,000 independent events (each its own color,
--   every color homed on core 0); 98% are short (100 cycles of work), 2%
--   long (uniformly 10k-50k cycles). When the last one has run, the next
--   round starts. Also run on a simulated 8-core machine (eight workers on
--   the two CPUs, 'simulatedXeon' topology) for the locality column.
--
-- * __balanced__: the same rounds, with the events spread evenly: each core
--   gets the same sequence of work, posted by a fork event on that core.
--   Stealing has little to win here (the end of each round), so this
--   mostly measures what a policy costs.
--
-- * __penalty__ (Table 5): 64 chains in flight, all started on core 0. A
--   chain's A event allocates a 256 KiB array (it fits this machine's 2 MiB
--   L2) and fills it; then 16 B events of the same color, one after
--   another, each add 1 to every word of the next 16 KiB of it (as many
--   times as it takes to cost 'bFloorNs'). A chain
--   that ends starts a new A on core 0. B's stealing penalty is 1000, A's
--   1, so penalty-aware stealing takes A colors (cheap to move: nothing in
--   cache yet) and leaves B colors with their warm arrays. A B event is
--   sized to cost more than a steal (2 us or more, against 0.3-1.5 us), so that
--   time-left stealing alone would take B colors too: the penalty, not the
--   time-left threshold, is what keeps them home.
--
-- * __cache-efficient__ (Table 6): fork/join rounds. Half of the cores
--   (core 0 of two) start with 100 A events. An A allocates a 4 KiB array
--   of random numbers and posts two B events of different colors, each
--   sorting one half; each B posts a C event of the array's color; the
--   second C posts the M event that merges the halves. When every array is
--   merged, the next round starts.
--
-- Work is a calibrated busy loop. The paper counts cycles; here a cycle is
-- @1000 / MHz@ ns, with the MHz that @/proc/cpuinfo@ reports, and the loop's
-- speed is measured when each child starts. Handler costs ('handlerCost')
-- are measured, not guessed: each handler body is timed alone (without the
-- runtime) before the runtime starts. The drivers' own events (a round's
-- start and fork events) are annotated with cost 0, which the runtime reads
-- as "unknown or short": they are not the measured workload, and the paper
-- registers a round's events on the first core, which a start event stolen
-- by an idle core would undo. With cost 0 no policy steals them: work 0 is
-- never worth a steal, and a lone queued color is not below half of its
-- core's events (the base policies' condition). The children count driver
-- events that ran off their core ('driver_off_core' in the CSV): none do.
--
-- This VM exposes no hardware performance counters (no @cpu@ PMU in
-- @/sys/bus/event_source/devices@), so the paper's L2-miss columns cannot be
-- measured. Locality (the share of steals taken from a core sharing the
-- thief's nearest cache), steal counts, and how many events ran away from
-- the core that holds their data stand in for them.
--
-- Every run is a child process (@weft-bench color-child ...@) pinned with
-- @taskset -c 0,1@ at @+RTS -N2 -A64m@ (Note [Nursery]), one per
-- (benchmark, policy, repetition); the parent runs every policy in each
-- repetition before the next one, and reports medians and ratios of
-- medians. A child measures whole rounds after a warm-up (unless rounds
-- outlast a quarter of the window, as LibasyncSmp's do), reads the
-- runtime's per-core statistics at both ends of its window, and reports
-- how much of the two CPUs other processes took meanwhile; runs that
-- others disturbed are redone (Note [Disturbed runs]).
module Bench.Color
  ( colorMain
  , colorChild
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Control.Monad.Primitive (RealWorld)
import Data.Bits (shiftR)
import Data.IORef
import Data.List (intercalate, isPrefixOf)
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe, mapMaybe)
import Data.Primitive.Array
import Data.Primitive.ByteArray
import Data.Primitive.PrimArray
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Directory (createDirectoryIfMissing)
import System.Environment (getExecutablePath)
import System.Exit
import System.IO
import System.Posix.Process (exitImmediately)
import Text.Printf (printf)

import Bench.Atomic
import Bench.Headline (note)
import Bench.Options
import System.FilePath ((</>))
import Bench.Report
import Weft.Color

------------------------------------------------------------------------------
-- Options and benchmarks

data Options = Options
  { optQuick    :: Bool
  , optReps     :: Int
  , optSecs     :: Maybe Double   -- ^ overrides every benchmark's run length
  , optOnly     :: [String]
  , optPolicies :: [Policy]
  , optMaxOthers :: Double        -- ^ others' CPU % above which a run is redone
  , optRetries  :: Maybe Int      -- ^ redos per run at most (default: 2; 0 with --quick, to keep it short)
  , optNursery  :: String         -- ^ the children's -A, or "default" (Note [Nursery])
  }

parseOptions :: [String] -> IO Options
parseOptions = parseOrExit "color"
  [ flag "--quick" (\o -> o { optQuick = True })
  , value "--reps" "N" positive (\n o -> o { optReps = n })
  , value "--duration" "SECONDS" positive (\d o -> o { optSecs = Just d })
  , value "--max-others" "PERCENT" number (\pc o -> o { optMaxOthers = pc })
  , value "--retries" "N" number (\n o -> o { optRetries = Just n })
  , value "--nursery" "SIZE|default" Just (\a o -> o { optNursery = a })
  , value "--only" (intercalate "," (map bName benches)) (listOf Just) (\bs o -> o { optOnly = bs })
  , value "--policies" (intercalate "," (map policyName allPolicies)) (listOf parsePolicy) (\ps o -> o { optPolicies = ps }) ]
  (Options False 3 Nothing (map bName benches) allPolicies 20 Nothing "64m")

-- | One benchmark as the parent runs it.
data Bench = Bench
  { bName    :: String   -- ^ its --only key
  , bWork    :: String   -- ^ the child's workload
  , bTitle   :: String
  , bCores   :: Int      -- ^ workers; 0: one per capability
  , bTopo    :: String   -- ^ "system" or "xeon"
  , bFull    :: Double   -- ^ measured seconds per run
  , bQuick   :: Double   -- ^ the same with --quick
  , bExtra   :: [(String, String, Double -> String)]
    -- ^ columns of its own: header, result key, format
  }

benches :: [Bench]
benches =
  [ Bench "unbalanced" "unbalanced"
      "unbalanced (Tables 3-4): rounds of 50,000 independent events posted on core 0, 98% ~100 cycles, 2% 10k-50k cycles"
      0 "system" 5 1.5 [ ("long stolen %", "long_stolen_pct", pct) ]
  , Bench "balanced" "balanced"
      "balanced: the same rounds with the events spread evenly (each core posts and runs the same work)"
      0 "system" 5 0.8 [ ("long stolen %", "long_stolen_pct", pct) ]
  , Bench "penalty" "penalty"
      "penalty (Table 5): 64 chains started on core 0; A fills a 256 KiB array, 16 B events each touch 16 KiB of it; B penalty 1000"
      0 "system" 5 0.5
      [ ("A stolen %", "a_stolen_pct", pct), ("B stolen/s", "b_stolen_s", printf "%.0f")
      , ("B off-array %", "b_away_pct", pct) ]
  , Bench "cache" "cache"
      "cache-efficient (Table 6): rounds of 100 arrays on core 0; A fills 4 KiB, two B sort its halves, C joins, M merges"
      0 "system" 5 0.5
      [ ("B off-A %", "b_away_pct", pct), ("M off-A %", "m_away_pct", pct) ]
  , Bench "unbalanced8" "unbalanced"
      "unbalanced on a simulated 8-core Xeon (8 workers on 2 CPUs, simulatedXeon topology): locality of steals"
      8 "xeon" 5 0.5
      [ ("locality %", "locality_pct", pct) ]
  ]
  where pct = printf "%.1f"

benchSecs :: Options -> Bench -> Double
benchSecs o b = fromMaybe (if optQuick o then bQuick b else bFull b) (optSecs o)

------------------------------------------------------------------------------
-- The parent

-- Note [Nursery]
-- ~~~~~~~~~~~~~~
-- A round of the unbalanced benchmark queues 50,000 events, about 8 MB of
-- closures, in a few milliseconds. With GHC's default 1 MB nursery, every
-- minor GC in that burst copies the queued events and scans the color
-- table, and the collector stops both workers. That halves NoStealing's
-- throughput (638 against 1,247 KEvents/s with -A64m, in a pair of runs
-- that others disturbed by under 10%), and the same fixed cost in every
-- policy squeezes the policies' differences towards 1 (Mely's runtime, in
-- C, has no such cost). So the children run with a 64 MB nursery, the
-- same for every policy; --nursery default measures with GHC's own
-- setting.

-- | The children's RTS options: two capabilities, never -qa.
childRts :: Options -> [String]
childRts o = [ "+RTS", "-N2" ] ++ [ "-A" ++ optNursery o | optNursery o /= "default" ] ++ [ "-RTS" ]

csvPath, runsPath :: FilePath
csvPath = resultsRoot </> "color.csv"
runsPath = resultsRoot </> "color-runs.dat"

-- | Run the selected benchmarks, print one table per benchmark and the
-- targets, write the CSV; return the tables and target lines.
colorMain :: [String] -> IO String
colorMain args = do
  opts <- parseOptions args
  let chosen = [ b | b <- benches, bName b `elem` optOnly opts ]
  exe <- getExecutablePath
  createDirectoryIfMissing True resultsRoot
  writeFile runsPath ""
  writeCsv csvPath csvHeader []
  started <- getMonotonicTimeNSec
  mhz <- cpuMHz
  printf "weft-bench color: Mely's microbenchmarks, %d policies, %d repetitions, policies interleaved,\n"
    (length (optPolicies opts)) (optReps opts)
  printf "each run a child pinned with taskset -c 0,1 with %s; 1 cycle = %.3f ns (%.0f MHz from /proc/cpuinfo)\n"
    (unwords (childRts opts)) (1000 / mhz) mhz
  results <- forM chosen $ \b -> do
    res <- section opts exe b
    return (bName b, res)
  finished <- getMonotonicTimeNSec
  let res = Map.fromList results
      tables = concat [ t | (_, (t, _)) <- results ]
      verdicts = targets res
      notes = unlines
        [ "(medians of the repetitions; ratios are of medians. locks %: time any thread waited for a core's lock,"
        , " summed over cores, per core-second. steal ns/attempt: time in steal passes (from the first victim locked)"
        , " per victim locked; steal cost: the runtime's moving estimate of one steal, which time-left stealing"
        , " compares colors' work with. work/steal: annotated ns moved per steal (cost/penalty for the"
        , " penalty-aware policies). unpaid %: steals whose work ran for less than twice the pass that took it."
        , " This VM has no hardware cache-miss counters: locality and steal counts"
        , " stand in for the paper's L2 misses. others' CPU %: the share of CPUs 0-1 that other processes"
        , " took during the run (from /proc/stat); it hurts the stealing policies, which need both CPUs, more"
        , " than NoStealing, which needs one.)" ]
  putStrLn ""
  putStrLn "== weft-bench color: all results =="
  putStr tables
  putStr notes
  putStr verdicts
  putStrLn ("CSV: " ++ csvPath ++ "; every child's result: " ++ runsPath)
  printf "weft-bench color took %.0f s\n" (fromIntegral (finished - started) / 1e9 :: Double)
  return (tables ++ notes ++ verdicts)

-- | The runs of each policy, by 'policyName'.
type Results = Map.Map String [ChildResult]

-- | One benchmark: every policy in every repetition, then its table.
section :: Options -> FilePath -> Bench -> IO (String, Results)
section opts exe b = do
  let secs = benchSecs opts b
      reps = optReps opts
  putStrLn ""
  printf "%s; %.1f s per run\n" (bTitle b) secs
  ref <- newIORef (Map.empty :: Results)
  failed <- newIORef (Map.empty :: Map.Map String Int)
  forM_ [1 .. reps] $ \rep -> forM_ (optPolicies opts) $ \p -> do
    let args = [ "color-child", bWork b, policyName p, show secs, show (bCores b), bTopo b ]
               ++ childRts opts
    r <- runQuietest opts (printf "  [rep %d/%d] %-13s" rep reps (policyName p))
                     (runPinned "0,1" exe args (ceiling secs + 60))
    case r of
      Left err -> do
        printf "  [rep %d/%d] %-13s FAILED: %s\n" rep reps (policyName p) err
        modifyIORef' failed (Map.insertWith (+) (policyName p) 1)
      Right s -> do
        printf "  [rep %d/%d] %-13s %8.0f KEvents/s  steals/s %8.0f  locks %5.2f%%  others' CPU %3.0f%%%s\n" rep reps (policyName p)
          (get0 "kevents_s" s) (get0 "steals_s" s) (get0 "lock_pct" s) (get0 "others_cpu_pct" s)
          (if get0 "errors" s > 0 then printf "  (%.0f handler errors!)" (get0 "errors" s) else "" :: String)
        appendFile runsPath (unwords ([bName b, policyName p] ++ [ k ++ "=" ++ show v | (k, v) <- Map.toList s ]) ++ "\n")
        modifyIORef' ref (Map.insertWith (flip (++)) (policyName p) [s])
  res <- readIORef ref
  fails <- readIORef failed
  sequence_ [ note ["color", bName b, pol] (median vs)
            | (pol, ss) <- Map.toList res, let vs = mapMaybe (Map.lookup "kevents_s") ss, not (null vs) ]
  let runsOf p = Map.findWithDefault [] (policyName p) res
      med p k = case mapMaybe (Map.lookup k) (runsOf p) of
        [] -> Nothing
        vs -> Just (median vs)
      cell p k f = maybe "-" f (med p k)
      ratio p base = case (med p "kevents_s", med base "kevents_s") of
        (Just a, Just z) | z > 0 -> printf "%.2f" (a / z)
        _ -> "-"
      rows = [ [ policyName p
               , cell p "kevents_s" (printf "%.0f")
               , spread (printf "%.0f") (mapMaybe (Map.lookup "kevents_s") (runsOf p))
                   ++ maybe "" (\k -> " (" ++ show k ++ " failed)") (Map.lookup (policyName p) fails)
               , ratio p NoStealing, ratio p LibasyncSmp
               , cell p "lock_pct" (printf "%.2f")
               , cell p "steal_ns_per_attempt" (printf "%.0f")
               , cell p "steal_cost_ns" (printf "%.0f")
               , cell p "work_per_steal_ns" (printf "%.0f")
               , cell p "events_per_steal" (printf "%.1f")
               , cell p "steals_s" (printf "%.0f")
               , cell p "unpaid_pct" (printf "%.0f") ]
               ++ [ cell p k f | (_, k, f) <- bExtra b ]
               ++ [ cell p "others_cpu_pct" (printf "%.0f") ]
             | p <- optPolicies opts ]
      header = [ "policy", "KEvents/s", "min–max", "÷NoStealing", "÷LibasyncSmp", "locks %"
               , "steal ns/attempt", "steal cost ns", "work/steal ns", "events/steal", "steals/s", "unpaid %" ]
               ++ [ h | (h, _, _) <- bExtra b ] ++ [ "others' CPU %" ]
      table = "### " ++ bTitle b ++ printf " (%.1f s runs)\n" secs ++ renderTable header rows
      csvRows = [ [ bName b, policyName p ] ++ [ maybe "" show (med p k) | k <- csvKeys ] | p <- optPolicies opts ]
  putStrLn ""
  putStr table
  appendFile csvPath (unlines (map (intercalate ",") csvRows))
  return (table, res)

-- Note [Disturbed runs]
-- ~~~~~~~~~~~~~~~~~~~~~
-- The children use both CPUs; anything else running on them takes a
-- share, and a worker preempted while it holds a core's lock makes the
-- other spin for the rest of its time slice. That hurts the stealing
-- policies, which need both CPUs, far more than NoStealing, which uses
-- one, so a busy machine skews the comparison rather than just slowing it.
-- Each child reports what share of the two CPUs other processes took
-- during its window; a run above --max-others (20%) is redone, up to
-- --retries times (2; none with --quick, which must stay short), and the
-- least disturbed attempt is kept. The tables show the kept runs' share.

-- | Run a child, again while other processes took more than
-- 'optMaxOthers' of the CPUs (Note [Disturbed runs]); keep the least
-- disturbed result.
runQuietest :: Options -> String -> IO (Either String ChildResult) -> IO (Either String ChildResult)
runQuietest opts label run = go (fromMaybe (if optQuick opts then 0 else 2) (optRetries opts)) Nothing
  where
    others = get0 "others_cpu_pct"
    go left best = do
      r <- run
      let best' = case (r, best) of
            (Right s, Just b) | others b <= others s -> Just b
            (Right s, _) -> Just s
            (Left _, b) -> b
      case best' of
        Just b | others b > optMaxOthers opts, left > 0 -> do
          printf "%s others took %.0f%% of the CPUs; again\n" label (others b)
          go (left - 1 :: Int) best'
        Just b -> return (Right b)
        Nothing -> return r

csvKeys :: [String]
csvKeys = [ "kevents_s", "lock_pct", "long_stolen_pct", "steal_ns_per_attempt", "steal_cost_ns", "work_per_steal_ns"
          , "events_per_steal", "steals_s", "unpaid_pct", "locality_pct", "parks_s", "a_stolen_pct", "b_stolen_s"
          , "b_away_pct", "m_away_pct", "driver_off_core", "post_ms", "others_cpu_pct" ]

csvHeader :: [String]
csvHeader = "benchmark" : "policy" : map ("median_" ++) csvKeys

get0 :: String -> ChildResult -> Double
get0 k = fromMaybe 0 . Map.lookup k

-- | The PASS/MISS lines of the targets, and the paper's other effects for
-- comparison.
targets :: Map.Map String (String, Results) -> String
targets res = unlines $ "" : "== targets ==" :
  [ check "unbalanced" TimeLeft MelyBase (>= 1.5)
      "TimeLeft >= 1.5x MelyBase on unbalanced (paper: 2042/1195 = 1.71x)"
  , check "unbalanced" TimeLeft NoStealing (>= 1.3)
      "TimeLeft >= 1.3x NoStealing on unbalanced"
  , check "unbalanced" Mely NoStealing (>= 1.3)
      "Mely >= 1.3x NoStealing on unbalanced"
  , check "unbalanced" LibasyncSmp NoStealing (<= 0.5)
      "LibasyncSmp collapses on unbalanced: <= 0.5x NoStealing (paper: 122/1310 = 0.09x)"
  , check "penalty" PenaltyAware MelyBase (>= 1.5)
      "PenaltyAware >= 1.5x MelyBase on penalty (paper: 2122/1386 = 1.53x)"
  , check "balanced" Mely NoStealing (>= 0.95)
      "Mely >= 0.95x NoStealing on balanced"
  , "", "== the paper's other effects, for comparison (no target) ==" ,
    info "unbalanced" MelyBase NoStealing "MelyBase vs NoStealing on unbalanced (paper: 1195/1265 = 0.94x)"
  , info "unbalanced" Mely MelyBase "Mely vs MelyBase on unbalanced"
  , info "penalty" LibasyncSmp NoStealing "LibasyncSmp vs NoStealing on penalty (paper: 190/1103 = 0.17x)"
  , info "cache" LocalityAware MelyBase
      "LocalityAware vs MelyBase on cache-efficient (paper: 1869/1426 = 1.31x; with 2 cores there is one victim, so the two are the same policy)"
  , info "unbalanced8" LocalityAware MelyBase "LocalityAware vs MelyBase on unbalanced, simulated 8 cores"
  , localityLine ]
  where
    kev b p = do
      (_, r) <- Map.lookup b res
      case mapMaybe (Map.lookup "kevents_s") (Map.findWithDefault [] (policyName p) r) of
        [] -> Nothing
        vs -> Just (median vs)
    ratioOf b p q = do
      a <- kev b p
      z <- kev b q
      if z > 0 then Just (a / z) else Nothing
    check b p q ok what = case ratioOf b p q of
      Nothing -> "SKIP " ++ what ++ ": not measured"
      -- Three decimals: a MISS at 0.949 must not read as 0.95.
      Just r -> printf "%s %s: %.3fx" (if ok r then "PASS" else "MISS" :: String) what r
    info b p q what = maybe ("  " ++ what ++ ": not measured") (printf "  %s: %.2fx" what) (ratioOf b p q)
    localityLine = case Map.lookup "unbalanced8" res of
      Nothing -> "  locality on simulated 8 cores: not measured"
      Just (_, r) -> "  locality (steals from an L2 neighbour) on simulated 8 cores: " ++ intercalate ", "
        [ p ++ " " ++ (case mapMaybe (Map.lookup "locality_pct") ss of
                         [] -> "-"
                         vs -> printf "%.0f%%" (median vs))
        | (p, ss) <- Map.toList r, p /= policyName NoStealing ]

------------------------------------------------------------------------------
-- The child

-- | @color-child WORKLOAD POLICY SECONDS CORES TOPOLOGY@: one measured run,
-- printing a @result key=value ...@ line.
colorChild :: [String] -> IO ()
colorChild args = case args of
  [work, pol, secsS, coresS, topoS]
    | Just policy <- parsePolicy pol, [(secs, "")] <- reads secsS, [(cores0, "")] <- reads coresS -> do
        hSetBuffering stdout LineBuffering
        caps <- getNumCapabilities
        let cores = if cores0 > 0 then cores0 else caps
            topo = if topoS == "xeon" then Just simulatedXeon else Nothing
            warm = min 1 (max 0.1 (secs / 10))
        cal <- calibrate
        let config colors = defaultConfig { cfgPolicy = policy, cfgCores = cores, cfgColors = colors
                                          , cfgTopology = topo }
        (rt, win, extra) <- case work of
          "unbalanced" -> unbalancedRun cal cores (config (colorSpace (cores * (roundEvents + 1)))) False warm secs
          "balanced" -> unbalancedRun cal cores (config (colorSpace (cores * (roundEvents `div` cores + 2)))) True warm secs
          "penalty" -> penaltyRun cal cores (config (colorSpace (cores * (2 * chainsInFlight + 2)))) warm secs
          "cache" -> cacheRun cal cores (config (colorSpace (cores * (3 * arraysPerStarter + 2)))) warm secs
          _ -> usage
        cost <- stealCostNanos rt
        result (windowMetrics cores win cost ++ extra
                ++ [ ("mhz", calMHz cal), ("loop_iters_per_ns", calItersPerNs cal) ])
        hFlush stdout
        -- The result is out; the round or chains in flight are of no
        -- interest. 'shutdown' would drain them: 6-9 s for LibasyncSmp on
        -- eight workers (a round takes 15 s there), and a run on a busy
        -- machine once outlasted the parent's limit. So the child leaves
        -- at once.
        exitImmediately ExitSuccess
  _ -> usage
  where
    usage :: IO a
    usage = do
      hPutStrLn stderr $ "usage: weft-bench color-child unbalanced|balanced|penalty|cache POLICY SECONDS CORES system|xeon\n"
        ++ "  POLICY: " ++ unwords (map policyName allPolicies) ++ "; CORES: workers, 0 for one per capability"
      exitFailure

result :: [(String, Double)] -> IO ()
result kvs = putStrLn (unwords ("result" : [ k ++ "=" ++ show v | (k, v) <- kvs, not (isNaN v) ]))

-- | The smallest power of two above the colors a workload uses.
colorSpace :: Int -> Int
colorSpace n = until (> n) (* 2) 1024

------------------------------------------------------------------------------
-- Work calibration

data Calibration = Calibration
  { calMHz        :: Double
  , calItersPerNs :: Double
  }

-- | The clock speed /proc/cpuinfo reports (MHz), or 1000 if it reports
-- none (then a "cycle" is a nanosecond).
cpuMHz :: IO Double
cpuMHz = do
  r <- try (readFile "/proc/cpuinfo")
  return $ case r of
    Left (_ :: IOException) -> 1000
    Right info -> case [ v | l <- lines info, "cpu MHz" `isPrefixOf` l
                           , [(v, _)] <- [reads (drop 1 (dropWhile (/= ':') l))], v > 0 ] of
      (v : _) -> v
      [] -> 1000

-- | The busy loop's speed: the fastest of 9 runs of a million iterations
-- (the others were interrupted).
calibrate :: IO Calibration
calibrate = do
  mhz <- cpuMHz
  ts <- replicateM 9 $ do
    t0 <- getMonotonicTimeNSec
    burn 1_000_000
    t1 <- getMonotonicTimeNSec
    return (max 1 (t1 - t0))
  return (Calibration mhz (1e6 / fromIntegral (minimum ts)))

-- | Loop iterations that take @cycles@ cycles.
itersForCycles :: Calibration -> Double -> Int
itersForCycles cal cycles = max 1 (round (cycles * 1000 / calMHz cal * calItersPerNs cal))


-- | Busy for @n@ iterations of a dependent chain of xorshift steps (no
-- memory traffic, no allocation). The loop runs in 'IO' and ends in a test
-- of its result: a pure loop with a fixed @n@ could be floated out of a
-- caller's loop and computed once.
burn :: Int -> IO ()
burn n0 = go n0 0x9E3779B97F4A7C15
  where
    go :: Int -> Word64 -> IO ()
    go 0 !x = when (x == 0) (throwIO (userError "weft-bench: xorshift reached 0"))
    go n !x = go (n - 1) (xorshift x)
{-# NOINLINE burn #-}

-- | Mean ns per call of @act@, the best of @tries@ batches of @k@ calls:
-- other processes share these CPUs, and the least disturbed batch is the
-- one closest to the handler's own cost.
timeEach :: Int -> Int -> (Int -> IO ()) -> IO Int
timeEach tries k act = do
  ts <- replicateM tries $ do
    t0 <- getMonotonicTimeNSec
    forM_ [0 .. k - 1] act
    t1 <- getMonotonicTimeNSec
    return (fromIntegral (t1 - t0) / fromIntegral k :: Double)
  return (max 1 (round (minimum ts)))

------------------------------------------------------------------------------
-- Measurement windows

-- | Per-core statistics at the start and end of the measured window, the
-- window's length, and the workload's own counters at both ends.
data Window = Window
  { wStats0, wStats1 :: [CoreStats]
  , wNanos           :: Word64
  , wOwn0, wOwn1     :: [Int]
  , wBusy            :: Double   -- ^ CPU seconds CPUs 0 and 1 were busy
  , wOurs            :: Double   -- ^ CPU seconds this process used
  }

-- | The ends of a window: statistics, own counters, CPU clocks.
data Edge = Edge [CoreStats] [Int] Double Double

edge :: Runtime -> Own -> IO Edge
edge rt own = Edge <$> stats rt <*> readOwn own <*> cpuBusySecs <*> ((/ 1e6) <$> processCpuMicros)

window :: Edge -> Edge -> Word64 -> Window
window (Edge s0 o0 b0 c0) (Edge s1 o1 b1 c1) ns = Window s0 s1 ns o0 o1 (b1 - b0) (c1 - c0)

-- | Seconds CPUs 0 and 1 (the children's) have been busy, by anyone, from
-- @/proc/stat@ (in 10 ms ticks): what others took of them shows as the
-- difference from this process's own CPU time.
cpuBusySecs :: IO Double
cpuBusySecs = do
  r <- try (readFile "/proc/stat")
  case r of
    Left (_ :: IOException) -> return (0 / 0)
    Right st -> do
      let busy l = case words l of
            (_ : us : ni : sy : _idle : _iow : irq : sirq : steal : _) ->
              sum (map read [us, ni, sy, irq, sirq, steal]) :: Double
            _ -> 0
          ticks = sum [ busy l | l <- lines st, w : _ <- [words l], w `elem` ["cpu0", "cpu1"] ]
      _ <- evaluate ticks
      return (ticks / 100)

-- | The workload's own counters: 'ownFields' per capability, each
-- capability's on its own cache lines, bumped by that capability's worker
-- only (the child runs one worker per capability, except the simulated
-- 8-core run, which counts nothing of its own).
ownStride, ownFields :: Int
ownStride = 16
ownFields = 8

-- | Plain stores: each stripe has one writer.
type Own = MutablePrimArray RealWorld Int

newOwn :: IO Own
newOwn = do
  arr <- newPrimArray (64 * ownStride)
  setPrimArray arr 0 (64 * ownStride) 0
  return arr

-- | Bump field @f@ of the calling thread's capability.
bumpOwn :: Own -> Int -> IO ()
bumpOwn c f = addOwn c f 1

-- | Add to field @f@ of the calling thread's capability.
addOwn :: Own -> Int -> Int -> IO ()
addOwn c f d = do
  cap <- myCap
  let i = cap * ownStride + f
  v <- readPrimArray c i
  writePrimArray c i (v + d)

readOwn :: Own -> IO [Int]
readOwn c = do
  caps <- getNumCapabilities
  forM [0 .. ownFields - 1] $ \f -> sum <$> mapM (\cap -> readPrimArray c (cap * ownStride + f)) [0 .. caps - 1]

myCap :: IO Int
myCap = fst <$> (myThreadId >>= threadCapability)

-- | Fork/join rounds back to back. @startRound k@ starts a round and makes
-- its last event call @k@. Rounds run unmeasured for @warm@ s; then each
-- edge of the @secs@ s window is taken by the handler that ends the next
-- round, so the window holds whole rounds. A policy whose rounds take
-- longer than a quarter of the window (LibasyncSmp's take seconds) would
-- stretch the run by whole rounds, so if no round ends within that time
-- the edge is taken where the rounds stand. Rounds stop after the window.
forkJoin :: Runtime -> Own -> Double -> Double -> (IO () -> IO ()) -> IO Window
forkJoin rt own warm secs startRound = do
  -- 1 while an edge is wanted; whoever turns it back to 0 takes the edge.
  wanted <- newAtomicInt 0
  edges <- newEmptyMVar
  stopping <- newIORef False
  let takeEdge = do
        now <- getMonotonicTimeNSec
        e <- edge rt own
        return (now, e)
      roundEnd = do
        w <- casInt wanted 1 0
        when (w == 1) (takeEdge >>= putMVar edges)
        stop <- readIORef stopping
        unless stop (startRound roundEnd)
      -- Polled rather than waited for with 'timeout': an edge taken
      -- just as the timeout fired would be lost with the exception.
      edgeAt = do
        writeInt wanted 1
        giveUp <- (+ round (secs * 0.25e9)) <$> getMonotonicTimeNSec
        let poll = do
              r <- tryTakeMVar edges
              now <- getMonotonicTimeNSec
              case r of
                Just x -> return x
                Nothing
                  | now < giveUp -> threadDelay 2000 >> poll
                  | otherwise -> do
                      w <- casInt wanted 1 0
                      -- A round ended just now: its edge is coming.
                      if w == 1 then takeEdge else takeMVar edges
        poll
  startRound roundEnd
  threadDelay (round (warm * 1e6))
  (t0, e0) <- edgeAt
  let sleepUntil t = do
        now <- getMonotonicTimeNSec
        when (now < t) (threadDelay (fromIntegral ((t - now) `div` 1000)))
  sleepUntil (t0 + round (secs * 1e9))
  (t1, e1) <- edgeAt
  writeIORef stopping True
  return (window e0 e1 (t1 - t0))

-- | A steady load: wait @warm@ s, then measure @secs@ s.
steadyWindow :: Runtime -> Own -> Double -> Double -> IO Window
steadyWindow rt own warm secs = do
  threadDelay (round (warm * 1e6))
  e0 <- edge rt own
  t0 <- getMonotonicTimeNSec
  threadDelay (round (secs * 1e6))
  e1 <- edge rt own
  t1 <- getMonotonicTimeNSec
  return (window e0 e1 (t1 - t0))

-- | What every benchmark reports, from the runtime's statistics.
windowMetrics :: Int -> Window -> Int -> [(String, Double)]
windowMetrics cores w cost =
  [ ("kevents_s", d csEventsRun / secs / 1000)
  , ("events", d csEventsRun)
  , ("seconds", secs)
  , ("lock_pct", 100 * d csLockWaitNanos / (fromIntegral cores * fromIntegral (wNanos w)))
  , ("attempts", d csStealAttempts)
  , ("steals", steals)
  , ("steals_s", steals / secs)
  , ("steal_ns_per_attempt", d csStealNanos / d csStealAttempts)
  , ("steal_cost_ns", fromIntegral cost)
  , ("work_per_steal_ns", d csWorkStolen / steals)
  , ("events_per_steal", d csEventsStolen / steals)
  , ("locality_pct", 100 * d csNeighbourSteals / steals)
  , ("unpaid_pct", 100 * d csUnpaidSteals / steals)
  , ("parks_s", d csParks / secs)
  , ("errors", d csHandlerErrors)
    -- Other processes' share of the two CPUs during the window.
  , ("others_cpu_pct", max 0 (100 * (wBusy w - wOurs w) / (2 * secs))) ]
  where
    secs = fromIntegral (wNanos w) / 1e9
    steals = d csSteals
    d f = fromIntegral (sum (map f (wStats1 w)) - sum (map f (wStats0 w))) :: Double

-- | Field @f@ of the workload's counters, over the window (unbalanced and
-- balanced: 0 driver events off their core, 1 long events, 2 long events
-- off their home core, 3 ns spent posting by driver events, 4 driver
-- events; penalty and cache: 'fA' and the rest).
ownDelta :: Window -> Int -> Double
ownDelta w f = fromIntegral ((wOwn1 w !! f) - (wOwn0 w !! f))

-- | @100 * a / b@, or NaN (left out of the result) when @b@ is 0.
percent :: Double -> Double -> Double
percent a b = if b > 0 then 100 * a / b else 0 / 0

------------------------------------------------------------------------------
-- unbalanced and balanced

-- | Events per round.
roundEvents :: Int
roundEvents = 50_000

-- | @unbalancedRun cal cores config balanced warm secs@. Unbalanced: a
-- round's start event (color 0, home core 0) posts 'roundEvents' events of
-- colors @cores * (i + 1)@, all homed on core 0. Balanced: a fork event per
-- core (color @k@, home core @k@) posts that core's share, colors
-- @k + cores * (j + 1)@, with the same work sequence on every core.
unbalancedRun :: Calibration -> Int -> Config -> Bool -> Double -> Double
              -> IO (Runtime, Window, [(String, Double)])
unbalancedRun cal cores config balanced warm secs = do
  let perCore = roundEvents `div` cores
      n = if balanced then perCore else roundEvents
      -- One work sequence, the same for every policy: 2% long events,
      -- 10k-50k cycles, the rest 100 cycles.
      draws = take n (drop 1 (iterate xorshift 0x2545F4914F6CDD1D))
      cyclesOf r
        | r `mod` 50 == 0 = 10_000 + fromIntegral ((r `shiftR` 8) `mod` 40_001)
        | otherwise = 100 :: Double
      iters = primArrayFromList [ itersForCycles cal (cyclesOf r) | r <- draws ]
  own <- newOwn
  pending <- newAtomicInt 0
  -- The annotated costs: each kind of event body, timed alone (its join
  -- decrement included; the counter is far from zero).
  let body k = burn k >> void (fetchAddInt pending (-1))
  writeInt pending maxBound
  let shortIters = itersForCycles cal 100
  shortNs <- timeEach 50 2000 (\_ -> body shortIters)
  let overheadNs = max 0 (shortNs - round (100 * 1000 / calMHz cal))
      nsOf k = round (fromIntegral k / calItersPerNs cal) + overheadNs
      handlers = arrayFromList
        [ if cyclesOf r > 100 then (handler "long") { handlerCost = nsOf k } else (handler "short") { handlerCost = shortNs }
        | (r, k) <- zip draws (primArrayToList iters) ]
      driverH = handler (if balanced then "fork" else "start")
  caps <- getNumCapabilities
  rt <- newRuntime config
  let startRound next = do
        writeInt pending (if balanced then perCore * cores else n)
        let event home long k = do
              -- Long events that ran away from their home core: the ones
              -- stolen.
              when long $ do
                cap <- myCap
                bumpOwn own 1
                when (cap /= home) (bumpOwn own 2)
              burn k
              left <- fetchAddInt pending (-1)
              when (left == 1) next
            postAll base = do
              let go !i | i >= n = return ()
                        | otherwise = do
                            let k = indexPrimArray iters i
                            post rt (base + cores * (i + 1)) (indexArray handlers i)
                                 (event (base `mod` caps) (k > shortIters) k)
                            go (i + 1)
              go 0
            -- Count driver events that ran off their core (worker k runs on
            -- capability k mod caps); none should.
            driver k = do
              cap <- myCap
              when (cap /= k `mod` caps) (bumpOwn own 0)
              t0 <- getMonotonicTimeNSec
              postAll k
              t1 <- getMonotonicTimeNSec
              addOwn own 3 (fromIntegral (t1 - t0))
              addOwn own 4 1
        if balanced
          then forM_ [0 .. cores - 1] $ \k -> post rt k driverH (driver k)
          else post rt 0 driverH (driver 0)
  win <- forkJoin rt own warm secs startRound
  return (rt, win, [ ("post_ms", ownDelta win 3 / ownDelta win 4 / 1e6)
                   , ("long_stolen_pct", if cores == caps then percent (ownDelta win 2) (ownDelta win 1) else 0 / 0)
                   , ("driver_off_core", ownDelta win 0), ("short_cost_ns", fromIntegral shortNs) ])

------------------------------------------------------------------------------
-- penalty

chainsInFlight, arrayBytes, chunkBytes :: Int
chainsInFlight = 64
arrayBytes = 256 * 1024
chunkBytes = 16 * 1024

-- | The least a B event costs, in ns: more than a steal (0.3-1.5 us on
-- the hosts measured), so that time-left stealing alone would take B
-- colors. A B passes over its chunk as many times as that takes on the
-- host at hand; only the first pass can find the chunk in another core's
-- cache.
bFloorNs :: Int
bFloorNs = 2000

-- | Words of one chunk, and chunks (B events) per chain.
chunkWords, chunksPerArray :: Int
chunkWords = chunkBytes `div` 8
chunksPerArray = arrayBytes `div` chunkBytes

-- Own counters of the penalty and cache workloads.
fA, fAAway, fB, fBMoved, fBAway, fM, fMAway :: Int
fA = 0
fAAway = 1
fB = 2
fBMoved = 3
fBAway = 4
fM = 5
fMAway = 6

-- | Per-capability pools of spare arrays, as a per-core allocator (Mely
-- uses TCMalloc) would keep them. Fresh 256 KiB arrays are large objects
-- that the GC frees only at its next collection; with the children's
-- 64 MB nursery that is hundreds of arrays later, so every A would map and
-- fault in new pages (about 200 us, against 10 us to fill a warm array).
-- Only the worker of a capability touches its pool.
type Pools = Array (IORef [MutableByteArray RealWorld])

newPools :: IO Pools
newPools = do
  caps <- getNumCapabilities
  arrayFromList <$> replicateM caps (newIORef [])

-- | A's work: take an array from this capability's pool (or allocate one)
-- and fill it, which brings it into this core's cache.
takeFilled :: Pools -> IO (MutableByteArray RealWorld)
takeFilled pools = do
  cap <- myCap
  let pool = indexArray pools cap
  spare <- readIORef pool
  arr <- case spare of
    a : rest -> writeIORef pool rest >> return a
    [] -> newByteArray arrayBytes
  setByteArray arr 0 (arrayBytes `div` 8) (0 :: Int)
  return arr

-- | A chain is done with its array: into the pool of the core it ended on.
giveBack :: Pools -> MutableByteArray RealWorld -> IO ()
giveBack pools arr = do
  cap <- myCap
  modifyIORef' (indexArray pools cap) (arr :)

-- | Add 1 to every word of chunk @j@ (B's work).
touchChunk :: MutableByteArray RealWorld -> Int -> IO ()
touchChunk arr j = go (j * chunkWords)
  where
    end = (j + 1) * chunkWords
    go :: Int -> IO ()
    go !i | i >= end = return ()
          | otherwise = do
              v <- readByteArray arr i
              writeByteArray arr i (v + 1 :: Int)
              go (i + 1)

-- | 'chainsInFlight' chains, each on two colors homed on core 0 that it
-- alternates between: a chain's next A goes to the color its previous
-- chain left idle, so it is posted to core 0 even when the ending chain
-- runs elsewhere.
penaltyRun :: Calibration -> Int -> Config -> Double -> Double -> IO (Runtime, Window, [(String, Double)])
penaltyRun _ cores config warm secs = do
  own <- newOwn
  stopping <- newIORef False
  pools <- newPools
  -- Annotated costs, timed alone: A fills a pooled array; B touches a
  -- chunk of a warm one.
  warmArr <- takeFilled pools
  giveBack pools warmArr
  aNs <- timeEach 20 1 (\_ -> takeFilled pools >>= giveBack pools)
  onePass <- timeEach 20 1 (\_ -> mapM_ (touchChunk warmArr) [0 .. chunksPerArray - 1])
  let perPass = max 1 (onePass `div` chunksPerArray)
      passes = max 1 ((bFloorNs + perPass - 1) `div` perPass)
      touchB arr j = replicateM_ passes (touchChunk arr j)
  bNs <- timeEach 20 1 (\_ -> mapM_ (touchB warmArr) [0 .. chunksPerArray - 1])
  let bEach = max 1 (bNs `div` chunksPerArray)
      hA = (handler "A") { handlerCost = aNs, handlerPenalty = 1 }
      hB = (handler "B") { handlerCost = bEach, handlerPenalty = 1000 }
  rt <- newRuntime config
  let colorOf slot parity = cores * (1 + 2 * slot + parity)
      startA slot parity = post rt (colorOf slot parity) hA $ do
        cap <- myCap
        bumpOwn own fA
        when (cap /= 0) (bumpOwn own fAAway)
        arr <- takeFilled pools
        post rt (colorOf slot parity) hB (stepB slot parity arr cap cap 0)
      stepB slot parity arr home prev j = do
        cap <- myCap
        bumpOwn own fB
        when (cap /= prev) (bumpOwn own fBMoved)
        when (cap /= home) (bumpOwn own fBAway)
        touchB arr j
        if j + 1 < chunksPerArray
          then post rt (colorOf slot parity) hB (stepB slot parity arr home cap (j + 1))
          else do
            giveBack pools arr
            stop <- readIORef stopping
            unless stop (startA slot (1 - parity))
  forM_ [0 .. chainsInFlight - 1] $ \s -> startA s 0
  win <- steadyWindow rt own warm secs
  writeIORef stopping True
  let a = ownDelta win fA
      b = ownDelta win fB
  return (rt, win, [ ("a_stolen_pct", percent (ownDelta win fAAway) a)
                   , ("b_stolen_s", ownDelta win fBMoved / (fromIntegral (wNanos win) / 1e9))
                   , ("b_stolen_pct", percent (ownDelta win fBMoved) b)
                   , ("b_away_pct", percent (ownDelta win fBAway) b)
                   , ("a_cost_ns", fromIntegral aNs), ("b_cost_ns", fromIntegral bEach)
                   , ("b_passes", fromIntegral passes) ])

------------------------------------------------------------------------------
-- cache-efficient

arraysPerStarter, sortElems :: Int
arraysPerStarter = 100
sortElems = 512

-- | One array of the cache-efficient rounds: the numbers, the merge
-- buffer, the core that filled it, and how many halves have joined
-- (touched only by events of the array's color).
data SortJob = SortJob
  { sjArr    :: !(MutablePrimArray RealWorld Int)
  , sjTmp    :: !(MutablePrimArray RealWorld Int)
  , sjHome   :: !Int
  , sjJoined :: !(IORef Int)
  }

newJob :: Int -> Int -> IO SortJob
newJob seed home = do
  arr <- newPrimArray sortElems
  let fill :: Int -> Word64 -> IO ()
      fill !i !x | i >= sortElems = return ()
                 | otherwise = writePrimArray arr i (fromIntegral (x `shiftR` 1)) >> fill (i + 1) (xorshift x)
  fill 0 (fromIntegral seed * 0x9E3779B97F4A7C15 + 1)
  tmp <- newPrimArray sortElems
  SortJob arr tmp home <$> newIORef 0

-- | Sort @arr[lo, hi)@ (merge sort through @tmp[lo, hi)@).
sortRange :: MutablePrimArray RealWorld Int -> MutablePrimArray RealWorld Int -> Int -> Int -> IO ()
sortRange arr tmp lo hi
  | hi - lo <= 16 = insertion (lo + 1)
  | otherwise = do
      let mid = (lo + hi) `div` 2
      sortRange arr tmp lo mid
      sortRange arr tmp mid hi
      mergeInto arr tmp lo mid hi
      copyMutablePrimArray arr lo tmp lo (hi - lo)
  where
    insertion :: Int -> IO ()
    insertion !i
      | i >= hi = return ()
      | otherwise = do
          v <- readPrimArray arr i
          let shift :: Int -> IO Int
              shift !j
                | j <= lo = return j
                | otherwise = do
                    u <- readPrimArray arr (j - 1)
                    if u > v then writePrimArray arr j u >> shift (j - 1) else return j
          j <- shift i
          writePrimArray arr j v
          insertion (i + 1)

-- | Merge the sorted @arr[lo, mid)@ and @arr[mid, hi)@ into @tmp[lo, hi)@.
mergeInto :: MutablePrimArray RealWorld Int -> MutablePrimArray RealWorld Int -> Int -> Int -> Int -> IO ()
mergeInto arr tmp lo mid hi = go lo mid lo
  where
    go :: Int -> Int -> Int -> IO ()
    go !i !j !k
      | k >= hi = return ()
      | i >= mid = readPrimArray arr j >>= writePrimArray tmp k >> go i (j + 1) (k + 1)
      | j >= hi = readPrimArray arr i >>= writePrimArray tmp k >> go (i + 1) j (k + 1)
      | otherwise = do
          a <- readPrimArray arr i
          b <- readPrimArray arr j
          if a <= b then writePrimArray tmp k a >> go (i + 1) j (k + 1)
                    else writePrimArray tmp k b >> go i (j + 1) (k + 1)

-- | Rounds of 'arraysPerStarter' arrays on each of the first half of the
-- cores. The array's A, C and M events have one color, its two B events
-- one each, all homed on the starting core.
cacheRun :: Calibration -> Int -> Config -> Double -> Double -> IO (Runtime, Window, [(String, Double)])
cacheRun _ cores config warm secs = do
  own <- newOwn
  pending <- newAtomicInt 0
  let starters = max 1 (cores `div` 2)
      half = sortElems `div` 2
  -- Annotated costs, each body timed alone.
  aNs <- timeEach 10 50 (\i -> void (newJob i 0))
  -- Sorting changes the data, so every try gets fresh arrays, prepared
  -- as the timed event finds them.
  let perEach prep act = fmap minimum $ replicateM 5 $ do
        jobs <- mapM (`newJob` 0) [0 .. 49]
        mapM_ prep jobs
        t <- timeEach 1 1 (\_ -> forM_ jobs act)
        return (max 1 (t `div` 50))
      sortHalf lo hi j = sortRange (sjArr j) (sjTmp j) lo hi
  perB <- perEach (const (return ())) (sortHalf 0 half)
  perM <- perEach (\j -> sortHalf 0 half j >> sortHalf half sortElems j)
                  (\j -> mergeInto (sjArr j) (sjTmp j) 0 half sortElems)
  let hA = (handler "A") { handlerCost = aNs }
      hB = (handler "B") { handlerCost = perB }
      hC = handler "C"
      hM = (handler "M") { handlerCost = perM }
  rt <- newRuntime config
  roundNo <- newIORef (0 :: Int)
  let startRound next = do
        r <- readIORef roundNo
        writeIORef roundNo (r + 1)
        writeInt pending (starters * arraysPerStarter)
        forM_ [0 .. starters - 1] $ \k -> forM_ [0 .. arraysPerStarter - 1] $ \i -> do
          let base = k + cores * (1 + 3 * i)
          post rt base hA (eventA next base (r * arraysPerStarter + i))
      eventA next base seed = do
        cap <- myCap
        bumpOwn own fA
        job <- newJob seed cap
        post rt (base + cores) hB (eventB next base job 0 half)
        post rt (base + 2 * cores) hB (eventB next base job half sortElems)
      eventB next base job lo hi = do
        cap <- myCap
        bumpOwn own fB
        when (cap /= sjHome job) (bumpOwn own fBAway)
        sortRange (sjArr job) (sjTmp job) lo hi
        post rt base hC $ do
          k <- readIORef (sjJoined job)
          writeIORef (sjJoined job) (k + 1)
          when (k == 1) $ post rt base hM (eventM next job)
      eventM next job = do
        cap <- myCap
        bumpOwn own fM
        when (cap /= sjHome job) (bumpOwn own fMAway)
        mergeInto (sjArr job) (sjTmp job) 0 half sortElems
        left <- fetchAddInt pending (-1)
        when (left == 1) next
  win <- forkJoin rt own warm secs startRound
  return (rt, win, [ ("b_away_pct", percent (ownDelta win fBAway) (ownDelta win fB))
                   , ("m_away_pct", percent (ownDelta win fMAway) (ownDelta win fM))
                   , ("a_cost_ns", fromIntegral aNs), ("b_cost_ns", fromIntegral perB)
                   , ("m_cost_ns", fromIntegral perM) ])
