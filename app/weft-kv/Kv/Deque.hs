{-# LANGUAGE BangPatterns, MagicHash, UnboxedTuples #-}
-- | A list value as weft-kv keeps it: a persistent deque of strings whose
-- bulk the garbage collector does not walk (Note [Packed lists]). Pure;
-- the test suite checks every operation against a plain list.
module Kv.Deque
  ( Deque
  , emptyDeque
  , dequeLength
  , dequeNull
  , dequeFromList
  , dequeToList
  , dequeToListRev
  , pushHead
  , pushTail
  , dropHead
  , dropTail
  , dequeIndex
  , dequeFoldRange
  , dequeAppend
  , dequeBytes
  , dequeFromBytes
  , packItems
  , openItems
  , copyIn
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Primitive.ByteArray
import Data.Primitive.PrimArray
import qualified Data.Sequence as Seq
import Data.Sequence (Seq, ViewL (..), ViewR (..), (<|), (|>))
import GHC.Exts (Int (..), Ptr (..), copyAddrToByteArray#)
import GHC.IO (IO (..), unsafeDupablePerformIO)
import Control.Monad.Primitive (RealWorld)

import Kv.Record (joinStrings, recordedItems, splitStrings)

-- Note [Packed lists]
-- ~~~~~~~~~~~~~~~~~~~
-- A list that grows with the workload (LPUSH/RPUSH onto one key) would,
-- as a sequence of boxed strings, be copied element by element by every
-- major collection, and every push would leave a lazy spine thunk for the
-- next minor one. So most of a list lives in packed chunks: one unpinned
-- byte array holding up to 'packItems' elements back to back, and an
-- unboxed array of where each ends. The collector copies a chunk as two
-- flat arrays (a large one not at all) and never looks inside. The bytes
-- are unpinned so that a long-lived chunk does not hold on to the pinned
-- block it would share with short-lived strings (the copies it packed,
-- received requests); an element read out is copied into a string of its
-- own.
--
-- Pushes go to an open end first: the head's elements in order, the tail's
-- newest first, each end holding fewer than 'packItems' (the caller's
-- copies, so no end retains a request's read buffer). When an end reaches
-- 'packItems' it is packed into one chunk at its side of the sequence.
-- Pops and trims take from the open end and then from chunks, whose views
-- ('chLo', 'chHi') shrink without copying; a chunk that empties leaves the
-- sequence. So every chunk holds at least one element, and the length is
-- the ends' counts plus the chunks' sizes. A chunk enters the sequence
-- evaluated (the sequence is lazy in its elements): a chunk left as a
-- thunk would keep the open elements it packs alive.
--
-- Indexing walks chunks (linear in their number, 1/'packItems' of the
-- elements), as redis's own list index walks its nodes.

-- | A list of strings: its length, the open head's count and elements (in
-- list order), the chunks, the open tail's count and elements (the last
-- element first).
data Deque = Deque {-# UNPACK #-} !Int {-# UNPACK #-} !Int ![ByteString] !(Seq Chunk)
                   {-# UNPACK #-} !Int ![ByteString]

-- | Packed elements: the bytes, where element i ends in them, and the
-- view (elements @lo@ to @hi - 1@).
data Chunk = Chunk !ByteArray !(PrimArray Int) {-# UNPACK #-} !Int {-# UNPACK #-} !Int

-- | Most elements an open end holds before it is packed, and so most
-- elements of a chunk.
packItems :: Int
packItems = 32

emptyDeque :: Deque
emptyDeque = Deque 0 0 [] Seq.empty 0 []

dequeLength :: Deque -> Int
dequeLength (Deque n _ _ _ _ _) = n

dequeNull :: Deque -> Bool
dequeNull d = dequeLength d == 0

-- | The elements, packed (all but none open).
dequeFromList :: [ByteString] -> Deque
dequeFromList xs0 = go 0 Seq.empty xs0
  where
    go !n !cs xs = case splitAt packItems xs of
      ([], _) -> Deque n 0 [] cs 0 []
      (some, rest) -> let !c = packChunk some in go (n + chunkSize c) (cs |> c) rest

-- | How many elements the open ends hold (head, tail): for the tests of
-- Note [Packed lists].
openItems :: Deque -> (Int, Int)
openItems (Deque _ hc _ _ tc _) = (hc, tc)

dequeToList :: Deque -> [ByteString]
dequeToList (Deque _ _ h cs _ t) = h ++ foldr (\c rest -> chunkItems c ++ rest) (reverse t) cs

-- | A short list's elements as bytes for a record of its key (Note
-- [Small values in records] in "Kv.Store"): at most 'recordedItems'
-- elements, else 'Nothing'.
dequeBytes :: Deque -> Maybe ByteString
dequeBytes d
  | dequeLength d <= recordedItems = Just (joinStrings (dequeToList d))
  | otherwise = Nothing

-- | The list 'dequeBytes' wrote.
dequeFromBytes :: ByteString -> Deque
dequeFromBytes = dequeFromList . splitStrings

-- | The elements from the last to the first.
dequeToListRev :: Deque -> [ByteString]
dequeToListRev (Deque _ _ h cs _ t) = t ++ foldl (\rest c -> reverse (chunkItems c) ++ rest) (reverse h) cs

-- | Push one element at the head. The caller owns it (a copy, not a slice
-- of a buffer that should not be kept).
pushHead :: ByteString -> Deque -> Deque
pushHead !x (Deque n hc h cs tc t)
  | hc + 1 >= packItems = let !c = packChunk (x : h) in Deque (n + 1) 0 [] (c <| cs) tc t
  | otherwise = Deque (n + 1) (hc + 1) (x : h) cs tc t

-- | Push one element at the tail (as 'pushHead').
pushTail :: ByteString -> Deque -> Deque
pushTail !x (Deque n hc h cs tc t)
  | tc + 1 >= packItems = let !c = packChunk (reverse (x : t)) in Deque (n + 1) hc h (cs |> c) 0 []
  | otherwise = Deque (n + 1) hc h cs (tc + 1) (x : t)

-- | Without its first k elements.
dropHead :: Int -> Deque -> Deque
dropHead k d@(Deque n hc h cs tc t)
  | k <= 0 = d
  | k >= n = emptyDeque
  | k <= hc = Deque (n - k) (hc - k) (drop k h) cs tc t
  | otherwise = chunks (k - hc) cs
  where
    chunks !j s = case Seq.viewl s of
      EmptyL -> Deque (n - k) 0 [] Seq.empty (tc - j) (take (tc - j) t)
      c@(Chunk b ends lo hi) :< rest
        | j >= chunkSize c -> chunks (j - chunkSize c) rest
        | otherwise -> let !c' = Chunk b ends (lo + j) hi in Deque (n - k) 0 [] (c' <| rest) tc t

-- | Without its last k elements.
dropTail :: Int -> Deque -> Deque
dropTail k d@(Deque n hc h cs tc t)
  | k <= 0 = d
  | k >= n = emptyDeque
  | k <= tc = Deque (n - k) hc h cs (tc - k) (drop k t)
  | otherwise = chunks (k - tc) cs
  where
    chunks !j s = case Seq.viewr s of
      EmptyR -> Deque (n - k) (hc - j) (take (hc - j) h) Seq.empty 0 []
      rest :> c@(Chunk b ends lo hi)
        | j >= chunkSize c -> chunks (j - chunkSize c) rest
        | otherwise -> let !c' = Chunk b ends lo (hi - j) in Deque (n - k) hc h (rest |> c') 0 []

-- | The element at an index from the head (0 based), if there is one.
dequeIndex :: Int -> Deque -> Maybe ByteString
dequeIndex i (Deque n hc h cs tc t)
  | i < 0 || i >= n = Nothing
  | i < hc = Just (h !! i)
  | i >= n - tc = Just (t !! (n - 1 - i))
  | i - hc <= packed `div` 2 = fromHead (i - hc) cs
  | otherwise = fromTail (n - tc - 1 - i) cs
  where
    packed = n - hc - tc
    -- From the nearer end: a pop at either end reads one chunk.
    fromHead !j s = case Seq.viewl s of
      EmptyL -> Nothing
      c@(Chunk _ _ lo _) :< rest
        | j < chunkSize c -> Just (chunkItem c (lo + j))
        | otherwise -> fromHead (j - chunkSize c) rest
    fromTail !j s = case Seq.viewr s of
      EmptyR -> Nothing
      rest :> c@(Chunk _ _ _ hi)
        | j < chunkSize c -> Just (chunkItem c (hi - 1 - j))
        | otherwise -> fromTail (j - chunkSize c) rest

-- | A strict fold over the elements at indices a to b (both included, 0
-- based, within the list), in order, none of them copied: an element in a
-- chunk is passed as the chunk's bytes, where it starts in them and its
-- length; an open one as its string. No more elements are visited than
-- those.
dequeFoldRange
  :: Monad m
  => (acc -> ByteArray -> Int -> Int -> m acc) -> (acc -> ByteString -> m acc)
  -> acc -> Int -> Int -> Deque -> m acc
dequeFoldRange packed open acc0 a b d
  | a > b = return acc0
  | otherwise = let Deque _ _ h cs _ t = dropHead a d in opens (b - a + 1) acc0 h (chunks cs t)
  where
    opens !k !acc xs next
      | k <= 0 = return acc
      | otherwise = case xs of
          [] -> next k acc
          x : rest -> open acc x >>= \acc' -> opens (k - 1) acc' rest next
    chunks s t !k !acc
      | k <= 0 = return acc
      | otherwise = case Seq.viewl s of
          EmptyL -> opens k acc (reverse t) (\_ acc' -> return acc')
          Chunk bytes ends lo hi :< rest -> do
            let m = min k (hi - lo)
                endOf i = if i < 0 then 0 else indexPrimArray ends i
                items !i !acc'
                  | i >= lo + m = return acc'
                  | otherwise = packed acc' bytes (endOf (i - 1)) (endOf i - endOf (i - 1)) >>= items (i + 1)
            acc' <- items lo acc
            chunks rest t (k - m) acc'
{-# INLINE dequeFoldRange #-}

-- | The elements of one list, then those of the other. The two open ends
-- that meet are packed; no other element is copied.
dequeAppend :: Deque -> Deque -> Deque
dequeAppend (Deque n hc h cs tc t) (Deque n' hc' h' cs' tc' t')
  | n == 0 = Deque n' hc' h' cs' tc' t'
  | n' == 0 = Deque n hc h cs tc t
  | otherwise = Deque (n + n') hc h (withTail Seq.>< withHead) tc' t'
  where
    withTail = if tc == 0 then cs else let !c = packChunk (reverse t) in cs |> c
    withHead = if hc' == 0 then cs' else let !c = packChunk h' in c <| cs'

------------------------------------------------------------------------------
-- Chunks

chunkSize :: Chunk -> Int
chunkSize (Chunk _ _ lo hi) = hi - lo

-- | Element i of the chunk, copied out.
chunkItem :: Chunk -> Int -> ByteString
chunkItem (Chunk b ends _ _) i =
  let start = if i == 0 then 0 else indexPrimArray ends (i - 1)
      len = indexPrimArray ends i - start
  in BI.unsafeCreate len (\p -> copyByteArrayToAddr p b start len)

-- | The chunk's elements (in its view): slices of one copy of their
-- bytes, so a read of many elements makes one string per chunk. A slice
-- keeps that copy alive, so a single element that may be stored again
-- (a pop) is read with 'chunkItem' instead.
chunkItems :: Chunk -> [ByteString]
chunkItems (Chunk b ends lo hi) = go lo
  where
    endOf k = if k < 0 then 0 else indexPrimArray ends k
    base = endOf (lo - 1)
    copied = BI.unsafeCreate (endOf (hi - 1) - base) (\p -> copyByteArrayToAddr p b base (endOf (hi - 1) - base))
    go !k
      | k >= hi = []
      | otherwise =
          let !y = BU.unsafeTake (endOf k - endOf (k - 1)) (BU.unsafeDrop (endOf (k - 1) - base) copied)
              !ys = go (k + 1)
          in y : ys

-- | Pack elements (at least one) into a chunk: one copy of their bytes.
packChunk :: [ByteString] -> Chunk
packChunk xs = unsafeDupablePerformIO $ do
  let k = length xs
      total = sum (map B.length xs)
      ends = primArrayFromListN k (drop 1 (scanl (\s x -> s + B.length x) 0 xs))
  arr <- newByteArray total
  let copyFrom !_ [] = return ()
      copyFrom off (x : rest) = do
        BU.unsafeUseAsCStringLen x $ \(src, len) -> copyIn src arr off len
        copyFrom (off + B.length x) rest
  copyFrom 0 xs
  bytes <- unsafeFreezeByteArray arr
  return (Chunk bytes ends 0 k)

-- | Copy bytes from memory into a byte array, at an offset.
copyIn :: Ptr a -> MutableByteArray RealWorld -> Int -> Int -> IO ()
copyIn (Ptr addr) (MutableByteArray arr) (I# off) (I# len) =
  IO (\s -> (# copyAddrToByteArray# addr arr off len s, () #))
