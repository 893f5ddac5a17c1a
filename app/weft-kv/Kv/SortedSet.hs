{-# LANGUAGE BangPatterns #-}
-- | A sorted set as a key holds it: packed while small, a table and an
-- order changed in place once large (Note [Sorted sets in tables]). The
-- test suite checks it against "Data.Set".
module Kv.SortedSet
  ( SortedSet
  , emptySorted
  , sortedFromAscList
  , sortedSize
  , sortedScore
  , sortedMove
  , sortedRemove
  , sortedRank
  , sortedAt
  , sortedWalk
  , sortedCountWhile
  , sortedWalkPast
  , sortedAsc
  , sortedPacked
  , sortedLeafCounts
  , sortedFlat
  , sortedInRecord
  , sortedOwn
  ) where

import Control.Monad (when)
import Data.ByteString (ByteString)
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64, Word8)
import Foreign.Marshal.Utils (moveBytes)
import Foreign.Ptr (Ptr, castPtr, plusPtr, ptrToWordPtr, wordPtrToPtr)
import Foreign.Storable (peek, poke)

import Kv.Flat (flatItems, flatSearch, flatValueAt)
import Kv.Key (Key, bytesHash)
import Kv.Members (smallMembers)
import Kv.Record (Record, addrRecord, recordAddr, recordedItems, recordKeyBytes, recordKeyCompare, recordKeyWith, recordNewWith,
                  recordOverwriteWith, recordReadWith)
import Kv.Sorted
import Kv.Table
import Kv.ZOrder

-- Note [Sorted sets in tables]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A sorted set that grows with the workload (ZADD of new members onto
-- one key) as two persistent packed maps built a new leaf and path of
-- each at every write, and the collector copied them as the store kept
-- them. So past 'smallMembers' members (redis's
-- zset-max-listpack-entries), a sorted set is, as a large hash's fields
-- are (Note [Members in tables] in "Kv.Members"), a table of records
-- off the heap, one per member, the member as the record's key and its
-- score's order word ('scoreWord') as its 8-byte value; and beside it
-- the members in (score, member) order, each entry the score's word and
-- the address of the member's record, in leaves the collector neither
-- copies nor scans (Note [Sorted-set order in leaves] in "Kv.ZOrder").
-- An entry compares by its word, then by the member's bytes, read where
-- the record keeps them.
--
-- A member's record stays where it is while the member is in the set: a
-- new score is written over the old (same length), after the member's
-- entry has left the order and before it comes back at its new place.
-- A removal takes the entry out of the order before the table frees the
-- record; the table's finalizer frees the rest when the collector finds
-- the set unreachable (Note [Tables the collector frees] in
-- "Kv.Table"), and nothing else holds the order. As with a large hash,
-- only the key's color touches a large sorted set, in IO, and whatever
-- a read gives back is a copy; a search's tests alone see members where
-- their records keep them ('entryView'), and keep nothing of them.
--
-- Up to 'smallMembers' members the set stays packed (Note [Sorted sets
-- packed] in "Kv.Sorted"); the write that takes it past moves it into a
-- table, and it stays one however few members it keeps. A few members
-- in a record are seen there, as a small hash's are (Note [Members read
-- in their record] in "Kv.Members"): a member's score is read in place,
-- so a ZADD that changes no score builds nothing; any other operation
-- builds the packed set from the record first ('sortedOwn').

-- | Never made: a large sorted set's table holds records only.
newtype RecordsOnly = RecordsOnly Key

instance Keyed RecordsOnly where
  entryKey (RecordsOnly k) = k

-- | A sorted set (Note [Sorted sets in tables]).
data SortedSet
  = SmallZ !ZSet
  | LargeZ !(Table RecordsOnly) !ZOrder
  | ZInRecord !(Ptr Word8) !Int
    -- ^ A flat copy ('zsetFlat'), of this length, in the key's record,
    -- valid while the operation given it runs.

emptySorted :: SortedSet
emptySorted = SmallZ emptyZSet

-- | The sorted set of these scores and members, in (score, member)
-- order with members distinct (a -0 score is kept as 0).
sortedFromAscList :: [(Double, ByteString)] -> IO SortedSet
sortedFromAscList ps
  | length ps <= smallMembers = return (SmallZ (zsetFromAscList ps))
  | otherwise = do
      (t, o) <- newOrdered
      mapM_ (\(s, m) -> moveLarge t o m (if s == 0 then 0 else s) Nothing) ps
      return (LargeZ t o)

newOrdered :: IO (Table RecordsOnly, ZOrder)
newOrdered = do
  t <- newTable
  tableFreeOnDrop t
  o <- newOrder
  return (t, o)

sortedSize :: SortedSet -> IO Int
sortedSize (SmallZ z) = return (zsetSize z)
sortedSize (LargeZ _ o) = orderSize o
sortedSize (ZInRecord p _) = flatItems (scoresIn p)

-- | Where the scores' map of a flat copy starts ('zsetFlat'): after the
-- word that gives its length.
scoresIn :: Ptr Word8 -> Ptr Word8
scoresIn p = p `plusPtr` 8

-- | The probe for the entry of a score's word and a member.
probeFor :: Word64 -> ByteString -> Probe
probeFor w m w' a
  | w /= w' = return (compare w w')
  | otherwise = recordKeyCompare m (addrRecord (wordPtrToPtr (fromIntegral a)))

addrWord :: Ptr Word8 -> Word64
addrWord = fromIntegral . ptrToWordPtr

-- | The score word of a member's record.
recordScore :: Record -> IO Word64
recordScore r = recordReadWith r (\p _ -> peek (castPtr p))

-- | The record of a member, if it is in the table.
memberRecord :: Table RecordsOnly -> ByteString -> IO (Maybe Record)
memberRecord t m = do
  i <- tableFind t (bytesHash m) m
  if i < 0 then return Nothing else Just <$> tableRecord t i

-- | A member's score.
sortedScore :: SortedSet -> ByteString -> IO (Maybe Double)
sortedScore (SmallZ z) m = return (zsetScore m z)
sortedScore (LargeZ t _) m = memberRecord t m >>= traverse (fmap wordScore . recordScore)
sortedScore (ZInRecord p _) m = do
  i <- flatSearch (scoresIn p) m
  if i < 0 then return Nothing else Just <$> (flatValueAt (scoresIn p) i >>= addrScore . fst)

-- | Give a member a score, given its old one ('Nothing': it is not a
-- member): what the key holds then. A -0 score is kept as 0. The
-- member's bytes are copied in.
sortedMove :: SortedSet -> ByteString -> Double -> Maybe Double -> IO SortedSet
sortedMove (SmallZ z) m s0 old
  | zsetSize z' > smallMembers = do
      (t, o) <- newOrdered
      mapM_ (\(s, x) -> moveLarge t o x s Nothing) (zsetAsc z')
      return (LargeZ t o)
  | otherwise = return (SmallZ z')
  where !z' = zsetMove m s0 old z
sortedMove z@(LargeZ t o) m s0 old = z <$ moveLarge t o m (if s0 == 0 then 0 else s0) old
sortedMove z m s0 old = sortedOwn z >>= \o -> sortedMove o m s0 old

moveLarge :: Table RecordsOnly -> ZOrder -> ByteString -> Double -> Maybe Double -> IO ()
moveLarge t o m s old = do
  let !w = scoreWord s
  r <- case old of
    Just before -> do
      i <- tableFind t (bytesHash m) m
      r <- tableRecord t i
      _ <- orderDelete o (probeFor (scoreWord before) m)
      r <$ recordOverwriteWith r (\p -> poke (castPtr p) w)
    Nothing -> do
      r <- recordNewWith m 0 8 (\p -> poke (castPtr p) w)
      r <$ tableInsertRecord t (bytesHash m) r
  orderInsert o (probeFor w m) w (addrWord (recordAddr r))

-- | Remove a member: what the key holds then, and whether it was there.
sortedRemove :: SortedSet -> ByteString -> IO (SortedSet, Bool)
sortedRemove z@(SmallZ p) m = case zsetScore m p of
  Just _ -> let !z' = SmallZ (zsetRemove m p) in return (z', True)
  Nothing -> return (z, False)
sortedRemove z@(LargeZ t o) m = do
  i <- tableFind t (bytesHash m) m
  if i < 0 then return (z, False) else do
    w <- tableRecord t i >>= recordScore
    _ <- orderDelete o (probeFor w m)
    tableDelete t i
    return (z, True)
sortedRemove z m = sortedScore z m >>= \had -> case had of
  Nothing -> return (z, False)
  Just _ -> sortedOwn z >>= \o -> sortedRemove o m

-- | A member's rank, lowest score first.
sortedRank :: SortedSet -> ByteString -> IO (Maybe Int)
sortedRank (SmallZ z) m = return (zsetRank m z)
sortedRank (LargeZ t o) m = memberRecord t m >>= \found -> case found of
  Nothing -> return Nothing
  Just r -> recordScore r >>= \w -> orderRank o (probeFor w m)
sortedRank z m = sortedOwn z >>= \o -> sortedRank o m

-- | The score and member (a copy) of an entry.
entryItem :: Word64 -> Word64 -> IO (Double, ByteString)
entryItem w a = (,) (wordScore w) <$> recordKeyBytes (addrRecord (wordPtrToPtr (fromIntegral a)))

-- | The score and member of an entry, the member a view of its record's
-- bytes, not a copy: for a test that keeps nothing of it, run at once.
entryView :: Word64 -> Word64 -> IO (Double, ByteString)
entryView w a = recordKeyWith (addrRecord (wordPtrToPtr (fromIntegral a))) $ \p n ->
  (,) (wordScore w) <$> BU.unsafePackCStringLen (castPtr p, n)

-- | The score and member at a rank (below the size), counted from the
-- highest if @back@.
sortedAt :: SortedSet -> Bool -> Int -> IO (Double, ByteString)
sortedAt (SmallZ z) back i = return (zsetAt (if back then zsetSize z - 1 - i else i) z)
sortedAt (LargeZ _ o) back i = do
  n <- orderSize o
  orderAt o (if back then n - 1 - i else i) >>= uncurry entryItem
sortedAt z back i = sortedOwn z >>= \o -> sortedAt o back i

-- | Scores and members (copies) from a rank on (counted from the highest,
-- highest first, if @back@), while they satisfy @keep@, at most @limit@
-- of them (no limit if negative).
sortedWalk :: SortedSet -> Bool -> Int -> Int -> ((Double, ByteString) -> Bool) -> IO [(Double, ByteString)]
sortedWalk (SmallZ z) back start limit keep
  | start < 0 = return []
  | otherwise = return (limited (takeWhile keep ((if back then zsetDescFrom else zsetAscFrom) start z)))
  where limited = if limit < 0 then id else take limit
sortedWalk (LargeZ _ o) back start limit keep = orderWalk o back start limit entryItem keep
sortedWalk z back start limit keep = sortedOwn z >>= \o -> sortedWalk o back start limit keep

-- | How many of the first members (the highest if @back@) satisfy
-- @keep@. On a large set @keep@ must hold of a first run of the
-- members and of none after it, as a bound does, and the count is found
-- by binary search; a small set is walked, so that a test that holds
-- again later still counts only the first run.
sortedCountWhile :: SortedSet -> Bool -> ((Double, ByteString) -> Bool) -> IO Int
sortedCountWhile (SmallZ z) back keep = return (length (takeWhile keep ((if back then zsetDesc else zsetAsc) z)))
sortedCountWhile (LargeZ _ o) back keep
  | back = do
      n <- orderSize o
      (n -) <$> orderCountWhile o (\w a -> not . keep <$> entryView w a)
  | otherwise = orderCountWhile o (\w a -> keep <$> entryView w a)
sortedCountWhile z back keep = sortedOwn z >>= \o -> sortedCountWhile o back keep

-- | Scores and members (copies) past the first members (the highest if
-- @back@) that satisfy @skipping@ and @offset@ more, while they satisfy
-- @keep@, at most @limit@ of them (no limit if negative). On a large set
-- @skipping@ must hold of a first run and of none after it, as for
-- 'sortedCountWhile'; the walk starts where the search for the run's
-- end stops, without counting ranks.
sortedWalkPast :: SortedSet -> Bool -> ((Double, ByteString) -> Bool) -> Int -> Int -> ((Double, ByteString) -> Bool)
               -> IO [(Double, ByteString)]
sortedWalkPast (SmallZ z) back skipping offset limit keep =
  return (limited (takeWhile keep (drop offset (dropWhile skipping ((if back then zsetDesc else zsetAsc) z)))))
  where limited = if limit < 0 then id else take limit
sortedWalkPast (LargeZ _ o) back skipping offset limit keep =
  orderWalkPast o back (\w a -> skipping <$> entryView w a) offset limit entryItem keep
sortedWalkPast z back skipping offset limit keep = sortedOwn z >>= \o -> sortedWalkPast o back skipping offset limit keep

-- | Scores and members (copies), lowest first.
sortedAsc :: SortedSet -> IO [(Double, ByteString)]
sortedAsc z = sortedWalk z False 0 (-1) (const True)

-- | The members as the packed form (the set itself while small, else a
-- copy), for picks by rank.
sortedPacked :: SortedSet -> IO ZSet
sortedPacked (SmallZ z) = return z
sortedPacked z@(LargeZ {}) = zsetFromAscList <$> sortedAsc z
sortedPacked z = sortedOwn z >>= sortedPacked

-- | The entries of each leaf of a large set's order, none for a small
-- set (for the tests).
sortedLeafCounts :: SortedSet -> IO [Int]
sortedLeafCounts (LargeZ _ o) = orderLeafCounts o
sortedLeafCounts _ = return []

-- | A few members as a flat copy for a record of their key (Note [Small
-- values in records] in "Kv.Store"): its length and its writer, for a
-- packed set of at most 'recordedItems' members whose maps are one leaf
-- each, or the copy in a record itself (which a write over that record
-- leaves as it is); else 'Nothing'.
sortedFlat :: SortedSet -> Maybe (Int, Ptr Word8 -> IO ())
sortedFlat (SmallZ z) | zsetSize z <= recordedItems = zsetFlat z
sortedFlat (ZInRecord p n) = Just (n, \d -> when (d /= p) (moveBytes d p n))
sortedFlat _ = Nothing

-- | The sorted set whose flat copy of the given length is at the
-- address, in a record, seen there (Note [Sorted sets in tables]).
sortedInRecord :: Ptr Word8 -> Int -> SortedSet
sortedInRecord = ZInRecord

-- | A sorted set of its own: a copy in a record built into the packed
-- set, others as they are.
sortedOwn :: SortedSet -> IO SortedSet
sortedOwn (ZInRecord p n) = SmallZ <$> zsetReadFlat p n
sortedOwn z = return z
