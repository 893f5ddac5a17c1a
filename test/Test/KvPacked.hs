{-# LANGUAGE OverloadedStrings #-}
-- | weft-kv's packed maps (the contents of sorted sets)
-- against "Data.Map": every operation, after any sequence of writes,
-- with members that repeat, values up to past a leaf's byte limit, and
-- maps of thousands of members (so that leaves split and the tree
-- rebalances); and sorted sets against a "Data.Set" of (score, member)
-- pairs, with negative, infinite, tied and -0 scores.
module Test.KvPacked (spec) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import qualified Data.List as List
import qualified Data.Map.Strict as Map
import qualified Data.Set as Set
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess, prop)
import Test.QuickCheck

import Kv.Packed
import Kv.Sorted

data PackedOp
  = OpInsert ByteString ByteString
  | OpDelete ByteString
  | OpDeleteAt Int
  | OpMany Int Int
    -- ^ insert this many members numbered from this one (with values of
    --   their number's length)
  | OpDropMost
    -- ^ delete all but every 7th member
  deriving Show

instance Arbitrary PackedOp where
  arbitrary = frequency
    [ (6, OpInsert <$> member <*> value), (4, OpDelete <$> member), (2, OpDeleteAt <$> choose (-1, 200))
    , (1, OpMany <$> choose (0, 3000) <*> choose (1, 600)), (1, pure OpDropMost) ]
    where
      member = C.pack <$> resize 5 (listOf (elements "ab\0\255"))
      value = frequency [(8, C.pack <$> resize 8 (listOf (elements "xyz"))), (1, (`B.replicate` 120) <$> choose (0, 5000))]

applyOp :: (Packed, Map.Map ByteString ByteString) -> PackedOp -> (Packed, Map.Map ByteString ByteString)
applyOp (p, m) op = case op of
  OpInsert k v -> (packedInsert k v p, Map.insert k v m)
  OpDelete k -> (packedDelete k p, Map.delete k m)
  OpDeleteAt i -> (packedDeleteAt i p, if i >= 0 && i < Map.size m then Map.deleteAt i m else m)
  OpMany from n -> List.foldl' (\acc k -> applyOp acc (OpInsert k (C.pack (show (B.length k))))) (p, m)
                     [ C.pack ("m:" ++ show i) | i <- [from .. from + n - 1] ]
  OpDropMost -> List.foldl' (\acc (j, k) -> if j `mod` 7 == (0 :: Int) then acc else applyOp acc (OpDelete k)) (p, m)
                  (zip [0 ..] (Map.keys m))

agrees :: (Packed, Map.Map ByteString ByteString) -> Property
agrees (p, m) =
  counterexample (show (Map.size m, packedLeafSizes p)) $
    packedToAscList p === Map.toAscList m
    .&&. packedToDescList p === Map.toDescList m
    .&&. packedSize p === Map.size m
    .&&. packedNull p === Map.null m
    .&&. property (packedBalanced p)
    .&&. property (all (\s -> s >= 1 && s <= 32) (packedLeafSizes p))
    .&&. conjoin [ packedLookup k p === Map.lookup k m .&&. packedIndex k p === Map.lookupIndex k m
                 | k <- probes ]
    .&&. conjoin [ packedAt i p === Map.elemAt i m | i <- [0, 5 .. Map.size m - 1] ++ [Map.size m - 1 | not (Map.null m)] ]
    .&&. conjoin [ take 40 (packedAscFrom i p) === take 40 (drop i (Map.toAscList m))
                   .&&. take 40 (packedDescFrom i p) === take 40 (drop i (Map.toDescList m))
                 | i <- [0, 1, 7, 31, 32, 33] ++ [Map.size m `div` 3, Map.size m - 1, Map.size m, Map.size m + 5] ]
  where
    -- every member of a small map, a sample of a big one, and strings
    -- around and between them
    ks = Map.keys m
    picked = if length ks > 200 then every (length ks `div` 100) ks else ks
    probes = picked ++ map (<> "\0") picked ++ map (B.take 1) picked ++ ["", "\255\255\255\255\255\255", "m:", "m:9999"]
    every k xs = case drop (k - 1) xs of
      y : rest -> y : every k rest
      [] -> []

data ZOp = ZPut ByteString Double | ZRemove ByteString | ZMany Int
  deriving Show

instance Arbitrary ZOp where
  arbitrary = frequency
    [ (6, ZPut <$> member <*> score), (3, ZRemove <$> member), (1, ZMany <$> choose (0, 600)) ]
    where
      member = C.pack <$> resize 4 (listOf (elements "ab\0\255"))
      score = oneof [ fromIntegral <$> choose (-3, 3 :: Int), arbitrary
                    , elements [0, -0, 1 / 0, -1 / 0, 5e-324, -5e-324, 1.7976931348623157e308, -1.7976931348623157e308] ]

-- | The model: each member's score; -0 kept as 0.
applyZ :: (ZSet, Map.Map ByteString Double) -> ZOp -> (ZSet, Map.Map ByteString Double)
applyZ (z, s) op = case op of
  ZPut m sc -> (zsetPut m sc z, Map.insert m (if sc == 0 then 0 else sc) s)
  ZRemove m -> (zsetRemove m z, Map.delete m s)
  ZMany n -> List.foldl' (\acc i -> applyZ acc (ZPut (C.pack ("z" ++ show i)) (fromIntegral (i `mod` 37) - 18))) (z, s) [1 .. n]

zAgrees :: (ZSet, Map.Map ByteString Double) -> Property
zAgrees (z, scores) =
  counterexample (show (Set.size s)) $
    bitsOf (zsetAsc z) === bitsOf (Set.toAscList s)
    .&&. bitsOf (zsetDesc z) === bitsOf (Set.toDescList s)
    .&&. zsetSize z === Set.size s
    .&&. zsetNull z === Set.null s
    .&&. conjoin [ (isNegativeZero <$> zsetScore m z) === Just False
                   .&&. zsetScore m z === Just sc
                   .&&. zsetRank m z === Just i
                   .&&. bitsOf [zsetAt i z] === bitsOf [(sc, m)]
                 | (i, (sc, m)) <- zip [0 ..] (Set.toAscList s), Set.size s < 100 || i `mod` 17 == (0 :: Int) ]
    .&&. conjoin [ bitsOf (zsetAscFrom i z) === bitsOf (drop i (Set.toAscList s))
                   .&&. bitsOf (zsetDescFrom i z) === bitsOf (drop i (Set.toDescList s))
                 | i <- [0, 1, 20, Set.size s `div` 2, Set.size s - 1, Set.size s] ]
    .&&. zsetScore "absent\1" z === Nothing .&&. zsetRank "absent\1" z === Nothing
  where
    s = Set.fromList [ (sc, m) | (m, sc) <- Map.toList scores ]
    -- scores compared by their bits, so that -0 and 0 differ
    bitsOf xs = [ (show sc, isNegativeZero sc, m) | (sc, m) <- xs ]

spec :: Spec
spec = describe "sorted-set contents (Kv.Packed, Kv.Sorted)" $ do
  modifyMaxSuccess (const 100) $ prop "sorted sets agree with a set of (score, member) pairs after any writes" $
    forAll (resize 40 (listOf arbitrary)) $ \ops ->
      conjoin (map zAgrees (scanl applyZ (emptyZSet, Map.empty) ops))
  prop "a sorted set built from an ascending list agrees with one built member by member" $
    forAll (resize 200 (listOf ((,) <$> (fromIntegral <$> choose (-5, 5 :: Int)) <*> (C.pack <$> resize 5 (listOf (elements "abc")))))) $ \ps ->
      let scores = Map.fromList [ (m, sc) | (sc, m) <- ps ]
      in zAgrees (zsetFromAscList (Set.toAscList (Set.fromList [ (sc, m) | (m, sc) <- Map.toList scores ])), scores)
  modifyMaxSuccess (const 150) $ prop "agree with Data.Map after any writes" $
    forAll (resize 40 (listOf arbitrary)) $ \ops ->
      conjoin (map agrees (scanl applyOp (packedEmpty, Map.empty) ops))
  prop "a map built from an ascending list agrees with Data.Map, and takes writes" $
    forAll (choose (0, 2000)) $ \n -> forAll (resize 20 (listOf arbitrary)) $ \ops ->
      let m = Map.fromList [ (C.pack ("k" ++ show i), C.pack (show i)) | i <- [1 .. n :: Int] ]
      in conjoin (map agrees (scanl applyOp (packedFromAscList (Map.toAscList m), m) ops))
  it "splits a leaf by its bytes: a member with a big value sits in a leaf of few" $ do
    let big = B.replicate 3000 120
        p = List.foldl' (\acc i -> packedInsert (C.pack ("f" ++ show (i :: Int))) big acc) packedEmpty [1 .. 50]
    packedSize p `shouldBe` 50
    maximum (packedLeafSizes p) `shouldSatisfy` (<= 2)
    packedLookup "f17" p `shouldBe` Just big
