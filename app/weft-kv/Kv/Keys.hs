{-# LANGUAGE BangPatterns #-}
-- | The keys of one color: a persistent map from key strings to entries,
-- found by the key's hash (Note [Keys by hash]). Pure; the test suite
-- checks it against "Data.Map", hashes that collide included.
module Kv.Keys
  ( Keys
  , emptyKeys
  , keysNull
  , keysLookup
  , keysInsert
  , keysDelete
  , keysToList
  , keysFold
  ) where

import Data.ByteString (ByteString)
import qualified Data.IntMap.Strict as IntMap

-- Note [Keys by hash]
-- ~~~~~~~~~~~~~~~~~~~
-- A store with many keys spends its lookups in the map of a color. As a
-- 'Data.Map.Map' of strings, every lookup compared the key with each of
-- the ~log2 n keys on its path (a call to memcmp per level, on keys that
-- often share a long prefix), and a write walked the path again. Here a
-- key is found by its 64-bit hash (the one its color is cut from) in a
-- Patricia tree: each level tests one bit of a word, and the key's bytes
-- are compared once, with the entry found. Keys whose hashes are equal
-- share a bucket and are compared in turn. The map stays persistent, as
-- the 'Data.Map.Map' was: a store-wide command reads every color's map
-- from another thread (Note [One store per color] in "Kv.Store").
--
-- Every function takes the key's hash from the caller, which must give
-- the same hash for the same key every time.

-- | Keys and their entries, by hash.
newtype Keys a = Keys (IntMap.IntMap (Bucket a))

-- | The keys of one hash: one, or several distinct ones (at least two).
data Bucket a
  = One !ByteString !a
  | Several ![(ByteString, a)]

emptyKeys :: Keys a
emptyKeys = Keys IntMap.empty

keysNull :: Keys a -> Bool
keysNull (Keys m) = IntMap.null m

-- | The entry of a key, given its hash.
keysLookup :: Int -> ByteString -> Keys a -> Maybe a
keysLookup h key (Keys m) = case IntMap.lookup h m of
  Nothing -> Nothing
  Just (One k v) -> if k == key then Just v else Nothing
  Just (Several kvs) -> lookup key kvs
{-# INLINE keysLookup #-}

-- | Store an entry under a key, given its hash. A key already present
-- keeps the string it is stored under (so a caller can pass a slice of a
-- request for an existing key, and a copy only for a new one).
keysInsert :: Int -> ByteString -> a -> Keys a -> Keys a
keysInsert h key !v (Keys m) = Keys (IntMap.alter put h m)
  where
    put Nothing = Just (One key v)
    put (Just (One k old))
      | k == key = Just (One k v)
      | otherwise = Just (Several [(key, v), (k, old)])
    put (Just (Several kvs)) = Just (Several (replace kvs))
    replace [] = [(key, v)]
    replace (kv@(k, _) : rest)
      | k == key = (k, v) : rest
      | otherwise = kv : replace rest

-- | Without the key, given its hash.
keysDelete :: Int -> ByteString -> Keys a -> Keys a
keysDelete h key (Keys m) = Keys (IntMap.update without h m)
  where
    without b@(One k _) = if k == key then Nothing else Just b
    without (Several kvs) = case filter ((/= key) . fst) kvs of
      [(k, v)] -> Just (One k v)
      rest -> Just (Several rest)

-- | Every key and its entry, in no particular order.
keysToList :: Keys a -> [(ByteString, a)]
keysToList = keysFold (\acc k v -> (k, v) : acc) []

-- | A strict left fold over every key and its entry, in no particular
-- order.
keysFold :: (b -> ByteString -> a -> b) -> b -> Keys a -> b
keysFold f z (Keys m) = IntMap.foldl' bucket z m
  where
    bucket !acc (One k v) = f acc k v
    bucket acc (Several kvs) = foldl (\a (k, v) -> f a k v) acc kvs
