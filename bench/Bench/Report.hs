-- | Shared helpers for weft-bench: process CPU time, medians, tables, CSV.
module Bench.Report
  ( processCpuMicros
  , median
  , spread
  , renderTable
  , writeCsv
  ) where

import Data.List (intercalate, sort, transpose)
import System.Directory (createDirectoryIfMissing)
import System.FilePath (takeDirectory)

-- | User plus system CPU time of this process so far, in microseconds, from
-- @/proc/self/stat@ (fields 14 and 15, in clock ticks of 1/100 s on Linux).
processCpuMicros :: IO Double
processCpuMicros = do
  stat <- readFile "/proc/self/stat"
  -- The command name (field 2) may hold spaces; fields restart after ')'.
  let fields = words (drop 2 (dropWhile (/= ')') stat))
      ticks = read (fields !! 11) + read (fields !! 12) :: Integer
  length stat `seq` return (fromIntegral ticks * 1e6 / clockTicksPerSecond)
  where clockTicksPerSecond = 100

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
