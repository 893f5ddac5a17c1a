{-# LANGUAGE ScopedTypeVariables #-}
-- | @weft-bench spin@: the dispatcher's spin policy (Note [Adaptive
-- spinning] in "Weft.Event.Internal.Spin") against the fixed window of earlier
-- versions, no spinning, and GHC's manager, on the servers where spinning
-- matters: SimpleServer at 1/16/64/400 connections and pong under wrk at
-- 16/64/400, each at -N1 and -N2; echo; the wait benchmark; and an idle
-- server's CPU. Arms interleaved and repeated; the weft arms' dispatcher
-- counters (read from the servers with SIGUSR1) say what each policy did.
module Bench.Spin (spinBench, spinBenchWithoutWait) where

import Control.Concurrent (threadDelay)
import Control.Exception
import Control.Monad
import Data.IORef
import Data.List (isPrefixOf, isSuffixOf)
import qualified Data.Map.Strict as Map
import System.FilePath ((</>))
import System.Posix.Signals (signalProcess, sigUSR1)
import Text.Printf (printf)

import Bench.Net
import Bench.Report (median, renderTable, writeCsv)
import Bench.Wait (waitMain)

-- | The arms: the environment of a weft server (Nothing: GHC's manager).
arms :: [(String, Maybe [String])]
arms =
  [ ("adaptive", Just [])
  , ("fixed", Just ["WEFT_SPIN_POLICY=fixed"])
  , ("off", Just ["WEFT_SPIN_US=0"])
  , ("ghc", Nothing) ]

armNames :: [String]
armNames = map fst arms

-- | A server command line for an arm: @env VARS... BIN ARGS --manager M@.
armCommand :: FilePath -> Maybe [String] -> [String] -> Int -> [String]
armCommand exe vars args n = case vars of
  Just vs -> "env" : vs ++ [exe] ++ args ++ ["--manager", "weft"] ++ rts
  Nothing -> [exe] ++ args ++ ["--manager", "ghc"] ++ rts
  where rts = ["+RTS", "-N" ++ show n, "-RTS"]

-- | What a weft server's dispatchers did over one cell, per request.
data Counts = Counts { ctSpins :: !Double, ctHits :: !Double, ctSpinUs :: !Double
                     , ctBlocks :: !Double, ctPolls :: !Double }

spinBench :: Settings -> IO String
spinBench = spinBenchWith True

-- | 'spinBench' without its wait benchmark, for @weft-bench all@, whose
-- own wait section runs the same four arms.
spinBenchWithoutWait :: Settings -> IO String
spinBenchWithoutWait = spinBenchWith False

spinBenchWith :: Bool -> Settings -> IO String
spinBenchWith withWait st = do
  _ <- raiseFdLimit
  bin <- binDir
  wrkRun <- newWrkRun st
  counts <- newIORef Map.empty
  putStrLn "weft-bench spin: the adaptive spin policy vs the fixed 50 us window vs no spinning vs GHC's manager"
  let measured label srv name run = do
        -- Counters are read around the whole cell (warm-up included).
        c0 <- dispatcherCounters label srv
        s <- run
        c1 <- dispatcherCounters label srv
        let perReq k = (Map.findWithDefault 0 k c1 - Map.findWithDefault 0 k c0)
                       / max 1 (smRps s * cellSeconds)
            hits = Map.findWithDefault 0 "spin_hits" c1 - Map.findWithDefault 0 "spin_hits" c0
            spins = Map.findWithDefault 0 "spins" c1 - Map.findWithDefault 0 "spins" c0
        when (Map.member "spins" c1) $
          modifyIORef' counts (Map.insertWith (flip (++)) name
            [Counts (perReq "spins") (if spins > 0 then hits / spins else 0) (perReq "spin_ns" / 1000)
                    (perReq "blocking_polls") (perReq "polls")])
        return s
      cellSeconds = setWarmup st + setDuration st
      family title kind concs mkArgs run = forM [1, 2 :: Int] $ \n -> do
        let label a = "spin-" ++ kind ++ "-N" ++ show n ++ "-" ++ a
            servers = [ (label a, serverCores n, \p -> armCommand (bin </> exeOf kind) vars (show p : mkArgs) n)
                      | (a, vars) <- arms ]
            groups = [ kind ++ " N" ++ show n ++ " c=" ++ show c | c <- concs ]
        printf "weft-bench spin: %s, -N%d\n" (title :: String) n
        withServers servers $ \srvs -> do
          let cells = [ Cell g a (measured (label a) srv (g, a) (run n srv c))
                      | (c, g) <- zip concs groups, ((a, _), srv) <- zip arms srvs ]
          res <- interleave "spin" (setReps st) cells
          reportWith ["ghc"] ("spin-" ++ kind ++ "-N" ++ show n) groups armNames False res
  simple <- family "SimpleServer, 90-byte requests, 323-byte replies" "simple" [1, 16, 64, 400 :: Int]
              ["90", "323"] (\n srv c -> loadgen bin st srv n ["--conns", show c])
  pong <- family "HTTP pong under wrk" "pong" [16, 64, 400 :: Int] []
              (\_ srv c -> wrkSample wrkRun srv c "/")
  echo <- do
    let label a = "spin-echo-" ++ a
        servers = [ (label a, "0", \p -> armCommand (bin </> "weft-echo") vars [show p] 1) | (a, vars) <- arms ]
    withServers servers $ \srvs -> do
      let cells = [ Cell "echo" a (measured (label a) srv ("echo", a)
                      (loadgen bin st srv 1 ["--conns", "1", "--req", "8", "--reply", "8"]))
                  | ((a, _), srv) <- zip arms srvs ]
      res <- interleave "spin" (setReps st) cells
      reportWith ["ghc"] "spin-echo" ["echo"] armNames False res
  wait <- if withWait then waitMain ["--reps", show (setReps st), "--caps", "1,2"]
          else return "(the wait benchmark's arms: see the wait section)\n"
  idle <- idleCheck bin
  table <- countersTable <$> readIORef counts
  dir <- resultsDir
  writeCsv (dir </> "spin-counters.csv") countersHeader (countersRows table)
  putStrLn "\nDispatcher counters per request (medians; counted over whole cells, warm-up included):"
  putStr (renderTable countersHeader (countersRows table))
  putStrLn idle
  return (concat simple ++ concat pong ++ echo ++ "\n" ++ wait ++ "\n"
          ++ renderTable countersHeader (countersRows table) ++ idle ++ "\n")
  where
    exeOf "simple" = "weft-simple-server"
    exeOf "pong" = "weft-pong"
    exeOf other = other

-- | The server's latest counter line after a SIGUSR1 (empty for GHC's
-- arm, which has none: it is never signalled).
dispatcherCounters :: String -> Server -> IO (Map.Map String Double)
dispatcherCounters label srv
  | "-ghc" `isSuffixOf` label = return Map.empty
  | otherwise = do
      signalProcess sigUSR1 (fromIntegral (srvPid srv))
      threadDelay 30000
      dir <- resultsDir
      text <- readFileStrict (dir </> ("server-" ++ label ++ ".log"))
      return $ case [ l | l <- lines text, "weft-stats " `isPrefixOf` l ] of
        [] -> Map.empty
        ls -> Map.fromList [ (k, read v) | w <- words (last ls), (k, '=' : v) <- [break (== '=') w] ]

readFileStrict :: FilePath -> IO String
readFileStrict p = do
  s <- readFile p `catch` \(_ :: IOException) -> return ""
  length s `seq` return s

countersHeader :: [String]
countersHeader = ["cell", "arm", "spins/req", "spins ending in events", "spin us/req", "blocking polls/req", "polls/req"]

countersTable :: Map.Map (String, String) [Counts] -> [((String, String), Counts)]
countersTable m =
  [ (k, Counts (med ctSpins) (med ctHits) (med ctSpinUs) (med ctBlocks) (med ctPolls))
  | (k, cs) <- Map.toList m, let med f = median (map f cs) ]

countersRows :: [((String, String), Counts)] -> [[String]]
countersRows rows =
  [ [ g, a, printf "%.3f" (ctSpins c), printf "%.0f%%" (100 * ctHits c), printf "%.2f" (ctSpinUs c)
    , printf "%.3f" (ctBlocks c), printf "%.2f" (ctPolls c) ]
  | ((g, a), c) <- rows ]

-- | An idle weft server (adaptive policy) after a burst of traffic: its
-- CPU ticks over 10 s must be zero. The window starts 1 s after the
-- burst, past the one major GC the GHC runtime does once a program has
-- been idle for 0.3 s (@+RTS -I@), which can cost a tick of its own.
idleCheck :: FilePath -> IO String
idleCheck bin = do
  let settings = shortSettings { setReps = 1, setDuration = 0.5, setWarmup = 0.2 }
  bracket (startServer "spin-idle" "0" (\p -> armCommand (bin </> "weft-simple-server") (Just []) [show p, "90", "323"] 1))
          stopServer $ \srv -> do
    _ <- loadgen bin settings srv 1 ["--conns", "16"]
    threadDelay 1000000
    t0 <- cpuTicks (srvPid srv)
    threadDelay 10000000
    t1 <- cpuTicks (srvPid srv)
    return (printf "\nIdle server after a burst: %d CPU ticks (1/100 s) over 10 s %s\n" (t1 - t0)
              (if t1 == t0 then "(PASS: zero)" else "(MISS: should be zero)" :: String))
