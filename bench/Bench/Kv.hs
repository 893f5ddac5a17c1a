{-# LANGUAGE ScopedTypeVariables #-}
-- | weft-bench kv: weft-kv against a real redis-server, both driven by
-- the real redis-benchmark.
--
-- Two pairings. On one core: redis-server and weft-kv at @+RTS -N1@ on
-- core 0, redis-benchmark on core 1. On two cores: redis-server with
-- @--io-threads 2@ (its reads and writes on two threads) and weft-kv at
-- @-N2@, both on cores 0 and 1, where redis-benchmark runs too: on this
-- two-core machine the client takes a share of the server's second core,
-- so the pairing compares how each server uses a contended second core,
-- not how it scales. Each weft-kv arm is compared with its pairing's
-- redis. Each repetition starts the servers
-- afresh (the lists the list tests grow would otherwise differ between
-- repetitions), then runs every test at each pipeline depth on both, one
-- after the other, so that the arms see the same machine. Each test is
-- its own redis-benchmark invocation, so that the server CPU time read
-- from @/proc/PID/stat@ (user plus system, 10 ms ticks) before and after
-- belongs to that test; so does the collector's share of weft-kv's CPU,
-- from its INFO runtime section read before and after; and so does the
-- client's CPU, as a share of its core over the run (near 100% the
-- client sets the pace, and the servers' ops/s tie whatever their cost).
-- Medians of the repetitions are reported, with ratios weft-kv ÷ redis.
module Bench.Kv (kvMain) where

import Control.Exception
import Control.Monad
import Data.Char (toLower, toUpper)
import Data.IORef
import Data.List (isPrefixOf)
import GHC.Clock (getMonotonicTimeNSec)
import qualified Data.Map.Strict as Map
import System.Directory (findExecutable)
import System.Exit
import System.FilePath ((</>))
import System.IO
import System.Process
import Text.Printf (printf)

import Bench.Net (Server (..), binDir, childrenTicks, cpuTicks, resultsDir, startServer, stopServer)
import Bench.Headline (note)
import Bench.Options
import Bench.Report

data Options = Options
  { optRequests  :: !Int        -- ^ requests per test at -P 1
  , optPipelined :: !Int        -- ^ requests per test at -P 16
  , optReps      :: !Int
  , optTests     :: ![String]
  , optN2        :: !Bool       -- ^ also run the two-core pairing (sharing the client's core)
  , optKeyspace  :: !(Maybe Int) -- ^ random keys from a keyspace this large (redis-benchmark -r)
  , optDepths    :: ![Int]      -- ^ the pipeline depths to run (1, 16, 64 or a subset)
  }

-- | Every test redis-benchmark runs by default.
defaultTests :: [String]
defaultTests =
  [ "ping_inline", "ping_mbulk", "set", "get", "incr", "lpush", "rpush", "lpop", "rpop", "sadd"
  , "hset", "spop", "zadd", "zpopmin", "lrange_100", "lrange_300", "lrange_500", "lrange_600", "mset" ]

parseOptions :: [String] -> IO Options
parseOptions = parseOrExit "kv"
  [ flag "--quick" (\o -> o { optRequests = 20000, optPipelined = 100000 })
  , value "-n" "REQUESTS" positive (\k o -> o { optRequests = k, optPipelined = k })
  , value "--reps" "N" positive (\k o -> o { optReps = k })
  , value "--tests" "set,get,..." (listOf (Just . map toLower)) (\ts o -> o { optTests = ts })
  , flag "--no-n2" (\o -> o { optN2 = False })
  , value "-r" "KEYSPACE" positive (\k o -> o { optKeyspace = Just k })
  , value "--depths" "1,16,64" (listOf depth) (\ds o -> o { optDepths = ds }) ]
  (Options 1000000 1000000 3 defaultTests True Nothing [1, 16, 64])
  where
    -- Only the three depths whose request counts the options set.
    depth d = positive d >>= \k -> if k `elem` [1, 16, 64] then Just k else Nothing

-- | One redis-benchmark run of one test: requests per second, latency
-- percentiles in ms, server CPU in microseconds per request, and for
-- weft-kv the collector's share of its CPU in percent (from INFO's
-- runtime section before and after; negative for redis).
-- | One run's results; 'smClient' is redis-benchmark's CPU (user plus
-- system) as a percentage of one core over the run: near 100 the client,
-- not the server, sets the pace.
data Sample = Sample { smRps :: !Double, smP50 :: !Double, smP99 :: !Double, smCpu :: !Double, smGc :: !Double, smClient :: !Double }

-- | Run the kv benchmark; returns the rendered tables.
kvMain :: [String] -> IO String
kvMain args = parseOptions args >>= \opts -> do
    hSetBuffering stdout LineBuffering
    forM_ ["redis-server", "redis-benchmark", "redis-cli"] $ \exe -> do
      found <- findExecutable exe
      when (found == Nothing) $ do
        hPutStrLn stderr ("weft-bench kv: " ++ exe ++ " not found (make deps installs redis-server and redis-tools)")
        exitFailure
    bin <- binDir
    let redis extra p = ["redis-server", "--port", show p, "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"] ++ extra
        arms = [ ("redis", "0", redis [])
               , ("weft-N1", "0", \p -> [bin </> "weft-kv", show p, "+RTS", "-N1", "-RTS"]) ]
               ++ concat [ [ ("redis-io2", "0,1", redis ["--io-threads", "2", "--io-threads-do-reads", "yes"])
                           , ("weft-N2", "0,1", \p -> [bin </> "weft-kv", show p, "+RTS", "-N2", "-RTS"]) ]
                         | optN2 opts ]
        armNames = [ a | (a, _, _) <- arms ]
        depths = [ (d, if d == 1 then optRequests opts else optPipelined opts) | d <- optDepths opts ]
    printf "weft-bench kv: weft-kv vs redis-server under redis-benchmark -c 50, client on core 1; redis and weft-N1 on core 0%s\n"
      (if optN2 opts then ", redis-io2 (--io-threads 2) and weft-N2 on cores 0,1, shared with the client" else "" :: String)
    printf "  -P 1: -n %d; -P 16 and -P 64: -n %d (LRANGE tests a %s of that); %d repetitions, fresh servers each, arms interleaved per test%s\n"
      (optRequests opts) (optPipelined opts) (show lrangeShare ++ "th") (optReps opts)
      (maybe "" (printf "; random keys from %d (-r)") (optKeyspace opts) :: String)
    results <- newIORef Map.empty
    forM_ [1 .. optReps opts] $ \rep ->
      bracket (mapM (\(l, c, a) -> startServer ("kv-" ++ l) c a) arms) (mapM_ stopServer) $ \servers -> do
        -- An unmeasured warm-up: a fresh server's first requests pay for
        -- page faults (weft-kv's nursery) and cold caches.
        forM_ servers $ \srv -> forM_ ["ping_inline", "set", "get"] $ \t -> runTest (optKeyspace opts) srv False 16 20000 t
        forM_ depths $ \(depth, n) -> forM_ (optTests opts) $ \test ->
          forM_ (zip armNames servers) $ \(arm, srv) -> do
            s <- runTest (optKeyspace opts) srv ("weft" `isPrefixOf` arm) depth n test
            printf "  [kv %d/%d] -P %-2d %-11s %-8s %10.0f ops/s %7.2f CPU-us/op  p50 %6.3f  p99 %6.3f ms  client %3.0f%%\n"
              rep (optReps opts) depth test arm (smRps s) (smCpu s) (smP50 s) (smP99 s) (smClient s)
            modifyIORef' results (Map.insertWith (flip (++)) (depth, test, arm) [s])
    res <- readIORef results
    tables <- forM depths $ \(depth, _) -> report opts armNames depth res
    return (concat tables)

-- | The LRANGE tests run this fraction of the requests of the others.
lrangeShare :: Int
lrangeShare = 5

-- | One redis-benchmark invocation of one test against one server, with
-- random keys from a keyspace of the given size if one is given (each
-- command then names another key, and so, in weft-kv, another color).
runTest :: Maybe Int -> Server -> Bool -> Int -> Int -> String -> IO Sample
runTest keyspace srv weft depth n0 test = do
  g0 <- gcTimes
  c0 <- cpuTicks (srvPid srv)
  let lrange = "lrange" `isPrefixOf` test
      -- Each LRANGE reply is 100 to 600 elements: a fifth of the
      -- requests keeps these four tests from taking most of the run.
      n = if lrange then max 1000 (n0 `quot` lrangeShare) else n0
  let argv = [ "-c", "1", "redis-benchmark", "-h", "127.0.0.1", "-p", show (srvPort srv), "-c", "50"
             , "-n", show n, "-P", show depth, "-t", test, "--csv" ]
             ++ maybe [] (\k -> ["-r", show k]) keyspace
  k0 <- childrenTicks
  t0 <- getMonotonicTimeNSec
  (code, out, errs) <- readProcessWithExitCode "taskset" argv ""
  t1 <- getMonotonicTimeNSec
  k1 <- childrenTicks
  c1 <- cpuTicks (srvPid srv)
  g1 <- gcTimes
  let rows = [ cells | l <- lines out, let cells = map unquote (splitOn ',' l), length cells >= 7 ]
      -- The LRANGE tests first fill the list with an LPUSH test of their own.
      wanted = map toUpper test
      matching = [ r | r@(name : _) <- rows, map toUpper (takeWhile (/= ' ') name) == wanted ]
  case matching of
    (_ : rps : _ : _ : p50 : _ : p99 : _) : _ | code == ExitSuccess -> do
      let requests = fromIntegral n * (if lrange then 2 else 1)
      let gcShare = case (g0, g1) of
            (Just (gc0, mut0), Just (gc1, mut1)) | gc1 + mut1 > gc0 + mut0 ->
              100 * fromIntegral (gc1 - gc0) / fromIntegral (gc1 + mut1 - gc0 - mut0)
            _ -> -1
      return Sample { smRps = read rps, smP50 = read p50, smP99 = read p99
                    , smCpu = fromIntegral (c1 - c0) * 10000 / requests, smGc = gcShare
                    , smClient = fromIntegral (k1 - k0) * 1e9 / fromIntegral (max 1 (t1 - t0)) }
    _ -> do
      hPutStrLn stderr ("weft-bench kv: redis-benchmark " ++ unwords (drop 3 argv) ++ " failed ("
                        ++ show code ++ "):\n" ++ errs ++ out)
      exitFailure
  where
    unquote = filter (/= '"')
    -- weft-kv's collector and mutator CPU in microseconds so far (INFO's
    -- runtime section, read with redis-cli).
    gcTimes :: IO (Maybe (Integer, Integer))
    gcTimes
      | not weft = return Nothing
      | otherwise = do
          (code, out, _) <- readProcessWithExitCode "redis-cli" ["-h", "127.0.0.1", "-p", show (srvPort srv), "INFO"] ""
          let fields = [ (k, drop 1 v) | l <- lines (filter (/= '\r') out), let (k, v) = break (== ':') l ]
              num k = lookup k fields >>= \v -> case reads v of [(x, "")] -> Just x; _ -> Nothing
          return $ if code /= ExitSuccess then Nothing else (,) <$> num "gc_cpu_us" <*> num "mutator_cpu_us"

-- | The table of medians for one pipeline depth, written to
-- bench-results/kv-P<depth>.csv.
report :: Options -> [String] -> Int -> Map.Map (Int, String, String) [Sample] -> IO String
report opts arms depth res = do
  let get t a f = maybe [] (map f) (Map.lookup (depth, t, a) res)
      med t a f = median (get t a f)
      -- Each weft-kv arm against its pairing's redis.
      pairs = [ (a, r) | (a, r) <- [("weft-N1", "redis"), ("weft-N2", "redis-io2")], a `elem` arms ]
      ratio x y = if y > 0 then printf "%.2f" (x / y) else "-"
      header = [ "test" ] ++ concat [ [a ++ " ops/s", a ++ " min–max"] | a <- arms ]
               ++ [ a ++ " ÷ " ++ r | (a, r) <- pairs ]
               ++ [ a ++ " CPU us/op" | a <- arms ]
               ++ [ a ++ " CPU ÷ " ++ r | (a, r) <- pairs ]
               ++ [ a ++ " p50/p99 ms" | a <- arms ]
               ++ [ a ++ " GC %" | a <- arms, "weft" `isPrefixOf` a ]
               ++ [ a ++ " client CPU %" | a <- arms ]
      rows = [ [ map toUpper t ]
               ++ concat [ [ printf "%.0f" (med t a smRps), spread (printf "%.0f") (get t a smRps) ] | a <- arms ]
               ++ [ ratio (med t a smRps) (med t r smRps) | (a, r) <- pairs ]
               ++ [ printf "%.2f" (med t a smCpu) | a <- arms ]
               ++ [ ratio (med t a smCpu) (med t r smCpu) | (a, r) <- pairs ]
               ++ [ printf "%.3f/%.3f" (med t a smP50) (med t a smP99) | a <- arms ]
               ++ [ let g = med t a smGc in if g < 0 then "-" else printf "%.1f" g | a <- arms, "weft" `isPrefixOf` a ]
               ++ [ printf "%.0f" (med t a smClient) | a <- arms ]
             | t <- optTests opts ]
      table = renderTable header rows
  sequence_ [ note ["kv", map toUpper t ++ (if depth == 1 then "" else " P" ++ show depth), name] (med t a smRps)
            | t <- optTests opts, (a, name) <- [("weft-N1", "weft-kv"), ("redis", "redis")], a `elem` arms ]
  dir <- resultsDir
  writeCsv (dir </> ("kv-P" ++ show depth ++ ".csv")) header rows
  let title = printf "\nredis-benchmark -c 50 -P %d (medians of %d; CPU per op counts the LPUSH fill of the LRANGE tests, per request of both)\n"
                depth (optReps opts)
  putStr title
  putStr table
  return (title ++ table)
