{-# LANGUAGE BangPatterns, MagicHash, UnboxedTuples #-}
-- | A key and its small string value kept outside the collected heap
-- (Note [Strings off the heap]).
module Kv.Record
  ( Record
  , recordAddr
  , addrRecord
  , noRecord
  , isRecord
  , recordable
  , recordNew
  , recordNewBytes
  , recordNewWith
  , recordOverwriteWith
  , recordReadWith
  , recordKind
  , pokeBytes
  , joinStrings
  , splitStrings
  , recordedItems
  , recordKeyIs
  , recordKeyCompare
  , compareWithBytes
  , recordKeyWith
  , recordKeyBytes
  , recordValue
  , recordValueBytes
  , recordFits
  , recordOverwrite
  , recordOverwriteBytes
  , recordFree
  , prefetchRecord
  , recordsLive
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Bits (unsafeShiftL, unsafeShiftR, (.&.), (.|.))
import Data.Primitive.ByteArray (MutableByteArray (..), newByteArray, writeByteArray)
import Data.Word (Word32, Word64, Word8)
import Foreign.Marshal.Alloc (free, mallocBytes)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Ptr (Ptr, nullPtr, plusPtr)
import Foreign.Storable (peekByteOff, pokeByteOff)
import GHC.Exts (Int (..), Ptr (..), RealWorld, fetchAddIntArray#, prefetchAddr0#)
import GHC.ForeignPtr (unsafeWithForeignPtr)
import GHC.IO (IO (..), unsafePerformIO)

import Kv.Str (Str, sharedBulkBytes, strFromPtr, strLength, writeStr)

-- Note [Strings off the heap]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Most keys of a large store hold small strings that live as long as
-- the store, and GHC's copying collector copies every live object at
-- every major collection, and every new one once more when it leaves the
-- nursery: a store that grows by SETs to new keys spends its collector's
-- time copying their entries and values. So a key without an expiry
-- whose value is a string below 'sharedBulkBytes' is kept as a record
-- ('recordable'):
-- one block from @malloc@ holding the key's and the value's lengths
-- (4 bytes each, the value's with its kind in the top byte:
-- 'recordKind'), the key's bytes and the value's, which the collector
-- never sees. A color's table holds the record's address in an unboxed
-- array beside its hashes (Note [Records in slots] in "Kv.Table"), and no
-- heap object at all stands for the key. A small list, hash or set is
-- kept so too, its items as bytes of another kind (Note [Small values in
-- records] in "Kv.Store"), and so are a large hash's fields and values
-- and a large set's members, each in its own table (Note [Members in
-- tables] in "Kv.Members").
--
-- A record belongs to its table's slot alone. Whoever reads it copies
-- out what it needs at once ('recordValue', 'recordKeyBytes', in IO),
-- since the next write to the key may write
-- the value's bytes in place ('recordOverwrite', a value of the same
-- kind and length) or free the record (any other write, or the key's deletion).
-- The table frees a slot's record when the slot changes to another
-- record or to a heap entry, when the key is deleted, and when the table
-- is cleared ('recordFree'). 'recordsLive' counts the records made and
-- not yet freed, and their bytes: a store emptied by FLUSHALL has none.

-- | A key and its string value off the heap, or 'noRecord'.
newtype Record = Record (Ptr Word8)
  deriving Eq

-- | A record's address, as a table keeps it.
recordAddr :: Record -> Ptr Word8
recordAddr (Record p) = p
{-# INLINE recordAddr #-}

-- | The record at an address a table kept.
addrRecord :: Ptr Word8 -> Record
addrRecord = Record
{-# INLINE addrRecord #-}

-- | No record: the slot's entry is on the heap (or the slot is vacant).
noRecord :: Record
noRecord = Record nullPtr

isRecord :: Record -> Bool
isRecord (Record p) = p /= nullPtr
{-# INLINE isRecord #-}

-- | Can this key and a value of this length be a record? A value below
-- 'sharedBulkBytes' (a larger string is pinned and sent from where it
-- is: Note [Stored strings] in "Kv.Str"), under a key whose length the
-- record's 4 bytes hold.
recordable :: ByteString -> Int -> Bool
recordable key vlen = vlen < sharedBulkBytes && B.length key <= fromIntegral (maxBound :: Word32)
{-# INLINE recordable #-}

headerBytes :: Int
headerBytes = 8

-- The second word holds the value's length in its low 24 bits (a
-- record's value is under 'sharedBulkBytes') and the value's kind above
-- them: 0 for a string's bytes, else whatever its maker says ('recordKind').
keyLength, valueLength, valueWord :: Ptr Word8 -> IO Int
keyLength p = fromIntegral <$> (peekByteOff p 0 :: IO Word32)
valueLength p = (.&. 0xffffff) <$> valueWord p
valueWord p = fromIntegral <$> (peekByteOff p 4 :: IO Word32)
{-# INLINE keyLength #-}
{-# INLINE valueLength #-}
{-# INLINE valueWord #-}

-- | What kind of value the record holds: 0 for a string's bytes, else
-- what 'recordNewBytes' was given.
recordKind :: Record -> IO Int
recordKind (Record p) = (`unsafeShiftR` 24) <$> valueWord p
{-# INLINE recordKind #-}

-- | A new record of a key and a small value ('recordable').
recordNew :: ByteString -> Str -> IO Record
recordNew key v = recordNewWith key 0 (strLength v) (\d -> () <$ writeStr d v)

-- | A new record of a key and a small value given as bytes
-- ('recordable'), of a kind from 0 (a string) to 255.
recordNewBytes :: ByteString -> Int -> ByteString -> IO Record
recordNewBytes key kind v = recordNewWith key kind (B.length v) (pokeBytes v)

-- | A new record of a key and a value of the given kind and length,
-- which the writer puts at the address it is given.
recordNewWith :: ByteString -> Int -> Int -> (Ptr Word8 -> IO ()) -> IO Record
recordNewWith (BI.PS fp off klen) kind vlen write = do
  let size = headerBytes + klen + vlen
  p <- mallocBytes size
  pokeByteOff p 0 (fromIntegral klen :: Word32)
  pokeByteOff p 4 (fromIntegral (vlen .|. kind `unsafeShiftL` 24) :: Word32)
  unsafeWithForeignPtr fp $ \k -> copyBytes (p `plusPtr` headerBytes) (k `plusPtr` off) klen
  write (p `plusPtr` (headerBytes + klen))
  count 1 size
  return (Record p)
{-# INLINE recordNewWith #-}

-- | Copy a string's bytes to an address (as 'Kv.Str.writeStr' does a
-- stored string's).
pokeBytes :: ByteString -> Ptr Word8 -> IO ()
pokeBytes (BI.PS fp off len) d = unsafeWithForeignPtr fp $ \b -> copyBytes d (b `plusPtr` off) len

-- | Is the record's key this string?
recordKeyIs :: Record -> ByteString -> IO Bool
recordKeyIs (Record p) (BI.PS fp off len) = do
  klen <- keyLength p
  if klen /= len then return False else
    unsafeWithForeignPtr fp $ \k -> sameAt (p `plusPtr` headerBytes) (k `plusPtr` off) len
{-# INLINE recordKeyIs #-}

-- | The string against the record's key, in byte order (shorter first
-- where one is the other's start), as 'compare' orders strings.
recordKeyCompare :: ByteString -> Record -> IO Ordering
recordKeyCompare s (Record p) = keyLength p >>= compareWithBytes s (p `plusPtr` headerBytes)
{-# INLINE recordKeyCompare #-}

-- | The string against the n bytes at an address, in byte order, as
-- 'compare' orders strings.
compareWithBytes :: ByteString -> Ptr Word8 -> Int -> IO Ordering
compareWithBytes (BI.PS fp off len) p n = do
  c <- unsafeWithForeignPtr fp $ \k -> c_memcmpPtrs (k `plusPtr` off) p (fromIntegral (min len n))
  return $! if c /= 0 then compare c 0 else compare len n

foreign import ccall unsafe "string.h memcmp"
  c_memcmpPtrs :: Ptr Word8 -> Ptr Word8 -> CSize -> IO CInt

-- | Are the n bytes at the two addresses the same? Word by word, the
-- last word overlapping the one before it: most keys are a few words,
-- compared here without a call out to C.
sameAt :: Ptr Word8 -> Ptr Word8 -> Int -> IO Bool
sameAt a b n
  | n < 8 = bytesFrom 0
  | otherwise = wordsFrom 0
  where
    word :: Ptr Word8 -> Int -> IO Word64
    word = peekByteOff
    wordsFrom !i
      | i + 8 >= n = (==) <$> word a (n - 8) <*> word b (n - 8)
      | otherwise = do
          x <- word a i
          y <- word b i
          if x == y then wordsFrom (i + 8) else return False
    bytesFrom !i
      | i >= n = return True
      | otherwise = do
          x <- peekByteOff a i :: IO Word8
          y <- peekByteOff b i
          if x == y then bytesFrom (i + 1) else return False

-- | Read the record's key with the reader, given its address and length;
-- the reader copies out what it keeps.
recordKeyWith :: Record -> (Ptr Word8 -> Int -> IO a) -> IO a
recordKeyWith (Record p) readAt = keyLength p >>= readAt (p `plusPtr` headerBytes)

-- | A copy of the record's key.
recordKeyBytes :: Record -> IO ByteString
recordKeyBytes (Record p) = do
  klen <- keyLength p
  BI.create klen (\d -> copyBytes d (p `plusPtr` headerBytes) klen)

-- | A copy of the record's value.
recordValue :: Record -> IO Str
recordValue r = recordReadWith r strFromPtr

-- | A copy of the record's value as a string of its own.
recordValueBytes :: Record -> IO ByteString
recordValueBytes r = recordReadWith r (\p vlen -> BI.create vlen (\d -> copyBytes d p vlen))

-- | Can a value of this kind and length be written over the record's?
-- Of the same kind and length only.
recordFits :: Record -> Int -> Int -> IO Bool
recordFits (Record p) kind vlen = (== (vlen .|. kind `unsafeShiftL` 24)) <$> valueWord p
{-# INLINE recordFits #-}

-- | Write the string over the record's value ('recordFits').
recordOverwrite :: Record -> Str -> IO ()
recordOverwrite r v = recordOverwriteWith r (\d -> () <$ writeStr d v)
{-# INLINE recordOverwrite #-}

-- | Write over the record's value with the writer, given the value's
-- address ('recordFits').
recordOverwriteWith :: Record -> (Ptr Word8 -> IO ()) -> IO ()
recordOverwriteWith (Record p) write = do
  klen <- keyLength p
  write (p `plusPtr` (headerBytes + klen))
{-# INLINE recordOverwriteWith #-}

-- | Read the record's value with the reader, given its address and
-- length; the reader copies out what it keeps.
recordReadWith :: Record -> (Ptr Word8 -> Int -> IO a) -> IO a
recordReadWith (Record p) readAt = do
  klen <- keyLength p
  vlen <- valueLength p
  readAt (p `plusPtr` (headerBytes + klen)) vlen

-- | Write the bytes over the record's value ('recordFits').
recordOverwriteBytes :: Record -> ByteString -> IO ()
recordOverwriteBytes r v = recordOverwriteWith r (pokeBytes v)

-- | Give the record's memory back. Nothing may read it after.
recordFree :: Record -> IO ()
recordFree (Record p) = do
  klen <- keyLength p
  vlen <- valueLength p
  free p
  count (-1) (negate (headerBytes + klen + vlen))

-- | Start loading the record's first bytes (its lengths, and a short
-- key's and value's bytes).
prefetchRecord :: Record -> IO ()
prefetchRecord (Record (Ptr a)) = IO (\s -> (# prefetchAddr0# a 0# s, () #))
{-# INLINE prefetchRecord #-}

-- | The records made and not yet freed, over every table, and their
-- bytes (headers included, @malloc@'s own overhead not).
recordsLive :: IO (Int, Int)
recordsLive = (,) <$> counter 0 <*> counter 1
  where counter i = fetchAdd i 0

-- The counts: records, and bytes. Atomic, as tables on several cores
-- make and free records.
counts :: MutableByteArray RealWorld
counts = unsafePerformIO $ do
  m <- newByteArray 16
  writeByteArray m 0 (0 :: Int)
  writeByteArray m 1 (0 :: Int)
  return m
{-# NOINLINE counts #-}

count :: Int -> Int -> IO ()
count n bytes = () <$ fetchAdd 0 n <* fetchAdd 1 bytes

fetchAdd :: Int -> Int -> IO Int
fetchAdd (I# i) (I# d) = case counts of
  MutableByteArray m -> IO (\s -> case fetchAddIntArray# m i d s of (# s1, old #) -> (# s1, I# old #))

-- | The most items (elements, members) a collection has that a record
-- holds (Note [Small values in records] in "Kv.Store").
recordedItems :: Int
recordedItems = 16

-- | Strings joined into one, each after its length in 4 bytes: how a
-- record holds the items of a small collection.
joinStrings :: [ByteString] -> ByteString
joinStrings xs = BI.unsafeCreate (sum (map ((+ 4) . B.length) xs)) (go xs)
  where
    go [] _ = return ()
    go (x : rest) d = do
      pokeByteOff d 0 (fromIntegral (B.length x) :: Word32)
      pokeBytes x (d `plusPtr` 4)
      go rest (d `plusPtr` (4 + B.length x))

-- | The strings 'joinStrings' joined, as slices of its result.
splitStrings :: ByteString -> [ByteString]
splitStrings b
  | B.length b < 4 = []
  | otherwise =
      let n = fromIntegral (BU.unsafeIndex b 0) .|. fromIntegral (BU.unsafeIndex b 1) `unsafeShiftL` 8
              .|. fromIntegral (BU.unsafeIndex b 2) `unsafeShiftL` 16 .|. fromIntegral (BU.unsafeIndex b 3) `unsafeShiftL` 24 :: Int
          (x, rest) = B.splitAt n (BU.unsafeDrop 4 b)
      in x : splitStrings rest
