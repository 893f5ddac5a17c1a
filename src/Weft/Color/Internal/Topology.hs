-- | Which cores share which caches: the input of locality-aware stealing
-- (Mely §3.1). A topology is read from Linux's @/sys@ at start-up, or made
-- up, so that tests and benchmarks can simulate a bigger machine than the
-- one they run on.
-- Internal and unstable: import "Weft.Color", which re-exports it.
--
-- Worker @i@ of a runtime is taken to run on CPU @i@. weft does not pin
-- capabilities to CPUs (that is the job of @taskset@ or @+RTS -qa@), so on
-- an unpinned process the order is a hint, not a guarantee.
module Weft.Color.Internal.Topology
  ( Topology
  , fromCacheGroups
  , flatTopology
  , simulatedXeon
  , systemTopology
  , parseCpuList
  , topologyCores
  , distance
  , isNeighbour
  , victimOrder
  ) where

import Control.Exception (IOException, try)
import Data.Char (isDigit, isSpace)
import Data.List (nub, sort, sortOn)
import qualified Data.Map.Strict as M
import System.Directory (doesDirectoryExist, listDirectory)
import System.FilePath ((</>))
import Text.Read (readMaybe)

-- | For each cache level, nearest first, the groups of cores that share a
-- cache of that level.
newtype Topology = Topology [[[Int]]]
  deriving (Eq, Show)

-- | A topology from its cache levels, nearest first; each level lists the
-- groups of cores that share one cache. Cores missing from a level share
-- nothing at that level.
fromCacheGroups :: [[[Int]]] -> Topology
fromCacheGroups = Topology . map (filter (not . null) . map (nub . sort))

-- | @n@ cores and no shared cache: every victim is equally far.
flatTopology :: Int -> Topology
flatTopology n = Topology [[[c] | c <- [0 .. n - 1]]]

-- | Mely's test machine (§5.1): 8 cores, two quad-core sockets, each socket
-- made of two pairs that share an L2 cache.
simulatedXeon :: Topology
simulatedXeon = fromCacheGroups
  [ [[c] | c <- [0 .. 7]]              -- private L1
  , [[0, 1], [2, 3], [4, 5], [6, 7]]   -- shared L2
  , [[0, 1, 2, 3], [4, 5, 6, 7]] ]     -- one socket

-- | The cores named in a topology (one more than the highest).
topologyCores :: Topology -> Int
topologyCores (Topology ls) = case concat (concat ls) of
  [] -> 0
  cs -> maximum cs + 1

-- | How far apart two cores are: 0 for the same core, @l + 1@ when the
-- nearest cache they share is level index @l@, and one more than the number
-- of levels when they share none (or either is outside the topology).
distance :: Topology -> Int -> Int -> Int
distance (Topology ls) a b
  | a == b = 0
  | otherwise = go (1 :: Int) ls
  where
    go d (lvl : rest)
      | any (\g -> a `elem` g && b `elem` g) lvl = d
      | otherwise = go (d + 1) rest
    go d [] = d

-- | Whether @b@ is one of @a@'s nearest other cores among @n@ cores (those
-- sharing its closest shared cache). With no sharing at all, no core is.
isNeighbour :: Topology -> Int -> Int -> Int -> Bool
isNeighbour t@(Topology ls) n a b =
  a /= b && d <= length ls && d == minimum (d : [distance t a c | c <- [0 .. n - 1], c /= a])
  where d = distance t a b

-- | The victims of core @thief@ among @n@ cores, nearest first; cores at the
-- same distance come in the order @thief+1, thief+2, ...@ (mod @n@), so
-- that thieves spread over equally near victims.
victimOrder :: Topology -> Int -> Int -> [Int]
victimOrder t n thief =
  sortOn (distance t thief) [ (thief + k) `mod` n | k <- [1 .. n - 1] ]

-- | Read the cache topology of this machine from
-- @\/sys\/devices\/system\/cpu\/cpu*\/cache\/index*\/{level,type,shared_cpu_list}@.
-- Instruction caches are ignored. If @/sys@ cannot be read, the result is
-- 'flatTopology' of the given core count.
systemTopology :: Int -> IO Topology
systemTopology fallbackCores = do
  r <- try readSys :: IO (Either IOException Topology)
  return $ case r of
    Right t | topologyCores t > 0 -> t
    _ -> flatTopology fallbackCores
  where
    root = "/sys/devices/system/cpu"
    readSys = do
      cpus <- filter isCpuDir <$> listDirectory root
      entries <- concat <$> mapM cacheEntries cpus
      let byLevel = M.fromListWith (++) [ (lvl, [grp]) | (lvl, grp) <- entries ]
      return (fromCacheGroups [ nub (sort gs) | gs <- M.elems byLevel ])
    isCpuDir d = case d of
      'c' : 'p' : 'u' : rest -> not (null rest) && all isDigit rest
      _ -> False
    cacheEntries cpu = do
      let dir = root </> cpu </> "cache"
      ok <- doesDirectoryExist dir
      if not ok then return [] else do
        idxs <- filter ((== "index") . take 5) <$> listDirectory dir
        concat <$> mapM (entry . (dir </>)) idxs
    entry d = do
      ty <- trim <$> readStrict (d </> "type")
      if ty == "Instruction" then return [] else do
        lvl <- readMaybe . trim <$> readStrict (d </> "level")
        cpus <- parseCpuList . trim <$> readStrict (d </> "shared_cpu_list")
        return [ (l :: Int, cs) | Just l <- [lvl], Just cs <- [cpus] ]
    -- Read the whole file now, so its handle is closed now and not when
    -- the garbage collector finds it (a program near its fd limit would
    -- see fds close at random moments).
    readStrict f = do
      s <- readFile f
      length s `seq` return s
    trim = reverse . dropWhile isSpace . reverse . dropWhile isSpace

-- | Parse a Linux CPU list such as @0-3,8,10-11@.
parseCpuList :: String -> Maybe [Int]
parseCpuList s = concat <$> mapM range (splitOn ',' s)
  where
    range r = case break (== '-') r of
      (a, "") -> (: []) <$> readMaybe a
      (a, '-' : b) -> enumFromTo <$> readMaybe a <*> readMaybe b
      _ -> Nothing
    splitOn c xs = case break (== c) xs of
      (a, []) -> [a]
      (a, _ : rest) -> a : splitOn c rest
