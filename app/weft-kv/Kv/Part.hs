{-# LANGUAGE BangPatterns #-}
-- | A value carried from one key to another as a 'Reply' (Note [Values
-- in parts]): RENAME's and COPY's, and a sorted set's scored members.
module Kv.Part
  ( valuePart
  , partValue
  , scoredItems
  , itemsScored
  ) where

import qualified Data.ByteString as B
import GHC.Float (castDoubleToWord64, castWord64ToDouble)
import Data.ByteString (ByteString)

import Kv.Deque (dequeFromList, dequeToList)
import Kv.Members (membersAscList, membersFromList)
import Kv.Resp (Reply (..))
import Kv.SortedSet (sortedAsc, sortedFromAscList)
import Kv.Store (Value (..))
import Kv.Str (strClone)

-- Note [Values in parts]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- A command that carries a value from one key to another (RENAME, COPY)
-- reads it on the source's color and writes it on the destination's,
-- and what passes between its steps is a 'Reply' (Note [Multi-key
-- commands] in "Kv.Batch"). So the value travels as one: 'valuePart'
-- writes its expiry deadline, its type and its contents (a score as its
-- bits, so that it comes back exact), 'partValue' reads them back. A part
-- is never sent to a client; it copies the contents' spine, not their
-- bytes, but for a small string's (Note [Stored strings] in "Kv.Str").

-- | A value and its expiry deadline (0: none) as a part (Note [Values in
-- parts]). In IO, on the key's color: a hash's or set's members are read
-- out of their table.
valuePart :: Int -> Value -> IO Reply
valuePart deadline v = case v of
  -- A copy, made as the part is: the source's bytes may be written over
  -- before the part is read (Note [Stored strings] in "Kv.Str").
  VString s -> let !c = strClone s in return (RArray [RInt deadline, RInt 0, RStored c])
  VList xs -> part 1 . map RBulk <$> dequeToList xs
  VSet xs -> part 2 . map (RBulk . fst) <$> membersAscList xs
  VHash h -> part 3 . concatMap (\(f, x) -> [RBulk f, RBulk x]) <$> membersAscList h
  VZSet z -> part 4 . scoredItems <$> sortedAsc z
  where part tag xs = RArray (RInt deadline : RInt tag : xs)

-- | The expiry deadline of a part 'valuePart' wrote, and how to make its
-- value: each run of the action makes a value of its own (a hash or set
-- is a table that one key alone may hold).
partValue :: Reply -> Maybe (Int, IO Value)
partValue (RArray (RInt deadline : RInt tag : xs)) = (,) deadline <$> case tag of
  0 | [RStored s] <- xs -> Just (return (VString s))
  1 -> fmap VList . dequeFromList <$> traverse bulk xs
  2 -> (\ms -> VSet <$> membersFromList [ (m, B.empty) | m <- ms ]) <$> traverse bulk xs
  3 -> (\fxs -> VHash <$> membersFromList fxs) <$> pairs (\f x -> (,) f <$> bulk x) xs
  4 -> fmap VZSet . sortedFromAscList <$> itemsScored xs
  _ -> Nothing
  where
    bulk (RBulk b) = Just b
    bulk _ = Nothing
    pairs f (RBulk a : b : rest) = (:) <$> f a b <*> pairs f rest
    pairs _ [] = Just []
    pairs _ _ = Nothing
partValue _ = Nothing

-- | Scored members as a part's items: each member, then its score's bits
-- (so that it comes back exact).
scoredItems :: [(Double, ByteString)] -> [Reply]
scoredItems ms = concat [ [RBulk m, RInt (fromIntegral (castDoubleToWord64 sc))] | (sc, m) <- ms ]

-- | The scored members of items 'scoredItems' wrote.
itemsScored :: [Reply] -> Maybe [(Double, ByteString)]
itemsScored (RBulk m : RInt b : rest) = ((castWord64ToDouble (fromIntegral b), m) :) <$> itemsScored rest
itemsScored [] = Just []
itemsScored _ = Nothing
