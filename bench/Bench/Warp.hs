{-# LANGUAGE ScopedTypeVariables #-}
-- | A WAI application on weft against stock warp and nginx: warp's pong (a
-- 4-byte body) from one binary, weft-warp-pong, on Weft.Warp and on stock
-- warp, beside nginx returning the same body. HTTP/1.1 under wrk at
-- -N1 and -N2, and HTTP/2 (h2c, prior knowledge) under h2load.
module Bench.Warp (warpBench) where

import Control.Monad (forM, when)
import Data.List (isPrefixOf, sort)
import System.Directory (removeFile)
import System.FilePath ((</>))
import Text.Printf (printf)

import Bench.Net

-- | The arms, in table order; ratios are against stock warp and nginx.
arms :: [String]
arms = ["weft", "warp", "nginx"]

warpBench :: Settings -> IO String
warpBench st = do
  _ <- raiseFdLimit
  bin <- binDir
  wrkRun <- newWrkRun st
  let concs = [16, 64, 400] :: [Int]
      pong (n :: Int) server = \p -> [ bin </> "weft-warp-pong", show p, "--server", server
                            , "+RTS", "-N" ++ show n, "-RTS" ]
  putStrLn "weft-bench warp: a WAI pong (4-byte body) on Weft.Warp, on stock warp (same binary), and nginx"
  http1 <- forM [1, 2 :: Int] $ \n -> do
    let servers = [ ("warp-weft-N" ++ show n, serverCores n, pong n "weft")
                  , ("warp-warp-N" ++ show n, serverCores n, pong n "warp") ]
        site = NginxSite ("warp-nginx-N" ++ show n) (serverCores n) n pongLocation
        groups = [ "N" ++ show n ++ " c=" ++ show c | c <- concs ]
    withServers servers $ \srvs -> withNginx site $ \ngx -> do
      let cells = [ Cell ("N" ++ show n ++ " c=" ++ show c) a (wrkSample wrkRun srv c "/")
                  | c <- concs, (a, srv) <- zip arms (srvs ++ [ngx]) ]
      res <- interleave "warp" (setReps st) cells
      t <- reportWith ["warp", "nginx"] ("warp-N" ++ show n) groups arms False res
      plot ("warp-N" ++ show n) (linePlot ("warp-N" ++ show n) ("warp-N" ++ show n)
        ("WAI pong under wrk, -N" ++ show n ++ ": requests/s (median)") "wrk connections" "requests/s"
        (map (drop 1 . dropWhile (/= ' ')) groups) arms 0 False)
      return t
  putStrLn "weft-bench warp: HTTP/2 (h2c, prior knowledge) under h2load, 64 connections, -N1"
  let servers = [ ("warp-h2-weft", serverCores 1, pong 1 "weft"), ("warp-h2-warp", serverCores 1, pong 1 "warp") ]
  http2 <- withServers servers $ \srvs -> do
    let cells = [ Cell "h2 c=64" a (h2Sample st srv 64) | (a, srv) <- zip ["weft", "warp"] srvs ]
    res <- interleave "warp-h2" (setReps st) cells
    reportWith ["warp"] "warp-h2" ["h2 c=64"] ["weft", "warp"] False res
  return (concat http1 ++ "\n" ++ http2)

-- | One h2load run (one thread, on the client core, one stream per
-- connection at a time): an unmeasured second of warm-up, then the
-- settings' duration, over which the server's CPU is measured. Latency
-- percentiles come from h2load's per-request log.
h2Sample :: Settings -> Server -> Int -> IO Sample
h2Sample st srv conns = do
  dir <- resultsDir
  let logPath = dir </> ("h2load-" ++ show (srvPort srv) ++ ".log")
      secs = max 1 (round (setDuration st)) :: Int
      url = "http://127.0.0.1:" ++ show (srvPort srv) ++ "/"
  Measured out cpuMicros rss ipis <- measureOutput srv 1 (fromIntegral secs)
    [ "taskset", "-c", clientCores 1, "h2load", "-c" ++ show conns, "-t1", "-m1"
    , "--warm-up-time=1", "-D", show secs, "--log-file=" ++ logPath, url ]
  times <- sort . map (read . (!! 2) . words) . lines <$> readFile logPath :: IO [Double]
  length times `seq` removeFile logPath
  let total = field "requests:" 1
      failed = field "requests:" 9 + field "requests:" 11 + field "status" 6 + field "status" 8
      rps = case [ w | l <- lines out, "finished in" `isPrefixOf` l, (w, _) <- [break (== ',') (drop 1 (dropWhile (/= ',') l))] ] of
        (w : _) -> read (takeWhile (/= ' ') (dropWhile (== ' ') w))
        [] -> 0
      field key i = case [ words l | l <- lines out, key `isPrefixOf` l ] of
        (ws : _) | length ws > i, [(v, _)] <- reads (ws !! i) -> v
        _ -> 0
      pct p = if null times then 0 else times !! min (length times - 1) (floor (p * fromIntegral (length times) :: Double))
  when (null times) $ printf "  (h2load logged no requests: %s)\n" (unwords (take 3 (lines out)))
  return Sample
    { smRps = rps, smCpuPerReq = cpuMicros / max 1 total
    , smMean = if null times then 0 else sum times / fromIntegral (length times)
    , smP50 = pct 0.5, smP99 = pct 0.99, smP999 = pct 0.999, smRss = rss, smErrors = failed
    , smIpis = ipis / max 1 total }
