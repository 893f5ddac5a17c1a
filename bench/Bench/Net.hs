{-# LANGUAGE ScopedTypeVariables #-}
-- | The network benchmarks: real servers in their own processes, pinned
-- with @taskset@, driven by real load generators (weft-loadgen, wrk), every
-- arm of a comparison running in the same invocation, interleaved and
-- repeated. Server CPU comes from @/proc/PID/stat@ over the measured window.
--
-- Core placement on a 2-core machine: servers on core 0 and load generators
-- on core 1. A server run with @-N2@ (or 2 C threads) is given both cores,
-- so it shares core 1 with the load generator; the tables say so.
module Bench.Net
  ( Settings (..)
  , shortSettings
  , longSettings
  , parseSettings
  , simpleBench
  , echoBench
  , pongBench
  , idleBench
    -- * Pieces for other network benchmarks
  , Server (..)
  , Sample (..)
  , Cell (..)
  , binDir
  , resultsDir
  , raiseFdLimit
  , serverCores
  , withServers
  , interleave
  , reportWith
  , plot
  , linePlot
  , WrkRun
  , newWrkRun
  , wrkSample
  , wrkSampleReconnecting
  , NginxSite (..)
  , withNginx
  , startServer
  , stopServer
  , cpuTicks
  , childrenTicks
  , measureOutput
  , Measured (..)
  , loadgen
  , pongLocation
  , clientCores
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import Data.List (groupBy, intercalate, isPrefixOf, nub)
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe, listToMaybe)
import qualified Network.Socket as N
import System.Directory
import System.Environment (getExecutablePath)
import System.Exit
import System.FilePath
import System.IO
import System.Posix.Resource
import System.Process
import Text.Printf (printf)

import Bench.Headline (note)
import Bench.Options
import Bench.Report

-- | How long and how often to measure.
data Settings = Settings
  { setReps     :: !Int     -- ^ repetitions of every (configuration, arm)
  , setDuration :: !Double  -- ^ measured seconds per run
  , setWarmup   :: !Double  -- ^ unmeasured seconds before each run
  , setLong     :: !Bool
  , setHeadline :: !Bool    -- ^ only the headline's configurations (@weft-bench all@ without @--full@)
  } deriving Show

-- | What @make bench@ runs: 3 repetitions of short runs.
shortSettings, longSettings :: Settings
shortSettings = Settings 3 1.5 0.5 False False
-- | @--long@: 5 repetitions of 5 s.
longSettings = Settings 5 5 1 True False

-- | @--long@, @--reps N@, @--duration SECONDS@ (for the command named).
settingsOptions :: [Option Settings]
settingsOptions =
  [ flag "--long" (\s -> s { setReps = setReps longSettings, setDuration = setDuration longSettings
                           , setWarmup = setWarmup longSettings, setLong = True })
  , value "--reps" "N" positive (\n s -> s { setReps = n })
  , value "--duration" "SECONDS" positive (\d s -> s { setDuration = d }) ]

-- | A command's 'settingsOptions', or its usage and exit.
parseSettings :: String -> [String] -> IO Settings
parseSettings command = parseOrExit command settingsOptions shortSettings

------------------------------------------------------------------------------
-- Processes

serverCores, clientCores :: Int -> String
serverCores n = if n <= 1 then "0" else "0,1"
clientCores _ = "1"

data Server = Server
  { srvHandle :: ProcessHandle
  , srvPid    :: Int
  , srvPort   :: Int
  , srvCores  :: [Int]
    -- ^ The CPUs it is pinned to, whose rescheduling interrupts count as
    -- its own ('reschedulingIpis').
  }

-- | The directory holding weft-bench and its sibling programs.
binDir :: IO FilePath
binDir = takeDirectory <$> getExecutablePath

-- | A free loopback port (bound and released; another process could take
-- it meanwhile, which only fails that server's start, loudly).
freePort :: IO Int
freePort = bracket (N.socket N.AF_INET N.Stream N.defaultProtocol) N.close $ \s -> do
  N.bind s (N.SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
  fromIntegral <$> N.socketPort s

-- | Start a server pinned to the cores on a free port, and wait until it
-- accepts connections. @argv port@ gives its command line.
startServer :: String -> String -> (Int -> [String]) -> IO Server
startServer label cores argv = do
  port <- freePort
  startServerOn label cores port (argv port)

-- | 'startServer' on a given port, with a complete command line.
startServerOn :: String -> String -> Int -> [String] -> IO Server
startServerOn label cores port argv = do
  let cmd = "taskset" : "-c" : cores : argv
  logPath <- (</> ("server-" ++ label ++ ".log")) <$> resultsDir
  logH <- openFile logPath WriteMode
  (_, _, _, ph) <- createProcess (commandLine cmd)
    { std_in = NoStream, std_out = UseHandle logH, std_err = UseHandle logH }
  pid <- maybe (die' ("could not start " ++ unwords cmd)) (return . fromIntegral) =<< getPid ph
  let server = Server ph pid port (map read (splitOn ',' cores))
      wait (0 :: Int) = stopServer server >> die' ("server " ++ label ++ " did not start; see " ++ logPath)
      wait k = do
        exited <- getProcessExitCode ph
        when (exited /= Nothing) $ die' ("server " ++ label ++ " exited; see " ++ logPath)
        ok <- try (bracket (N.socket N.AF_INET N.Stream N.defaultProtocol) N.close $ \s ->
                     N.connect s (N.SockAddrInet (fromIntegral port) (N.tupleToHostAddress (127, 0, 0, 1))))
        case ok of
          Right () -> return server
          Left (_ :: IOException) -> threadDelay 20000 >> wait (k - 1)
  wait 250

stopServer :: Server -> IO ()
stopServer s = do
  terminateProcess (srvHandle s)
  void (waitForProcess (srvHandle s))

withServers :: [(String, String, Int -> [String])] -> ([Server] -> IO a) -> IO a
withServers specs = bracket (mapM (\(l, c, a) -> startServer l c a) specs) (mapM_ stopServer)

die' :: String -> IO a
die' msg = hPutStrLn stderr ("weft-bench: " ++ msg) >> exitFailure

-- | CPU ticks (1/100 s) a server has used, user plus system time: the
-- process and its live child processes (nginx's workers under a master;
-- weft's servers have none).
cpuTicks :: Int -> IO Integer
cpuTicks pid = do
  own <- processTicks pid
  kids <- childPids pid
  (own +) . sum <$> mapM (\k -> processTicks k `catch` \(_ :: IOException) -> return 0) kids

-- | The CPU ticks (user plus system) of this process's children that
-- have ended and been waited for, as @/proc/self/stat@ counts them: a
-- load generator's, read before and after it runs.
childrenTicks :: IO Integer
childrenTicks = statTicks "/proc/self/stat" 13

processTicks :: Int -> IO Integer
processTicks pid = statTicks ("/proc/" ++ show pid ++ "/stat") 11

-- | Two adjacent tick counts of a stat file, added: the fields after the
-- command's name, from the given index (11: utime and stime; 13: cutime
-- and cstime).
statTicks :: FilePath -> Int -> IO Integer
statTicks path i = do
  stat <- readFile path
  let fields = words (drop 2 (dropWhile (/= ')') stat))
  length stat `seq` return (read (fields !! i) + read (fields !! (i + 1)))

-- | The live children of a process, from each of its threads'
-- @/proc/PID/task/TID/children@.
childPids :: Int -> IO [Int]
childPids pid = do
  let dir = "/proc/" ++ show pid ++ "/task"
  tids <- listDirectory dir `catch` \(_ :: IOException) -> return []
  fmap concat . forM tids $ \t -> do
    text <- readFile (dir </> t </> "children") `catch` \(_ :: IOException) -> return ""
    length text `seq` return [ read w | w <- words text ]

-- | Resident memory of a process, in KiB.
rssKiB :: Int -> IO Double
rssKiB pid = do
  status <- readFile ("/proc/" ++ show pid ++ "/status")
  let rss = [ read (words l !! 1) | l <- lines status, "VmRSS:" `isPrefixOf` l ]
  length status `seq` return (fromMaybe 0 (listToMaybe rss))

-- | A process from a command line, program first.
commandLine :: [String] -> CreateProcess
commandLine (prog : args) = proc prog args
commandLine [] = error "weft-bench: an empty command line"

resultsDir :: IO FilePath
resultsDir = do
  createDirectoryIfMissing True resultsRoot
  return resultsRoot

-- | Let this process and its children open as many fds as allowed.
raiseFdLimit :: IO Integer
raiseFdLimit = do
  lim <- getResourceLimit ResourceOpenFiles
  let hard = case hardLimit lim of
        ResourceLimit h -> h
        _ -> 1048576
  setResourceLimit ResourceOpenFiles lim { softLimit = ResourceLimit hard }
  return hard

------------------------------------------------------------------------------
-- One measurement

data Sample = Sample
  { smRps :: !Double, smCpuPerReq :: !Double, smMean :: !Double, smP50 :: !Double
  , smP99 :: !Double, smP999 :: !Double, smRss :: !Double, smErrors :: !Double
  , smIpis :: !Double
    -- ^ Rescheduling interrupts on the server's cores over the measured
    -- window (whatever else ran there counts too).
  }

-- | Run a load generator against a server (the client command line is
-- complete) and parse its key=value report; see 'measureOutput'.
measure :: Server -> Double -> Double -> [String] -> IO (Map.Map String Double, Measured)
measure srv warmup duration clientCmd = do
  m@(Measured output _ _ _) <- measureOutput srv warmup duration clientCmd
  let kv = Map.fromList [ (k, read v) | w <- words output, (k, '=' : v) <- [break (== '=') w]
                                      , [(_, "")] <- [reads v :: [(Double, String)]] ]
  unless (Map.member "requests" kv) $
    die' ("load generator printed no report: " ++ unwords clientCmd ++ "\n" ++ output)
  return (kv, m)

-- | What a load generator's run gave: its output, the server's CPU time in
-- microseconds from the end of the warm-up to the client's exit, the
-- server's RSS (KiB) halfway through, and the rescheduling interrupts on
-- the server's cores over the same window as the CPU time.
data Measured = Measured
  { msOutput :: String, msCpuMicros :: !Double, msRss :: !Double, msIpis :: !Double }

-- | Run a load generator against a server ('Measured'). Exits if the
-- client fails.
measureOutput :: Server -> Double -> Double -> [String] -> IO Measured
measureOutput srv warmup duration clientCmd = do
  (_, Just out, Just err, ph) <- createProcess (commandLine clientCmd)
    { std_out = CreatePipe, std_err = CreatePipe }
  errText <- newEmptyMVar
  _ <- forkIO (hGetContents err >>= \t -> length t `seq` putMVar errText t)
  threadDelay (round (warmup * 1e6))
  c0 <- cpuTicks (srvPid srv)
  i0 <- reschedulingIpis (srvCores srv)
  threadDelay (round (duration * 5e5))
  rss <- rssKiB (srvPid srv)
  output <- hGetContents out
  length output `seq` return ()
  code <- waitForProcess ph
  c1 <- cpuTicks (srvPid srv)
  i1 <- reschedulingIpis (srvCores srv)
  errs <- takeMVar errText
  when (code /= ExitSuccess) $
    die' ("load generator failed (" ++ show code ++ "): " ++ unwords clientCmd ++ "\n" ++ errs ++ output)
  return (Measured output (fromIntegral (c1 - c0) * 10000) rss (fromIntegral (i1 - i0)))

-- | Rescheduling interrupts (IPIs) taken so far by the given CPUs, from
-- the @RES@ line of @/proc/interrupts@ (0 where there is none).
reschedulingIpis :: [Int] -> IO Integer
reschedulingIpis cpus = do
  text <- readFile "/proc/interrupts"
  length text `seq` return ()
  return $ case [ ws | l <- lines text, ("RES:" : ws) <- [words l] ] of
    (counts : _) -> sum [ n | (i, c) <- zip [0 :: Int ..] counts, i `elem` cpus, [(n, "")] <- [reads c] ]
    [] -> 0

toSample :: (Map.Map String Double, Measured) -> Sample
toSample (kv, m) = Sample
  { smRps = get "rps", smCpuPerReq = msCpuMicros m / requests
  , smMean = get "mean_us", smP50 = get "p50_us", smP99 = get "p99_us", smP999 = get "p999_us"
  , smRss = msRss m, smErrors = get "errors", smIpis = msIpis m / requests }
  where get k = Map.findWithDefault 0 k kv
        requests = max 1 (get "requests")

loadgen :: FilePath -> Settings -> Server -> Int -> [String] -> IO Sample
loadgen bin st srv n extra = toSample <$> measure srv (setWarmup st) (setDuration st)
  ( [ "taskset", "-c", clientCores n, bin </> "weft-loadgen", "127.0.0.1", show (srvPort srv)
    , "--duration", show (setDuration st), "--warmup", show (setWarmup st) ] ++ extra )

------------------------------------------------------------------------------
-- Interleaving and reporting

-- | One configuration of one arm: a group label, the arm, and how to take
-- a sample.
data Cell = Cell { cellGroup :: String, cellArm :: String, cellRun :: IO Sample }

-- | Run every cell once per repetition, printing progress: the groups in
-- order, and within each group the arms rotated by one place per
-- repetition, so that no arm always runs first after the previous group
-- (whose servers may still be busy closing its connections on the same
-- core) or always right after a given other arm.
interleave :: String -> Int -> [Cell] -> IO (Map.Map (String, String) [Sample])
interleave name reps cells = do
  results <- newIORef Map.empty
  let groups = groupBy (\a b -> cellGroup a == cellGroup b) cells
      rotate k xs = let i = k `mod` max 1 (length xs) in drop i xs ++ take i xs
  forM_ [1 .. reps] $ \rep -> forM_ (concatMap (rotate (rep - 1)) groups) $ \c -> do
    s <- cellRun c
    printf "  [%s %d/%d] %-14s %-10s %9.0f req/s %7.2f CPU-us/req  p50 %7.1f  p99 %8.1f  p999 %8.1f us  %.3f IPI/req%s\n"
      name rep reps (cellGroup c) (cellArm c) (smRps s) (smCpuPerReq s) (smP50 s) (smP99 s) (smP999 s) (smIpis s)
      (if smErrors s > 0 then printf "  (%.0f errors)" (smErrors s) else "" :: String)
    modifyIORef' results (Map.insertWith (flip (++)) (cellGroup c, cellArm c) [s])
  readIORef results

-- | The table of medians, with ratios against the "ghc" and "C" arms if
-- present: 'reportWith' those baselines.
report :: String -> [String] -> [String] -> Bool -> Map.Map (String, String) [Sample] -> IO String
report name groups arms = reportWith [ b | b <- ["ghc", "C"], b `elem` arms ] name groups arms

-- | The table of medians, with ratios (of medians, within each group)
-- against the given baseline arms, written to bench-results/NAME.csv;
-- returns the rendered table. Cells that were not run are left out, and a
-- ratio whose baseline was not run in the group is "-".
reportWith :: [String] -> String -> [String] -> [String] -> Bool -> Map.Map (String, String) [Sample] -> IO String
reportWith baselines name groups arms withRss results = do
  let get g a f = maybe [] (map f) (Map.lookup (g, a) results)
      med g a f = median (get g a f)
      rows = [ [ g, a
               , printf "%.0f" (med g a smRps), spread (printf "%.0f") (get g a smRps)
               , printf "%.2f" (med g a smCpuPerReq)
               , printf "%.1f" (med g a smMean), printf "%.1f" (med g a smP50)
               , printf "%.1f" (med g a smP99), printf "%.1f" (med g a smP999)
               , printf "%.3f" (med g a smIpis) ]
               ++ [ printf "%.0f" (med g a smRss / 1024) | withRss ]
               ++ concat [ [ ratio (med g a smRps) (med g b smRps)
                           , ratio (med g a smCpuPerReq) (med g b smCpuPerReq) ]
                         | b <- baselines ]
             | g <- groups, a <- arms, Map.member (g, a) results ]
      ratio x y = if y > 0 then printf "%.2f" (x / y) else "-"
      header = [ "config", "arm", "req/s", "min–max", "CPU us/req", "mean us", "p50 us", "p99 us", "p999 us", "IPI/req" ]
               ++ [ "RSS MiB" | withRss ]
               ++ concat [ [ "req/s ÷ " ++ b, "CPU/req ÷ " ++ b ] | b <- baselines ]
      table = renderTable header rows
  dir <- resultsDir
  writeCsv (dir </> (name ++ ".csv")) header rows
  -- Long form for plots: one line per run.
  writeFile (dir </> (name ++ "-runs.dat")) $ unlines
    [ unwords [ show gi, show ai, show (smRps s), show (smCpuPerReq s), show (smP50 s)
              , show (smP99 s), show (smRss s / 1024) ]
    | (gi, g) <- zip [0 :: Int ..] groups, (ai, a) <- zip [0 :: Int ..] arms, s <- get g a id ]
  writeFile (dir </> (name ++ "-medians.dat")) $ unlines $
    ("# group " ++ unwords [ a ++ "_rps " ++ a ++ "_cpu " ++ a ++ "_p99 " ++ a ++ "_rss" | a <- arms ]) :
    [ unwords (show gi : concat [ [ show (med g a smRps), show (med g a smCpuPerReq), show (med g a smP99)
                                  , show (med g a smRss / 1024) ] | a <- arms ])
    | (gi, g) <- zip [0 :: Int ..] groups ]
  sequence_ [ note [name, g, a, m] (med g a f)
            | g <- groups, a <- arms, Map.member (g, a) results
            , (m, f) <- [("rps", smRps), ("cpu", smCpuPerReq), ("mean", smMean), ("rss", (/ 1024) . smRss)] ]
  putStrLn ""
  putStr table
  return table

-- | Run gnuplot on a script (written next to the results); a missing
-- gnuplot only costs the plot.
plot :: String -> String -> IO ()
plot name script = do
  dir <- resultsDir
  let path = dir </> (name ++ ".gp")
  writeFile path script
  r <- try (callProcess "gnuplot" [path])
  case r of
    Left (e :: SomeException) -> hPutStrLn stderr ("weft-bench: no plot for " ++ name ++ ": " ++ show e)
    Right () -> putStrLn ("plot: " ++ (dir </> (name ++ ".png")))

-- | A line plot, written to @output@.png, of one column (0: req/s, 1: CPU
-- per request, 2: p99, 3: RSS) of @name@'s medians per arm against the
-- groups.
linePlot :: String -> String -> String -> String -> String -> [String] -> [String] -> Int -> Bool -> String
linePlot output name title xlabel ylabel groups arms column logY = unlines $
  [ "set terminal pngcairo size 900,560"
  , "set output '" ++ resultsRoot ++ "/" ++ output ++ ".png'"
  , "set title '" ++ title ++ "'"
  , "set xlabel '" ++ xlabel ++ "'", "set ylabel '" ++ ylabel ++ "'"
  , "set key top left", "set grid"
  , "set xtics (" ++ intercalate ", " [ "'" ++ g ++ "' " ++ show i | (i, g) <- zip [0 :: Int ..] groups ] ++ ")"
  , "set yrange [0:*]" ]
  ++ [ "set logscale y" | logY ]
  ++ [ "plot " ++ intercalate ", "
       [ "'" ++ resultsRoot ++ "/" ++ name ++ "-medians.dat' using 1:" ++ show (2 + 4 * ai + column)
         ++ " with linespoints lw 2 title '" ++ a ++ "'"
       | (ai, a) <- zip [0 :: Int ..] arms ] ]

-- | A weft server's command line, run on the io_uring backend.
onUring :: [String] -> [String]
onUring argv = "env" : "WEFT_BACKEND=uring" : argv

------------------------------------------------------------------------------
-- simple

-- | SimpleServer, 90-byte requests and 323-byte replies, at each
-- concurrency, with weft, GHC's manager and the C reference, at -N1 and -N2.
simpleBench :: Settings -> IO String
simpleBench st = do
  _ <- raiseFdLimit
  bin <- binDir
  let concs = if setHeadline st then [16, 400] else [1, 16, 64, 400] :: [Int]
      caps = [1, 2] :: [Int]
      arms = ["weft", "weft-uring", "ghc", "C"]
  putStrLn "weft-bench simple: SimpleServer (90-byte requests, 323-byte replies), closed loop"
  tables <- forM caps $ \n -> do
    let servers =
          [ ("simple-weft", serverCores n, \p -> [bin </> "weft-simple-server", show p, "90", "323", "--manager", "weft", "+RTS", "-N" ++ show n, "-RTS"])
          , ("simple-weft-uring", serverCores n, \p -> onUring [bin </> "weft-simple-server", show p, "90", "323", "--manager", "weft", "+RTS", "-N" ++ show n, "-RTS"])
          , ("simple-ghc", serverCores n, \p -> [bin </> "weft-simple-server", show p, "90", "323", "--manager", "ghc", "+RTS", "-N" ++ show n, "-RTS"])
          , ("simple-C", serverCores n, \p -> [bin </> "weft-ref-server", show p, "90", "323", "--threads", show n]) ]
    withServers servers $ \srvs -> do
      let groups = [ "N" ++ show n ++ " c=" ++ show c | c <- concs ]
          cells = [ Cell ("N" ++ show n ++ " c=" ++ show c) a (loadgen bin st srv n ["--conns", show c])
                  | c <- concs, (a, srv) <- zip arms srvs ]
      res <- interleave "simple" (setReps st) cells
      t <- report ("simple-N" ++ show n) groups arms False res
      plot ("simple-N" ++ show n) (linePlot ("simple-N" ++ show n) ("simple-N" ++ show n)
        ("SimpleServer, -N" ++ show n ++ ": requests/s (median)") "concurrent connections" "requests/s"
        (map (drop 1 . dropWhile (/= ' ')) groups) arms 0 False)
      return t
  return (concat tables)

------------------------------------------------------------------------------
-- echo

-- | One-connection ping-pong latency (8 bytes each way): GHC non-threaded,
-- GHC threaded, weft, and C, with the latency CDF plotted.
echoBench :: Settings -> IO String
echoBench st = do
  bin <- binDir
  dir <- resultsDir
  let arms = ["ghc-nonthreaded", "ghc", "weft", "weft-uring", "C"]
      servers =
        [ ("echo-ghc-nonthreaded", "0", \p -> [bin </> "weft-echo-nonthreaded", show p, "--manager", "ghc"])
        , ("echo-ghc", "0", \p -> [bin </> "weft-echo", show p, "--manager", "ghc", "+RTS", "-N1", "-RTS"])
        , ("echo-weft", "0", \p -> [bin </> "weft-echo", show p, "--manager", "weft", "+RTS", "-N1", "-RTS"])
        , ("echo-weft-uring", "0", \p -> onUring [bin </> "weft-echo", show p, "--manager", "weft", "+RTS", "-N1", "-RTS"])
        , ("echo-C", "0", \p -> [bin </> "weft-ref-server", show p, "0", "0", "--echo"]) ]
  putStrLn "weft-bench echo: one connection, 8-byte ping-pong, closed loop"
  withServers servers $ \srvs -> do
    let cdf a = dir </> ("echo-cdf-" ++ a ++ ".dat")
        cells = [ Cell "1 conn" a (loadgen bin st srv 1 ["--conns", "1", "--req", "8", "--reply", "8", "--cdf", cdf a])
                | (a, srv) <- zip arms srvs ]
    res <- interleave "echo" (setReps st) cells
    t <- report "echo" ["1 conn"] arms False res
    plot "echo-cdf" $ unlines
      [ "set terminal pngcairo size 900,560"
      , "set output '" ++ resultsRoot ++ "/echo-cdf.png'"
      , "set title 'Echo round-trip latency CDF (last repetition)'"
      , "set xlabel 'round-trip time (us)'", "set ylabel 'fraction of round trips'"
      , "set key bottom right", "set grid", "set xrange [0:100]", "set yrange [0:1]"
      , "plot " ++ intercalate ", " [ "'" ++ cdf a ++ "' using 1:2 with lines lw 2 title '" ++ a ++ "'" | a <- arms ] ]
    return t

------------------------------------------------------------------------------
-- pong

-- | HTTP keep-alive pong under wrk: weft-pong on weft (epoll and uring)
-- and on GHC's manager, and nginx: on one core at 16, 64 and 400
-- connections, on two at 400, and on one with a new connection for every
-- request (accept on the hot path).
pongBench :: Settings -> IO String
pongBench st = do
  _ <- raiseFdLimit
  bin <- binDir
  wrkRun <- newWrkRun st
  let arms = ["weft", "weft-uring", "ghc", "nginx"]
      concs = if setHeadline st then [16, 400] else [16, 64, 400] :: [Int]
      pong n label wrap manager =
        ( "pong-" ++ label ++ (if n == 1 then "" else "-N" ++ show n), serverCores n
        , \p -> wrap [bin </> "weft-pong", show p, "--manager", manager, "+RTS", "-N" ++ show n, "-RTS"] )
      servers n = [pong n "weft" id "weft", pong n "weft-uring" onUring "weft", pong n "ghc" id "ghc"]
  putStrLn "weft-bench pong: HTTP/1.1 keep-alive pong under wrk (1 thread): servers on one core at 16, 64"
  putStrLn "  and 400 connections and on two at 400; and a new connection for every request (Connection: close),"
  putStrLn "  which makes accept the hot path"
  withServers (servers 1 ++ servers 2) $ \srvs ->
    withNginx (NginxSite "nginx" "0" 1 pongLocation) $ \ngx ->
    withNginx (NginxSite "nginx-N2" (serverCores 2) 2 pongLocation) $ \ngx2 -> do
    let (srv1, srv2) = splitAt 3 srvs
        arms1 = zip arms (srv1 ++ [ngx])
        arms2 = zip arms (srv2 ++ [ngx2])
        groups = [ "c=" ++ show c | c <- concs ]
        twoCores = "N2 c=400"
        reconnecting = "c=64 new connection per request"
        cells = [ Cell ("c=" ++ show c) a (wrkSample wrkRun srv c "/") | c <- concs, (a, srv) <- arms1 ]
             ++ [ Cell twoCores a (wrkSample wrkRun srv 400 "/") | (a, srv) <- arms2 ]
             ++ [ Cell reconnecting a (wrkSampleReconnecting wrkRun 1 srv 64 "/") | not (setHeadline st), (a, srv) <- arms1 ]
    res <- interleave "pong" (setReps st) cells
    t <- report "pong" groups arms False res
    t' <- report "pong-more" [twoCores, reconnecting] arms False res
    plot "pong" (linePlot "pong" "pong" "HTTP pong under wrk, one server core: requests/s (median)"
                  "wrk connections" "requests/s" (map (drop 2) groups) arms 0 False)
    return (t ++ "\n" ++ t')

-- | How to drive a server with wrk: the settings and the report script.
data WrkRun = WrkRun !Settings !FilePath

-- | Write wrk's report script into the results directory.
newWrkRun :: Settings -> IO WrkRun
newWrkRun st = do
  script <- (</> "wrk-report.lua") <$> (makeAbsolute =<< resultsDir)
  writeFile script wrkScript
  return (WrkRun st script)

-- | One sample of wrk (one thread, on core 1) with the given connections
-- against the path on the server: an unmeasured 1 s warm-up, then a run of
-- the settings' duration (whole seconds, at least 1) over which the
-- server's CPU is measured.
wrkSample :: WrkRun -> Server -> Int -> String -> IO Sample
wrkSample run = wrkSampleWith run Nothing

-- | As 'wrkSample', but the connections are closed and reopened: every
-- @n@th request asks for @Connection: close@, and wrk reconnects once the
-- server has answered and closed. wrk's script sees requests, not
-- connections, so each connection makes @n@ requests on average.
wrkSampleReconnecting :: WrkRun -> Int -> Server -> Int -> String -> IO Sample
wrkSampleReconnecting run n = wrkSampleWith run (Just n)

wrkSampleWith :: WrkRun -> Maybe Int -> Server -> Int -> String -> IO Sample
wrkSampleWith (WrkRun st reportScript) closeEvery srv c path = do
  script <- case closeEvery of
    Nothing -> return reportScript
    Just n -> do
      let closing = takeDirectory reportScript </> ("wrk-reconnect-" ++ show n ++ ".lua")
      writeFile closing (wrkScript ++ reconnectScript n)
      return closing
  let url = "http://127.0.0.1:" ++ show (srvPort srv) ++ path
      secs = max 1 (round (setDuration st)) :: Int
  _ <- readProcessWithExitCode "taskset" ["-c", clientCores 1, "wrk", "-t1", "-c" ++ show c, "-d1s", "-s", script, url] ""
  toSample <$> measure srv 0 (fromIntegral secs)
    ["taskset", "-c", clientCores 1, "wrk", "-t1", "-c" ++ show c, "-d" ++ show secs ++ "s", "-s", script, url]

-- | wrk's request function for 'wrkSampleReconnecting'.
reconnectScript :: Int -> String
reconnectScript n = unlines
  [ "local sent = 0"
  , "request = function()"
  , "  sent = sent + 1"
  , "  if sent % " ++ show n ++ " == 0 then"
  , "    return wrk.format(nil, nil, { [\"Connection\"] = \"close\" })"
  , "  end"
  , "  return wrk.format()"
  , "end" ]

-- | An nginx to measure.
data NginxSite = NginxSite
  { ngxLabel    :: String
    -- ^ Names its log in the results directory.
  , ngxCores    :: String
    -- ^ The cores it is pinned to (a taskset list).
  , ngxWorkers  :: Int
    -- ^ Worker processes. One runs as a single process; more run under a
    -- master, and 'cpuTicks' adds the workers' CPU to the master's.
  , ngxLocation :: String
    -- ^ The body of its @location /@ block.
  }

-- | Run nginx on a free loopback port for the body's duration.
withNginx :: NginxSite -> (Server -> IO a) -> IO a
withNginx site body = do
  dir <- (</> "nginx") <$> (makeAbsolute =<< resultsDir)
  createDirectoryIfMissing True dir
  port <- freePort
  let conf = dir </> ("nginx-" ++ show port ++ ".conf")
  writeFile conf (nginxConfig dir port (ngxWorkers site) (ngxLocation site))
  bracket (startServerOn (ngxLabel site) (ngxCores site) port ["nginx", "-c", conf, "-p", dir]) stopServer body

-- | nginx's answer in the pong benchmark.
pongLocation :: String
pongLocation = "default_type text/plain; return 200 \"PONG\";"

-- | wrk's report in weft-loadgen's key=value form (latencies in us).
wrkScript :: String
wrkScript = unlines
  [ "done = function(summary, latency, requests)"
  , "  local e = summary.errors"
  , "  io.write(string.format(\"requests=%d seconds=%.3f rps=%.1f mean_us=%.1f p50_us=%.1f p99_us=%.1f p999_us=%.1f errors=%d\\n\","
  , "    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),"
  , "    latency.mean, latency:percentile(50), latency:percentile(99), latency:percentile(99.9),"
  , "    e.connect + e.read + e.write + e.status + e.timeout))"
  , "end" ]

-- | nginx on loopback with the given workers (one: a single process, no
-- master) and @location /@ block.
nginxConfig :: FilePath -> Int -> Int -> String -> String
nginxConfig dir port workers location = unlines
  [ "daemon off;", "master_process " ++ (if workers > 1 then "on;" else "off;")
  , "worker_processes " ++ show workers ++ ";"
  , "error_log " ++ dir </> "error.log" ++ " warn;", "pid " ++ dir </> ("nginx-" ++ show port ++ ".pid") ++ ";"
  , "worker_rlimit_nofile 65536;"
  , "events { worker_connections 20000; }"
  , "http {"
  , "  access_log off;", "  keepalive_requests 100000000;", "  keepalive_timeout 60s;"
  , "  client_body_temp_path " ++ dir </> "tmp" ++ ";", "  proxy_temp_path " ++ dir </> "tmp" ++ ";"
  , "  fastcgi_temp_path " ++ dir </> "tmp" ++ ";", "  uwsgi_temp_path " ++ dir </> "tmp" ++ ";"
  , "  scgi_temp_path " ++ dir </> "tmp" ++ ";"
  , "  server {"
  , "    listen 127.0.0.1:" ++ show port ++ ";"
  , "    location / { " ++ location ++ " }"
  , "  }"
  , "}" ]

------------------------------------------------------------------------------
-- idle

-- | 64 active SimpleServer connections next to many idle ones: active
-- throughput and server memory, weft (on epoll and on io_uring) against
-- GHC's manager.
idleBench :: Settings -> IO String
idleBench st = do
  hard <- raiseFdLimit
  bin <- binDir
  let arms = ["weft", "weft-uring", "ghc"]
      -- Both the server and the load generator hold every connection, so
      -- the fd limit bounds the idle count.
      room = fromIntegral hard - 500 :: Int
      wanted = (if setHeadline st then [0, 20000] else [0, 1000, 10000, 20000]) ++ [ 50000 | setLong st ]
      levels = nub [ min room k | k <- wanted ]
  when (room < 20000) $ printf "note: the fd limit is %d, so the largest idle level is %d, not 20000\n" hard room
  putStrLn "weft-bench idle: 64 active SimpleServer connections plus idle ones, servers on one core"
  results <- newIORef Map.empty
  forM_ [1 .. setReps st] $ \rep -> do
    -- Fresh servers each repetition, so memory reflects the levels run so far.
    let server a p = [bin </> "weft-simple-server", show p, "90", "323", "--manager", a, "+RTS", "-N1", "-RTS"]
        servers = [ ("idle-weft", "0", server "weft"), ("idle-weft-uring", "0", onUring . server "weft")
                  , ("idle-ghc", "0", server "ghc") ]
    withServers servers $ \srvs -> do
      let cells = [ Cell ("idle=" ++ show k) a (loadgen bin st srv 1
                      ["--conns", "64", "--idle", show k, "--src-addrs", "4", "--connect-timeout", "30"])
                  | k <- levels, (a, srv) <- zip arms srvs ]
      r <- interleave "idle" 1 cells
      printf "  (repetition %d/%d done)\n" rep (setReps st)
      modifyIORef' results (Map.unionWith (++) r)
  res <- readIORef results
  let groups = [ "idle=" ++ show k | k <- levels ]
  t <- report "idle" groups arms True res
  -- The headline's row: the most idle connections this host allowed.
  forM_ (take 1 (reverse groups)) $ \g -> forM_ arms $ \a ->
    forM_ (Map.lookup (g, a) res) $ \ss -> note ["idle", "max", a, "rss"] (median (map smRss ss) / 1024)
  plot "idle" (linePlot "idle" "idle" "64 active connections beside idle ones: active requests/s (median)"
                "idle connections" "requests/s" (map (drop 5) groups) arms 0 False)
  plot "idle-rss" (linePlot "idle-rss" "idle" "Server RSS with idle connections (MiB, median)"
                "idle connections" "MiB" (map (drop 5) groups) arms 3 False)
  return t
