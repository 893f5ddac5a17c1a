{-# LANGUAGE BangPatterns, MagicHash, UnliftedFFITypes #-}
-- | A key as its entry stores it (Note [Keys in entries]), and its hash.
module Kv.Key
  ( Key
  , storedKey
  , keyIs
  , keyBytes
  , keyHash
  , bytesHash
  ) where

import Data.Bits (complement, shiftL, shiftR, xor, (.&.), (.|.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.Primitive.ByteArray (ByteArray (..), copyByteArrayToPtr, emptyByteArray, sizeofByteArray)
import Data.Word (Word8, Word64)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (peekByteOff, pokeByteOff)
import GHC.ByteOrder (ByteOrder (..), targetByteOrder)
import GHC.Exts (ByteArray#)
import GHC.ForeignPtr (unsafeWithForeignPtr)

import Weft.Net (byteAt)

import Kv.Str (unpinnedCopy)

-- Note [Keys in entries]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- A lookup that finds its key's hash in a table compares the key itself
-- with the entry's (Note [A color's table] in "Kv.Table"), and in a large
-- store each line it reads for that is a cache miss. So an entry holds
-- its key's length and first 16 bytes in three words of its own, and a
-- key of at most 16 bytes (most keys: redis-benchmark's are 16) is
-- compared there, with no array to follow, and needs none at all: its
-- array of bytes is one shared empty array. A longer key keeps all its bytes
-- in an unpinned array, compared after its words agree. The words hold
-- the bytes in order from the least significant byte, zero after the
-- end; the length tells a key from the same key with zero bytes added.

-- | A stored key: its length, its first 16 bytes (two words), and, if
-- it is longer, all its bytes (else an empty array).
data Key = Key {-# UNPACK #-} !Int {-# UNPACK #-} !Word64 {-# UNPACK #-} !Word64 {-# UNPACK #-} !ByteArray

-- | The most bytes a key keeps in its words alone.
wordBytes :: Int
wordBytes = 16

-- | A key's bytes, copied to be stored.
storedKey :: ByteString -> IO Key
storedKey s = do
  let n = B.length s
  rest <- if n <= wordBytes then return emptyByteArray else unpinnedCopy s
  return (Key n (wordAt s 0) (wordAt s 8) rest)

-- | Eight bytes of a string from an offset, the first the least
-- significant, zero past its end.
wordAt :: ByteString -> Int -> Word64
wordAt s@(BI.PS fp off len) from
  -- Read without keepAlive# (Note [Reading bytes without keepAlive#] in
  -- "Weft.Internal.Bytes"): a lookup reads two words of its key.
  | targetByteOrder == LittleEndian && from + 8 <= len =
      BI.accursedUnutterablePerformIO (unsafeWithForeignPtr fp (\p -> peekByteOff p (off + from)))
  | otherwise = go (min len (from + 8) - 1) 0
  where
    go !i !w
      | i < from = w
      | otherwise = go (i - 1) (w `shiftL` 8 .|. fromIntegral (byteAt s i))
{-# INLINE wordAt #-}

-- | Is the stored key this string?
keyIs :: Key -> ByteString -> Bool
keyIs (Key n w0 w1 rest) s =
  n == B.length s && wordAt s 0 == w0 && wordAt s 8 == w1
    && (n <= wordBytes || sameBytes rest s)
{-# INLINE keyIs #-}

-- | A stored key as a fresh string.
keyBytes :: Key -> ByteString
keyBytes (Key n w0 w1 rest)
  | n > wordBytes = BI.unsafeCreate n (\p -> copyByteArrayToPtr p rest 0 n)
  | otherwise = BI.unsafeCreate n $ \p ->
      mapM_ (\i -> pokeByteOff p i (byteOf (if i < 8 then w0 else w1) (i `rem` 8))) [0 .. n - 1]
  where
    byteOf :: Word64 -> Int -> Word8
    byteOf w i = fromIntegral (w `shiftR` (8 * i))

-- | Are an array's bytes this string's?
sameBytes :: ByteArray -> ByteString -> Bool
sameBytes k@(ByteArray k#) (BI.PS fp off len) =
  sizeofByteArray k == len
    && (len == 0 || BI.accursedUnutterablePerformIO (unsafeWithForeignPtr fp $ \p ->
          (== 0) <$> c_memcmpArray k# (p `plusPtr` off) (fromIntegral len)))

-- memcmp of an unpinned array (unsafe calls may pass one) and an address.
foreign import ccall unsafe "string.h memcmp"
  c_memcmpArray :: ByteArray# -> Ptr Word8 -> CSize -> IO CInt

------------------------------------------------------------------------------
-- Hashes

-- | The hash of a key: a 64-bit FNV-style hash of its bytes, taken eight
-- at a time (then the tail byte by byte), mixed. Its low 16 bits are the
-- key's color in a store of 'colorCount' colors; the whole finds the key
-- in its color's table ("Kv.Table"). Word-wise,
-- because a key's color is computed for every command on it: byte-wise
-- FNV-1a was a tenth of weft-kv's instructions under MSET (callgrind).
--
-- Note [Hash tags]
-- ~~~~~~~~~~~~~~~~
-- A key with a hash tag, as redis cluster defines one (the bytes between
-- its first @{@ and the first @}@ after it, if there are any), takes its
-- color from the tag's hash alone: keys that share a tag share a color,
-- so a command on several of them is one event, atomic, and a blocked
-- command on them is served inside the write that wakes it (Note
-- [Serving blocked commands] in "Kv.Batch"). The bits above the color
-- are still the whole key's, so that such keys do not collide in their
-- color's table. Only a key with a @{@ is looked at for a tag.
keyHash :: ByteString -> Int
keyHash key@(BI.PS fp off len) =
  BI.accursedUnutterablePerformIO $ unsafeWithForeignPtr fp $ \base -> do
    -- One pass: the bytes' hash ('bytesHash') and whether any is a @{@.
    let p = base `plusPtr` off :: Ptr Word8
        wordsEnd = len - len `rem` 8
        goWords !i !h !braces
          | i >= wordsEnd = goBytes i h braces
          | otherwise = do
              w <- peekByteOff p i :: IO Word64
              goWords (i + 8) (mixWord h w) (braces .|. braceBits w)
        goBytes !i !h !braces
          | i >= len = return $! done h braces
          | otherwise = do
              b <- peekByteOff p i :: IO Word8
              goBytes (i + 1) (mixWord h (fromIntegral b)) (if b == 123 then 1 else braces)
        done h braces = let !whole = fromIntegral (finalHash h)
                        in if braces /= 0 then taggedHash key whole else whole
    goWords 0 (hashSeed len) 0

-- | Non-zero if a byte of the word is a @{@: the word xor eight @{@s
-- then has a zero byte.
braceBits :: Word64 -> Word64
braceBits w = let x = w `xor` 0x7b7b7b7b7b7b7b7b
              in (x - 0x0101010101010101) .&. complement x .&. 0x8080808080808080
{-# INLINE braceBits #-}

-- | The hash of a string's bytes (see 'keyHash').
bytesHash :: ByteString -> Int
bytesHash bs = fromIntegral (finalHash (foldBytes mixWord (\h b -> mixWord h (fromIntegral b)) (hashSeed (B.length bs)) bs))

-- | Where the hash of a string of this length starts.
hashSeed :: Int -> Word64
hashSeed len = 14695981039346656037 `xor` fromIntegral len
{-# INLINE hashSeed #-}

-- | A strict left fold over a string's bytes, eight at a time (a word
-- read as the machine reads it), then the last few one by one.
foldBytes :: (Word64 -> Word64 -> Word64) -> (Word64 -> Word8 -> Word64) -> Word64 -> ByteString -> Word64
foldBytes word byte z (BI.PS fp off len) =
  BI.accursedUnutterablePerformIO $ unsafeWithForeignPtr fp $ \base -> do
    let p = base `plusPtr` off :: Ptr Word8
        wordsEnd = len - len `rem` 8
        goWords !i !acc
          | i >= wordsEnd = goBytes i acc
          | otherwise = do
              w <- peekByteOff p i :: IO Word64
              goWords (i + 8) (word acc w)
        goBytes !i !acc
          | i >= len = return acc
          | otherwise = do
              b <- peekByteOff p i :: IO Word8
              goBytes (i + 1) (byte acc b)
    goWords 0 z
{-# INLINE foldBytes #-}

-- | A key's hash with the color of its hash tag, if it has one (Note
-- [Hash tags]).
taggedHash :: ByteString -> Int -> Int
taggedHash key h = case B.elemIndex 123 key of
  Just open
    | Just close <- B.elemIndex 125 (B.drop (open + 1) key), close > 0 ->
        (h .&. complement 0xffff) .|. (bytesHash (B.take close (B.drop (open + 1) key)) .&. 0xffff)
  _ -> h
{-# NOINLINE taggedHash #-}

mixWord :: Word64 -> Word64 -> Word64
mixWord h x = (h `xor` x) * 1099511628211
{-# INLINE mixWord #-}

-- | A 64-bit avalanche (MurmurHash3's finaliser), so that every input bit
-- reaches the low 16: 200,000 keys of the form key:%012d land on 62,389
-- colors, as many as uniform random colors would.
finalHash :: Word64 -> Word64
finalHash h =
  let f1 = (h `xor` (h `shiftR` 33)) * 0xff51afd7ed558ccd
      f2 = (f1 `xor` (f1 `shiftR` 33)) * 0xc4ceb9fe1a85ec53
  in f2 `xor` (f2 `shiftR` 33)
{-# INLINE finalHash #-}
