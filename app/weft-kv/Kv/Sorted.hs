{-# LANGUAGE BangPatterns #-}
-- | A sorted set as weft-kv keeps it: each member's score, and the members
-- in (score, member) order, both packed maps (Note [Sorted sets packed]).
-- Pure; the test suite checks it against a "Data.Set" of pairs.
module Kv.Sorted
  ( ZSet
  , emptyZSet
  , zsetSize
  , zsetNull
  , zsetScore
  , zsetPut
  , zsetMove
  , zsetRemove
  , zsetRank
  , zsetAt
  , zsetAsc
  , zsetDesc
  , zsetAscFrom
  , zsetDescFrom
  , zsetFromAscList
  , zsetOrdered
  , orderedItem
  , scoreWord
  , wordScore
  , addrScore
  , zsetFlat
  , zsetReadFlat
  ) where

import Data.Bits (complement, shiftL, shiftR, testBit, xor, (.|.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.List (sortOn)
import Data.Primitive.ByteArray (indexByteArray)
import Data.Word (Word64, Word8)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (peekByteOff, pokeByteOff)
import GHC.Float (castDoubleToWord64, castWord64ToDouble)

import Kv.Packed

-- Note [Sorted sets packed]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- A sorted set is two packed maps (Note [Packed maps] in "Kv.Packed"):
-- its scores, from each member to its score, and its order, whose
-- members are each member's score and member as one string and whose
-- values are empty. The order's strings sort in byte order as the pairs
-- sort by score and then by member, because a score is written first,
-- in 8 bytes that sort as the scores do ('scoreBytes': the bits of the
-- double, big-endian, the sign bit flipped for a positive score and every
-- bit flipped for a negative one, so that a more negative score gives
-- smaller bytes). The scores map keeps the same 8 bytes as its values.
--
-- A score is never NaN (ZADD refuses one) and never -0 ('zsetPut' keeps
-- -0 as 0, as redis keeps it in a small sorted set), so equal scores have
-- equal bytes, and scores that compare as doubles compare as bytes.

-- | A sorted set: its scores, and its order (Note [Sorted sets packed]).
data ZSet = ZSet !Packed !Packed

emptyZSet :: ZSet
emptyZSet = ZSet packedEmpty packedEmpty

zsetSize :: ZSet -> Int
zsetSize (ZSet scores _) = packedSize scores

zsetNull :: ZSet -> Bool
zsetNull (ZSet scores _) = packedNull scores

-- | The 8 bytes of a score, in an order that sorts as the scores do.
scoreBytes :: Double -> ByteString
scoreBytes d = orderKey d B.empty

-- | A score as a word that orders as the scores do (the word
-- 'scoreBytes' writes big-endian).
scoreWord :: Double -> Word64
scoreWord d =
  let w = castDoubleToWord64 d
  in if testBit w 63 then complement w else w `xor` 0x8000000000000000

-- | The score of a word of 'scoreWord'.
wordScore :: Word64 -> Double
wordScore w = castWord64ToDouble (if testBit w 63 then w `xor` 0x8000000000000000 else complement w)

-- | The score 8 bytes of 'scoreBytes' give, at the start of a string.
bytesScore :: ByteString -> Double
bytesScore b = byteScore (BU.unsafeIndex b)

-- | The score of 8 bytes of 'scoreBytes' in a leaf.
sliceScore :: Slice -> Double
sliceScore (Slice a s _) = byteScore (\i -> indexByteArray a (s + i))

-- | The score of 8 bytes of 'scoreBytes' at an address.
addrScore :: Ptr Word8 -> IO Double
addrScore p = wordScore <$> go 0 0
  where
    go :: Int -> Word64 -> IO Word64
    go 8 !acc = return acc
    go i !acc = peekByteOff p i >>= \b -> go (i + 1) ((acc `shiftL` 8) .|. fromIntegral (b :: Word8))

-- | The score of 8 bytes of 'scoreBytes' the function reads, by index.
byteScore :: (Int -> Word8) -> Double
byteScore byte = wordScore (go 0 0)
  where
    go :: Int -> Word64 -> Word64
    go 8 !acc = acc
    go i !acc = go (i + 1) ((acc `shiftL` 8) .|. fromIntegral (byte i))
{-# INLINE byteScore #-}

-- | A score and member as the order's string.
orderKey :: Double -> ByteString -> ByteString
orderKey d m = BI.unsafeCreate (8 + B.length m) $ \p -> do
  let !w = scoreWord d
  mapM_ (\i -> pokeByteOff p i (fromIntegral (w `shiftR` (8 * (7 - i))) :: Word8)) [0 .. 7]
  BU.unsafeUseAsCString m (\q -> copyBytes (p `plusPtr` 8) (castPtr q) (B.length m))

-- | A member's score.
zsetScore :: ByteString -> ZSet -> Maybe Double
zsetScore m (ZSet scores _) = sliceScore <$> packedFind m scores

-- | Give a member a score, replacing its old one. -0 is kept as 0 (Note
-- [Sorted sets packed]). The member's bytes are copied in.
zsetPut :: ByteString -> Double -> ZSet -> ZSet
zsetPut m s z = zsetMove m s (zsetScore m z) z

-- | Give a member a score, given its old one ('Nothing': it is not a
-- member), as 'zsetPut' does.
zsetMove :: ByteString -> Double -> Maybe Double -> ZSet -> ZSet
zsetMove m s0 old (ZSet scores ordered) =
  let s = if s0 == 0 then 0 else s0
      ordered' = case old of
        Just o -> packedDelete (orderKey o m) ordered
        Nothing -> ordered
  in ZSet (packedInsert m (scoreBytes s) scores) (packedInsert (orderKey s m) B.empty ordered')

-- | The sorted set without the member.
zsetRemove :: ByteString -> ZSet -> ZSet
zsetRemove m z@(ZSet scores ordered) = case zsetScore m z of
  Just s -> ZSet (packedDelete m scores) (packedDelete (orderKey s m) ordered)
  Nothing -> z

-- | A member's rank, lowest score first.
zsetRank :: ByteString -> ZSet -> Maybe Int
zsetRank m z@(ZSet _ ordered) = do
  s <- zsetScore m z
  packedIndex (orderKey s m) ordered

-- | The score and member at a rank, lowest first (which must be in range).
zsetAt :: Int -> ZSet -> (Double, ByteString)
zsetAt i (ZSet _ ordered) = orderedItem (packedAt i ordered)

-- | Scores and members, lowest first.
zsetAsc :: ZSet -> [(Double, ByteString)]
zsetAsc (ZSet _ ordered) = map orderedItem (packedToAscList ordered)

-- | Scores and members, highest first.
zsetDesc :: ZSet -> [(Double, ByteString)]
zsetDesc (ZSet _ ordered) = map orderedItem (packedToDescList ordered)

-- | Scores and members from a rank on, lowest first.
zsetAscFrom :: Int -> ZSet -> [(Double, ByteString)]
zsetAscFrom i (ZSet _ ordered) = map orderedItem (packedAscFrom i ordered)

-- | Scores and members from a rank counted from the highest on, highest
-- first.
zsetDescFrom :: Int -> ZSet -> [(Double, ByteString)]
zsetDescFrom i (ZSet _ ordered) = map orderedItem (packedDescFrom i ordered)

-- | The sorted set of these scores and members, in (score, member) order
-- with members distinct (a -0 score is kept as 0).
zsetFromAscList :: [(Double, ByteString)] -> ZSet
zsetFromAscList ps0 =
  let ps = [ (if s == 0 then 0 else s, m) | (s, m) <- ps0 ] in
  ZSet (packedFromAscList (sortOn fst [ (m, scoreBytes s) | (s, m) <- ps ]))
       (packedFromAscList [ (orderKey s m, B.empty) | (s, m) <- ps ])

-- | The order's packed map, for a pick by rank (SPOP-like random choices).
zsetOrdered :: ZSet -> Packed
zsetOrdered (ZSet _ ordered) = ordered

-- | An item of the order as its score and member.
orderedItem :: (ByteString, ByteString) -> (Double, ByteString)
orderedItem (k, _) = (bytesScore k, BU.unsafeDrop 8 k)

-- | A few members as a flat copy for a record of their key (Note [Small
-- values in records] in "Kv.Store"): both maps as their leaves' flat
-- copies (Note [Packed maps flat] in "Kv.Packed"), the first's length
-- in a word before them; its length and its writer, if each map is one
-- leaf.
zsetFlat :: ZSet -> Maybe (Int, Ptr Word8 -> IO ())
zsetFlat (ZSet scores ordered) = do
  a <- packedFlatSize scores
  b <- packedFlatSize ordered
  let write p = do
        pokeByteOff p 0 a
        packedWriteFlat scores (p `plusPtr` 8)
        packedWriteFlat ordered (p `plusPtr` (8 + a))
  Just (8 + a + b, write)

-- | The sorted set whose flat copy of the given length is at the address.
zsetReadFlat :: Ptr Word8 -> Int -> IO ZSet
zsetReadFlat p n = do
  a <- peekByteOff p 0
  ZSet <$> packedReadFlat (p `plusPtr` 8) a <*> packedReadFlat (p `plusPtr` (8 + a)) (n - 8 - a)
