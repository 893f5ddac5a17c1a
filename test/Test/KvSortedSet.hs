{-# LANGUAGE OverloadedStrings, ScopedTypeVariables #-}
-- | weft-kv's sorted sets (packed while few, then a table of records and
-- an order in leaves) against "Data.Map" and "Data.Set": every read,
-- after any sequence of writes, with scores that tie (so that members
-- decide the order, prefixes of one another among them), sets that grow
-- past the packed limit and through many leaves and shrink back through
-- merges; the order's leaves keep their invariants; and the records of a
-- set nothing holds any more are freed.
module Test.KvSortedSet (spec) where

import Control.Monad (foldM, forM, forM_)
import Data.ByteString (ByteString)
import qualified Data.ByteString.Char8 as C
import qualified Data.Map.Strict as Map
import qualified Data.Set as Set
import GHC.Float (castDoubleToWord64)
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess, prop)
import Test.QuickCheck

import Kv.SortedSet
import Kv.ZOrder (leafEntries)

import Support (modelRun, modelRunInRecord, recordsFreedOnDrop)

data ZOp
  = ZPut ByteString Double
  | ZRemove ByteString
  | ZMany Int Int
    -- ^ give this many members, numbered from this one, scores 0 to 4
  | ZDropMost
    -- ^ remove all but every 7th member
  | ZDropRun Int Int
    -- ^ remove the members of this many ranks from this one, the
    -- highest rank first
  deriving Show

instance Arbitrary ZOp where
  arbitrary = frequency
    [ (6, ZPut <$> member <*> score), (4, ZRemove <$> member)
    , (1, ZMany <$> choose (0, 3000) <*> choose (1, 700)), (1, pure ZDropMost)
    , (2, ZDropRun <$> choose (0, 1500) <*> choose (1, 400)) ]
    where
      member = C.pack <$> frequency [ (4, resize 3 (listOf (elements "ab\0"))), (1, ("m" ++) . show <$> choose (0 :: Int, 3700)) ]
      score = elements [0, -0, 1, 2, -1.5, 1 / 0, -1 / 0, 3, 1.0e-300]
  shrink (ZMany a n) = [ ZMany a n' | n' <- shrink n ]
  shrink _ = []

type Model = Map.Map ByteString Double

-- | Apply one operation to the set and the model.
step :: SortedSet -> Model -> ZOp -> IO (SortedSet, Model, Property)
step z m op = case op of
  ZPut k s -> do
    old <- sortedScore z k
    z' <- sortedMove z k s old
    return (z', Map.insert k (zero s) m, counterexample ("score of " ++ show k) (fmap bits old === fmap bits (Map.lookup k m)))
  ZRemove k -> do
    (z', was) <- sortedRemove z k
    return (z', Map.delete k m, counterexample ("remove " ++ show k) (was === Map.member k m))
  ZMany from n -> do
    let ks = [ (C.pack ("m" ++ show j), fromIntegral (j `mod` 5)) | j <- [from .. from + n - 1] ]
    z' <- foldM (\acc (k, s) -> sortedScore acc k >>= sortedMove acc k s) z ks
    return (z', foldl (\acc (k, s) -> Map.insert k s acc) m ks, property True)
  ZDropMost -> do
    let gone = [ k | (j, k) <- zip [0 :: Int ..] (Map.keys m), j `mod` 7 /= 0 ]
    z' <- foldM (\acc k -> fst <$> sortedRemove acc k) z gone
    return (z', foldr Map.delete m gone, property True)
  ZDropRun from n -> do
    let gone = reverse (take n (drop from (Set.toAscList (Set.fromList [ (s, k) | (k, s) <- Map.toList m ]))))
    z' <- foldM (\acc (_, k) -> fst <$> sortedRemove acc k) z gone
    return (z', foldr (Map.delete . snd) m gone, property True)
  where zero s = if s == 0 then 0 else s

bits :: Double -> (Bool, Double)
bits d = (isNegativeZero d, d)

-- | Items compared with their scores' bits, so that -0 is not 0.
exact :: [(Double, ByteString)] -> [(Integer, ByteString)]
exact = map (\(s, k) -> (fromIntegral (castDoubleToWord64 s), k))

-- | Every read of the set against the model, and the leaves' invariants.
agrees :: SortedSet -> Model -> IO Property
agrees z m = do
  let asc = Set.toAscList (Set.fromList [ (s, k) | (k, s) <- Map.toList m ])
      desc = reverse asc
      n = length asc
      sampled = [ x | (j, x) <- zip [0 :: Int ..] asc, n < 300 || j `mod` 37 == 0 ]
  size <- sortedSize z
  listed <- sortedAsc z
  walkedBack <- sortedWalk z True 0 (-1) (const True)
  looked <- forM sampled $ \(s, k) -> do
    sc <- sortedScore z k
    r <- sortedRank z k
    return (counterexample ("member " ++ show k) (sc === Just s .&&. r === Just (length (takeWhile (< (s, k)) asc))))
  absent <- (,) <$> sortedScore z "absent\1" <*> sortedRank z "absent\1"
  let ranks = [0, 1, n `div` 3, n - 1, n, n + 5]
  at <- forM [ r | r <- ranks, r >= 0, r < n ] $ \r -> do
    a <- sortedAt z False r
    b <- sortedAt z True r
    return (counterexample ("at " ++ show r) (exact [a, b] === exact [asc !! r, desc !! r]))
  walks <- forM [ (r, l) | r <- ranks, l <- [-1, 0, 1, 300] ] $ \(r, l) -> do
    up <- sortedWalk z False r l (const True)
    down <- sortedWalk z True r l (const True)
    let lim = if l < 0 then id else take l
    return (counterexample ("walk " ++ show (r, l)) (exact up === exact (lim (drop r asc)) .&&. exact down === exact (lim (drop r desc))))
  counts <- forM [ -1 / 0, -1, 0, 1, 2.5, 4, 1 / 0 ] $ \b -> do
    below <- sortedCountWhile z False ((< b) . fst)
    above <- sortedCountWhile z True ((> b) . fst)
    pairBelow <- sortedCountWhile z False (< (b, "m1"))
    past <- forM [ (off, lim) | off <- [0, 1, 300], lim <- [-1, 0, 3, 300] ] $ \(off, lim) -> do
      up <- sortedWalkPast z False ((< b) . fst) off lim ((<= b + 1.5) . fst)
      down <- sortedWalkPast z True ((> b) . fst) off lim ((>= b - 1.5) . fst)
      let limited = if lim < 0 then id else take lim
      return (counterexample ("walk past " ++ show (off, lim))
                (exact up === exact (limited (takeWhile ((<= b + 1.5) . fst) (drop off (dropWhile ((< b) . fst) asc))))
                 .&&. exact down === exact (limited (takeWhile ((>= b - 1.5) . fst) (drop off (dropWhile ((> b) . fst) desc))))))
    return (counterexample ("count by " ++ show b)
              (below === length (filter ((< b) . fst) asc) .&&. above === length (filter ((> b) . fst) asc)
               .&&. pairBelow === length (filter (< (b, "m1")) asc) .&&. conjoin past))
  leaves <- sortedLeafCounts z
  let leavesOk = null leaves
        || (sum leaves == n && all (<= leafEntries) leaves
            && (leaves == [0] || all (> 0) leaves)
            && and (zipWith (\a b -> a + b > leafEntries `div` 2) leaves (drop 1 leaves)))
  return $ size === n .&&. exact listed === exact asc .&&. exact walkedBack === exact desc
    .&&. conjoin looked .&&. absent === (Nothing, Nothing) .&&. conjoin at .&&. conjoin walks .&&. conjoin counts
    .&&. counterexample ("leaves " ++ show leaves) leavesOk
    .&&. counterexample "large past the packed limit" (n <= 128 || not (null leaves))

spec :: Spec
spec = describe "sorted-set contents (Kv.SortedSet, Kv.ZOrder)" $ do
  modifyMaxSuccess (const 100) $ prop "agree with Data.Set after any writes" $ \(ops :: [ZOp]) -> ioProperty $
    fst <$> modelRun step agrees emptySorted Map.empty ops

  modifyMaxSuccess (const 100) $ prop "agree with Data.Set after any writes, seen in a record while small" $ \(ops :: [ZOp]) -> ioProperty $
    modelRunInRecord sortedFlat sortedInRecord sortedOwn step agrees emptySorted Map.empty ops

  it "built from an ascending list, large or small, holds it" $ do
    let items n = [ (fromIntegral (j `mod` 3), C.pack ("k" ++ show j)) | j <- [1 .. n :: Int] ]
    forM_ [5, 129, 2000] $ \n -> do
      let sorted = Set.toAscList (Set.fromList (items n))
      z <- sortedFromAscList sorted
      sortedAsc z `shouldReturn` sorted
      sortedSize z `shouldReturn` n

  it "frees its records once nothing holds the set" $
    recordsFreedOnDrop 2000 $ do
      z <- foldM (\acc i -> sortedMove acc (C.pack ("z" ++ show i)) (fromIntegral (i `mod` 10)) Nothing) emptySorted [1 .. 2000 :: Int]
      return (sortedSize z)
