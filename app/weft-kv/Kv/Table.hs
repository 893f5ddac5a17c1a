{-# LANGUAGE BangPatterns, MagicHash, ScopedTypeVariables, UnboxedTuples #-}
-- | The keys of one color: a mutable hash table from key strings to
-- entries on the heap or records off it, owned by the color's events
-- (Note [A color's table], Note [Records in slots]). The
-- test suite checks it against "Data.Map", hashes that collide included.
module Kv.Table
  ( Table
  , Keyed (..)
  , newTable
  , tableSize
  , tableFind
  , tableValue
  , tableRecord
  , tableSet
  , tableSetRecord
  , tableInsert
  , tableInsertRecord
  , tableDelete
  , tableSlots
  , tableFold
  , tableRandom
  , tableClear
  , tableFreeOnDrop
  , tableCapacity
  , tablePrefetch
  , tableHashSlot
  , tablePrefetchCell
  , tablePrefetchEntry
  ) where

import Control.Monad (when)
import Control.Monad.Primitive (RealWorld)
import Data.Bits (unsafeShiftR, (.&.))
import Data.ByteString (ByteString)
import Data.IORef
import Data.Word (Word64, Word8)
import Foreign.Ptr (Ptr, nullPtr)
import Data.Primitive.PrimArray
import GHC.Exts (Int (..), MutVar#, MutableArrayArray#, (+#), (*#), (>=#), isTrue#, newArrayArray#, newMutVar#,
                 prefetchMutableByteArray0#, prefetchValue0#, readMutVar#, readMutableArrayArrayArray#, sameMutVar#,
                 unsafeCoerce#, writeMutVar#, writeMutableArrayArrayArray#)
import GHC.IO (IO (..))

import Kv.Key (Key, keyBytes, keyIs)
import Kv.Record (Record, addrRecord, isRecord, prefetchRecord, recordAddr, recordFree, recordKeyBytes, recordKeyIs)

-- Note [A color's table]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- Every command on a key looks it up in its color's keys, and a store of
-- a million keys does so with the keys far out of the caches: what a
-- lookup costs is its cache misses. So a color's keys are an open-
-- addressing hash table with linear probing, as redis's own dictionary
-- is a table: an unboxed array of the keys' hashes, probed from the
-- slot the hash picks, then, on a full hash match, the entry in the same
-- slot's cell, which carries its key (Note [Slots in cells], Note [Keys
-- in entries] in "Kv.Key"), or the slot's record (Note [Records in
-- slots]). A lookup of an entry touches four lines wherever the key
-- is (hash, cell pointer, cell, entry; a key over 16 bytes adds its
-- bytes), one of a record three (hash, address, record); a persistent
-- trie touched two per level and rebuilt its path on
-- every write, which the collector then copied.
--
-- A key's bytes past the words its entry keeps (Note [Keys in entries]
-- in "Kv.Key") are an unpinned byte array: the collector moves it like
-- any small object. (Pinned copies of short keys are kept in pinned
-- blocks that stay allocated while any key in them lives, which after
-- deletes spread over the store holds many times the live keys.)
--
-- The table is mutable, so only events of its color may touch it (Note
-- [One store per color] in "Kv.Store"). The one exception is
-- 'tableSize', a single read of a counter, which a store-wide command
-- reads from another color to skip empty tables: a count read while
-- another core writes it is that core's count just before or just after.
--
-- The hash of slot i is 0 if the slot is empty, 1 if its key was deleted
-- (a tombstone: probes go on past it), else the key's hash (0 and 1 map
-- to 2 and 3: 'storedHash'). The slot a hash starts at is taken from its
-- bits above the low 16, because every key of one color shares its low
-- bits (they are the color). The load, counting tombstones, stays at
-- most three quarters, so a probe always ends at an empty slot. An index
-- returned by 'tableFind' stays valid until the next insert or delete.
--
-- Note [Looking ahead]
-- ~~~~~~~~~~~~~~~~~~~~
-- A read's commands are grouped by color on the connection's color, and
-- run later on their keys' colors. The grouping knows each key's hash,
-- so it asks for the lines of hashes, cells and record addresses the
-- key's lookup will start at ('tablePrefetch'); by the time the key's color runs the
-- command, the first two of the lookup's cache misses have been paid
-- while the connection's color went on decoding and grouping. (The cell's
-- contents cannot be asked for: where they are is in the line of cells.)
--
-- The rest of a lookup is a chain: the cell, then the entry it holds,
-- then (for a string's reply) the string's bytes, each known only once
-- the one before it has come. A color's batch of commands (Note [Batches
-- per color] in "Kv.Batch") walks those chains for all its keys at once,
-- one link per pass, before it runs them ('lookAhead' in "Kv.Store"): the
-- slot whose hash matches ('tableHashSlot'), then its cell or record
-- ('tablePrefetchCell'), then its entry ('tablePrefetchEntry'). A batch
-- of 16 lookups then waits for three rounds of loads rather than 48
-- loads one after another. Each pass only asks for lines, and a slot
-- whose hash matches another key's merely loads a useless line.
--
-- Note [Slots in cells]
-- ~~~~~~~~~~~~~~~~~~~~~
-- Every write changes a key's slot: most replace the entry of a key that
-- exists (SET over a keyspace, INCR, LPUSH), some add or remove a key.
-- Written into a big array of the old generation, each write marks the
-- array's card of 128 slots, and the next minor collection looks at
-- every slot of every marked card: with a million keys and writes to a
-- different card each time, a large part of the store per collection
-- (scanning cards was a third of SET's CPU with random keys). So a slot
-- whose key holds an entry has a cell of its own (a 'MutVar#', Note
-- [Cells unboxed]), which holds the entry, and every write replaces a
-- cell's contents: the collector then looks at the cells written since
-- it last ran, one pointer each.
--
-- Every other slot (empty, or with a record: Note [Records in slots])
-- holds the table's one vacant cell, never written: a store of strings
-- in records makes no cells, where a cell made for every slot of every
-- table that doubled was most of what the collector copied. A slot gets
-- a cell of its own when an entry first goes in it ('placeCell'), which
-- writes the array (one card, for the next minor collection); it keeps
-- that cell, holding 'noEntry', when its entry goes, until the table is
-- rebuilt. A rebuilt table moves the cells of the keys with entries.
--
-- A cell holds the entry itself, and the entry carries its key ('Keyed'):
-- a write then makes one object for the table (the entry), not a pair of
-- key and entry around it, and a lookup follows one pointer fewer. The
-- cells of slots without an entry hold 'noEntry', which is never read:
-- the slot's hash says it is vacant, or its record that it has one,
-- before its cell is looked at.

-- Note [Records in slots]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- A slot's key and what it holds are either an entry on the heap, in the
-- slot's cell, or a record off the heap (Note [Strings off the heap] in
-- "Kv.Record"), whose address the slot keeps in an unboxed array: the
-- collector neither copies a record nor scans the array. A slot with a
-- record has the vacant cell or 'noEntry' in its own (Note [Slots in
-- cells]), and a slot with an entry a null address. The table owns its records: it frees a slot's record when the
-- slot gets another record or an entry ('tableSetRecord', 'tableSet'),
-- when the key goes ('tableDelete'), and when it is cleared
-- ('tableClear'). A lookup reads the address before the cell, and its
-- look ahead loads the record where it would load the entry.

-- | A color's keys and their entries.
newtype Table a = Table (IORef (Tab a))

data Tab a = Tab
  { tabMask   :: {-# UNPACK #-} !Int
  , tabHashes :: {-# UNPACK #-} !(MutablePrimArray RealWorld Int)
  , tabCells  :: {-# UNPACK #-} !(Cells a)
    -- ^ one cell per slot (Note [Slots in cells])
  , tabRecords :: {-# UNPACK #-} !(MutablePrimArray RealWorld (Ptr Word8))
    -- ^ the record of each slot whose key has one, else null (Note
    -- [Records in slots])
  , tabCounts :: {-# UNPACK #-} !(MutablePrimArray RealWorld Int)
    -- ^ 'liveCount' and 'usedCount'
  }

-- | An entry that carries its key (Note [Slots in cells]).
class Keyed a where
  entryKey :: a -> Key

-- | The keys in the table; the slots that are not empty (keys and
-- tombstones).
liveCount, usedCount :: Int
liveCount = 0
usedCount = 1

-- | The fewest slots a table has.
minCapacity :: Int
minCapacity = 8

-- | An empty table.
newTable :: IO (Table a)
newTable = newTab minCapacity >>= fmap Table . newIORef

-- | An empty table of the given capacity, every slot with the vacant
-- cell.
newTab :: Int -> IO (Tab a)
newTab cap = do
  hashes <- newPrimArray cap
  setPrimArray hashes 0 cap 0
  cells <- newCells cap
  records <- newPrimArray cap
  setPrimArray records 0 cap nullPtr
  counts <- newPrimArray 2
  setPrimArray counts 0 2 0
  return (Tab (cap - 1) hashes cells records counts)

-- | What the cell of a vacant slot holds (Note [Slots in cells]).
noEntry :: a
noEntry = errorWithoutStackTrace "weft-kv: a vacant slot of a key table was read"

-- | How many keys the table holds. The one function that may run on
-- another color (Note [A color's table]).
tableSize :: Table a -> IO Int
tableSize (Table ref) = readIORef ref >>= \t -> readPrimArray (tabCounts t) liveCount

-- | How many slots the table has (for tests).
tableCapacity :: Table a -> IO Int
tableCapacity (Table ref) = (+ 1) . tabMask <$> readIORef ref

-- | The hash as stored: 0 and 1 are taken by empty and deleted slots.
storedHash :: Int -> Int
storedHash h = if h == 0 || h == 1 then h + 2 else h
{-# INLINE storedHash #-}

-- | Is a slot with this stored hash empty or deleted? (Hashes may be
-- negative.)
vacant :: Int -> Bool
vacant x = x == 0 || x == 1
{-# INLINE vacant #-}

-- | The slot a hash starts its probe at.
homeSlot :: Int -> Int -> Int
homeSlot mask h = fromIntegral ((fromIntegral h :: Word) `unsafeShiftR` 16) .&. mask
{-# INLINE homeSlot #-}

-- | Start loading the lines of the table's hashes, cells and records
-- where a key's probe starts, for a lookup soon after (Note [Looking
-- ahead], Note [Records in slots]). A
-- hint only: it reads the table as another color may be changing it,
-- and writes nothing.
tablePrefetch :: Table a -> Int -> IO ()
tablePrefetch (Table ref) h0 = do
  t <- readIORef ref
  let !i = homeSlot (tabMask t) (storedHash h0)
  case tabHashes t of
    MutablePrimArray m -> case i * 8 of
      I# off -> IO (\s -> (# prefetchMutableByteArray0# m off s, () #))
  case tabRecords t of
    MutablePrimArray m -> case i * 8 of
      I# off -> IO (\s -> (# prefetchMutableByteArray0# m off s, () #))
  prefetchCell (tabCells t) i

-- | The first slot whose hash is a key's hash, or -1: where 'tableFind'
-- will most likely find the key (Note [Looking ahead]). Only on the
-- table's color.
tableHashSlot :: Table a -> Int -> IO Int
tableHashSlot t h0 = probe t h0 (\_ _ -> return True)

-- | The first slot, probing from a hash's home slot, whose hash is the
-- given one and which passes the check, or -1 at an empty slot.
probe :: Table a -> Int -> (Tab a -> Int -> IO Bool) -> IO Int
probe (Table ref) h0 check = do
  t <- readIORef ref
  let !h = storedHash h0
      !mask = tabMask t
      go :: Int -> IO Int
      go !i = do
        x <- readPrimArray (tabHashes t) i
        if x == 0 then return (-1)
        else if x == h then do
          found <- check t i
          if found then return i else go ((i + 1) .&. mask)
        else go ((i + 1) .&. mask)
  go (homeSlot mask h)
{-# INLINE probe #-}

-- | Start loading the cell of a slot, or its record (Note [Looking
-- ahead], Note [Records in slots]).
tablePrefetchCell :: Table a -> Int -> IO ()
tablePrefetchCell (Table ref) ix@(I# i) = do
  t <- readIORef ref
  r <- slotRecord t ix
  if isRecord r then prefetchRecord r else case tabCells t of
    -- The cell's contents are a word past its header, and a byte
    -- array's bytes two words past its own: so the cell's word is at
    -- offset -8 from where its bytes would be.
    Cells arr _ -> IO $ \s -> case readMutableArrayArrayArray# arr i s of
      (# s1, cell #) -> (# prefetchMutableByteArray0# (unsafeCoerce# cell) (-8#) s1, () #)

-- | Start loading the entry in a slot's cell (Note [Looking ahead]); a
-- slot with a record has had its record loaded by 'tablePrefetchCell'.
tablePrefetchEntry :: Table a -> Int -> IO ()
tablePrefetchEntry (Table ref) i = do
  t <- readIORef ref
  r <- slotRecord t i
  if isRecord r then return () else do
    e <- readCell (tabCells t) i
    IO (\s -> (# prefetchValue0# e s, () #))

-- | The slot of a key, given its hash, or -1 if it is not in the table.
tableFind :: Keyed a => Table a -> Int -> ByteString -> IO Int
tableFind t h0 key = probe t h0 $ \tab i -> do
  r <- slotRecord tab i
  if isRecord r then recordKeyIs r key else do
    e <- readCell (tabCells tab) i
    return (keyIs (entryKey e) key)
{-# INLINABLE tableFind #-}

-- | The entry in a slot 'tableFind' returned, which must have no record
-- ('tableRecord').
tableValue :: Table a -> Int -> IO a
tableValue (Table ref) i = do
  t <- readIORef ref
  readCell (tabCells t) i
{-# INLINE tableValue #-}

-- | The record of a slot 'tableFind' returned, or 'noRecord' if its
-- entry is on the heap (Note [Records in slots]). Valid until the
-- slot's next write.
tableRecord :: Table a -> Int -> IO Record
tableRecord (Table ref) i = do
  t <- readIORef ref
  slotRecord t i
{-# INLINE tableRecord #-}

slotRecord :: Tab a -> Int -> IO Record
slotRecord t i = addrRecord <$> readPrimArray (tabRecords t) i
{-# INLINE slotRecord #-}

-- | Free a slot's record, if it has one; has it.
dropRecord :: Tab a -> Int -> IO Bool
dropRecord t i = do
  r <- slotRecord t i
  if not (isRecord r) then return False else do
    writePrimArray (tabRecords t) i nullPtr
    True <$ recordFree r
{-# INLINE dropRecord #-}

-- | Replace the entry or record in a slot 'tableFind' returned with an
-- entry, which must carry the slot's key (as 'storedKey' made it).
tableSet :: Table a -> Int -> a -> IO ()
tableSet (Table ref) i !v = do
  t <- readIORef ref
  had <- dropRecord t i
  if had then placeCell (tabCells t) i v else writeCell (tabCells t) i v
{-# INLINE tableSet #-}

-- | Replace the entry or record in a slot 'tableFind' returned with a
-- record of the slot's key; the table owns it from now on.
tableSetRecord :: Table a -> Int -> Record -> IO ()
tableSetRecord (Table ref) i r = do
  t <- readIORef ref
  had <- dropRecord t i
  when (not had) (writeCell (tabCells t) i noEntry)
  writePrimArray (tabRecords t) i (recordAddr r)

-- | Add a key that is not in the table (the caller has just looked for
-- it), given its hash, with its entry, which carries the key as
-- 'storedKey' made it.
tableInsert :: Table a -> Int -> a -> IO ()
tableInsert table h0 !v = do
  (t, i) <- insertSlot table h0
  placeCell (tabCells t) i v

-- | Add a key that is not in the table, given its hash, with its record;
-- the table owns it from now on.
tableInsertRecord :: Table a -> Int -> Record -> IO ()
tableInsertRecord table h0 r = do
  (t, i) <- insertSlot table h0
  writePrimArray (tabRecords t) i (recordAddr r)

-- | Take a slot for a new key, given its hash, growing the table if it
-- must; the table and the slot, whose cell and record the caller
-- writes.
insertSlot :: Table a -> Int -> IO (Tab a, Int)
insertSlot (Table ref) h0 = do
  t0 <- readIORef ref
  used <- readPrimArray (tabCounts t0) usedCount
  t <- if 4 * (used + 1) <= 3 * (tabMask t0 + 1) then return t0 else do
    live <- readPrimArray (tabCounts t0) liveCount
    -- Twice the slots if the keys fill half of them, else as many
    -- (only the tombstones go).
    let cap = tabMask t0 + 1
    t' <- rehash t0 (if 2 * (live + 1) > cap then 2 * cap else cap)
    t' <$ writeIORef ref t'
  let !h = storedHash h0
  i <- freeSlot t h
  old <- readPrimArray (tabHashes t) i
  writePrimArray (tabHashes t) i h
  bump t liveCount 1
  when (old == 0) (bump t usedCount 1)
  return (t, i)
{-# INLINE insertSlot #-}

-- | The first empty or deleted slot on a hash's probe.
freeSlot :: Tab a -> Int -> IO Int
freeSlot t h = go (homeSlot (tabMask t) h)
  where
    go :: Int -> IO Int
    go !i = do
      x <- readPrimArray (tabHashes t) i
      if vacant x then return i else go ((i + 1) .&. tabMask t)

-- | Remove the key in a slot 'tableFind' returned. The table shrinks
-- when its keys fill less than an eighth of it.
tableDelete :: Table a -> Int -> IO ()
tableDelete (Table ref) i = do
  t <- readIORef ref
  let mask = tabMask t
  next <- readPrimArray (tabHashes t) ((i + 1) .&. mask)
  -- Followed by an empty slot, no probe passes this one: it can be empty.
  if next == 0
    then writePrimArray (tabHashes t) i 0 >> bump t usedCount (-1)
    else writePrimArray (tabHashes t) i 1
  had <- dropRecord t i
  when (not had) (writeCell (tabCells t) i noEntry)
  bump t liveCount (-1)
  live <- readPrimArray (tabCounts t) liveCount
  let cap = mask + 1
  when (cap > minCapacity && 8 * live < cap) $
    rehash t (max minCapacity (cap `quot` 2)) >>= writeIORef ref

bump :: Tab a -> Int -> Int -> IO ()
bump t which d = readPrimArray (tabCounts t) which >>= writePrimArray (tabCounts t) which . (+ d)
{-# INLINE bump #-}

-- | The table's keys and entries in a new table of the given capacity,
-- without tombstones. The cells of the keys with entries move; the other
-- slots get the vacant cell.
rehash :: Tab a -> Int -> IO (Tab a)
rehash t cap = do
  t' <- newTab cap
  let move :: Int -> Int -> IO Int
      move !i !n
        | i > tabMask t = return n
        | otherwise = do
            h <- readPrimArray (tabHashes t) i
            if vacant h then move (i + 1) n else do
              j <- freeSlot t' h
              writePrimArray (tabHashes t') j h
              r <- slotRecord t i
              if isRecord r
                then writePrimArray (tabRecords t') j (recordAddr r)
                else moveCell (tabCells t) i (tabCells t') j
              move (i + 1) (n + 1)
  n <- move 0 0
  writePrimArray (tabCounts t') liveCount n
  writePrimArray (tabCounts t') usedCount n
  return t'

-- | A strict left fold over the slots that hold a key, in no
-- particular order; the function reads each slot's record or entry
-- ('tableRecord', 'tableValue') and must not change the table.
tableSlots :: forall a b. (b -> Int -> IO b) -> b -> Table a -> IO b
tableSlots f z0 (Table ref) = do
  t <- readIORef ref
  let go :: Int -> b -> IO b
      go !i !z
        | i > tabMask t = return z
        | otherwise = do
            h <- readPrimArray (tabHashes t) i
            if vacant h then go (i + 1) z else f z i >>= go (i + 1)
  go 0 z0

-- | A strict left fold over every key and its entry ('Nothing' for a
-- key with a record), in no particular order. The keys are fresh
-- strings.
tableFold :: forall a b. Keyed a => (b -> ByteString -> Maybe a -> b) -> b -> Table a -> IO b
tableFold f z0 table = tableSlots step z0 table
  where
    step z i = do
      r <- tableRecord table i
      if isRecord r then (\k -> f z k Nothing) <$> recordKeyBytes r
      else (\e -> f z (keyBytes (entryKey e)) (Just e)) <$> tableValue table i

-- | A key picked at random among those whose entries pass the check
-- ('Nothing' for a key with a record), if any: a few slots drawn at random (with many keys one of them holds
-- one), then a walk from a random slot through the whole table. Not
-- uniform, as redis's own pick is not: a key after a run of vacant slots
-- is found by the walk more often. The key is a fresh string.
tableRandom :: forall a. Keyed a => Table a -> Word64 -> (Maybe a -> Bool) -> IO (Maybe ByteString)
tableRandom (Table ref) seed wanted = do
  t <- readIORef ref
  let mask = tabMask t
      slotAt :: Word64 -> Int
      slotAt r = fromIntegral (r `unsafeShiftR` 20) .&. mask
      at :: Int -> IO (Maybe ByteString)
      at i = do
        h <- readPrimArray (tabHashes t) i
        if vacant h then return Nothing else do
          r <- slotRecord t i
          if isRecord r
            then if wanted Nothing then Just <$> recordKeyBytes r else return Nothing
            else do
              e <- readCell (tabCells t) i
              return (if wanted (Just e) then Just (keyBytes (entryKey e)) else Nothing)
      draw :: Int -> Word64 -> IO (Maybe ByteString)
      draw k r
        | k == 0 = walk (slotAt r) (mask + 1)
        | otherwise = at (slotAt r) >>= maybe (draw (k - 1) (next r)) (return . Just)
      walk :: Int -> Int -> IO (Maybe ByteString)
      walk !i !left
        | left == 0 = return Nothing
        | otherwise = at i >>= maybe (walk ((i + 1) .&. mask) (left - 1)) (return . Just)
      next r = r * 6364136223846793005 + 1442695040888963407
  draw (8 :: Int) (next seed)

-- | Remove every key, freeing their records.
tableClear :: Table a -> IO ()
tableClear (Table ref) = do
  readIORef ref >>= freeRecords
  newTab minCapacity >>= writeIORef ref

-- | Free the records of a table that will not be used again.
freeRecords :: Tab a -> IO ()
freeRecords t = go 0
  where
    go :: Int -> IO ()
    go !i = when (i <= tabMask t) $ do
      r <- slotRecord t i
      when (isRecord r) (recordFree r)
      go (i + 1)

-- | Have the table's records freed once the collector finds the table
-- unreachable (Note [Tables the collector frees]). Only for a table
-- nothing clears: a table that is cleared while still reachable would
-- have its records freed twice.
tableFreeOnDrop :: Table a -> IO ()
tableFreeOnDrop (Table ref) = () <$ mkWeakIORef ref (readIORef ref >>= freeRecords)

-- Note [Tables the collector frees]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A color's table lives as long as the store, and 'tableClear' frees
-- its records. A table inside a value (a hash's fields, a set's members:
-- Note [Members in tables] in "Kv.Members") is dropped wherever its
-- value is: a delete, an overwrite, an expiry, a FLUSHALL of the table
-- that holds it. Rather than a walk at each of those places, each such
-- table has a weak pointer whose finalizer frees its records once the
-- collector finds the table unreachable ('tableFreeOnDrop'). Until that
-- collection the records still count in 'recordsLive'. A finalizer
-- runs after the table is unreachable, so no color can touch the table
-- while it runs.

------------------------------------------------------------------------------
-- Cells

-- Note [Cells unboxed]
-- ~~~~~~~~~~~~~~~~~~~~
-- A cell is a 'MutVar#' (Note [Slots in cells]). In an array of lifted
-- values it would have to be boxed, one more object per slot for the
-- collector to copy and one more pointer for a lookup to follow, in a
-- table whose cost is its cache misses. So the cells are held in a
-- 'MutableArrayArray#', an array of unlifted pointers: the collector
-- treats each element as a pointer to a heap object whatever its type,
-- and a 'MutVar#' goes in and comes out by 'unsafeCoerce#' between
-- unlifted types of the same representation. Only the functions below
-- touch the array, and every element they read was written as a cell.

-- | A table's cells, one per slot, and the vacant cell.
data Cells a = Cells (MutableArrayArray# RealWorld) (MutVar# RealWorld a)

-- | An array of n cells, each the vacant cell.
newCells :: Int -> IO (Cells a)
newCells (I# n) = IO $ \s -> case newArrayArray# n s of
  (# s1, arr #) -> case newMutVar# noEntry s1 of
    (# s2, vacantCell #) ->
      let fill i st
            | isTrue# (i >=# n) = st
            | otherwise = fill (i +# 1#) (writeMutableArrayArrayArray# arr i (unsafeCoerce# vacantCell) st)
      in (# fill 0# s2, Cells arr vacantCell #)

-- | What the cell at i holds.
readCell :: Cells a -> Int -> IO a
readCell (Cells arr _) (I# i) = IO $ \s -> case readMutableArrayArrayArray# arr i s of
  (# s1, cell #) -> readMutVar# (unsafeCoerce# cell) s1
{-# INLINE readCell #-}

-- | Put an entry in the cell at i, which must be a slot's own.
writeCell :: Cells a -> Int -> a -> IO ()
writeCell (Cells arr _) (I# i) v = IO $ \s -> case readMutableArrayArrayArray# arr i s of
  (# s1, cell #) -> (# writeMutVar# (unsafeCoerce# cell) v s1, () #)
{-# INLINE writeCell #-}

-- | Put an entry in the cell at i, first giving the slot a cell of its
-- own if it has the vacant one (Note [Slots in cells]).
placeCell :: Cells a -> Int -> a -> IO ()
placeCell (Cells arr vacantCell) (I# i) v = IO $ \s -> case readMutableArrayArrayArray# arr i s of
  (# s1, cell #)
    | isTrue# (sameMutVar# (unsafeCoerce# cell) vacantCell) -> case newMutVar# v s1 of
        (# s2, own #) -> (# writeMutableArrayArrayArray# arr i (unsafeCoerce# own) s2, () #)
    | otherwise -> (# writeMutVar# (unsafeCoerce# cell) v s1, () #)

-- | Start loading the line of the array that holds the cell at i. The
-- prefetch primitive takes a byte array and an offset from its bytes:
-- a byte array's bytes follow two words (header and size), an array's
-- elements three (header, and two counts), so element i is at byte
-- 8 + 8 i from where a byte array's bytes would start. A hint only: a
-- wrong address loads a useless line.
prefetchCell :: Cells a -> Int -> IO ()
prefetchCell (Cells arr _) (I# i) = IO $ \s ->
  (# prefetchMutableByteArray0# (unsafeCoerce# arr) (8# +# 8# *# i) s, () #)

-- | The cell at i of one array becomes the cell at j of another.
moveCell :: Cells a -> Int -> Cells a -> Int -> IO ()
moveCell (Cells from _) (I# i) (Cells to _) (I# j) = IO $ \s -> case readMutableArrayArrayArray# from i s of
  (# s1, cell #) -> (# writeMutableArrayArrayArray# to j cell s1, () #)
