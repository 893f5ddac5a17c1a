{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE NumericUnderscores #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | @weft-bench timers@: weft's timers against GHC's, through the APIs
-- programs actually call, at @-N1@ and @-N2@.
--
-- * __timeout-heavy__: two threads each wrap a no-op in 'timeout' (10 s, so
--   it never fires) a million times. Servers put a timeout around every
--   request, so a timeout's set-up and tear-down is pure overhead on the hot
--   path; GHC funnels every one through a single timer queue behind one
--   'IORef', which both capabilities fight over.
--
-- * __threadDelay scaling__ (the threadDelay experiment of O'Sullivan and
--   Tibell, Haskell 2010, Fig. 3): N threads each sleep 1 us and then bump a
--   shared counter; wall time from the first fork to the last increment, and
--   peak RSS. This is the timer queue under many concurrent insertions and
--   expiries, but not only that: the sleepers pile up faster than they
--   expire, and with default RTS settings the GC copying them takes most of
--   the time (about 75% for GHC's arm at 1M), so a cheaper queue shows
--   mostly through less memory per sleeper. Without @--long@, N >= 100k
--   runs once: a million sleepers take GHC's arm 20-50 s and 10 GB here.
--
-- * __bytes per pending threadDelay__: the live heap that 100k sleeping
--   threads cost beyond 100k threads blocked in @takeMVar@. At the default
--   1 KiB first stack this includes the stack the threadDelay call path
--   grows (kilobytes); with @-ki4k@, where no stack grows, only the timer's
--   own data (about a hundred bytes).
--
-- * __tickle__ (warp's pattern: every request pushes its connection's
--   timeout back): 10k registered long timers and a million 'updateTimeout's
--   on random keys to random limits of 30-60 s, from two threads that each
--   own half of the timers.
--
-- Every measured run is a child process (@weft-bench timers-child ...@)
-- pinned with @taskset@, so each arm starts from a fresh heap and neither
-- arm's managers run during the other's measurement. The parent interleaves
-- the arms within each repetition, repeats, and reports medians, min–max
-- and weft÷ghc ratios next to the targets of the timer-wheel work.
--
-- The measured work never runs on the bound main thread: every hand-off
-- between a bound thread and the capability costs about 8 us here, which
-- would swamp a timeout's cost. Workers are forked with 'forkOn' 0 and 1
-- (both land on capability 0 at @-N1@) and main waits on 'MVar's.
module Bench.Timers
  ( timersMain
  , timersChild
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.Bits (shiftR, (.&.))
import Data.IORef
import Data.List (intercalate, isPrefixOf, sortOn, stripPrefix)
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe, mapMaybe)
import Data.Word (Word64)
import GHC.Arr (Array, listArray, unsafeAt)
import GHC.Clock (getMonotonicTimeNSec)
import qualified GHC.Conc as GHC
import qualified GHC.Event as GE
import GHC.Stats (gcdetails_live_bytes, gc, getRTSStats, getRTSStatsEnabled)
import System.Directory (createDirectoryIfMissing)
import System.Environment (getExecutablePath)
import System.Exit
import System.IO
import System.Mem (performMajorGC)
import System.Posix.Process (exitImmediately)
import System.Process
import qualified System.Timeout as GHC (timeout)
import Text.Printf (printf)

import Bench.Headline (note)
import Bench.Options
import System.FilePath ((</>))
import Bench.Report
import qualified Weft
import qualified Weft.Event as E
import qualified Weft.Timer as WT

------------------------------------------------------------------------------
-- Arms and options

data Arm = WeftArm | GhcArm deriving (Eq, Ord, Show, Enum, Bounded)

armName :: Arm -> String
armName WeftArm = "weft"
armName GhcArm = "ghc"

parseArm :: String -> Arm
parseArm s = case [ a | a <- [minBound .. maxBound], armName a == s ] of
  (a : _) -> a
  [] -> error ("weft-bench timers-child: unknown arm " ++ s)

data Options = Options
  { optReps         :: Int
  , optLong         :: Bool
  , optTimeouts     :: Int    -- ^ timeouts per thread (two threads)
  , optUpdates      :: Int    -- ^ updateTimeout calls in all (two threads)
  , optTimers       :: Int    -- ^ registered timers in all (two threads)
  , optDelayThreads :: [Int]  -- ^ the N of the threadDelay scaling runs
  , optBytesThreads :: Int    -- ^ the N of the bytes-per-delay runs
  , optCaps         :: [Int]
  , optOnly         :: [String]
  }

parseOptions :: [String] -> IO Options
parseOptions args0 = finish <$> parseOrExit "timers" table (defaults, Nothing) args0
  where
    defaults = Options 3 False 1_000_000 1_000_000 10_000 [10_000, 30_000, 100_000, 300_000, 1_000_000]
                       100_000 [1, 2] allBenches
    -- --long changes the defaults, but an explicit --reps wins wherever it is.
    finish (o, reps)
      | optLong o = o { optReps = fromMaybe 5 reps
                      , optDelayThreads = optDelayThreads o ++ [ 3_000_000 | 3_000_000 `notElem` optDelayThreads o ] }
      | otherwise = o { optReps = fromMaybe (optReps o) reps }
    -- The options, and an explicit --reps.
    table =
      [ flag "--long" (\(o, r) -> (o { optLong = True }, r))
      , value "--reps" "N" positive (\n (o, _) -> (o, Just n))
      , value "--timeouts" "N" positive (\n (o, r) -> (o { optTimeouts = n }, r))
      , value "--updates" "N" positive (\n (o, r) -> (o { optUpdates = n }, r))
      , value "--timers" "N" positive (\n (o, r) -> (o { optTimers = n }, r))
      , value "--delay-threads" "N,N,.." (listOf positive) (\ns (o, r) -> (o { optDelayThreads = ns }, r))
      , value "--bytes-threads" "N" positive (\n (o, r) -> (o { optBytesThreads = n }, r))
      , value "--caps" "1,2" (listOf positive) (\cs (o, r) -> (o { optCaps = cs }, r))
      , value "--only" (intercalate "," allBenches) (listOf Just) (\bs (o, r) -> (o { optOnly = bs }, r)) ]

allBenches :: [String]
allBenches = ["timeout", "delay", "bytes", "tickle"]

------------------------------------------------------------------------------
-- The parent

-- | A child's @result@ line: named numbers.
type Sample = ChildResult

-- | One row of the report: a configuration at one @-N@ and one arm.
type CellKey = (String, Int, Arm)

-- | How a benchmark's samples become table rows.
data Metric = Metric
  { mKey    :: String                 -- ^ the sample field whose median is shown
  , mUnit   :: String
  , mFmt    :: Double -> String
  , mCpuKey :: Maybe String           -- ^ CPU us per operation, if any
  , mRssKey :: Maybe String           -- ^ peak RSS in KiB, if any
  , mTarget :: String -> Int -> Double -> String
    -- ^ the target note for weft's row, from the configuration, @-N@ and ratio
  }

-- | One configuration of a benchmark: its row label, the child's arguments
-- (the arm goes after the first), extra RTS options, how many repetitions
-- it gets at most, and the @-N@ values it runs at.
data Config = Config
  { cfLabel :: String
  , cfArgs  :: [String]
  , cfRts   :: [String]
  , cfReps  :: Int
  , cfCaps  :: [Int]
  , cfGuard :: Map.Map CellKey [Sample] -> Int -> Arm -> IO (Maybe String)
    -- ^ from the samples so far, a reason not to run this cell at this @-N@
    -- and arm, if there is one
  }

noGuard :: Map.Map CellKey [Sample] -> Int -> Arm -> IO (Maybe String)
noGuard _ _ _ = return Nothing

-- | The parent: every benchmark in turn, each with its arms interleaved
-- within every repetition; prints and returns the tables.
timersMain :: [String] -> IO String
timersMain args = do
  opts <- parseOptions args
  let want b = b `elem` optOnly opts
      reps = optReps opts
      caps = optCaps opts
  exe <- getExecutablePath
  hSetBuffering stdout LineBuffering
  createDirectoryIfMissing True resultsRoot
  writeFile runsPath ""
  writeCsv csvPath tableHeader []
  started <- getMonotonicTimeNSec
  printf "weft-bench timers: weft's timers vs GHC's, %d repetitions, arms interleaved, children pinned with taskset\n" reps
  let half n = n `div` 2
      skip = return ("", Map.empty)
  (t1, _) <- if not (want "timeout") then skip else
    section opts exe
      (printf "timeout-heavy: 2 threads x %d timeout 10 s around a no-op" (optTimeouts opts))
      [ Config "timeout-heavy" ["timeout", show (optTimeouts opts)] [] reps caps noGuard ]
      (Metric "rate" "timeouts/s" (printf "%.0f") (Just "cpu_us") Nothing
         (\_ n r -> if n == 2 then target ">=" 5 r else "(target >=5x is at -N2)"))
  -- A million sleepers take 20-30 s and 10-14 GB here (the threads pile up
  -- faster than the timers expire, and the GC copies them over and over),
  -- so without --long the big runs are made once, to keep the default run
  -- near 4 minutes.
  let delayReps n | optLong opts || n < bigDelay = reps
                  | otherwise = 1
      bigDelay = 100_000
  (t2, delays) <- if not (want "delay") then skip else do
    unless (optLong opts || reps == 1 || all (< bigDelay) (optDelayThreads opts)) $
      printf "(N >= %s: 1 repetition; --long runs all %d)\n" (showCount bigDelay) reps
    section opts exe
      "threadDelay scaling: N threads each threadDelay 1 then bump a counter; wall time from first fork to last increment"
      [ Config (delayLabel n) ["delay", show n] [] (delayReps n) caps (memoryGuard (optDelayThreads opts) n) | n <- optDelayThreads opts ]
      (Metric "wall_ms" "ms" (printf "%.1f") (Just "cpu_us") (Just "rss_kib")
         (\l _ r -> if l == delayLabel 1_000_000 then target "<=" 0.5 r else ""))
  when (want "delay") (plotDelay opts delays)
  -- The memory figures hardly vary with -N (the threads are the same), so
  -- -N1 only, where they are steadiest.
  (t3, _) <- if not (want "bytes") then skip else
    section opts exe
      (printf "bytes per pending threadDelay: %d sleeping threads vs %d threads blocked in takeMVar, live heap after a major GC"
         (optBytesThreads opts) (optBytesThreads opts))
      [ Config "bytes/pending delay" ["bytes", show (optBytesThreads opts)] ["-T"] reps [1] noGuard
      , Config "bytes/pending delay -ki4k" ["bytes", show (optBytesThreads opts)] ["-T", "-ki4k"] reps [1] noGuard ]
      (Metric "bytes_per_delay" "bytes" (printf "%.0f") Nothing Nothing (\_ _ _ -> ""))
  (t4, _) <- if not (want "tickle") then skip else
    section opts exe
      (printf "tickle: %d timers (2 threads x %d, 60 s), %d updateTimeout to random keys and 30-60 s limits (2 threads x %d)"
         (2 * half (optTimers opts)) (half (optTimers opts)) (2 * half (optUpdates opts)) (half (optUpdates opts)))
      [ Config "tickle" ["tickle", show (optTimers opts), show (optUpdates opts)] [] reps caps noGuard ]
      (Metric "rate" "updates/s" (printf "%.0f") (Just "cpu_us") Nothing (\_ _ r -> target ">=" 3 r))
  finished <- getMonotonicTimeNSec
  let tables = concat [t1, t2, t3, t4]
  putStrLn ""
  putStrLn "== weft-bench timers: all results =="
  putStr tables
  putStr $ unlines
    [ "(medians of the repetitions, ratios of medians. weft÷ghc is of throughput for timeout-heavy and tickle"
    , " (higher is better), of wall time for threadDelay and of bytes for bytes/pending delay (lower is better)."
    , " CPU us/op: process CPU of all threads per timeout, per sleeping thread, per update."
    , " bytes/pending delay: live heap per sleeping thread beyond a thread blocked in takeMVar; at the default"
    , " 1 KiB first stack it includes the stack growth the threadDelay call path causes, with -ki4k only the"
    , " timer's own data.)" ]
  putStrLn ("CSV: " ++ csvPath ++ "; every child's result: " ++ runsPath)
  printf "weft-bench timers took %.0f s\n" (fromIntegral (finished - started) / 1e9 :: Double)
  return tables

csvPath, runsPath, delayDatPath :: FilePath
csvPath = resultsRoot </> "timers.csv"
runsPath = resultsRoot </> "timers-runs.dat"
delayDatPath = resultsRoot </> "timers-threaddelay.dat"

-- | "met" or "missed" against a ratio target.
target :: String -> Double -> Double -> String
target op goal r =
  let ok = if op == ">=" then r >= goal else r <= goal
  in printf "target %s%gx: %s" op goal (if ok then "met" else "missed" :: String)

showCount :: Int -> String
showCount n
  | n >= 1_000_000 && n `mod` 1_000_000 == 0 = show (n `div` 1_000_000) ++ "M"
  | n >= 1000 && n `mod` 1000 == 0 = show (n `div` 1000) ++ "k"
  | otherwise = show n

-- | Run one benchmark: each configuration at each of its @-N@ with each
-- arm, arms interleaved, up to 'optReps' times; then print its table,
-- append it to the CSV and return it.
section :: Options -> FilePath -> String -> [Config] -> Metric -> IO (String, Map.Map CellKey [Sample])
section opts exe title configs metric = do
  putStrLn ""
  putStrLn title
  results <- newIORef (Map.empty :: Map.Map CellKey [Sample])
  -- Per cell: skipped (Left), or how many runs failed (Right).
  failures <- newIORef (Map.empty :: Map.Map CellKey (Either () Int))
  forM_ [1 .. optReps opts] $ \rep ->
    forM_ [ cf | cf <- configs, rep <= cfReps cf ] $ \cf -> forM_ (cfCaps cf) $ \n -> forM_ [minBound .. maxBound] $ \arm -> do
      let label = cfLabel cf
      soFar <- readIORef results
      veto <- cfGuard cf soFar n arm
      r <- maybe (runChild exe n arm (cfArgs cf) (cfRts cf)) (return . Left . Left) veto
      case r of
        Left (Left why) -> do
          printf "  [rep %d/%d] %-26s -N%d %-4s skipped: %s\n" rep (cfReps cf) label n (armName arm) why
          modifyIORef' failures (Map.insertWith (\_ old -> old) (label, n, arm) (Left ()))
        Left (Right err) -> do
          printf "  [rep %d/%d] %-26s -N%d %-4s FAILED: %s\n" rep (cfReps cf) label n (armName arm) err
          modifyIORef' failures (Map.insertWith (\_ old -> either Left (Right . (+ 1)) old) (label, n, arm) (Right (1 :: Int)))
        Right s -> do
          printf "  [rep %d/%d] %-26s -N%d %-4s %s\n" rep (cfReps cf) label n (armName arm) (progress s)
          appendFile runsPath (unwords ([label, "N" ++ show n, armName arm] ++ [ k ++ "=" ++ show v | (k, v) <- Map.toList s ]) ++ "\n")
          modifyIORef' results (Map.insertWith (flip (++)) (label, n, arm) [s])
  res <- readIORef results
  fails <- readIORef failures
  let get key f = mapMaybe (Map.lookup f) (Map.findWithDefault [] key res)
      rows = [ [ label, "-N" ++ show n, armName arm
               , if not (null vals) then mFmt metric (median vals)
                 else if Map.lookup key fails == Just (Left ()) then "skipped" else "failed"
               , spread (mFmt metric) vals ++ failNote
               , mUnit metric
               , maybe "" (\k -> let cs = get key k in if null cs then "-" else printf "%.3f" (median cs)) (mCpuKey metric)
               , maybe "" (\k -> let rs = get key k in if null rs then "-" else printf "%.0f" (median rs / 1024)) (mRssKey metric)
               , ratioCell, targetCell ]
             | cf <- configs, let label = cfLabel cf, n <- cfCaps cf, arm <- [minBound .. maxBound]
             , let key = (label, n, arm)
             , let vals = get key (mKey metric)
             , let ghcVals = get (label, n, GhcArm) (mKey metric)
             , let failNote = case Map.lookup key fails of
                     Just (Right k) -> " (" ++ show k ++ " failed)"
                     _ -> ""
             , let ratio = median vals / median ghcVals
             , let ratioCell | arm == GhcArm = ""
                             | null vals || null ghcVals = "-"
                             | otherwise = printf "%.2fx" ratio
             , let targetCell | arm == GhcArm || null vals || null ghcVals = ""
                              | otherwise = mTarget metric label n ratio ]
      table = renderTable tableHeader rows
  sequence_ [ note ["timers", headlineLabel (cfLabel cf), "N" ++ show n, armName arm] (median vals)
            | cf <- configs, n <- cfCaps cf, arm <- [minBound .. maxBound]
            , let vals = get (cfLabel cf, n, arm) (mKey metric), not (null vals) ]
  putStrLn ""
  putStr table
  appendFile csvPath (unlines (map (intercalate "," . map csvField) rows))
  return (table, res)

-- | A configuration's name in the headline table's keys: the
-- threadDelay runs by their count alone (@1M@).
headlineLabel :: String -> String
headlineLabel l = case stripPrefix "threadDelay N=" l of
  Just count -> count
  Nothing -> l

tableHeader :: [String]
tableHeader = [ "benchmark", "caps", "arm", "median", "min–max", "unit", "CPU us/op", "peak RSS MiB", "weft÷ghc", "target" ]

-- | Commas inside a field (there are none today) would shift the columns.
csvField :: String -> String
csvField = map (\c -> if c == ',' then ';' else c)

progress :: Sample -> String
progress s = unwords [ k ++ "=" ++ fmt v | (k, v) <- Map.toList s ]
  where fmt v = if v == fromIntegral (round v :: Integer) then show (round v :: Integer) else printf "%.3f" v

-- | Run one child, pinned: core 0 for @-N1@, both cores for @-N2@. A child
-- that fails, or runs past a generous limit, fails only its cell.
runChild :: FilePath -> Int -> Arm -> [String] -> [String] -> IO (Either (Either String String) Sample)
runChild exe n arm childArgs rts = do
  let cores = if n <= 1 then "0" else intercalate "," (map show [0 .. n - 1])
      argv = [ "timers-child" ] ++ take 1 childArgs ++ [armName arm] ++ drop 1 childArgs
             ++ [ "+RTS", "-N" ++ show n ] ++ rts ++ [ "-RTS" ]
  either (Left . Right) Right <$> runPinned cores exe argv childLimitSecs
  -- GHC's arm at a million sleepers and -N2 normally takes under a minute
  -- here, but now and then stalls for many minutes; such a run is reported
  -- as failed rather than holding up the suite.
  where childLimitSecs = 240

-- | Skip a threadDelay run that would not fit in memory, judged by the
-- same -N and arm's peak RSS at the largest smaller N measured so far,
-- scaled linearly (per-thread memory grows with N, hence the margin).
-- Running out of memory would take minutes to end in the OOM killer, and
-- the squeeze would disturb everything else on the machine.
memoryGuard :: [Int] -> Int -> Map.Map CellKey [Sample] -> Int -> Arm -> IO (Maybe String)
memoryGuard ns n res caps arm = do
  let seen = [ (m, maximum rss)
             | m <- ns, m < n
             , let rss = mapMaybe (Map.lookup "rss_kib") (Map.findWithDefault [] (delayLabel m, caps, arm) res)
             , not (null rss) ]
  avail <- memAvailableKiB
  return $ case reverse (sortOn fst seen) of
    ((m, r) : _) | Just a <- avail, r * fromIntegral n / fromIntegral m > 0.75 * a ->
      Just (printf "would need about %.0f GiB (peak RSS at N=%s scaled up), %.0f GiB available"
              (r * fromIntegral n / fromIntegral m / 1048576) (showCount m) (a / 1048576))
    _ -> Nothing

-- | MemAvailable from /proc/meminfo, in KiB.
memAvailableKiB :: IO (Maybe Double)
memAvailableKiB = do
  r <- try (readFile "/proc/meminfo")
  return $ case r of
    Left (_ :: IOException) -> Nothing
    Right info -> case [ read (words l !! 1) | l <- lines info, "MemAvailable:" `isPrefixOf` l ] of
      (a : _) -> Just a
      [] -> Nothing

delayLabel :: Int -> String
delayLabel n = "threadDelay N=" ++ showCount n

-- | The threadDelay medians by N, one column per (-N, arm), and the log-log
-- plot of them. A missing gnuplot costs only the plot.
plotDelay :: Options -> Map.Map CellKey [Sample] -> IO ()
plotDelay opts res = do
  let cols = [ (c, a) | c <- optCaps opts, a <- [minBound .. maxBound :: Arm] ]
      med n c a = case mapMaybe (Map.lookup "wall_ms") (Map.findWithDefault [] (delayLabel n, c, a) res) of
        [] -> "?"
        vs -> show (median vs)
  writeFile delayDatPath $ unlines $
    ("# N " ++ unwords [ armName a ++ "_N" ++ show c ++ "_wall_ms" | (c, a) <- cols ]) :
    [ unwords (show n : [ med n c a | (c, a) <- cols ]) | n <- optDelayThreads opts ]
  let script = unlines
        [ "set terminal pngcairo size 900,560"
        , "set output '" ++ resultsRoot ++ "/timers-threaddelay.png'"
        , "set title 'threadDelay scaling: N threads x threadDelay 1, first fork to last increment (median)'"
        , "set xlabel 'threads (N)'", "set ylabel 'wall time (ms)'"
        , "set logscale xy", "set key top left", "set grid", "set datafile missing '?'"
        , "set xtics (" ++ intercalate ", " [ "'" ++ showCount n ++ "' " ++ show n | n <- optDelayThreads opts ] ++ ")"
          -- Room either side, or the end points sit on the border unlabelled.
        , printf "set xrange [%d:%d]" (minimum (optDelayThreads opts) * 2 `div` 3) (maximum (optDelayThreads opts) * 3 `div` 2)
        , "plot " ++ intercalate ", "
            [ "'" ++ delayDatPath ++ "' using 1:" ++ show (i + 2) ++ " with linespoints lw 2 title '"
              ++ armName a ++ " -N" ++ show c ++ "'"
            | (i, (c, a)) <- zip [0 :: Int ..] cols ] ]
      gp = resultsRoot </> "timers-threaddelay.gp"
  writeFile gp script
  r <- try (callProcess "gnuplot" [gp])
  case r of
    Left (e :: SomeException) -> hPutStrLn stderr ("weft-bench: no plot for timers-threaddelay: " ++ show e)
    Right () -> putStrLn ("plot: " ++ resultsRoot ++ "/timers-threaddelay.png (data: " ++ delayDatPath ++ ")")

------------------------------------------------------------------------------
-- The child

-- | The child: one timed run of one benchmark with one arm at the RTS's
-- @-N@, printing a @result key=value ...@ line.
timersChild :: [String] -> IO ()
timersChild args = do
  hSetBuffering stdout LineBuffering
  case args of
    ["timeout", a, n] -> withArm a (timeoutChild (read n))
    ["delay", a, n] -> withArm a (delayChild (read n))
    ["bytes", a, n] -> withArm a (bytesChild (read n))
    ["tickle", a, t, u] -> withArm a (tickleChild (read t) (read u))
    _ -> do
      hPutStrLn stderr $ unlines
        [ "usage: weft-bench timers-child timeout ARM TIMEOUTS_PER_THREAD"
        , "       weft-bench timers-child delay ARM THREADS"
        , "       weft-bench timers-child bytes ARM THREADS      (needs +RTS -T)"
        , "       weft-bench timers-child tickle ARM TIMERS UPDATES"
        , "ARM: weft or ghc" ]
      exitFailure
  where
    withArm a k = do
      let arm = parseArm a
      -- weft's managers start lazily; start them all before any timing so
      -- no run pays for a start.
      when (arm == WeftArm) E.startSystemManagers
      k arm

result :: [(String, Double)] -> IO ()
result kvs = putStrLn (unwords ("result" : [ k ++ "=" ++ show v | (k, v) <- kvs ]))

-- | Run @work i@ on capability @i@ for each @i@ below @k@ (modulo the
-- capability count), and wait for them all; a worker's exception is
-- rethrown here.
onWorkers :: Int -> (Int -> IO a) -> IO [a]
onWorkers k work = do
  vars <- forM [0 .. k - 1] $ \i -> do
    v <- newEmptyMVar
    _ <- forkOn i (try (work i) >>= putMVar v)
    return v
  forM vars $ \v -> takeMVar v >>= either (\(e :: SomeException) -> throwIO e) return

-- | Peak resident set (VmHWM), in KiB.
peakRssKiB :: IO Double
peakRssKiB = do
  status <- readFile "/proc/self/status"
  let hwm = [ read (words l !! 1) | l <- lines status, "VmHWM:" `isPrefixOf` l ]
  length status `seq` return (case hwm of (h : _) -> h; [] -> 0)

elapsedSince :: Word64 -> IO Double
elapsedSince t0 = do
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / 1e9)

-- timeout-heavy ----------------------------------------------------------------

timeoutChild :: Int -> Arm -> IO ()
timeoutChild perThread arm = case arm of
  WeftArm -> go Weft.timeout
  GhcArm -> go GHC.timeout
  where
    go :: (Int -> IO () -> IO (Maybe ())) -> IO ()
    go to = do
      -- Warm-up: first registrations, thread start-up, heap growth.
      _ <- onWorkers 2 (\_ -> timeoutLoop to (min perThread 10_000))
      c0 <- processCpuMicros
      t0 <- getMonotonicTimeNSec
      oks <- onWorkers 2 (\_ -> timeoutLoop to perThread)
      secs <- elapsedSince t0
      c1 <- processCpuMicros
      let total = 2 * perThread
      -- Every action must have completed: a fired timeout would mean the
      -- loop measured something else.
      when (sum oks /= total) $ fail ("weft-bench: only " ++ show (sum oks) ++ " of " ++ show total ++ " timeouts returned Just")
      result [ ("rate", fromIntegral total / secs), ("cpu_us", (c1 - c0) / fromIntegral total)
             , ("wall_s", secs) ]

-- | @n@ timeouts of 10 s around a no-op; returns how many completed. The
-- result is scrutinised, so neither the call nor its 'Maybe' can be
-- dropped.
timeoutLoop :: (Int -> IO () -> IO (Maybe ())) -> Int -> IO Int
timeoutLoop to n = loop 0 0
  where
    loop !i !ok
      | i >= n = return ok
      | otherwise = do
          r <- to 10_000_000 (return ())
          case r of
            Just () -> loop (i + 1) (ok + 1)
            Nothing -> loop (i + 1) ok
{-# INLINE timeoutLoop #-}

-- threadDelay scaling ------------------------------------------------------------

delayChild :: Int -> Arm -> IO ()
delayChild n arm = do
  -- The big runs take many GB; should one outgrow the machine, the kernel
  -- is to kill this child rather than the parent or a bystander.
  _ <- try (writeFile "/proc/self/oom_score_adj" "1000") :: IO (Either IOException ())
  let delay = case arm of
        WeftArm -> Weft.threadDelay
        GhcArm -> GHC.threadDelay
  _ <- delayRun delay 1000
  c0 <- processCpuMicros
  ns <- delayRun delay n
  c1 <- processCpuMicros
  rss <- peakRssKiB
  result [ ("wall_ms", fromIntegral ns / 1e6), ("cpu_us", (c1 - c0) / fromIntegral n), ("rss_kib", rss) ]

-- | Two forkers (capabilities 0 and 1) fork @n@ threads between them, each
-- pinned to its forker's capability; each sleeps 1 us and increments the
-- counter, and the last one stamps the time. Returns nanoseconds from just
-- before the first fork to the last increment.
delayRun :: (Int -> IO ()) -> Int -> IO Word64
delayRun delay n = do
  counter <- newIORef (0 :: Int)
  done <- newEmptyMVar
  let sleeper = do
        delay 1
        m <- atomicModifyIORef' counter (\x -> let y = x + 1 in (y, y))
        when (m == n) (getMonotonicTimeNSec >>= putMVar done)
  t0 <- getMonotonicTimeNSec
  forM_ (zip [0 ..] (shares 2 n)) $ \(c, k) ->
    forkOn c (replicateM_ k (forkOn c sleeper))
  t1 <- takeMVar done
  return (t1 - t0)

-- | @n@ split into @k@ near-equal parts.
shares :: Int -> Int -> [Int]
shares k n = [ n `div` k + (if i < n `mod` k then 1 else 0) | i <- [0 .. k - 1] ]

-- bytes per pending threadDelay ---------------------------------------------------

-- | Live heap of @n@ threads blocked in @takeMVar@ on their own MVars, then
-- of @n@ threads sleeping 30 s; the difference per thread is what a pending
-- delay holds beyond a blocked thread. Both sets of threads are forked the
-- same way and their 'ThreadId's kept in the same kind of list (which also
-- keeps the takeMVar threads reachable, so the GC does not resurrect them
-- with BlockedIndefinitelyOnMVar).
bytesChild :: Int -> Arm -> IO ()
bytesChild n arm = do
  enabled <- getRTSStatsEnabled
  unless enabled $ fail "weft-bench timers-child bytes: run with +RTS -T"
  let delay = case arm of
        WeftArm -> Weft.threadDelay
        GhcArm -> GHC.threadDelay
  live0 <- liveBytes
  base <- forkBlocked n (newEmptyMVar >>= \(m :: MVar ()) -> takeMVar m)
  live1 <- liveBytes
  -- killThread returns once the exception is raised, not once the thread
  -- has run and died; a thread still dying would free its stack during the
  -- next phase and understate it.
  mapM_ killThread base
  mapM_ awaitEnd base
  live2 <- liveBytes
  delayed <- forkBlocked n (delay 30_000_000)
  live3 <- liveBytes
  let perBase = fromIntegral (live1 - live0) / fromIntegral n :: Double
      perDelay = fromIntegral (live3 - live2) / fromIntegral n :: Double
  result [ ("bytes_per_delay", perDelay - perBase), ("thread_bytes_blocked", perBase)
         , ("thread_bytes_delayed", perDelay) ]
  -- The sleepers would hold the process for 30 s; the list must stay live
  -- until here, and then nothing else needs to run.
  _ <- evaluate (length delayed)
  hFlush stdout
  exitImmediately ExitSuccess

-- | Fork @n@ threads (half from each of two forkers) that count themselves
-- and then block in @act@; return once all have counted and had a moment
-- to reach their blocking point.
forkBlocked :: Int -> IO () -> IO [ThreadId]
forkBlocked n act = do
  started <- newIORef (0 :: Int)
  tidss <- onWorkers 2 $ \c -> forM [1 .. shares 2 n !! c] $ \_ ->
    forkOn c (atomicModifyIORef' started (\x -> (x + 1, ())) >> act)
  let tids = concat tidss
  _ <- evaluate (length tids)
  let waitAll = do
        s <- readIORef started
        unless (s >= n) (GHC.threadDelay 10_000 >> waitAll)
  waitAll
  -- Counting comes just before blocking; give the last few time to block.
  GHC.threadDelay 200_000
  return tids

awaitEnd :: ThreadId -> IO ()
awaitEnd t = do
  st <- GHC.threadStatus t
  case st of
    GHC.ThreadFinished -> return ()
    GHC.ThreadDied -> return ()
    _ -> GHC.threadDelay 1000 >> awaitEnd t

liveBytes :: IO Integer
liveBytes = do
  performMajorGC
  fromIntegral . gcdetails_live_bytes . gc <$> getRTSStats

-- tickle ---------------------------------------------------------------------------

-- | A timer API as the tickle loop needs it: the calling thread's manager,
-- and register / update / unregister on it.
data TimerApi m k = TimerApi
  { taManager    :: IO m
  , taRegister   :: m -> Int -> IO () -> IO k
  , taUpdate     :: m -> k -> Int -> IO ()
  , taUnregister :: m -> k -> IO ()
  }

weftApi :: TimerApi WT.TimerManager WT.TimeoutKey
weftApi = TimerApi WT.getSystemTimerManager WT.registerTimeout WT.updateTimeout WT.unregisterTimeout

ghcApi :: TimerApi GE.TimerManager GE.TimeoutKey
ghcApi = TimerApi GE.getSystemTimerManager GE.registerTimeout GE.updateTimeout GE.unregisterTimeout

tickleChild :: Int -> Int -> Arm -> IO ()
tickleChild timers updates arm = case arm of
  WeftArm -> tickle weftApi timers updates
  GhcArm -> tickle ghcApi timers updates

-- | Two workers each register @timers/2@ timers of 60 s, meet at a start
-- line, make @updates/2@ updates, and (after the clock stops) unregister
-- everything.
tickle :: forall m k. TimerApi m k -> Int -> Int -> IO ()
tickle api timers updates = do
  let perTimers = max 1 (timers `div` 2)
      perUpdates = updates `div` 2
  registered <- newEmptyMVar
  go <- newEmptyMVar
  finished <- newEmptyMVar
  let worker c = do
        mgr <- taManager api
        keys <- forM [1 .. perTimers] $ \_ -> taRegister api mgr 60_000_000 (return ())
        let arr = listArray (0, perTimers - 1) keys :: Array Int k
        _ <- evaluate (length keys)
        putMVar registered ()
        readMVar go
        done <- tickleLoop api mgr arr perTimers perUpdates (0x9E3779B97F4A7C15 + fromIntegral c)
        putMVar finished done
        -- Not timed: leave no timer behind.
        mapM_ (taUnregister api mgr) keys
        return done
  results <- newEmptyMVar
  _ <- forkIO (onWorkers 2 worker >>= putMVar results)
  replicateM_ 2 (takeMVar registered)
  c0 <- processCpuMicros
  t0 <- getMonotonicTimeNSec
  putMVar go ()
  replicateM_ 2 (takeMVar finished)
  secs <- elapsedSince t0
  c1 <- processCpuMicros
  dones <- takeMVar results
  let total = sum dones
  when (total /= 2 * perUpdates) $ fail "weft-bench: tickle lost updates"
  result [ ("rate", fromIntegral total / secs), ("cpu_us", (c1 - c0) / fromIntegral total)
         , ("wall_s", secs) ]
{-# INLINE tickle #-}

-- | @n@ updates of random keys to random limits of 30-60 s, drawn from an
-- xorshift64 generator: a few shifts per update, no allocation, nothing
-- precomputed, and the same sequence for both arms.
tickleLoop :: TimerApi m k -> m -> Array Int k -> Int -> Int -> Word64 -> IO Int
tickleLoop api mgr keys nkeys n seed0 = loop 0 seed0
  where
    loop !i !s
      | i >= n = return i
      | otherwise = do
          let !s' = xorshift s
              !ix = fromIntegral ((s' `shiftR` 32) `mod` fromIntegral nkeys)
              !us = 30_000_000 + fromIntegral ((s' .&. 0xFFFFFFFF) `mod` 30_000_001)
          taUpdate api mgr (unsafeAt keys ix) us
          loop (i + 1) s'
{-# INLINE tickleLoop #-}

