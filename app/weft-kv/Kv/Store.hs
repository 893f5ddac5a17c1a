{-# LANGUAGE BangPatterns #-}
-- | weft-kv's data: one map per color, each touched only by events of its
-- color, so that no lock or atomic operation guards any key
-- (Note [One store per color]).
module Kv.Store
  ( -- * Keys and colors
    keyColor
  , colorCount
  , validKeyColors
    -- * Values
  , Value (..)
  , ZSet (..)
  , emptyZSet
  , valuePart
  , partValue
  , scoredItems
  , itemsScored
    -- * Clocks
  , Now (..)
  , readNow
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
  , survey
  , occupiedColors
  , flushColor
  , expireDue
  ) where

import Control.Monad (forM_, when)
import Data.Bits (shiftR, xor, (.&.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import qualified Data.Map.Strict as Map
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)
import qualified Data.Set as Set
import Data.Word (Word8, Word64)
import Data.Time.Clock.System (SystemTime (..), getSystemTime)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (peekByteOff)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Float (castDoubleToWord64, castWord64ToDouble)
import GHC.ForeignPtr (unsafeWithForeignPtr)

import Weft.Timer (TimeoutKey, cancelTimeout)

import Kv.Deque (Deque, dequeFromList, dequeToList)
import Kv.Keys
import Kv.Resp (Reply (..))

-- Note [One store per color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A key's color is a hash of its bytes folded to the store's number of
-- key colors ('keyColor'; weft-kv's @--key-colors@, 64 by default),
-- and every command on a key runs as an event of that color. Weft.Color
-- never runs two events of one color at once, so the map of a color,
-- 'Store' entry number 'keyColor', is only ever read and written by one
-- event at a time, and in the order the events were posted: plain
-- 'IORef's suffice, with no lock, no atomic operation and no retry. A
-- color's map finds a key by the same hash its color is cut from (Note
-- [Keys by hash] in "Kv.Keys"); unrelated keys in different colors run
-- in parallel on different cores. The number of key colors
-- trades that grain against batching: a pipeline's commands on one color
-- run as one event (Note [Batches per color] in "Kv.Batch"), so with
-- fewer colors a pipeline of unrelated keys costs fewer events, and each
-- color's map holds more keys.

-- | The most colors keys can be spread over: 65536, the width of a
-- Weft.Color color.
colorCount :: Int
colorCount = 65536

-- | The color of a key in this store: its hash ('keyHash') folded to the
-- store's number of key colors.
keyColor :: Store -> ByteString -> Int
keyColor (Store _ mask) key = keyHash key .&. mask
{-# INLINE keyColor #-}

-- | The hash of a key: a 64-bit FNV-style hash of its bytes, taken eight
-- at a time (then the tail byte by byte), mixed. Its low 16 bits are the
-- key's color in a store of 'colorCount' colors; the whole finds the key
-- in its color's map ("Kv.Keys"). Word-wise,
-- because a key's color is computed for every command on it: byte-wise
-- FNV-1a was a tenth of weft-kv's instructions under MSET (callgrind).
keyHash :: ByteString -> Int
keyHash (BI.PS fp off len) =
  BI.accursedUnutterablePerformIO $ unsafeWithForeignPtr fp $ \base -> do
    let p = base `plusPtr` off :: Ptr Word8
        wordsEnd = len - len `rem` 8
        mix :: Word64 -> Word64 -> Word64
        mix h x = (h `xor` x) * 1099511628211
        goWords !i !h
          | i >= wordsEnd = goBytes i h
          | otherwise = do
              w <- peekByteOff p i :: IO Word64
              goWords (i + 8) (mix h w)
        goBytes !i !h
          | i >= len = return h
          | otherwise = do
              b <- peekByteOff p i :: IO Word8
              goBytes (i + 1) (mix h (fromIntegral b))
    h <- goWords 0 (14695981039346656037 `xor` fromIntegral len)
    -- A 64-bit avalanche (MurmurHash3's finaliser), so that every input
    -- bit reaches the low 16: 200,000 keys of the form key:%012d land on
    -- 62,389 colors, as many as uniform random colors would.
    let f1 = (h `xor` (h `shiftR` 33)) * 0xff51afd7ed558ccd
        f2 = (f1 `xor` (f1 `shiftR` 33)) * 0xc4ceb9fe1a85ec53
    return (fromIntegral (f2 `xor` (f2 `shiftR` 33)))

------------------------------------------------------------------------------
-- Values

-- | What a key holds.
data Value
  = VString !ByteString
  | VList !Deque
  | VSet !(Set.Set ByteString)
  | VHash !(Map.Map ByteString ByteString)
  | VZSet !ZSet

-- | A sorted set: each member's score, and the members in (score, member)
-- order.
data ZSet = ZSet !(Map.Map ByteString Double) !(Set.Set (Double, ByteString))

emptyZSet :: ZSet
emptyZSet = ZSet Map.empty Set.empty

-- Note [Values in parts]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- A command that carries a value from one key to another (RENAME, COPY)
-- reads it on the source's color and writes it on the destination's,
-- and what passes between its steps is a 'Reply' (Note [Multi-key
-- commands] in "Kv.Batch"). So the value travels as one: 'valuePart'
-- writes its expiry deadline, its type and its contents (a score as its
-- bits, so that it comes back exact), 'partValue' reads them back. A part
-- is never sent to a client; it copies the contents' spine, not their
-- bytes.

-- | A value and its expiry deadline (0: none) as a part (Note [Values in
-- parts]).
valuePart :: Int -> Value -> Reply
valuePart deadline v = RArray (RInt deadline : case v of
  VString s -> [RInt 0, RBulk s]
  VList xs -> RInt 1 : map RBulk (dequeToList xs)
  VSet xs -> RInt 2 : map RBulk (Set.toAscList xs)
  VHash h -> RInt 3 : concat [ [RBulk f, RBulk x] | (f, x) <- Map.toAscList h ]
  VZSet (ZSet _ ordered) -> RInt 4 : scoredItems (Set.toAscList ordered))

-- | The value and expiry deadline of a part 'valuePart' wrote.
partValue :: Reply -> Maybe (Int, Value)
partValue (RArray (RInt deadline : RInt tag : xs)) = (,) deadline <$> case tag of
  0 | [RBulk s] <- xs -> Just (VString s)
  1 -> VList . dequeFromList <$> traverse bulk xs
  2 -> VSet . Set.fromDistinctAscList <$> traverse bulk xs
  3 -> VHash . Map.fromDistinctAscList <$> pairs (\f x -> (,) f <$> bulk x) xs
  4 -> (\ps -> VZSet (ZSet (Map.fromList [ (m, sc) | (sc, m) <- ps ]) (Set.fromDistinctAscList ps))) <$> itemsScored xs
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

-- | A key and what it holds, with its expiry if any.
data Entry = Entry !Value !Expiry

data Expiry
  = Persistent
  | ExpiresAt !Int !TimeoutKey
    -- ^ The monotonic deadline in milliseconds, and the timer that deletes
    -- the key then (or, for a far deadline, that arms the next timer:
    -- 'timerHorizon').

------------------------------------------------------------------------------
-- Clocks

-- | The time a batch of operations runs at, in milliseconds (redis's
-- unit for expiry): the monotonic clock, which deadlines are kept on,
-- and the wall clock, which absolute times (EXPIREAT, SET ... PXAT) and
-- redis's overflow checks are given in.
data Now = Now
  { nowMono :: !Int  -- ^ monotonic clock, ms
  , nowWall :: !Int  -- ^ wall clock, ms since the epoch
  , nowSeed :: !Int  -- ^ monotonic clock, ns: a seed for random choices
  }

readNow :: IO Now
readNow = do
  mono <- getMonotonicTimeNSec
  MkSystemTime secs nanos <- getSystemTime
  return (Now (fromIntegral (mono `quot` 1000000)) (fromIntegral secs * 1000 + fromIntegral (nanos `quot` 1000000)) (fromIntegral mono))

------------------------------------------------------------------------------
-- Operations

-- | A command's work on one key: given the clocks, the key's expiry
-- deadline on the monotonic clock (in milliseconds, 0 if none) and its
-- value ('Nothing' if the key does not exist or has expired), what to
-- change and what to answer. Pure, so that the store alone deals with
-- expiry timers and memory.
type KeyOp = Now -> Int -> Maybe Value -> Outcome

data Outcome = Outcome !Update Reply

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

-- | A read of every key (Note [Store-wide commands] in "Kv.Server").
data Survey
  = CountKeys
    -- ^ How many live keys: 'RInt'.
  | MatchKeys (ByteString -> Bool)
    -- ^ The live keys that match: an 'RArray' of bulk strings.

------------------------------------------------------------------------------
-- The store

-- | The keys, one map per key color, and the mask that folds a key's
-- hash to its color.
data Store = Store !(Array (IORef (Keys Entry))) !Int

-- | An empty store whose keys spread over the given number of colors: a
-- power of two from 1 to 'colorCount' (checked by 'validKeyColors').
newStore :: Int -> IO Store
newStore n = (\maps -> Store maps (n - 1)) . arrayFromListN n <$> mapM (const (newIORef emptyKeys)) [1 .. n]

-- | Can a store spread its keys over this many colors?
validKeyColors :: Int -> Bool
validKeyColors n = n >= 1 && n <= colorCount && n .&. (n - 1) == 0

-- | Run an operation on a key, at the given time (keys whose deadline is
-- not after it have expired). Must run as an event of the key's color
-- (Note [One store per color]). @arm key deadline delay@ registers the
-- key's expiry timer (the monotonic deadline in milliseconds, the delay in
-- microseconds) and returns its key; the timer must end up calling
-- 'expireDue' with that deadline on the key's color. (It takes the key,
-- so that a caller passes one function for every key, not a closure per
-- operation.)
runKeyOp :: Store -> (ByteString -> Int -> Int -> IO TimeoutKey) -> Now -> ByteString -> KeyOp -> IO Reply
runKeyOp (Store maps mask) arm clocks key op = do
  let !h = keyHash key
      ref = indexArray maps (h .&. mask)
  m <- readIORef ref
  -- A key already past its deadline is gone, whatever its timer says.
  -- (Strict, so that no tuple or selector thunks are built per command.)
  let !(Found m0 expired live expiry deadlineOf) = case keysLookup h key m of
        Just (Entry v e@(ExpiresAt deadline _))
          | now >= deadline -> Found (keysDelete h key m) True Nothing Persistent 0
          | otherwise -> Found m False (Just v) e deadline
        Just (Entry v Persistent) -> Found m False (Just v) Persistent 0
        Nothing -> Found m False Nothing Persistent 0
      !(Outcome update reply) = op clocks deadlineOf live
      put e = writeIORef ref (putEntry h live key e m0)
      expiring v deadline = expireLater ref arm now h live key m0 v deadline
  case update of
    Keep -> when expired (writeIORef ref m0)
    Delete -> do
      cancel expiry
      writeIORef ref (keysDelete h key m0)
    Replace v -> put (Entry v expiry)
    Fresh v -> do
      cancel expiry
      put (Entry v Persistent)
    FreshUntil v deadline -> do
      cancel expiry
      expiring v deadline
    ExpireAt deadline -> forM_ live $ \v -> do
      cancel expiry
      expiring v deadline
  return reply
  where
    now = nowMono clocks

-- | Store an entry: under the key already stored if the key exists
-- ('keysInsert' keeps it), else under a copy, so as not to hold on to the
-- request buffer the key was sliced from.
putEntry :: Int -> Maybe Value -> ByteString -> Entry -> Keys Entry -> Keys Entry
putEntry h (Just _) key e m = keysInsert h key e m
putEntry h Nothing key e m = keysInsert h (B.copy key) e m
{-# INLINE putEntry #-}

-- | Store a value that expires at the deadline, with its timer; or delete
-- the key if the deadline has passed. Top level, so that 'runKeyOp' does
-- not allocate it as a closure for every operation.
expireLater :: IORef (Keys Entry) -> (ByteString -> Int -> Int -> IO TimeoutKey) -> Int -> Int -> Maybe Value
            -> ByteString -> Keys Entry -> Value -> Int -> IO ()
expireLater ref arm now h live key m v deadline
  | deadline <= now = writeIORef ref (keysDelete h key m)
  | otherwise = do
      timer <- arm key deadline (timerDelay now deadline)
      writeIORef ref (putEntry h live key (Entry v (ExpiresAt deadline timer)) m)
{-# NOINLINE expireLater #-}

cancel :: Expiry -> IO ()
cancel Persistent = return ()
cancel (ExpiresAt _ timer) = () <$ cancelTimeout timer

-- | The longest delay an expiry timer is armed for, in milliseconds
-- (about 12 days): redis accepts deadlines up to 2^63 ms away, far beyond
-- what a timer's microsecond 'Int' holds, so a far deadline arms a timer
-- for this long and 'expireDue' arms the next one when it fires. (A key
-- read after its deadline is gone whatever its timer says: the timer
-- only reclaims the memory of keys nobody reads.)
timerHorizon :: Int
timerHorizon = 2 ^ (30 :: Int)

-- | The delay of the timer for a deadline, in microseconds.
timerDelay :: Int -> Int -> Int
timerDelay now deadline = min timerHorizon (deadline - now) * 1000

-- | What 'runKeyOp' found: the map without the key if it had expired,
-- whether it had, the live value, its expiry and deadline (0 if none).
data Found = Found !(Keys Entry) !Bool !(Maybe Value) !Expiry !Int

-- | A key's expiry timer for this deadline fired: delete the key if the
-- deadline has come, or arm the next timer if it is beyond the one this
-- timer was armed for ('timerHorizon'; @arm@ as for 'runKeyOp'). A key
-- that was deleted or given another expiry since is left alone: its own
-- timer deals with it. Must run as an event of the key's color.
expireDue :: Store -> (ByteString -> Int -> Int -> IO TimeoutKey) -> ByteString -> Int -> IO ()
expireDue (Store maps mask) arm key armedFor = do
  let !h = keyHash key
      ref = indexArray maps (h .&. mask)
  m <- readIORef ref
  case keysLookup h key m of
    Just (Entry v (ExpiresAt deadline _)) | deadline == armedFor -> do
      now <- nowMono <$> readNow
      if now >= deadline
        then writeIORef ref (keysDelete h key m)
        else do
          next <- arm key deadline (timerDelay now deadline)
          writeIORef ref (keysInsert h key (Entry v (ExpiresAt deadline next)) m)
    _ -> return ()

-- | Read every color's keys, at the given time. Unlike everything else
-- here, this runs on any color: it reads each color's map as its last
-- event left it (an 'IORef' read of an immutable map, safe from any
-- thread), so it sees everything the caller's earlier commands did once
-- they have run, and any other client's writes either whole or not at all
-- per key (Note [Store-wide commands] in "Kv.Server").
survey :: Store -> Now -> Survey -> IO Reply
survey store clocks op = case op of
  CountKeys -> RInt <$> foldColors store (\n _ m -> keysFold (\c _ e -> if live e then c + 1 else c) n m) 0
  MatchKeys wanted -> RArray <$> foldColors store (\acc _ m -> [ RBulk k | (k, e) <- keysToList m, live e, wanted k ] ++ acc) []
  where
    live (Entry _ (ExpiresAt deadline _)) = deadline > nowMono clocks
    live _ = True

-- | The colors whose maps hold keys (live or expired), read as 'survey'
-- reads them, in descending order.
occupiedColors :: Store -> IO [Int]
occupiedColors store = foldColors store (\acc i m -> if keysNull m then acc else i : acc) []

-- | Fold over every color's map, from any thread (see 'survey').
foldColors :: Store -> (a -> Int -> Keys Entry -> a) -> a -> IO a
foldColors (Store maps _) f = go 0
  where
    go !i !z
      | i == sizeofArray maps = return z
      | otherwise = readIORef (indexArray maps i) >>= \m -> go (i + 1) (f z i m)

-- | Delete every key of a color, and cancel their expiry timers. Must run
-- as an event of that color.
flushColor :: Store -> Int -> IO ()
flushColor (Store maps _) color = do
  let ref = indexArray maps color
  m <- readIORef ref
  forM_ (keysToList m) (\(_, Entry _ e) -> cancel e)
  writeIORef ref emptyKeys
