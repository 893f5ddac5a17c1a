-- | The headline table of @weft-bench all@: a few medians that every
-- section notes as it reports (a section's full table says more), gathered
-- into one table that the summary and the terminal show first.
module Bench.Headline
  ( note
  , headlineTable
  ) where

import Data.IORef
import qualified Data.Map.Strict as Map
import System.IO.Unsafe (unsafePerformIO)
import Text.Printf (printf)

import Bench.Report (renderTable)

-- | Medians noted so far, by key (@section|group|arm|measure@).
{-# NOINLINE store #-}
store :: IORef (Map.Map String Double)
store = unsafePerformIO (newIORef Map.empty)

-- | Note a median under its key: the section's report name, the group
-- (configuration), the arm and the measure, joined by @|@.
note :: [String] -> Double -> IO ()
note key v = modifyIORef' store (Map.insert (keyOf key) v)

keyOf :: [String] -> String
keyOf = foldr1 (\a b -> a ++ "|" ++ b)

-- | One row: what it measures, how to show a value, weft's key, the
-- baseline's name and key, and another reference's name and key.
data Row = Row
  { rowWhat :: String
  , rowFmt :: Double -> String
  , rowWeft :: [String]
  , rowBase :: (String, [String])
  , rowOther :: Maybe (String, [String])
  }

rows :: [Row]
rows =
  [ Row "SimpleServer 400 conns -N1: CPU µs/req" f2 (simple 1 "weft" "cpu") ("GHC", simple 1 "ghc" "cpu") (Just ("C", simple 1 "C" "cpu"))
  , Row "SimpleServer 400 conns -N2: req/s" f0 (simple 2 "weft" "rps") ("GHC", simple 2 "ghc" "rps") (Just ("C", simple 2 "C" "rps"))
  , Row "echo, 1 conn: mean round trip µs" f1 ["echo", "1 conn", "weft", "mean"] ("GHC", ["echo", "1 conn", "ghc", "mean"])
      (Just ("C", ["echo", "1 conn", "C", "mean"]))
  , Row "HTTP pong 400 conns -N1: CPU µs/req" f2 ["pong", "c=400", "weft", "cpu"] ("GHC", ["pong", "c=400", "ghc", "cpu"])
      (Just ("nginx", ["pong", "c=400", "nginx", "cpu"]))
  , Row "64 active + most idle conns: RSS MiB" f0 ["idle", "max", "weft", "rss"] ("GHC", ["idle", "max", "ghc", "rss"]) Nothing
  , Row "WAI pong -N2 64 conns: req/s" f0 ["warp-N2", "N2 c=64", "weft", "rps"] ("stock warp", ["warp-N2", "N2 c=64", "warp", "rps"])
      (Just ("nginx", ["warp-N2", "N2 c=64", "nginx", "rps"]))
  , Row "WAI pong -N1 400 conns: req/s" f0 ["warp-N1", "N1 c=400", "weft", "rps"] ("stock warp", ["warp-N1", "N1 c=400", "warp", "rps"])
      (Just ("nginx", ["warp-N1", "N1 c=400", "nginx", "rps"]))
  , Row "fd waits (pipe ping-pong) -N2: waits/s" f0 ["wait", "N2", "weft", "rate"] ("GHC", ["wait", "N2", "ghc", "rate"]) Nothing
  , Row "timeouts/s, 2 threads, -N2" f0 ["timers", "timeout-heavy", "N2", "weft"] ("GHC", ["timers", "timeout-heavy", "N2", "ghc"]) Nothing
  , Row "threadDelay 1 x 1M threads -N1: wall ms" f0 ["timers", "1M", "N1", "weft"] ("GHC", ["timers", "1M", "N1", "ghc"]) Nothing
  , Row "Redis GET, 50 clients, -P 1: ops/s" f0 ["kv", "GET", "weft-kv"] ("redis", ["kv", "GET", "redis"]) Nothing
  , Row "Redis LPUSH, 50 clients, -P 16: ops/s" f0 ["kv", "LPUSH P16", "weft-kv"] ("redis", ["kv", "LPUSH P16", "redis"]) Nothing
  , Row "colors, unbalanced: KEvents/s (Mely)" f0 ["color", "unbalanced", "Mely"] ("no stealing", ["color", "unbalanced", "NoStealing"]) Nothing
  ]
  where
    simple :: Int -> String -> String -> [String]
    simple n a m = ["simple-N" ++ show n, "N" ++ show n ++ " c=400", a, m]
    f0, f1, f2 :: Double -> String
    f0 = printf "%.0f"
    f1 = printf "%.1f"
    f2 = printf "%.2f"

-- | The table of every row whose weft and baseline medians were noted
-- (sections that did not run leave their rows out), with the ratio of
-- weft's median to the baseline's.
headlineTable :: IO String
headlineTable = do
  m <- readIORef store
  let get k = Map.lookup (keyOf k) m
      line r = do
        w <- get (rowWeft r)
        b <- get (snd (rowBase r))
        let other = case rowOther r of
              Just (name, k) -> maybe "" (\v -> rowFmt r v ++ " (" ++ name ++ ")") (get k)
              Nothing -> ""
        return [ rowWhat r, rowFmt r w, rowFmt r b ++ " (" ++ fst (rowBase r) ++ ")", other
               , if b == 0 then "-" else printf "%.2f" (w / b) ]
  return $ case [ l | Just l <- map line rows ] of
    [] -> ""
    ls -> renderTable ["benchmark", "weft", "baseline", "other reference", "weft ÷ baseline"] ls
