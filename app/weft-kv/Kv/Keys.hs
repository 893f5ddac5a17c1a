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

import Data.Bits (bit, clearBit, popCount, rotateR, setBit, testBit, unsafeShiftR, (.&.), (.|.))
import Data.ByteString (ByteString)
import Data.Primitive.SmallArray

-- Note [Keys by hash]
-- ~~~~~~~~~~~~~~~~~~~
-- A store with many keys spends its lookups in the map of a color. As a
-- 'Data.Map.Map' of strings, every lookup compared the key with each of
-- the ~log2 n keys on its path (a call to memcmp per level, on keys that
-- often share a long prefix), and a write walked the path again, one
-- cache miss per level. Here a key is found by its 64-bit hash (the one
-- its color is cut from) in a hash array mapped trie: each level takes
-- 'levelBits' bits of the hash and indexes a compact array of the
-- children present (a bit map says which), so a million keys are about
-- four levels deep, and the key's bytes are compared once, with the entry
-- found. The trie consumes the hash from bit 16 up and its low 16 bits
-- last, because the keys of one color share their low bits (the color).
-- Keys whose whole hashes are equal share a bucket and are compared in
-- turn.
--
-- The trie is persistent, as the 'Data.Map.Map' was: a store-wide command
-- reads every color's map from another thread (Note [One store per color]
-- in "Kv.Store"). It is kept canonical: no branch is empty, and a branch
-- whose only child is a leaf is that leaf. Every child is evaluated
-- before it is written into its branch's array (arrays are lazy in their
-- elements): a write left as a thunk would be a chain of pending inserts
-- for the next lookup to run and the collector to copy.
--
-- Every function takes the key's hash from the caller, which must give
-- the same hash for the same key every time.

-- | Keys and their entries, by hash.
newtype Keys a = Keys (Node a)

data Node a
  = Empty
  | Leaf {-# UNPACK #-} !Int !(Bucket a)
    -- ^ the hash (rotated: 'trieHash') and its keys
  | Branch {-# UNPACK #-} !Word !(SmallArray (Node a))
    -- ^ which children are present, and those, in order

-- | The keys of one hash: one, or several distinct ones (at least two).
data Bucket a
  = One !ByteString !a
  | Several ![(ByteString, a)]

-- | Bits of the hash per level: 32 children per branch at most.
levelBits :: Int
levelBits = 5

emptyKeys :: Keys a
emptyKeys = Keys Empty

keysNull :: Keys a -> Bool
keysNull (Keys Empty) = True
keysNull _ = False

-- | The hash as the trie reads it, 'levelBits' bits per level from the low
-- end: the key's hash with its low 16 bits (the color) moved to the top.
trieHash :: Int -> Int
trieHash h = fromIntegral ((fromIntegral h :: Word) `rotateR` 16)
{-# INLINE trieHash #-}

-- | The child index at a level (the hash shifted by 'levelBits' per level).
childAt :: Int -> Int -> Int
childAt th shift = fromIntegral (((fromIntegral th :: Word) `unsafeShiftR` shift) .&. (bit levelBits - 1))
{-# INLINE childAt #-}

-- | Where a present child sits in the branch's array.
slotOf :: Word -> Int -> Int
slotOf present i = popCount (present .&. (bit i - 1))
{-# INLINE slotOf #-}

-- | The entry of a key, given its hash.
keysLookup :: Int -> ByteString -> Keys a -> Maybe a
keysLookup h key (Keys root) = go root 0
  where
    !th = trieHash h
    go Empty !_ = Nothing
    go (Leaf th' b) _
      | th' == th = case b of
          One k v -> if k == key then Just v else Nothing
          Several kvs -> lookup key kvs
      | otherwise = Nothing
    go (Branch present children) shift
      | testBit present i = go (indexSmallArray children (slotOf present i)) (shift + levelBits)
      | otherwise = Nothing
      where i = childAt th shift

-- | Store an entry under a key, given its hash. A key already present
-- keeps the string it is stored under (so a caller can pass a slice of a
-- request for an existing key, and a copy only for a new one).
keysInsert :: Int -> ByteString -> a -> Keys a -> Keys a
keysInsert h key !v (Keys root) = Keys (insertBelow (trieHash h) key v 0 root)
{-# INLINE keysInsert #-}

-- | 'keysInsert' into the subtree at a level. Top level, with the key,
-- entry and hash as arguments, so that an insert allocates no closures.
insertBelow :: Int -> ByteString -> a -> Int -> Node a -> Node a
insertBelow !th key v !shift node = case node of
  Empty -> Leaf th (One key v)
  Leaf th' b
    | th' == th -> Leaf th (bucketPut key v b)
    | otherwise -> pairLeaves shift node th' (Leaf th (One key v)) th
  Branch present children
    | testBit present i ->
        let !child = insertBelow th key v (shift + levelBits) (indexSmallArray children slot)
        in Branch present (updated children slot child)
    | otherwise -> let !leaf = Leaf th (One key v) in Branch (setBit present i) (inserted children slot leaf)
    where
      i = childAt th shift
      slot = slotOf present i

-- | Two leaves of different hashes, as the subtree at a level.
pairLeaves :: Int -> Node a -> Int -> Node a -> Int -> Node a
pairLeaves !shift old !thOld new !thNew
  | iOld == iNew = let !below = pairLeaves (shift + levelBits) old thOld new thNew
                   in Branch (bit iOld) (singletonSmallArray below)
  | iOld < iNew = Branch (bit iOld .|. bit iNew) (twoSmallArray old new)
  | otherwise = Branch (bit iOld .|. bit iNew) (twoSmallArray new old)
  where
    iOld = childAt thOld shift
    iNew = childAt thNew shift

-- | A bucket with the key's entry replaced or added.
bucketPut :: ByteString -> a -> Bucket a -> Bucket a
bucketPut key v (One k old)
  | k == key = One k v
  | otherwise = Several [(key, v), (k, old)]
bucketPut key v (Several kvs) = Several (replace kvs)
  where
    replace [] = [(key, v)]
    replace (kv@(k, _) : rest)
      | k == key = (k, v) : rest
      | otherwise = kv : replace rest

-- | Without the key, given its hash.
keysDelete :: Int -> ByteString -> Keys a -> Keys a
keysDelete h key (Keys root) = Keys (go root 0)
  where
    !th = trieHash h
    go Empty !_ = Empty
    go node@(Leaf th' b) _
      | th' /= th = node
      | otherwise = case b of
          One k _ -> if k == key then Empty else node
          Several kvs -> case filter ((/= key) . fst) kvs of
            [(k, x)] -> Leaf th (One k x)
            rest -> Leaf th (Several rest)
    go node@(Branch present children) shift
      | not (testBit present i) = node
      | otherwise = case go child (shift + levelBits) of
          Empty
            | present' == 0 -> Empty
            | popCount present' == 1, only@(Leaf _ _) <- indexSmallArray children (1 - slot) -> only
            | otherwise -> Branch present' (removed children slot)
          child'@(Leaf _ _) | popCount present == 1 -> child'
          child' -> Branch present (updated children slot child')
      where
        i = childAt th shift
        slot = slotOf present i
        child = indexSmallArray children slot
        present' = clearBit present i

-- | Every key and its entry, in no particular order.
keysToList :: Keys a -> [(ByteString, a)]
keysToList = keysFold (\acc k v -> (k, v) : acc) []

-- | A strict left fold over every key and its entry, in no particular
-- order.
keysFold :: (b -> ByteString -> a -> b) -> b -> Keys a -> b
keysFold f z0 (Keys root) = go z0 root
  where
    go !z Empty = z
    go z (Leaf _ (One k v)) = f z k v
    go z (Leaf _ (Several kvs)) = foldl (\a (k, v) -> f a k v) z kvs
    go z (Branch _ children) = foldl go z children

------------------------------------------------------------------------------
-- Small arrays, copied on write

-- | The array with one slot replaced.
updated :: SmallArray b -> Int -> b -> SmallArray b
updated arr slot x = runSmallArray $ do
  m <- thawSmallArray arr 0 (sizeofSmallArray arr)
  writeSmallArray m slot x
  return m

-- | The array with an element inserted before a slot.
inserted :: SmallArray b -> Int -> b -> SmallArray b
inserted arr slot x = runSmallArray $ do
  let n = sizeofSmallArray arr
  m <- newSmallArray (n + 1) x
  copySmallArray m 0 arr 0 slot
  copySmallArray m (slot + 1) arr slot (n - slot)
  return m

-- | The array without a slot.
removed :: SmallArray b -> Int -> SmallArray b
removed arr slot = runSmallArray $ do
  let n = sizeofSmallArray arr
  m <- newSmallArray (n - 1) (indexSmallArray arr 0)
  copySmallArray m 0 arr 0 slot
  copySmallArray m slot arr (slot + 1) (n - 1 - slot)
  return m

singletonSmallArray :: b -> SmallArray b
singletonSmallArray x = runSmallArray (newSmallArray 1 x)

twoSmallArray :: b -> b -> SmallArray b
twoSmallArray x y = runSmallArray $ do
  m <- newSmallArray 2 x
  writeSmallArray m 1 y
  return m
