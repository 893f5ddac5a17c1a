{-# LANGUAGE BangPatterns, MagicHash, UnboxedTuples #-}
-- | A string value's bytes as the store keeps them (Note [Stored
-- strings]).
module Kv.Str
  ( Str
  , strCopy
  , strString
  , strLength
  , strByte
  , strBuild
  , writeStr
  , prefetchStr
  , sharedBulkBytes
  , unpinnedCopy
  ) where

import Control.Monad.Primitive (RealWorld)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.Primitive.ByteArray
import Data.Word (Word8)
import Foreign.Ptr (Ptr, plusPtr)
import GHC.Exts (Int (..), Ptr (..), copyAddrToByteArray#, prefetchByteArray0#)
import GHC.ForeignPtr (ForeignPtr (..), ForeignPtrContents (PlainPtr), unsafeWithForeignPtr)
import GHC.IO (IO (..), unsafeDupablePerformIO)

-- Note [Stored strings]
-- ~~~~~~~~~~~~~~~~~~~~~
-- A string value lives as long as its key, usually far longer than the
-- request that set it, so it is kept as a byte array of its own, not as a
-- 'ByteString': a 'ByteString' is a pinned array behind two more objects
-- (the string and its pointer's contents), and pinned arrays share
-- blocks, which stay allocated while any array in them lives. Under
-- writes spread over many keys every block soon holds a few live values
-- among dead ones, so the blocks of short values would hold several
-- times the values' bytes; and the collector would copy three objects
-- per stored string where one suffices.
--
-- A string of 'sharedBulkBytes' or more is pinned instead: a reply sends
-- it from where it is stored, without a copy (Note [Replies in place] in
-- "Kv.Out"), and an array that large takes blocks of its own anyway. A
-- 'Str' is never written once made.

-- | A stored string's bytes.
newtype Str = Str ByteArray

instance Eq Str where
  Str a == Str b = a == b

instance Show Str where
  showsPrec d s = showsPrec d (strString s)

-- | Bulk strings from this size on (16 KiB) are sent from where they are
-- stored (Note [Replies in place] in "Kv.Out"), and stored strings this
-- large are pinned (Note [Stored strings]).
sharedBulkBytes :: Int
sharedBulkBytes = 16384

-- | A string's bytes, copied to be stored.
strCopy :: ByteString -> Str
strCopy s = Str $ unsafeDupablePerformIO $
  bytesCopy (if B.length s >= sharedBulkBytes then newPinnedByteArray else newByteArray) s

-- | An unpinned copy of a string's bytes.
unpinnedCopy :: ByteString -> IO ByteArray
unpinnedCopy = bytesCopy newByteArray

-- | A copy of a string's bytes in an array the given function makes.
bytesCopy :: (Int -> IO (MutableByteArray RealWorld)) -> ByteString -> IO ByteArray
bytesCopy new (BI.PS fp off n@(I# n#)) = do
  MutableByteArray m <- new n
  unsafeWithForeignPtr fp $ \p -> case p `plusPtr` off of
    Ptr addr -> IO (\st -> (# copyAddrToByteArray# addr m 0# n# st, () #))
  unsafeFreezeByteArray (MutableByteArray m)
{-# INLINE bytesCopy #-}

-- | A stored string's bytes as a 'ByteString': a pinned one's own bytes,
-- a small one's copied.
strString :: Str -> ByteString
strString (Str a)
  | isByteArrayPinned a = unsafeDupablePerformIO $ do
      MutableByteArray m <- unsafeThawByteArray a
      let !(Ptr addr) = byteArrayContents a
      return (BI.PS (ForeignPtr addr (PlainPtr m)) 0 n)
  | otherwise = BI.unsafeCreate n (\p -> copyByteArrayToPtr p a 0 n)
  where n = sizeofByteArray a

-- | How many bytes a stored string has.
strLength :: Str -> Int
strLength (Str a) = sizeofByteArray a
{-# INLINE strLength #-}

-- | The byte at an index of a stored string.
strByte :: Str -> Int -> Word8
strByte (Str a) = indexByteArray a
{-# INLINE strByte #-}

-- | A small stored string of n bytes, written by the given action.
strBuild :: Int -> (MutableByteArray RealWorld -> IO ()) -> Str
strBuild n write = Str $ unsafeDupablePerformIO $ do
  m <- newByteArray n
  write m
  unsafeFreezeByteArray m
{-# INLINE strBuild #-}

-- | Write a stored string's bytes at the pointer; the pointer after them.
writeStr :: Ptr Word8 -> Str -> IO (Ptr Word8)
writeStr p (Str a) = (p `plusPtr` n) <$ copyByteArrayToPtr p a 0 n
  where n = sizeofByteArray a
{-# INLINE writeStr #-}

-- | Start loading a stored string's first bytes.
prefetchStr :: Str -> IO ()
prefetchStr (Str (ByteArray a)) = IO (\s -> (# prefetchByteArray0# a 0# s, () #))
{-# INLINE prefetchStr #-}
