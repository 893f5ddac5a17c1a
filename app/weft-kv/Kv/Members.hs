{-# LANGUAGE BangPatterns #-}
-- | A hash's fields and values, or a set's members, as weft-kv keeps
-- them: a packed map while few, a mutable table of records changed in
-- place once many (Note [Members in tables]). The test suite checks it
-- against "Data.Map".
module Kv.Members
  ( Members
  , emptyMembers
  , membersFromList
  , membersSize
  , membersLookup
  , membersHas
  , membersPut
  , membersAdd
  , membersRemove
  , membersFold
  , membersAscList
  , membersRandom
  , membersPacked
  , smallMembers
  , membersFlat
  , membersInRecord
  , membersOwn
  ) where

import Control.Monad (foldM, when)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.List (sortOn)
import Data.Maybe (isJust)
import Data.Word (Word64, Word8)
import Foreign.Marshal.Utils (moveBytes)
import Foreign.Ptr (Ptr)

import Kv.Flat
import Kv.Key (Key, bytesHash, keyBytes, storedKey)
import Kv.Packed
import Kv.Record (isRecord, recordFits, recordKeyBytes, recordNewBytes, recordOverwriteBytes,
                  recordValueBytes, recordable, recordedItems)
import Kv.Table

-- Note [Members in tables]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A hash or set that grows with the workload (HSET, SADD of new members
-- onto one key) was a persistent map: every write built a new leaf and
-- path, which lived past the next minor collection because the store
-- held the new map, so the collector copied about as much as the
-- commands allocated. So past 'smallMembers' members, a hash's fields
-- and a set's members (with empty values) are a key table as a color's
-- keys are ("Kv.Table"): each member with a value below
-- 'Kv.Str.sharedBulkBytes' a record off the heap (Note [Strings off the
-- heap] in "Kv.Record"), a larger one an entry on the heap. A write
-- changes the table in place; a member read out is a copy.
--
-- Up to 'smallMembers' they stay a packed map (Note [Packed maps] in
-- "Kv.Packed"), a leaf or a few, as redis keeps a small hash or set in a
-- listpack: a table's arrays, cells and weak pointer cost several times
-- a small map's bytes, and a store of a million small hashes would carry
-- them all. A write to a small one makes a new map; the write that takes
-- it past 'smallMembers' moves its members into a table, and a table
-- stays a table however few members it keeps, as redis's does.
--
-- A table is mutable, so only the key's color touches it, and only in
-- IO: the operations of this module take the members and give back what
-- the key then holds (the same table, or a new map), and the commands on
-- hashes and sets answer 'Kv.Store.InPlace' (Note [Values changed in
-- place] in "Kv.Store"); whatever a reply carries was copied out before
-- the operation ends. A key holds its own table; a value carried to
-- another key (RENAME, COPY) is rebuilt there from its copy. A table's
-- records are freed as its members are replaced or removed, and the
-- rest when the collector finds the table unreachable (Note [Tables the
-- collector frees] in "Kv.Table").

-- Note [Members read in their record]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A small hash or set under a key without an expiry is its packed map's
-- flat copy in the key's record (Note [Small values in records] in
-- "Kv.Store"). An operation on it is given that copy where it lies
-- ('InRecord'), not a map built from it: a read (HGET, SISMEMBER, the
-- size) searches it in place ("Kv.Flat"), a value given a new one of the
-- same length (HSET of a field that is there) is written over in place,
-- and a member added that is there already (SADD, HSETNX) or removed that
-- is not changes nothing; only another write builds the map ('membersOwn')
-- and goes on there. What the operation leaves is then written back as
-- any value is: the copy itself is the record's value already, of its
-- kind and length, so that write is none.
--
-- The view points into the record, which the operation's update may free
-- or replace, so it must not outlive the operation: every read copies
-- out what it answers (as from a table), and a value that moves out of
-- its record (a key given an expiry goes to an entry on the heap) is
-- made its own map first ('membersOwn', in "Kv.Store"'s 'putEntry').

-- | The most members a hash or set keeps as a packed map.
smallMembers :: Int
smallMembers = 128

-- | A member whose value is too large for a record, with its key
-- (Note [Keys in entries] in "Kv.Key").
data Big = Big {-# UNPACK #-} !Key !ByteString

instance Keyed Big where
  entryKey (Big k _) = k

-- | A hash's fields and values, or a set's members: a packed map while
-- few, a table once many.
data Members
  = Small !Packed
  | Large !(Table Big)
  | InRecord !(Ptr Word8) !Int
    -- ^ A flat copy, of this length, in the key's record, valid while
    -- the operation given it runs (Note [Members read in their record]).

-- | No members (a key that holds none does not exist: this is where a
-- new hash or set starts).
emptyMembers :: Members
emptyMembers = Small packedEmpty

-- | A new empty table.
newLarge :: IO (Table Big)
newLarge = do
  t <- newTable
  tableFreeOnDrop t
  return t

-- | Members with the given values (later ones replace earlier ones of
-- the same member).
membersFromList :: [(ByteString, ByteString)] -> IO Members
membersFromList = foldM (\m (k, v) -> fst <$> membersPut m k v) emptyMembers

membersSize :: Members -> IO Int
membersSize (Small p) = return (packedSize p)
membersSize (Large t) = tableSize t
membersSize (InRecord p _) = flatItems p
{-# INLINE membersSize #-}

-- | The slot of a member in a table, or -1.
memberSlot :: Table Big -> ByteString -> IO Int
memberSlot t k = tableFind t (bytesHash k) k
{-# INLINE memberSlot #-}

-- | A member's value (a copy), if it is there.
membersLookup :: Members -> ByteString -> IO (Maybe ByteString)
membersLookup (Small p) k = return (packedLookup k p)
membersLookup (Large t) k = do
  i <- memberSlot t k
  if i < 0 then return Nothing else Just <$> valueAt t i
membersLookup (InRecord p _) k = do
  i <- flatSearch p k
  if i < 0 then return Nothing else Just <$> flatValue p i

-- | The value in a slot, a copy.
valueAt :: Table Big -> Int -> IO ByteString
valueAt t i = do
  r <- tableRecord t i
  if isRecord r then recordValueBytes r else (\(Big _ v) -> v) <$> tableValue t i

membersHas :: Members -> ByteString -> IO Bool
membersHas (Small p) k = return (isJust (packedFind k p))
membersHas (Large t) k = (>= 0) <$> memberSlot t k
membersHas (InRecord p _) k = (>= 0) <$> flatSearch p k

-- | Give a member this value (both copied in): what the key holds now,
-- and whether the member is new.
membersPut :: Members -> ByteString -> ByteString -> IO (Members, Bool)
membersPut (Small p) k v
  | n' > smallMembers = do
      t <- newLarge
      mapM_ (\(k', v') -> tablePut t k' v') (packedToAscList p')
      return (Large t, True)
  | otherwise = let !m = Small p' in return (m, n' > packedSize p)
  where
    !p' = packedInsert k v p
    !n' = packedSize p'
membersPut m@(Large t) k v = do
  !new <- tablePut t k v
  return (m, new)
membersPut m@(InRecord p _) k v = do
  i <- flatSearch p k
  written <- if i >= 0 then flatOverwrite p i v else return False
  if written then return (m, False) else membersOwn m >>= \o -> membersPut o k v
{-# INLINE membersPut #-}

-- | Give a member of a table this value: whether it is new.
tablePut :: Table Big -> ByteString -> ByteString -> IO Bool
tablePut t k v = memberSlot t k >>= putAt t k v

-- | Give a member of a table, found in slot i (-1: not there), this
-- value: whether it is new.
putAt :: Table Big -> ByteString -> ByteString -> Int -> IO Bool
putAt t k v i = do
  let small = recordable k (B.length v)
  if i < 0
    then do
      if small then recordNewBytes k 0 v >>= tableInsertRecord t (bytesHash k)
               else storedKey k >>= \sk -> tableInsert t (bytesHash k) (Big sk (B.copy v))
      return True
    else do
      r <- tableRecord t i
      fits <- if isRecord r && small then recordFits r 0 (B.length v) else return False
      if fits then recordOverwriteBytes r v
      else if small then recordNewBytes k 0 v >>= tableSetRecord t i
      else do
        sk <- if isRecord r then storedKey k else (\(Big sk _) -> sk) <$> tableValue t i
        tableSet t i (Big sk (B.copy v))
      return False

-- | Add a member with this value if it is not there: what the key holds
-- now, and whether the member was added.
membersAdd :: Members -> ByteString -> ByteString -> IO (Members, Bool)
membersAdd m@(Small p) k v
  | Just _ <- packedFind k p = return (m, False)
  | otherwise = membersPut m k v
membersAdd m@(Large t) k v = do
  i <- memberSlot t k
  if i >= 0 then return (m, False) else do
    _ <- putAt t k v i
    return (m, True)
membersAdd m@(InRecord p _) k v = do
  i <- flatSearch p k
  if i >= 0 then return (m, False) else membersOwn m >>= \o -> membersPut o k v

-- | Remove a member: what the key holds now, and whether the member was
-- there.
membersRemove :: Members -> ByteString -> IO (Members, Bool)
membersRemove m@(Small p) k
  | packedSize p' < packedSize p = let !m' = Small p' in return (m', True)
  | otherwise = return (m, False)
  where !p' = packedDelete k p
membersRemove m@(Large t) k = do
  i <- memberSlot t k
  if i < 0 then return (m, False) else (m, True) <$ tableDelete t i
membersRemove m@(InRecord p _) k = do
  i <- flatSearch p k
  if i < 0 then return (m, False) else membersOwn m >>= \o -> membersRemove o k
{-# INLINE membersRemove #-}

-- | A strict left fold over the members and their values (copies), in
-- no particular order.
membersFold :: (b -> ByteString -> ByteString -> b) -> b -> Members -> IO b
membersFold f z0 (Small p) = return (foldl (\z (k, v) -> f z k v) z0 (packedToAscList p))
membersFold f z0 (Large t) = tableSlots step z0 t
  where
    step z i = do
      r <- tableRecord t i
      if isRecord r
        then f z <$> recordKeyBytes r <*> recordValueBytes r
        else (\(Big k v) -> f z (keyBytes k) v) <$> tableValue t i
membersFold f z0 m@(InRecord {}) = membersOwn m >>= membersFold f z0

-- | The members and their values (copies), in byte order of the
-- members.
membersAscList :: Members -> IO [(ByteString, ByteString)]
membersAscList (Small p) = return (packedToAscList p)
membersAscList m@(InRecord {}) = membersOwn m >>= membersAscList
membersAscList m = sortOn fst <$> membersFold (\acc k v -> (k, v) : acc) [] m

-- | The members as a packed map: the map itself while few, else a copy
-- (a walk over the table), for picks by rank.
membersPacked :: Members -> IO Packed
membersPacked (Small p) = return p
membersPacked m@(InRecord {}) = membersOwn m >>= membersPacked
membersPacked m = packedFromAscList <$> membersAscList m

-- | A member and its value (copies) picked at random, if there are any:
-- uniform while few; once many as 'tableRandom' picks, near uniform (as
-- redis's own pick).
membersRandom :: Members -> Word64 -> IO (Maybe (ByteString, ByteString))
membersRandom (Small p) r
  | packedSize p == 0 = return Nothing
  | otherwise = return (Just (packedAt (fromIntegral (r `mod` fromIntegral (packedSize p))) p))
membersRandom m@(Large t) seed = do
  picked <- tableRandom t seed (const True)
  case picked of
    Nothing -> return Nothing
    Just k -> fmap ((,) k) <$> membersLookup m k
membersRandom m@(InRecord {}) r = membersOwn m >>= (`membersRandom` r)

-- | A few members as a flat copy for a record of their key (Note [Small
-- values in records] in "Kv.Store", Note [Packed maps flat] in
-- "Kv.Packed"): its length and its writer, for a packed map of at most
-- 'recordedItems' members in one leaf, or the copy in a record itself
-- (which a write over that record leaves as it is); else 'Nothing'.
membersFlat :: Members -> Maybe (Int, Ptr Word8 -> IO ())
membersFlat (Small p)
  | packedSize p <= recordedItems, Just n <- packedFlatSize p = Just (n, packedWriteFlat p)
membersFlat (InRecord p n) = Just (n, \d -> when (d /= p) (moveBytes d p n))
membersFlat _ = Nothing

-- | The members whose flat copy of the given length is at the address,
-- in a record, seen there (Note [Members read in their record]).
membersInRecord :: Ptr Word8 -> Int -> Members
membersInRecord = InRecord

-- | Members of their own: a copy in a record built into a map, others
-- as they are.
membersOwn :: Members -> IO Members
membersOwn (InRecord p n) = Small <$> packedReadFlat p n
membersOwn m = return m
