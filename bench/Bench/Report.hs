-- | Shared helpers for weft-bench: process CPU time, medians, tables, CSV,
-- option lists.
module Bench.Report
  ( processCpuMicros
  , splitOn
  , median
  , spread
  , renderTable
  , writeCsv
  ) where

import Control.Monad (when)
import Data.List (intercalate, sort, transpose)
import Foreign.C.Types (CInt (..))
import Foreign.Marshal.Alloc (allocaBytes)
import Foreign.Ptr (Ptr)
import Foreign.Storable (peekByteOff)
import System.Directory (createDirectoryIfMissing)
import System.FilePath (takeDirectory)

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
