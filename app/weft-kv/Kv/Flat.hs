{-# LANGUAGE BangPatterns #-}
-- | A packed map's flat copy (Note [Packed maps flat] in "Kv.Packed"),
-- read and changed where it lies, in a record, without building the map
-- from it: the commands on a small hash or set that find what they need
-- there, or change a value to one of the same length, copy nothing
-- (Note [Members read in their record] in "Kv.Members"), and a small
-- sorted set's scores are read likewise.
module Kv.Flat
  ( flatItems
  , flatSearch
  , flatValue
  , flatValueAt
  , flatOverwrite
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.Word (Word8)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (peekElemOff)
import GHC.ForeignPtr (unsafeWithForeignPtr)

import Kv.Record (compareWithBytes)

-- | How many ends the copy at the address lists (0 or 1 for no members:
-- member i spans ends 2i to 2i+1, its value 2i+1 to 2i+2).
endCount :: Ptr Word8 -> IO Int
endCount p = peekElemOff (castPtr p) 0
{-# INLINE endCount #-}

-- | End j.
endAt :: Ptr Word8 -> Int -> IO Int
endAt p j = peekElemOff (castPtr p) (1 + j)
{-# INLINE endAt #-}

-- | Where the members' and values' bytes start, after c ends.
bytesAfterEnds :: Ptr Word8 -> Int -> Ptr Word8
bytesAfterEnds p c = p `plusPtr` (8 + 8 * c)
{-# INLINE bytesAfterEnds #-}

-- | How many members the copy at the address holds.
flatItems :: Ptr Word8 -> IO Int
flatItems p = (\c -> if c <= 1 then 0 else (c - 1) `quot` 2) <$> endCount p

-- | Where a member is in the copy: its index if it is one (at least 0),
-- else minus one less the index it would be inserted at.
flatSearch :: Ptr Word8 -> ByteString -> IO Int
flatSearch p k = do
  c <- endCount p
  let bytes = bytesAfterEnds p c
      go !lo !hi
        | lo >= hi = return (-1 - lo)
        | otherwise = do
            let mid = (lo + hi) `quot` 2
            s <- endAt p (2 * mid)
            e <- endAt p (2 * mid + 1)
            o <- compareWithBytes k (bytes `plusPtr` s) (e - s)
            case o of
              LT -> go lo mid
              GT -> go (mid + 1) hi
              EQ -> return mid
  if c <= 1 then return (-1) else go 0 ((c - 1) `quot` 2)

-- | Member i's value, a copy.
flatValue :: Ptr Word8 -> Int -> IO ByteString
flatValue p i = do
  (at, n) <- flatValueAt p i
  if n == 0 then return B.empty else BI.create n (\d -> copyBytes d at n)

-- | Where member i's value lies, and its length: for a reader that
-- keeps nothing of it.
flatValueAt :: Ptr Word8 -> Int -> IO (Ptr Word8, Int)
flatValueAt p i = do
  c <- endCount p
  s <- endAt p (2 * i + 1)
  e <- endAt p (2 * i + 2)
  return (bytesAfterEnds p c `plusPtr` s, e - s)

-- | Write a value over member i's if it has the same length: whether it
-- had.
flatOverwrite :: Ptr Word8 -> Int -> ByteString -> IO Bool
flatOverwrite p i (BI.PS fp off n) = do
  (at, len) <- flatValueAt p i
  if len /= n then return False else do
    unsafeWithForeignPtr fp $ \v -> copyBytes at (v `plusPtr` off) n
    return True
