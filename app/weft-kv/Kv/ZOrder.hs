{-# LANGUAGE BangPatterns #-}
-- | The order of a large sorted set's members, changed in place: entries
-- of two words in leaves of unboxed arrays (Note [Sorted-set order in
-- leaves]). The entries' order is the caller's, given as a comparison
-- with the entry sought ('Probe'). The test suite checks it, through
-- "Kv.SortedSet", against "Data.Set".
module Kv.ZOrder
  ( ZOrder
  , Probe
  , leafEntries
  , newOrder
  , orderSize
  , orderInsert
  , orderDelete
  , orderRank
  , orderAt
  , orderWalk
  , orderCountWhile
  , orderWalkPast
  , orderLeafCounts
  ) where

import Control.Monad (forM_, when)
import Data.IORef (IORef, newIORef, readIORef, writeIORef)
import Data.Primitive.Array (MutableArray, newArray, readArray, sizeofMutableArray, writeArray)
import Data.Primitive.ByteArray (MutableByteArray, copyMutableByteArray, moveByteArray, newByteArray,
                                 readByteArray, writeByteArray)
import Data.Bits ((.&.))
import Data.Primitive.PrimArray (MutablePrimArray, newPrimArray, readPrimArray, setPrimArray, writePrimArray)
import Data.Word (Word64)
import GHC.Exts (RealWorld)

-- Note [Sorted-set order in leaves]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A large sorted set keeps its members in order here (Note [Sorted sets
-- in tables] in "Kv.SortedSet"): one entry per member, two words (the
-- score's order word and the address of the member's record), sorted as
-- the caller's 'Probe' compares them. The entries sit in leaves of at
-- most 'leafEntries' entries, each leaf one unboxed array of 4 KiB: an
-- object that large the collector never copies, and one without
-- pointers it never scans, so a sorted set of a million members costs
-- each collection a few thousand leaves, not a million objects. An
-- index, an array of the leaves in order beside their counts, finds a
-- leaf by binary search over the leaves' first entries.
--
-- Invariants: every leaf in the index holds at least one entry, but for
-- the only leaf of an empty order; a leaf's entries are sorted, and
-- every entry of a leaf comes before every entry of the next; the
-- index's counts are the leaves' entries, and their sum is the order's
-- size; and any two neighbouring leaves hold more than half a leaf's
-- entries between them, so that a walk does not cross long runs of
-- nearly empty leaves. An insert into a full leaf splits it in halves; a
-- delete that empties a leaf takes it out of the index, and one that
-- leaves a leaf and a neighbour together within half a leaf merges them
-- (a delete lowers one leaf by one, so one merge restores the bound for
-- both its neighbours). A rank is the counts of the leaves before plus
-- the place in the leaf; a Fenwick tree over the counts gives the first
-- in a dozen steps for a million members, and finds a rank's leaf as
-- fast. A count's change updates the tree along one path; a leaf put in
-- or taken out of the index moves the counts after it, and the tree is
-- built again from there ('rebuildTree'), as the leaves are shifted.

-- | The most entries of a leaf.
leafEntries :: Int
leafEntries = 256

entryBytes :: Int
entryBytes = 16

-- | The entry sought against an entry of the order (its two words):
-- 'LT' if the one sought comes first.
type Probe = Word64 -> Word64 -> IO Ordering

type Leaf = MutableByteArray RealWorld

data Index = Index
  { ixLeaves :: !(MutableArray RealWorld Leaf)
  , ixCounts :: !(MutablePrimArray RealWorld Int)
    -- ^ each leaf's entries; 0 past the leaves in use
  , ixTree :: !(MutablePrimArray RealWorld Int)
    -- ^ the counts' Fenwick tree, from 1: 'leavesBefore' and 'findRank'
    -- in a few steps each
  }

-- | The entries in order (Note [Sorted-set order in leaves]), and two
-- counts: the leaves in use and the entries.
data ZOrder = ZOrder !(IORef Index) !(MutablePrimArray RealWorld Int)

usedSlot, sizeSlot :: Int
usedSlot = 0
sizeSlot = 1

newLeaf :: IO Leaf
newLeaf = newByteArray (leafEntries * entryBytes)

-- | An empty order.
newOrder :: IO ZOrder
newOrder = do
  leaf <- newLeaf
  leaves <- newArray 4 leaf
  counts <- newPrimArray 4
  setPrimArray counts 0 4 0
  tree <- newPrimArray 5
  setPrimArray tree 0 5 0
  meta <- newPrimArray 2
  writePrimArray meta usedSlot 1
  writePrimArray meta sizeSlot 0
  ref <- newIORef (Index leaves counts tree)
  return (ZOrder ref meta)

orderSize :: ZOrder -> IO Int
orderSize (ZOrder _ meta) = readPrimArray meta sizeSlot
{-# INLINE orderSize #-}

-- | The entries in each leaf, in order (for the tests of the invariants).
orderLeafCounts :: ZOrder -> IO [Int]
orderLeafCounts (ZOrder ref meta) = do
  used <- readPrimArray meta usedSlot
  Index _ counts _ <- readIORef ref
  mapM (readPrimArray counts) [0 .. used - 1]

entryAt :: Leaf -> Int -> IO (Word64, Word64)
entryAt leaf i = (,) <$> readByteArray leaf (2 * i) <*> readByteArray leaf (2 * i + 1)
{-# INLINE entryAt #-}

writeEntry :: Leaf -> Int -> Word64 -> Word64 -> IO ()
writeEntry leaf i w a = writeByteArray leaf (2 * i) w >> writeByteArray leaf (2 * i + 1) a
{-# INLINE writeEntry #-}

-- | The probe against the entry at a place in a leaf.
probeAt :: Probe -> Leaf -> Int -> IO Ordering
probeAt probe leaf i = do
  w <- readByteArray leaf (2 * i)
  a <- readByteArray leaf (2 * i + 1)
  probe w a
{-# INLINE probeAt #-}

-- | The leaf where the probe belongs: the last whose first entry is not
-- after it (the first leaf if none is), its place in the index, and its
-- count.
locate :: ZOrder -> Probe -> IO (Int, Leaf, Int)
locate (ZOrder ref meta) probe = do
  Index leaves counts _ <- readIORef ref
  used <- readPrimArray meta usedSlot
  let go :: Int -> Int -> IO Int
      go lo hi
        | lo >= hi = return lo
        | otherwise = do
            let mid = (lo + hi + 1) `quot` 2
            leaf <- readArray leaves mid
            o <- probeAt probe leaf 0
            if o == LT then go lo (mid - 1) else go mid hi
  j <- go 0 (used - 1)
  leaf <- readArray leaves j
  n <- readPrimArray counts j
  return (j, leaf, n)

-- | The first place among a leaf's n entries whose entry is not before
-- the probe (n if there is none).
lowerIn :: Probe -> Leaf -> Int -> IO Int
lowerIn probe leaf = go 0
  where
    go !lo !hi
      | lo >= hi = return lo
      | otherwise = do
          let mid = (lo + hi) `quot` 2
          o <- probeAt probe leaf mid
          if o == GT then go (mid + 1) hi else go lo mid

setLeafCount :: ZOrder -> Int -> Int -> IO ()
setLeafCount (ZOrder ref _) j n = do
  Index leaves counts tree <- readIORef ref
  old <- readPrimArray counts j
  writePrimArray counts j n
  let cap = sizeofMutableArray leaves
      go :: Int -> IO ()
      go i = when (i <= cap) $ do
        readPrimArray tree i >>= writePrimArray tree i . (+ (n - old))
        go (i + (i .&. negate i))
  go (j + 1)

-- | Build the index's Fenwick tree again from its counts at a place on
-- (after leaves moved there; the counts before it are as the tree has
-- them). The nodes past the place are made from their counts, given what
-- the nodes that sum the counts before it contribute (the nodes a prefix
-- sum to the place reads, whose parents all lie past it), and carried up
-- to their parents in order.
rebuildTree :: Index -> Int -> IO ()
rebuildTree (Index leaves counts tree) j = do
  let cap = sizeofMutableArray leaves
      lowBit i = i .&. negate i
      fill :: Int -> IO ()
      fill i = when (i <= cap) $ do
        readPrimArray counts (i - 1) >>= writePrimArray tree i
        fill (i + 1)
      frontier :: Int -> IO ()
      frontier i = when (i > 0) $ do
        let up = i + lowBit i
        when (up <= cap) $ do
          x <- readPrimArray tree i
          readPrimArray tree up >>= writePrimArray tree up . (+ x)
        frontier (i - lowBit i)
      carry :: Int -> IO ()
      carry i = when (i <= cap) $ do
        let up = i + lowBit i
        when (up <= cap) $ do
          x <- readPrimArray tree i
          readPrimArray tree up >>= writePrimArray tree up . (+ x)
        carry (i + 1)
  fill (j + 1)
  frontier j
  carry (j + 1)

leafCount :: ZOrder -> Int -> IO Int
leafCount (ZOrder ref _) j = readIORef ref >>= \ix -> readPrimArray (ixCounts ix) j

leafAt :: ZOrder -> Int -> IO Leaf
leafAt (ZOrder ref _) j = readIORef ref >>= \ix -> readArray (ixLeaves ix) j

bumpSize :: ZOrder -> Int -> IO ()
bumpSize (ZOrder _ meta) d = readPrimArray meta sizeSlot >>= writePrimArray meta sizeSlot . (+ d)

-- | Put an entry at a place among a leaf's n entries (n below the most).
putIn :: Leaf -> Int -> Int -> Word64 -> Word64 -> IO ()
putIn leaf n p w a = do
  moveByteArray leaf ((p + 1) * entryBytes) leaf (p * entryBytes) ((n - p) * entryBytes)
  writeEntry leaf p w a

-- | Add an entry (its two words), which the probe finds and which is not
-- in the order.
orderInsert :: ZOrder -> Probe -> Word64 -> Word64 -> IO ()
orderInsert o probe w a = do
  (j, leaf, n) <- locate o probe
  p <- lowerIn probe leaf n
  if n < leafEntries
    then putIn leaf n p w a >> setLeafCount o j (n + 1)
    else do
      let half = n `quot` 2
      new <- newLeaf
      copyMutableByteArray new 0 leaf (half * entryBytes) ((n - half) * entryBytes)
      setLeafCount o j half
      insertLeaf o (j + 1) new (n - half)
      if p <= half
        then putIn leaf half p w a >> setLeafCount o j (half + 1)
        else putIn new (n - half) (p - half) w a >> setLeafCount o (j + 1) (n - half + 1)
  bumpSize o 1

-- | Put a leaf into the index at a place, growing the index if full.
insertLeaf :: ZOrder -> Int -> Leaf -> Int -> IO ()
insertLeaf (ZOrder ref meta) j leaf n = do
  ix0 <- readIORef ref
  used <- readPrimArray meta usedSlot
  ix@(Index leaves counts _) <-
    if used < sizeofMutableArray (ixLeaves ix0) then return ix0 else do
      let cap = 2 * used
      leaves <- newArray cap leaf
      counts <- newPrimArray cap
      setPrimArray counts 0 cap 0
      tree <- newPrimArray (cap + 1)
      forM_ [0 .. used - 1] $ \i -> do
        readArray (ixLeaves ix0) i >>= writeArray leaves i
        readPrimArray (ixCounts ix0) i >>= writePrimArray counts i
      let ix = Index leaves counts tree
      ix <$ writeIORef ref ix
  forM_ [used - 1, used - 2 .. j] $ \i -> do
    readArray leaves i >>= writeArray leaves (i + 1)
    readPrimArray counts i >>= writePrimArray counts (i + 1)
  writeArray leaves j leaf
  writePrimArray counts j n
  writePrimArray meta usedSlot (used + 1)
  -- A new index has no tree yet: all of it is built.
  rebuildTree ix (if used < sizeofMutableArray (ixLeaves ix0) then j else 0)

-- | Take the leaf at a place out of the index.
removeLeaf :: ZOrder -> Int -> IO ()
removeLeaf (ZOrder ref meta) j = do
  ix@(Index leaves counts _) <- readIORef ref
  used <- readPrimArray meta usedSlot
  forM_ [j + 1 .. used - 1] $ \i -> do
    readArray leaves i >>= writeArray leaves (i - 1)
    readPrimArray counts i >>= writePrimArray counts (i - 1)
  -- The slot past the last in use keeps a leaf that is still in use, so
  -- that the one taken out can be collected.
  readArray leaves 0 >>= writeArray leaves (used - 1)
  writePrimArray counts (used - 1) 0
  writePrimArray meta usedSlot (used - 1)
  rebuildTree ix j

-- | Remove the entry the probe finds: whether it was there.
orderDelete :: ZOrder -> Probe -> IO Bool
orderDelete o@(ZOrder _ meta) probe = do
  (j, leaf, n) <- locate o probe
  p <- lowerIn probe leaf n
  found <- if p < n then (== EQ) <$> probeAt probe leaf p else return False
  when found $ do
    moveByteArray leaf (p * entryBytes) leaf ((p + 1) * entryBytes) ((n - p - 1) * entryBytes)
    let n' = n - 1
    setLeafCount o j n'
    bumpSize o (-1)
    used <- readPrimArray meta usedSlot
    if n' == 0 && used > 1 then removeLeaf o j else do
      next <- if j + 1 < used then leafCount o (j + 1) else return leafEntries
      prev <- if j > 0 then leafCount o (j - 1) else return leafEntries
      if n' + next <= leafEntries `quot` 2 then mergeInto j n' (j + 1) next
      else when (prev + n' <= leafEntries `quot` 2) $ mergeInto (j - 1) prev j n'
  return found
  where
    -- The second leaf's entries go to the end of the first's, and the
    -- second leaf out of the index.
    mergeInto a na b nb = do
      la <- leafAt o a
      lb <- leafAt o b
      copyMutableByteArray la (na * entryBytes) lb 0 (nb * entryBytes)
      setLeafCount o a (na + nb)
      removeLeaf o b

-- | The rank (from 0, first in order) of the entry the probe finds.
orderRank :: ZOrder -> Probe -> IO (Maybe Int)
orderRank o probe = do
  (j, leaf, n) <- locate o probe
  p <- lowerIn probe leaf n
  found <- if p < n then (== EQ) <$> probeAt probe leaf p else return False
  if not found then return Nothing else do
    before <- leavesBefore o j
    return (Just (before + p))

-- | The entries of the leaves before the one at a place in the index.
leavesBefore :: ZOrder -> Int -> IO Int
leavesBefore (ZOrder ref _) j = do
  tree <- ixTree <$> readIORef ref
  let go :: Int -> Int -> IO Int
      go !i !acc | i <= 0 = return acc
                 | otherwise = readPrimArray tree i >>= \c -> go (i - (i .&. negate i)) (acc + c)
  go j 0

-- | The leaf and place of a rank (below the size).
findRank :: ZOrder -> Int -> IO (Int, Int)
findRank (ZOrder ref _) r0 = do
  Index leaves _ tree <- readIORef ref
  let cap = sizeofMutableArray leaves
      -- The most leaves from the first whose entries number at most the
      -- rank: the rank's leaf is the next, and what is left its place.
      go :: Int -> Int -> Int -> IO (Int, Int)
      go !pos !r !step
        | step == 0 = return (pos, r)
        | pos + step <= cap = do
            c <- readPrimArray tree (pos + step)
            if c <= r then go (pos + step) (r - c) (step `quot` 2) else go pos r (step `quot` 2)
        | otherwise = go pos r (step `quot` 2)
  go 0 r0 (highBit cap)
  where
    highBit n = until (\b -> 2 * b > n) (* 2) 1

-- | The entry at a rank (below the size).
orderAt :: ZOrder -> Int -> IO (Word64, Word64)
orderAt o r = do
  (j, i) <- findRank o r
  leaf <- leafAt o j
  entryAt leaf i

-- | Items made of the entries from a rank on (counted from the last
-- backwards if @back@), while they satisfy @keep@, at most @limit@ of
-- them (no limit if negative), in walk order.
orderWalk :: ZOrder -> Bool -> Int -> Int -> (Word64 -> Word64 -> IO x) -> (x -> Bool) -> IO [x]
orderWalk o@(ZOrder _ meta) back start limit item keep = do
  size <- readPrimArray meta sizeSlot
  used <- readPrimArray meta usedSlot
  if start < 0 || start >= size then return [] else do
    (j0, i0) <- findRank o (if back then size - 1 - start else start)
    walkFrom o back used j0 i0 limit item keep

-- | Items made of the entries from the one at a leaf and place on, as
-- 'orderWalk' makes them.
walkFrom :: ZOrder -> Bool -> Int -> Int -> Int -> Int -> (Word64 -> Word64 -> IO x) -> (x -> Bool) -> IO [x]
walkFrom o back used j0 i0 limit item keep = go j0 i0 limit []
  where
    go !j !i !left acc
      | left == 0 = return (reverse acc)
      | otherwise = do
          leaf <- leafAt o j
          (w, a) <- entryAt leaf i
          x <- item w a
          if not (keep x) then return (reverse acc) else do
            n <- leafCount o j
            let acc' = x : acc
                left' = left - 1
            if back
              then if i > 0 then go j (i - 1) left' acc'
                   else if j > 0 then leafCount o (j - 1) >>= \c -> go (j - 1) (c - 1) left' acc'
                   else return (reverse acc')
              else if i + 1 < n then go j (i + 1) left' acc'
                   else if j + 1 < used then go (j + 1) 0 left' acc'
                   else return (reverse acc')

-- | How many entries, first in order, satisfy @keep@, which must hold of
-- a first run of the entries and of none after it.
orderCountWhile :: ZOrder -> (Word64 -> Word64 -> IO Bool) -> IO Int
orderCountWhile o keep = do
  (j, p) <- seek o keep
  before <- leavesBefore o j
  return (before + p)

-- | The leaf and place of the first entry that does not satisfy @keep@
-- (which holds of a first run of the entries and of none after it); the
-- place may be the leaf's count, past its last entry.
seek :: ZOrder -> (Word64 -> Word64 -> IO Bool) -> IO (Int, Int)
seek o@(ZOrder _ meta) keep = do
  size <- readPrimArray meta sizeSlot
  used <- readPrimArray meta usedSlot
  let holdsAt leaf i = entryAt leaf i >>= uncurry keep
  first <- leafAt o 0
  ok0 <- if size == 0 then return False else holdsAt first 0
  if not ok0 then return (0, 0) else do
    -- The last leaf whose first entry satisfies it.
    let leaves lo hi
          | lo >= hi = return lo
          | otherwise = do
              let mid = (lo + hi + 1) `quot` 2
              leaf <- leafAt o mid
              ok <- holdsAt leaf 0
              if ok then leaves mid hi else leaves lo (mid - 1)
    j <- leaves 0 (used - 1)
    leaf <- leafAt o j
    n <- leafCount o j
    -- The first place in it that does not.
    let places lo hi
          | lo >= hi = return lo
          | otherwise = do
              let mid = (lo + hi) `quot` 2
              ok <- holdsAt leaf mid
              if ok then places (mid + 1) hi else places lo mid
    p <- places 1 n
    return (j, p)

-- | Items made of the entries past the first run that satisfies @skipping@
-- (as 'orderCountWhile' counts it), then @offset@ more, while they satisfy
-- @keep@, at most @limit@ (none if negative), in walk order: backwards
-- from the last entry if @back@, and then it is the last entries that
-- @skipping@ must hold of. No rank is counted: the walk starts where the
-- search ends.
orderWalkPast :: ZOrder -> Bool -> (Word64 -> Word64 -> IO Bool) -> Int -> Int
              -> (Word64 -> Word64 -> IO x) -> (x -> Bool) -> IO [x]
orderWalkPast o@(ZOrder _ meta) back skipping offset limit item keep = do
  used <- readPrimArray meta usedSlot
  -- Forwards, the first entry that fails @skipping@; backwards, the
  -- last one that fails it, just before the first of the final run.
  (j0, p0) <- seek o (if back then \w a -> not <$> skipping w a else skipping)
  start <- if back then before j0 p0 else after used j0 p0
  case start of
    Nothing -> return []
    Just (j, p) -> moveBy used j p offset >>= maybe (return []) (\(j', p') -> walkFrom o back used j' p' limit item keep)
  where
    before j p
      | p > 0 = return (Just (j, p - 1))
      | j > 0 = leafCount o (j - 1) >>= \c -> return (Just (j - 1, c - 1))
      | otherwise = return Nothing
    after used j p = do
      n <- leafCount o j
      return $ if p < n then Just (j, p) else if j + 1 < used then Just (j + 1, 0) else Nothing
    moveBy used j p k
      | k <= 0 = return (Just (j, p))
      | back = if p - k >= 0 then return (Just (j, p - k))
               else if j > 0 then leafCount o (j - 1) >>= \c -> moveBy used (j - 1) (c - 1) (k - p - 1)
               else return Nothing
      | otherwise = do
          n <- leafCount o j
          if p + k < n then return (Just (j, p + k))
          else if j + 1 < used then moveBy used (j + 1) 0 (k - (n - p))
          else return Nothing
