{-# LANGUAGE OverloadedStrings, ScopedTypeVariables #-}
-- | weft-kv's hash and set contents (a packed map while few, then a
-- mutable table of records, and of entries for values too large for one)
-- against "Data.Map": every operation, after any sequence of writes, with
-- members that repeat, values that change length and cross the record
-- limit, and contents that grow past the packed map's limit and shrink,
-- also when seen in a record while small; and the records of a table
-- nothing holds any more are freed.
module Test.KvMembers (spec) where

import Control.Monad (foldM, forM)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import qualified Data.Map.Strict as Map
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess, prop)
import Test.QuickCheck

import Kv.Members
import Kv.Str (sharedBulkBytes)

import Support (modelRun, modelRunInRecord, recordsFreedOnDrop)

data MembersOp
  = MPut ByteString ByteString
  | MAdd ByteString ByteString
    -- ^ only if not there
  | MRemove ByteString
  | MMany Int Int
    -- ^ put this many members numbered from this one
  | MDropMost
    -- ^ remove all but every 7th member
  deriving Show

instance Arbitrary MembersOp where
  arbitrary = frequency
    [ (6, MPut <$> member <*> value), (2, MAdd <$> member <*> value), (4, MRemove <$> member)
    , (1, MMany <$> choose (0, 3000) <*> choose (1, 400)), (1, pure MDropMost) ]
    where
      member = C.pack <$> frequency [ (4, resize 3 (listOf (elements "abc"))), (1, ("m" ++) . show <$> choose (0 :: Int, 3500)) ]
      -- Values of a few lengths, so that a write often fits over the old
      -- value and often does not; now and then one too large for a record.
      value = frequency
        [ (8, C.pack <$> resize 6 (listOf (elements "xyz")))
        , (1, (\n c -> B.replicate n c) <$> elements [sharedBulkBytes - 1, sharedBulkBytes, sharedBulkBytes + 5] <*> elements [120, 121]) ]
  shrink (MMany a n) = [ MMany a n' | n' <- shrink n ]
  shrink _ = []

-- | Apply one operation to the table and the model: what the operation
-- answered, as the model says it should.
step :: Members -> Map.Map ByteString ByteString -> MembersOp -> IO (Members, Map.Map ByteString ByteString, Property)
step t m op = case op of
  MPut k v -> do
    (t', new) <- membersPut t k v
    return (t', Map.insert k v m, counterexample ("put " ++ show k) (new === not (Map.member k m)))
  MAdd k v -> do
    (t', added) <- membersAdd t k v
    return (t', if Map.member k m then m else Map.insert k v m, counterexample ("add " ++ show k) (added === not (Map.member k m)))
  MRemove k -> do
    (t', was) <- membersRemove t k
    return (t', Map.delete k m, counterexample ("remove " ++ show k) (was === Map.member k m))
  MMany from n -> do
    let ks = [ C.pack ("m" ++ show j) | j <- [from .. from + n - 1] ]
    t' <- foldM (\acc k -> fst <$> membersPut acc k k) t ks
    return (t', foldr (\k -> Map.insert k k) m ks, property True)
  MDropMost -> do
    let gone = [ k | (j, k) <- zip [0 :: Int ..] (Map.keys m), j `mod` 7 /= 0 ]
    t' <- foldM (\acc k -> fst <$> membersRemove acc k) t gone
    return (t', foldr Map.delete m gone, property True)

-- | Every read of the table against the model.
agrees :: Members -> Map.Map ByteString ByteString -> IO Property
agrees t m = do
  size <- membersSize t
  listed <- membersAscList t
  folded <- membersFold (\n k v -> n + B.length k + B.length v) 0 t
  looked <- forM (Map.keys m ++ ["", "a", "zz", "m3501"]) $ \k -> do
    v <- membersLookup t k
    has <- membersHas t k
    return (counterexample ("lookup " ++ show k) (v === Map.lookup k m .&&. has === Map.member k m))
  picked <- membersRandom t 12345
  return $ size === Map.size m .&&. listed === Map.toList m
    .&&. folded === sum [ B.length k + B.length v | (k, v) <- Map.toList m ]
    .&&. conjoin looked
    .&&. counterexample ("random pick " ++ show picked)
           (maybe (Map.null m) (\(k, v) -> Map.lookup k m == Just v) picked)

spec :: Spec
spec = describe "hash and set contents (Kv.Members)" $ do
  modifyMaxSuccess (const 150) $ prop "agree with Data.Map after any writes" $ \(ops :: [MembersOp]) -> ioProperty $
    fst <$> modelRun step agrees emptyMembers Map.empty ops

  modifyMaxSuccess (const 150) $ prop "agree with Data.Map after any writes, seen in a record while small" $ \(ops :: [MembersOp]) -> ioProperty $
    modelRunInRecord membersFlat membersInRecord membersOwn step agrees emptyMembers Map.empty ops

  it "built from a list holds the last value of each member" $ do
    t <- membersFromList [("a", "1"), ("b", "2"), ("a", "3")]
    membersAscList t `shouldReturn` [("a", "3"), ("b", "2")]

  it "frees its records once nothing holds the table" $
    recordsFreedOnDrop 2000 $ do
      t <- foldM (\acc i -> fst <$> membersPut acc (C.pack ("f" ++ show i)) "v") emptyMembers [1 .. 2000 :: Int]
      return (membersSize t)
