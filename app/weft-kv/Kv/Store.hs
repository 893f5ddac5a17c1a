{-# LANGUAGE BangPatterns #-}
-- | weft-kv's data: one map per color, each touched only by events of its
-- color, so that no lock or atomic operation guards any key
-- (Note [One store per color]).
module Kv.Store
  ( -- * Keys and colors
    keyColor
  , colorCount
    -- * Values
  , Value (..)
  , ZSet (..)
  , emptyZSet
    -- * Operations on one key
  , KeyOp
  , Outcome (..)
  , Update (..)
    -- * The store
  , Store
  , newStore
  , runKeyOp
  , expireDue
  ) where

import Control.Monad (forM_, when)
import Data.Bits (shiftR, xor, (.&.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import qualified Data.Map.Strict as Map
import Data.Primitive.Array (Array, arrayFromListN, indexArray)
import qualified Data.Sequence as Seq
import qualified Data.Set as Set
import Data.Word (Word8, Word64)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (peekByteOff)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.ForeignPtr (unsafeWithForeignPtr)

import Weft.Timer (TimeoutKey, cancelTimeout)

import Kv.Resp (Reply)

-- Note [One store per color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A key's color is a hash of its bytes folded to 16 bits ('keyColor'),
-- and every command on a key runs as an event of that color. Weft.Color
-- never runs two events of one color at once, so the map of a color,
-- 'Store' entry number 'keyColor', is only ever read and written by one
-- event at a time, and in the order the events were posted: plain
-- 'IORef's suffice, with no lock, no atomic operation and no retry. The
-- 65536 maps are small (a key set spread over all of them), so a
-- 'Map.Map' with its O(log n) compares costs little; unrelated keys in
-- different colors run in parallel on different cores.

-- | The number of colors keys are spread over: 65536, the width of a
-- Weft.Color color.
colorCount :: Int
colorCount = 65536

-- | The color of a key: a 64-bit FNV-style hash of its bytes, taken eight
-- at a time (then the tail byte by byte), mixed and cut to 16 bits. Word-wise,
-- because a key's color is computed for every command on it: byte-wise
-- FNV-1a was a tenth of weft-kv's instructions under MSET (callgrind).
keyColor :: ByteString -> Int
keyColor (BI.PS fp off len) =
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
    return (fromIntegral ((f2 `xor` (f2 `shiftR` 33)) .&. 0xffff))

------------------------------------------------------------------------------
-- Values

-- | What a key holds.
data Value
  = VString !ByteString
  | VList !(Seq.Seq ByteString)
  | VSet !(Set.Set ByteString)
  | VHash !(Map.Map ByteString ByteString)
  | VZSet !ZSet

-- | A sorted set: each member's score, and the members in (score, member)
-- order.
data ZSet = ZSet !(Map.Map ByteString Double) !(Set.Set (Double, ByteString))

emptyZSet :: ZSet
emptyZSet = ZSet Map.empty Set.empty

-- | A key and what it holds, with its expiry if any.
data Entry = Entry !Value !Expiry

data Expiry
  = Persistent
  | ExpiresAt !Word64 !TimeoutKey
    -- ^ The monotonic deadline in nanoseconds, and the timer that deletes
    -- the key then.

------------------------------------------------------------------------------
-- Operations

-- | A command's work on one key: given the monotonic clock, the key's
-- expiry deadline on that clock (0 if none; both in nanoseconds) and its
-- value ('Nothing' if the key does not exist or has expired), what to
-- change and what to answer. Pure, so that the store alone deals with
-- expiry timers and memory.
type KeyOp = Word64 -> Word64 -> Maybe Value -> Outcome

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
  | FreshIn !Value !Int
    -- ^ A new value that expires after this many microseconds (SET EX).
  | ExpireIn !Int
    -- ^ The key (which must exist) expires after this many microseconds.

------------------------------------------------------------------------------
-- The store

-- | The keys, one map per color.
newtype Store = Store (Array (IORef (Map.Map ByteString Entry)))

-- | An empty store.
newStore :: IO Store
newStore = Store . arrayFromListN colorCount <$> mapM (const (newIORef Map.empty)) [1 .. colorCount]

-- | Run an operation on a key, at the given monotonic time in
-- nanoseconds (keys whose deadline is not after it have expired). Must run
-- as an event of the key's color (Note [One store per color]). @arm delay@
-- registers the key's expiry timer (delay in microseconds) and returns its
-- key; the timer must end up calling 'expireDue' on the key's color.
runKeyOp :: Store -> (Int -> IO TimeoutKey) -> Word64 -> ByteString -> KeyOp -> IO Reply
runKeyOp (Store maps) arm now key op = do
  let ref = indexArray maps (keyColor key)
  m <- readIORef ref
  -- A key already past its deadline is gone, whatever its timer says.
  -- (Strict, so that no tuple or selector thunks are built per command.)
  let !(Found m0 live expiry deadlineOf) = case Map.lookup key m of
        Just (Entry v e@(ExpiresAt deadline _))
          | now >= deadline -> Found (Map.delete key m) Nothing Persistent 0
          | otherwise -> Found m (Just v) e deadline
        Just (Entry v Persistent) -> Found m (Just v) Persistent 0
        Nothing -> Found m Nothing Persistent 0
      !(Outcome update reply) = op now deadlineOf live
      -- 'Map.adjust' keeps the stored key of an existing entry; a new key
      -- is copied, so as not to hold on to the request buffer it was
      -- sliced from.
      put e = writeIORef ref $ case live of
        Just _ -> Map.adjust (const e) key m0
        Nothing -> Map.insert (B.copy key) e m0
      expiring v us = do
        timer <- arm us
        put (Entry v (ExpiresAt (now + fromIntegral us * 1000) timer))
  case update of
    Keep -> when (Map.size m0 /= Map.size m) (writeIORef ref m0)
    Delete -> do
      cancel expiry
      writeIORef ref (Map.delete key m0)
    Replace v -> put (Entry v expiry)
    Fresh v -> do
      cancel expiry
      put (Entry v Persistent)
    FreshIn v us -> do
      cancel expiry
      expiring v us
    ExpireIn us -> forM_ live $ \v -> do
      cancel expiry
      if us <= 0 then writeIORef ref (Map.delete key m0) else expiring v us
  return reply
  where
    cancel Persistent = return ()
    cancel (ExpiresAt _ timer) = () <$ cancelTimeout timer

-- | What 'runKeyOp' found: the map without the key if it had expired, the
-- live value, its expiry and deadline (0 if none).
data Found = Found !(Map.Map ByteString Entry) !(Maybe Value) !Expiry !Word64

-- | A key's expiry timer fired: delete the key if its deadline has come
-- (a key that was overwritten, deleted or given a later expiry since is
-- left alone). Must run as an event of the key's color.
expireDue :: Store -> ByteString -> IO ()
expireDue (Store maps) key = do
  let ref = indexArray maps (keyColor key)
  m <- readIORef ref
  case Map.lookup key m of
    Just (Entry _ (ExpiresAt deadline _)) -> do
      now <- getMonotonicTimeNSec
      when (now >= deadline) $ writeIORef ref (Map.delete key m)
    _ -> return ()
