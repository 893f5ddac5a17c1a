{-# LANGUAGE NumericUnderscores #-}
-- | Shared helpers for weft-bench: process CPU time, medians, tables, CSV,
-- option lists, pinned child processes.
module Bench.Report
  ( resultsRoot
  , processCpuMicros
  , xorshift
  , splitOn
  , median
  , spread
  , renderTable
  , writeCsv
  , ChildResult
  , runPinned
  , parseResult
  ) where

import Control.Concurrent (forkIO, newEmptyMVar, putMVar, takeMVar, threadDelay)
import Control.Monad (when)
import Data.Bits (shiftL, shiftR, xor)
import Data.List (intercalate, isPrefixOf, sort, transpose)
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe)
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Exit (ExitCode (..))
import System.IO (hGetContents)
import System.Process
import Foreign.C.Types (CInt (..))
import Foreign.Marshal.Alloc (allocaBytes)
import Foreign.Ptr (Ptr)
import Foreign.Storable (peekByteOff)
import System.Directory (createDirectoryIfMissing)
import System.Environment (lookupEnv)
import System.FilePath (takeDirectory)
import System.IO.Unsafe (unsafePerformIO)

-- | The directory results go to: @$WEFT_BENCH_RESULTS@, or @bench-results@
-- (so that a run on another compiler keeps its own).
{-# NOINLINE resultsRoot #-}
resultsRoot :: FilePath
resultsRoot = unsafePerformIO (fromMaybe "bench-results" <$> lookupEnv "WEFT_BENCH_RESULTS")

-- | CPU time of all this process's threads so far, in microseconds, from
-- @clock_gettime(CLOCK_PROCESS_CPUTIME_ID)@: @/proc/self/stat@ counts in
-- 10 ms ticks, too coarse for sub-second runs.
processCpuMicros :: IO Double
processCpuMicros = allocaBytes 16 $ \ts -> do
  r <- c_clock_gettime 2 ts   -- CLOCK_PROCESS_CPUTIME_ID
  when (r /= 0) $ fail "weft-bench: clock_gettime failed"
  sec <- peekByteOff ts 0 :: IO Int
  nsec <- peekByteOff ts 8 :: IO Int
  return (fromIntegral sec * 1e6 + fromIntegral nsec / 1e3)

foreign import ccall unsafe "time.h clock_gettime" c_clock_gettime :: CInt -> Ptr () -> IO CInt

-- | Split a comma-separated option value (or on any other character).
splitOn :: Char -> String -> [String]
splitOn c s = case break (== c) s of
  (a, []) -> [a]
  (a, _ : b) -> a : splitOn c b

median :: [Double] -> Double
median [] = 0
median xs = let s = sort xs; n = length s
            in if odd n then s !! (n `div` 2) else (s !! (n `div` 2 - 1) + s !! (n `div` 2)) / 2

-- | "min–max" of a sample.
spread :: (Double -> String) -> [Double] -> String
spread _ [] = "-"
spread f xs = f (minimum xs) ++ "–" ++ f (maximum xs)

-- | A plain-text table with a header row and aligned columns.
renderTable :: [String] -> [[String]] -> String
renderTable header rows = unlines (line header : rule : map line rows)
  where
    widths = map (maximum . map length) (transpose (header : rows))
    line cells = intercalate " | " [ pad w c | (w, c) <- zip widths cells ]
    rule = intercalate "-+-" [ replicate w '-' | w <- widths ]
    pad w c = c ++ replicate (w - length c) ' '

writeCsv :: FilePath -> [String] -> [[String]] -> IO ()
writeCsv path header rows = do
  createDirectoryIfMissing True (takeDirectory path)
  writeFile path (unlines (map (intercalate ",") (header : rows)))

-- | A child's @result@ line: named numbers.
type ChildResult = Map.Map String Double

-- | @runPinned cpus exe args limit@ runs @taskset -c cpus exe args@ and
-- parses the one @result key=value ...@ line it prints. A child that exits
-- with an error, dies of a signal, prints no result line, or runs past
-- @limit@ seconds (it is then killed) gives 'Left' with the reason, so one
-- bad run fails only its own cell.
runPinned :: String -> FilePath -> [String] -> Int -> IO (Either String ChildResult)
runPinned cpus exe args limitSecs = do
  (_, Just out, _, ph) <- createProcess (proc "taskset" ("-c" : cpus : exe : args)) { std_out = CreatePipe }
  outVar <- newEmptyMVar
  _ <- forkIO (hGetContents out >>= \s -> length s `seq` putMVar outVar s)
  t0 <- getMonotonicTimeNSec
  -- Poll rather than block in waitForProcess, so the limit can always act.
  let wait = do
        code <- getProcessExitCode ph
        now <- getMonotonicTimeNSec
        case code of
          Just c -> return (Just c)
          Nothing | now - t0 > fromIntegral limitSecs * 1_000_000_000 -> return Nothing
                  | otherwise -> threadDelay 20_000 >> wait
  code <- wait
  case code of
    Nothing -> do
      terminateProcess ph
      _ <- waitForProcess ph
      return (Left ("no result within " ++ show limitSecs ++ " s; killed"))
    Just ExitSuccess -> parseResult <$> takeMVar outVar
    Just (ExitFailure c)
      | c == -9 -> return (Left "killed by SIGKILL (out of memory?)")
      | c < 0 -> return (Left ("killed by signal " ++ show (negate c)))
      | otherwise -> return (Left ("exited with status " ++ show c))

-- | The numbers of a child's single @result k=v k=v ...@ line.
parseResult :: String -> Either String ChildResult
parseResult out = case [ drop 7 l | l <- lines out, "result " `isPrefixOf` l ] of
  [l] -> let kvs = [ (k, v) | w <- words l, (k, '=' : s) <- [break (== '=') w], [(v, "")] <- [reads s] ]
         in if null kvs then Left ("bad child output: " ++ out) else Right (Map.fromList kvs)
  _ -> Left ("bad child output: " ++ out)

-- | One step of Marsaglia's xorshift64: a cheap, allocation-free stream of
-- pseudo-random numbers for load generators (never 0 from a non-zero seed).
xorshift :: Word64 -> Word64
xorshift x0 =
  let x1 = x0 `xor` (x0 `shiftL` 13)
      x2 = x1 `xor` (x1 `shiftR` 7)
  in x2 `xor` (x2 `shiftL` 17)
{-# INLINE xorshift #-}
