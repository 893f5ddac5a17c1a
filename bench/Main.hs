-- | weft-bench: weft's benchmarks, each measured side by side with its
-- baseline in one run.
module Main (main) where

import System.Environment (getArgs)
import System.Exit (exitFailure)
import System.IO (hPutStrLn, stderr)

import Bench.Wait (waitChild, waitMain)

main :: IO ()
main = do
  args <- getArgs
  case args of
    ("wait" : rest) -> waitMain rest
    ("wait-child" : rest) -> waitChild rest
    _ -> do
      hPutStrLn stderr $ unlines
        [ "usage: weft-bench wait [--reps N] [--round-trips N] [--caps 1,2]"
        , ""
        , "  wait   pipe ping-pong with weft's threadWaitRead and GHC's, at -N1 and -N2"
        ]
      exitFailure
