{-# LANGUAGE BangPatterns #-}
-- | weft-kv's data: one map per color, each touched only by events of its
-- color, so that no lock or atomic operation guards any key
-- (Note [One store per color]).
--
-- Somewhat over 600 lines: every write of a key's slot (entry, record,
-- in-place value, expiry) goes through 'runKeyOp' and the helpers beside
-- it, and splitting them would put the Notes on records, expiry and
-- values changed in place apart from the one path that keeps them.
module Kv.Store
  ( -- * Keys and colors
    keyColor
  , keyHash
  , hashColor
  , colorCount
  , validKeyColors
    -- * Values
  , Value (..)
    -- * Clocks
  , Now (..)
  , readNow
  , nowWallMicros
    -- * Operations on one key
  , KeyOp
  , Outcome (..)
  , Update (..)
    -- * Operations on every key
  , Survey (..)
    -- * The store
  , Store
  , newStore
  , runKeyOp
  , prefetchKey
  , lookAhead
  , surveyColor
  , joinSurvey
  , occupiedColors
  , keyCount
  , pickColor
  , storeWaiters
  , storeWatches
  , storeColors
  , flushColor
  , expireDue
  ) where

import Control.Monad (forM_, unless, when)
import Data.Bits (shiftR, (.&.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)
import Data.Word (Word64, Word8)
import Foreign.Ptr (Ptr)

import Weft.Timer (TimeoutKey, cancelTimeout)

import Kv.Clock
import Kv.Deque (Deque, dequeBytes, dequeFromBytes, dequeLength, sameDeque)
import Kv.Key (Key, keyHash, storedKey)
import Kv.Members (Members, membersFlat, membersInRecord, membersOwn)
import Kv.SortedSet (SortedSet, sortedFlat, sortedInRecord, sortedOwn)
import Kv.Table
import Kv.Resp (Reply (..))
import Kv.Record (Record, isRecord, noRecord, recordFits, recordKind, recordNewWith, recordOverwrite, recordOverwriteWith, recordReadWith,
                  recordValue, recordValueBytes, recordable, recordedItems, pokeBytes)
import Kv.Str (Str, prefetchStr, strClone, strFits, strLength, strOverwrite, writeStr)
import Kv.Waiters
import Kv.Watches

-- Note [One store per color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A key's color is a hash of its bytes folded to the store's number of
-- key colors ('keyColor'; weft-kv's @--key-colors@, 1 per core by default),
-- and every command on a key runs as an event of that color. Weft.Color
-- never runs two events of one color at once, so the table of a color,
-- 'Store' entry number 'keyColor', is only ever read and written by one
-- event at a time, and in the order the events were posted: a plain
-- mutable table suffices, with no lock, no atomic operation and no
-- retry. A color's table finds a key by the same hash its color is cut
-- from (Note [A color's table] in "Kv.Table"); unrelated keys in
-- different colors run
-- in parallel on different cores. The number of key colors
-- trades that grain against batching: a pipeline's commands on one color
-- run as one event (Note [Batches per color] in "Kv.Batch"), so with
-- fewer colors a pipeline of unrelated keys costs fewer events, and each
-- color's table holds more keys.

-- | The most colors keys can be spread over: 65536, the width of a
-- Weft.Color color.
colorCount :: Int
colorCount = 65536

-- | The color of a key in this store: its hash ('keyHash') folded to the
-- store's number of key colors.
keyColor :: Store -> ByteString -> Int
keyColor store = hashColor store . keyHash
{-# INLINE keyColor #-}

-- | The color of a key, given its hash ('keyHash').
hashColor :: Store -> Int -> Int
hashColor (Store _ mask _ _) h = h .&. mask
{-# INLINE hashColor #-}

------------------------------------------------------------------------------
-- Values

-- | What a key holds. A string is its bytes (Note [Stored strings] in
-- "Kv.Str"); a set's members (with empty values) and a hash's fields and
-- values are a mutable table (Note [Members in tables] in "Kv.Members");
-- a sorted set's members and scores are packed while few, a table and
-- an order once many (Note [Sorted sets in tables] in "Kv.SortedSet").
data Value
  = VString {-# UNPACK #-} !Str
  | VList !Deque
  | VSet !Members
  | VHash !Members
  | VZSet !SortedSet

-- | A key (Note [Keys in entries] in "Kv.Key") and what it holds, with
-- its expiry if any: what a table's cell holds (Note [Slots in cells] in
-- "Kv.Table"). A string's bytes are unpacked into its entry: one object
-- fewer per stored string, and one pointer fewer for a read to follow.
data Entry
  = EString {-# UNPACK #-} !Key {-# UNPACK #-} !Str !Expiry
  | EOther {-# UNPACK #-} !Key !Value !Expiry

instance Keyed Entry where
  entryKey (EString k _ _) = k
  entryKey (EOther k _ _) = k
  {-# INLINE entryKey #-}

-- | The entry of a key (as stored), value and expiry.
entry :: Key -> Value -> Expiry -> Entry
entry k (VString s) e = EString k s e
entry k v e = EOther k v e
{-# INLINE entry #-}

-- | What an entry's key holds.
entryValue :: Entry -> Value
entryValue (EString _ s _) = VString s
entryValue (EOther _ v _) = v
{-# INLINE entryValue #-}

-- | An entry's expiry.
entryExpiry :: Entry -> Expiry
entryExpiry (EString _ _ e) = e
entryExpiry (EOther _ _ e) = e
{-# INLINE entryExpiry #-}

data Expiry
  = Persistent
  | ExpiresAt !Int !TimeoutKey
    -- ^ The monotonic deadline in milliseconds, and the timer that deletes
    -- the key then (or, for a far deadline, that arms the next timer:
    -- 'timerHorizon' in "Kv.Clock").

------------------------------------------------------------------------------
-- Operations

-- | A command's work on one key: given the clocks, the key's expiry
-- deadline on the monotonic clock (in milliseconds, 0 if none) and its
-- value ('Nothing' if the key does not exist or has expired), what to
-- change and what to answer. Pure but for a hash's or set's members
-- (Note [Values changed in place]), so that the store alone deals with
-- expiry timers and memory.
type KeyOp = Now -> Int -> Maybe Value -> Outcome

-- | What an operation changes and answers; or, for a value changed in
-- place, the action that changes it and then says so (Note [Values
-- changed in place]).
data Outcome
  = Outcome !Update !Reply
  | InPlace (IO Outcome)

-- Note [Values changed in place]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Most operations are pure: given the key's value they say what it
-- becomes and what to answer, and the store writes the new value. A
-- hash's or set's members are a mutable table (Note [Members in tables]
-- in "Kv.Members"), and a list a mutable deque (Note [Lists in nodes] in
-- "Kv.Deque"), so an operation on one answers 'InPlace': an action
-- that 'runKeyOp' runs at once on the key's color, which reads or changes
-- the table and then gives the outcome: 'Replace' with what the key then
-- holds (the same table, or a new packed map for a small one) if it
-- changed anything (so that watchers see it, Note [Transactions] in
-- "Kv.Transaction"), 'Delete' if it emptied it, 'Keep' if it changed
-- nothing. Whatever its reply carries it has copied out, since the next
-- operation may change the table. A 'Replace' with the very list the
-- key's entry holds leaves the entry as it is (no new entry for the
-- collector to promote), unless the list has become short enough for a
-- record (Note [Small values in records]).

-- | How a 'KeyOp' changes its key.
data Update
  = Keep
    -- ^ Nothing changes.
  | Delete
    -- ^ The key goes (with its expiry).
  | Replace !Value
    -- ^ A new value; the key keeps its expiry (LPUSH, INCR, ...).
  | Fresh !Value
    -- ^ A new value without expiry (SET).
  | FreshUntil !Value !Int
    -- ^ A new value that expires at this monotonic deadline in
    -- milliseconds (SET EX); at once if it is not in the future.
  | ExpireAt !Int
    -- ^ The key (which must exist) expires at this monotonic deadline in
    -- milliseconds; at once if it is not in the future.

-- | A read of every key (Note [Store-wide commands] in "Kv.Batch").
data Survey
  = CountKeys
    -- ^ How many keys, as redis counts them (those whose expiry has
    -- passed but that are not yet deleted among them): 'RInt'.
  | MatchKeys (ByteString -> Bool)
    -- ^ The live keys that match: an 'RArray' of bulk strings.
  | RandomKey
    -- ^ A live key picked at random, or 'RNil' in an empty store.

------------------------------------------------------------------------------
-- The store

-- | The keys, one table per key color; the mask that folds a key's hash
-- to its color; the blocking commands' registrations on keys; and the
-- keys clients WATCH.
data Store = Store !(Array (Table Entry)) !Int !Waiters !Watches

-- | An empty store whose keys spread over the given number of colors: a
-- power of two from 1 to 'colorCount' (checked by 'validKeyColors').
newStore :: Int -> IO Store
newStore n = Store <$> (arrayFromListN n <$> mapM (const newTable) [1 .. n]) <*> pure (n - 1) <*> newWaiters n <*> newWatches n

-- | How many key colors the store spreads its keys over.
storeColors :: Store -> Int
storeColors (Store _ mask _ _) = mask + 1

-- | The keys clients WATCH.
storeWatches :: Store -> Watches
storeWatches (Store _ _ _ w) = w

-- | The blocking commands' registrations.
storeWaiters :: Store -> Waiters
storeWaiters (Store _ _ w _) = w

-- | Can a store spread its keys over this many colors?
validKeyColors :: Int -> Bool
validKeyColors n = n >= 1 && n <= colorCount && n .&. (n - 1) == 0

-- | A hint that a key, given its hash, is about to be looked up (Note
-- [Looking ahead] in "Kv.Table"). May run on any color.
prefetchKey :: Store -> Int -> IO ()
prefetchKey (Store tables mask _ _) h = tablePrefetch (indexArray tables (h .&. mask)) h
{-# INLINE prefetchKey #-}

-- | Load what the lookups of a color's batch will touch, given its work
-- and each item's key hash (0 for none), one link of every lookup's chain
-- per pass (Note [Looking ahead] in "Kv.Table"): cells or records,
-- entries, then strings' bytes. A hash that repeats the one before it (a pipeline on
-- one key) is passed over. On the color of every key given.
lookAhead :: Store -> (w -> Int) -> [w] -> IO ()
lookAhead (Store tables mask _ _) hashOf works = do
  each tablePrefetchCell
  each tablePrefetchEntry
  each $ \t i -> do
    r <- tableRecord t i
    if isRecord r then return () else do
      e <- tableValue t i
      case e of
        EString _ s _ -> prefetchStr s
        EOther {} -> return ()
  where
    -- Each pass finds the slots again (the hashes' lines are loaded by
    -- then) rather than keeping them in a list made per batch.
    each :: (Table Entry -> Int -> IO ()) -> IO ()
    each f = go 0 works
      where
        go !_ [] = return ()
        go before (w : rest)
          | h == 0 || h == before = go before rest
          | otherwise = do
              let t = indexArray tables (h .&. mask)
              i <- tableHashSlot t h
              when (i >= 0) (f t i)
              go h rest
          where h = hashOf w
{-# INLINE lookAhead #-}

-- | Run an operation on a key, given its hash ('keyHash'), at the given
-- time (keys whose deadline is not after it have expired). Must run as an event of the key's color
-- (Note [One store per color]). @arm key deadline delay@ registers the
-- key's expiry timer (the monotonic deadline in milliseconds, the delay in
-- microseconds) and returns its key; the timer must end up calling
-- 'expireDue' with that deadline on the key's color. (It takes the key,
-- so that a caller passes one function for every key, not a closure per
-- operation.)
runKeyOp :: Store -> (ByteString -> Int -> Int -> IO TimeoutKey) -> Now -> Int -> ByteString -> KeyOp -> IO Reply
runKeyOp (Store tables mask waiters watches) arm clocks h key op = do
  let t = indexArray tables (h .&. mask)
  found <- tableFind t h key
  if found < 0 then run t (-1) noKey Nothing Persistent 0 noRecord else do
    r <- tableRecord t found
    -- A record's value, a copy (Note [Small values in records]); its
    -- stored key is not needed: 'putEntry' makes one should the key
    -- move to the heap.
    if isRecord r then recordLive r >>= \v -> run t found noKey (Just v) Persistent 0 r else do
      stored <- tableValue t found
      let k = entryKey stored
          v = entryValue stored
      case entryExpiry stored of
        -- A key already past its deadline is gone, whatever its timer says.
        e@(ExpiresAt deadline _)
          | now >= deadline -> do
              tableDelete t found
              touchKey watches color key
              run t (-1) noKey Nothing Persistent 0 noRecord
          | otherwise -> run t found k (Just v) e deadline noRecord
        Persistent -> run t found k (Just v) Persistent 0 noRecord
  where
    now = nowMono clocks
    !color = h .&. mask
    wakeFor v = case v of
      VList _ -> wakeKey waiters color key
      VZSet _ -> wakeKey waiters color key
      _ -> return ()
    -- The key's slot (-1 if it has none) and stored key ('noKey' if
    -- none or a record), its live value, expiry and deadline (0 if
    -- none), and its record ('noRecord' if none).
    run t i k live expiry deadlineOf r = outcome (op clocks deadlineOf live)
     where
      -- An in-place operation's action runs first (Note [Values changed
      -- in place]); no pair of update and reply is built in between.
      outcome (Outcome update reply0) = apply update reply0
      outcome (InPlace act) = act >>= outcome
      apply update reply0 = do
        -- Before the update, which may write the stored string's bytes. A
        -- record's value is a copy already.
        reply <- if isRecord r then return reply0 else replyOut reply0
        -- A new value a record may hold goes into the key's record, if it
        -- has one.
        inRecord <- case update of
          Replace new | isRecord r -> intoRecord t i r key new
          Fresh new | isRecord r -> intoRecord t i r key new
          _ -> return False
        unless inRecord $ case update of
          -- A string of the stored one's length is written over it (Note
          -- [Stored strings] in "Kv.Str").
          Replace (VString new) | Just (VString old) <- live, strFits old new -> strOverwrite old new
          Fresh (VString new) | Persistent <- expiry, Just (VString old) <- live, strFits old new -> strOverwrite old new
          Keep -> return ()
          Delete -> do
            cancel expiry
            when (i >= 0) (tableDelete t i)
          Replace v -> do
            -- A list changed in place is already the entry's value, unless
            -- it has become short enough for a record.
            inPlace <- case (v, live) of
              (VList new, Just (VList old)) | not (isRecord r), sameDeque old new -> case expiry of
                Persistent -> (> recordedItems) <$> dequeLength new
                _ -> return True
              _ -> return False
            unless inPlace (putEntry t h i r k key v expiry)
          Fresh v -> do
            cancel expiry
            putEntry t h i r k key v Persistent
          FreshUntil v deadline -> do
            cancel expiry
            expireLater t arm now h i r k key v deadline
          ExpireAt deadline -> forM_ live $ \v -> do
            cancel expiry
            expireLater t arm now h i r k key v deadline
        -- A change sets the flags of the clients that watch the key (Note
        -- [Transactions] in "Kv.Transaction"); so an operation that leaves
        -- its key as it was answers 'Keep', as redis then signals nothing.
        case update of
          Keep -> return ()
          Delete | Nothing <- live -> return ()
          ExpireAt _ | Nothing <- live -> return ()
          _ -> touchKey watches color key
        -- A list or sorted set under the key wakes commands blocked on it
        -- (Note [Blocked commands] in "Kv.Batch").
        case update of
          Replace v -> wakeFor v
          Fresh v -> wakeFor v
          FreshUntil v _ -> wakeFor v
          _ -> return ()
        return reply

-- | A reply as it leaves the key's color: a stored string in it is a copy
-- (Note [Stored strings] in "Kv.Str").
replyOut :: Reply -> IO Reply
replyOut r = case r of
  RStored s -> let !c = strClone s in return (RStored c)
  _ -> return r
{-# INLINE replyOut #-}

-- | Store a value and expiry in the key's slot (whose stored key and
-- record are given: 'noKey' and a record, or a key and 'noRecord'), or
-- under a new slot if it has none (-1). A small value without expiry
-- goes in a record (Note [Small values in records]); anything else in an
-- entry, with a copy of the key if the slot has none.
putEntry :: Table Entry -> Int -> Int -> Record -> Key -> ByteString -> Value -> Expiry -> IO ()
putEntry t h i r k key v e = do
  kept <- case e of
    Persistent -> recorded key v
    _ -> return Nothing
  case kept of
    Just rv -> if i < 0 then newRecord key rv >>= tableInsertRecord t h else putRecord t i r key rv
    Nothing -> onHeap
  where
    onHeap = do
      -- Out of its record, which this may free (Note [Members read in
      -- their record] in "Kv.Members").
      v' <- valueOwn v
      if i < 0 then storedKey key >>= \k' -> tableInsert t h (entry k' v' e) else do
        k' <- if isRecord r then storedKey key else return k
        tableSet t i (entry k' v' e)

-- | A value of its own: a hash's, set's or sorted set's members seen in
-- a record built into a map.
valueOwn :: Value -> IO Value
valueOwn v = case v of
  VSet m -> VSet <$> membersOwn m
  VHash m -> VHash <$> membersOwn m
  VZSet z -> VZSet <$> sortedOwn z
  _ -> return v
{-# INLINE valueOwn #-}

-- | Store a small value ('recorded') in the key's slot, whose record is
-- given ('noRecord' if its value is an entry): over the record's value
-- if it is of that kind and length, else in a new record.
putRecord :: Table Entry -> Int -> Record -> ByteString -> Recorded -> IO ()
putRecord t i r key rv@(Recorded kind n write) = do
  fits <- if isRecord r then recordFits r kind n else return False
  if fits then recordOverwriteWith r write else newRecord key rv >>= tableSetRecord t i

-- | Write a value into the key's record ('putRecord'), if a record may
-- hold it: whether it did. A string goes over the record directly,
-- without the 'Recorded' it needs for a new record only.
intoRecord :: Table Entry -> Int -> Record -> ByteString -> Value -> IO Bool
intoRecord t i r key v = case v of
  VString s | recordable key n -> do
    fits <- recordFits r 0 n
    if fits then recordOverwrite r s
    else newRecord key (Recorded 0 n (\d -> () <$ writeStr d s)) >>= tableSetRecord t i
    return True
    where n = strLength s
  _ -> recorded key v >>= maybe (return False) (\rv -> True <$ putRecord t i r key rv)

-- Note [Small values in records]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A key without an expiry whose value is small is a record off the heap
-- (Note [Strings off the heap] in "Kv.Record"): a string below
-- 'sharedBulkBytes', as its bytes; a list of at most 'recordedItems'
-- elements, or a hash, set or sorted set of at most that many members
-- while packed maps of one leaf ("Kv.Members", "Kv.SortedSet"), under
-- 'kindList', 'kindSet', 'kindHash' or 'kindZSet': a list as its
-- elements' bytes ('joinStrings'), a hash, set or sorted set as its
-- leaves (Note [Packed maps flat] in "Kv.Packed"), if these too are below
-- 'sharedBulkBytes'. So a store of a million small lists, hashes, sets or
-- sorted sets holds none of them on the collected heap. An operation on
-- such a key gets a string or list decoded into a fresh one
-- ('recordLive'), and a hash, set or sorted set seen where it lies in
-- the record (Note [Members read in their record] in "Kv.Members"), and
-- the store encodes what it leaves ('recorded'): over the record's bytes
-- if of the same kind and length, else in a new record.
-- A value that grows past the limits, or a key given an expiry, moves to
-- an entry on the heap.

-- | A value as a record would hold it (Note [Small values in records]):
-- its kind, its length, and what writes it at an address.
data Recorded = Recorded !Int !Int (Ptr Word8 -> IO ())

kindList, kindSet, kindHash, kindZSet :: Int
kindList = 1
kindSet = 2
kindHash = 3
kindZSet = 4

-- | How a record would hold a value under a key, if it may (in IO: a
-- list's elements are read out of its nodes).
recorded :: ByteString -> Value -> IO (Maybe Recorded)
recorded key v = case v of
  VString s | recordable key (strLength s) -> return (Just (Recorded 0 (strLength s) (\d -> () <$ writeStr d s)))
  VList xs -> maybe Nothing (\b -> fits kindList (B.length b, pokeBytes b)) <$> dequeBytes xs
  VSet m | Just w <- membersFlat m -> return (fits kindSet w)
  VHash m | Just w <- membersFlat m -> return (fits kindHash w)
  VZSet z | Just w <- sortedFlat z -> return (fits kindZSet w)
  _ -> return Nothing
  where
    fits kind (n, write) = if recordable key n then Just (Recorded kind n write) else Nothing
{-# INLINE recorded #-}

newRecord :: ByteString -> Recorded -> IO Record
newRecord key (Recorded kind n write) = recordNewWith key kind n write

-- | The value a record holds, decoded into a value of its own.
recordLive :: Record -> IO Value
recordLive r = do
  kind <- recordKind r
  if kind == 0 then VString <$> recordValue r
  else if kind == kindList then VList <$> (recordValueBytes r >>= dequeFromBytes)
  else if kind == kindZSet then recordReadWith r (\p n -> return $! VZSet (sortedInRecord p n))
  else recordReadWith r $ \p n -> return $! (if kind == kindSet then VSet else VHash) (membersInRecord p n)

-- | The stored key of a key that has no slot yet: never read.
noKey :: Key
noKey = errorWithoutStackTrace "weft-kv: the stored key of a key without a slot was read"
{-# NOINLINE noKey #-}

-- | Store a value that expires at the deadline, with its timer; or delete
-- the key if the deadline has passed. Top level, so that 'runKeyOp' does
-- not allocate it as a closure for every operation.
expireLater :: Table Entry -> (ByteString -> Int -> Int -> IO TimeoutKey) -> Int -> Int -> Int
            -> Record -> Key -> ByteString -> Value -> Int -> IO ()
expireLater t arm now h i r k key v deadline
  | deadline <= now = when (i >= 0) (tableDelete t i)
  | otherwise = do
      timer <- arm key deadline (timerDelay now deadline)
      putEntry t h i r k key v (ExpiresAt deadline timer)
{-# NOINLINE expireLater #-}

cancel :: Expiry -> IO ()
cancel Persistent = return ()
cancel (ExpiresAt _ timer) = () <$ cancelTimeout timer

-- | A key's expiry timer for this deadline fired: delete the key if the
-- deadline has come, or arm the next timer if it is beyond the one this
-- timer was armed for ('timerHorizon' in "Kv.Clock"; @arm@ as for 'runKeyOp'). A key
-- that was deleted or given another expiry since is left alone: its own
-- timer deals with it. Must run as an event of the key's color.
expireDue :: Store -> (ByteString -> Int -> Int -> IO TimeoutKey) -> ByteString -> Int -> IO ()
expireDue (Store tables mask _ watches) arm key armedFor = do
  let !h = keyHash key
      t = indexArray tables (h .&. mask)
  i <- tableFind t h key
  -- A key with a record has no expiry.
  r <- if i >= 0 then tableRecord t i else return noRecord
  when (i >= 0 && not (isRecord r)) $ do
    old <- tableValue t i
    case entryExpiry old of
      ExpiresAt deadline _ | deadline == armedFor -> do
        now <- nowMono <$> readNow
        if now >= deadline
          then tableDelete t i >> touchKey watches (h .&. mask) key
          else do
            next <- arm key deadline (timerDelay now deadline)
            tableSet t i (entry (entryKey old) (entryValue old) (ExpiresAt deadline next))
      _ -> return ()

-- | One color's part of a read of every key, at the given time: its keys
-- counted ('RInt'), or the live ones that match ('RArray' of bulk
-- strings), or one picked at random.
-- Must run as an event of that color; 'joinSurvey' puts the colors'
-- parts together (Note [Store-wide commands] in "Kv.Batch").
surveyColor :: Store -> Int -> Now -> Survey -> IO Reply
surveyColor (Store tables _ _ _) color clocks op = case op of
  CountKeys -> RInt <$> tableSize t
  MatchKeys wanted -> RArray <$> tableFold (\acc k e -> if live e && wanted k then RBulk k : acc else acc) [] t
  -- The color's count (expired keys not yet deleted among them), one of
  -- its live keys, and a random number for 'joinSurvey's pick.
  RandomKey -> do
    n <- tableSize t
    picked <- tableRandom t seed live
    return $ case picked of
      Just k -> RArray [RInt n, RBulk k, RInt (fromIntegral (seed `shiftR` 1))]
      Nothing -> RNil
  where
    t = indexArray tables color
    -- A key with a record ('Nothing') has no expiry.
    live me = case entryExpiry <$> me of
      Just (ExpiresAt deadline _) -> deadline > nowMono clocks
      _ -> True
    seed = (fromIntegral (nowSeed clocks) + fromIntegral color * 0x9e3779b97f4a7c15) * 0x2545f4914f6cdd1d :: Word64

-- | The reply of a read of every key, from the colors' parts. RANDOMKEY
-- picks a color's key with the odds of the color's share of the keys.
joinSurvey :: Survey -> [Reply] -> Reply
joinSurvey CountKeys parts = RInt (sum [ n | RInt n <- parts ])
joinSurvey (MatchKeys _) parts = RArray (concat [ ks | RArray ks <- parts ])
joinSurvey RandomKey parts = case [ (n, k, r) | RArray [RInt n, RBulk k, RInt r] <- parts ] of
  [] -> RNil
  picks@((_, _, r0) : _) -> maybe RNil RBulk (byWeight (fromIntegral r0) [ (n, k) | (n, k, _) <- picks ])

-- | Fold over the key colors in ascending order with each table's count
-- of keys (live or expired). Runs on any color: it reads only the counts
-- (Note [A color's table] in "Kv.Table"), each as it is just before or
-- just after a write another core makes.
foldCounts :: Store -> (a -> Int -> Int -> a) -> a -> IO a
foldCounts (Store tables _ _ _) f = go 0
  where
    go !i !acc
      | i == sizeofArray tables = return acc
      | otherwise = tableSize (indexArray tables i) >>= \n -> go (i + 1) (f acc i n)

-- | The colors whose tables hold keys (live or expired), in descending
-- order. Runs on any color ('foldCounts').
occupiedColors :: Store -> IO [Int]
occupiedColors store = foldCounts store (\acc i n -> if n > 0 then i : acc else acc) []

-- | How many keys the store holds (expired ones not yet deleted among
-- them), DBSIZE's answer. Runs on any color ('foldCounts').
keyCount :: Store -> IO Int
keyCount store = foldCounts store (\acc _ n -> acc + n) 0

-- | A color that holds keys, picked with the odds of its share of the
-- store's keys (expired ones not yet deleted among them), by a random
-- number; 'Nothing' if no color holds any. RANDOMKEY's first try (Note
-- [Store-wide commands] in "Kv.Batch"). Runs on any color ('foldCounts').
pickColor :: Store -> Word64 -> IO (Maybe Int)
pickColor store r =
  -- Each count is read once, so the draw falls within the ones read,
  -- whatever other cores write meanwhile.
  byWeight r <$> foldCounts store (\acc i n -> if n > 0 then (n, i) : acc else acc) []

-- | The item a random number falls on when each item takes as many
-- numbers as its weight (the number modulo their sum); 'Nothing' if the
-- weights add up to none.
byWeight :: Word64 -> [(Int, a)] -> Maybe a
byWeight r items = go (fromIntegral (r `mod` fromIntegral (max 1 total))) items
  where
    total = sum (map fst items)
    go x ((n, a) : more) = if x < n then Just a else go (x - n) more
    go _ [] = Nothing

-- | Delete every key of a color, and cancel their expiry timers. Must run
-- as an event of that color.
flushColor :: Store -> Int -> IO ()
flushColor (Store tables _ _ watches) color = do
  let t = indexArray tables color
  -- A watched key that exists changes (as in redis, one that does not is
  -- left alone).
  watched <- watchedKeys watches color
  forM_ watched $ \k -> do
    i <- tableFind t (keyHash k) k
    when (i >= 0) (touchKey watches color k)
  timers <- tableFold (\acc _ me -> maybe acc ((: acc) . entryExpiry) me) [] t
  mapM_ cancel timers
  tableClear t
