{-# LANGUAGE BangPatterns, MagicHash, UnliftedFFITypes #-}
-- | A key as its entry stores it (Note [Keys in entries]).
module Kv.Key
  ( Key
  , storedKey
  , keyIs
  , keyBytes
  ) where

import Data.Bits (shiftL, shiftR, (.|.))
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
          (== 0) <$> c_memcmp k# (p `plusPtr` off) (fromIntegral len)))

foreign import ccall unsafe "string.h memcmp"
  c_memcmp :: ByteArray# -> Ptr Word8 -> CSize -> IO CInt
