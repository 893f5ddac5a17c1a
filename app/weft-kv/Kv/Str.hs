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
  , strFromPtr
  , writeStr
  , prefetchStr
  , strClone
  , strFits
  , strOverwrite
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
import GHC.Exts (Int (..), Ptr (..), copyAddrToByteArray#, isTrue#, prefetchByteArray0#, reallyUnsafePtrEquality#)
import GHC.ForeignPtr (ForeignPtr (..), ForeignPtrContents (PlainPtr), unsafeWithForeignPtr)
import GHC.IO (IO (..), unsafeDupablePerformIO)

-- Note [Stored strings]
-- ~~~~~~~~~~~~~~~~~~~~~
-- A string value lives as long as its key, usually far longer than the
-- request that set it. A small one under a key without an expiry is kept
-- off the collected heap altogether, in its key's record (Note [Strings
-- off the heap] in "Kv.Record"), and commands see a copy of it as a
-- 'Str'. Every other string is kept as a byte array of its own, not as a
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
-- "Kv.Out"), and an array that large takes blocks of its own anyway. So a
-- string is pinned exactly when it is that long, and its length says so
-- (asking the array would read its block's descriptor: another cache
-- miss per string).
--
-- A small (unpinned) string belongs to its key's entry alone: whatever
-- leaves the key's color carries a copy of it ('strClone': a reply, or
-- a value that RENAME or COPY moves), and nothing reads it lazily after
-- its operation. So a write of a string of the same length
-- (SET over a key, INCR keeping its digit count) copies the new bytes
-- over the stored ones ('strOverwrite') and leaves the entry as it is:
-- no new entry, nothing for the collector to move into the old
-- generation, and no cell to mark. A pinned string may be in a send
-- (Note [Replies in place] in "Kv.Out") and is never written once made.

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
bytesCopy new (BI.PS fp off n) = unsafeWithForeignPtr fp $ \p -> arrayFrom new (p `plusPtr` off) n
{-# INLINE bytesCopy #-}

-- | A copy of the n bytes at the pointer in an array the given function
-- makes.
arrayFrom :: (Int -> IO (MutableByteArray RealWorld)) -> Ptr Word8 -> Int -> IO ByteArray
arrayFrom new (Ptr addr) n@(I# n#) = do
  MutableByteArray m <- new n
  IO (\st -> (# copyAddrToByteArray# addr m 0# n# st, () #))
  unsafeFreezeByteArray (MutableByteArray m)
{-# INLINE arrayFrom #-}

-- | A stored string's bytes as a 'ByteString': a pinned one's own bytes,
-- a small one's copied.
strString :: Str -> ByteString
strString (Str a)
  | n >= sharedBulkBytes = unsafeDupablePerformIO $ do
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

-- | A small stored string of n bytes (below 'sharedBulkBytes'), written by
-- the given action.
strBuild :: Int -> (MutableByteArray RealWorld -> IO ()) -> Str
strBuild n write = Str $ unsafeDupablePerformIO $ do
  m <- newByteArray n
  write m
  unsafeFreezeByteArray m
{-# INLINE strBuild #-}

-- | A small string (below 'sharedBulkBytes') of the n bytes at the
-- pointer, copied now.
strFromPtr :: Ptr Word8 -> Int -> IO Str
strFromPtr p n = Str <$> arrayFrom newByteArray p n

-- | Write a stored string's bytes at the pointer; the pointer after them.
writeStr :: Ptr Word8 -> Str -> IO (Ptr Word8)
writeStr p (Str a) = (p `plusPtr` n) <$ copyByteArrayToPtr p a 0 n
  where n = sizeofByteArray a
{-# INLINE writeStr #-}

-- | Start loading a stored string's first bytes.
prefetchStr :: Str -> IO ()
prefetchStr (Str (ByteArray a)) = IO (\s -> (# prefetchByteArray0# a 0# s, () #))
{-# INLINE prefetchStr #-}

-- | A stored string as it may leave its key's color (a reply, or a
-- value that moves to another key): a small one copied, a pinned one
-- itself (Note [Stored strings]). Force it before the key's next write.
strClone :: Str -> Str
strClone s@(Str a)
  | n >= sharedBulkBytes = s
  | otherwise = strBuild n (\m -> copyByteArray m 0 a 0 n)
  where n = sizeofByteArray a

-- | Can the new string be written over the stored one? Both small and of
-- one length (Note [Stored strings]).
strFits :: Str -> Str -> Bool
strFits (Str old) (Str new) = n == sizeofByteArray new && n < sharedBulkBytes
  where n = sizeofByteArray old
{-# INLINE strFits #-}

-- | Write the new string's bytes over the stored one ('strFits').
strOverwrite :: Str -> Str -> IO ()
strOverwrite (Str old) (Str new)
  | isTrue# (reallyUnsafePtrEquality# old new) = return ()
  | otherwise = do
      m <- unsafeThawByteArray old
      copyByteArray m 0 new 0 (sizeofByteArray new)
