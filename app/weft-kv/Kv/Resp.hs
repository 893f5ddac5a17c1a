{-# LANGUAGE BangPatterns, MagicHash, OverloadedStrings, UnboxedTuples #-}
-- | RESP2, the Redis wire protocol, as weft-kv writes it: replies and
-- their encoding, requests as a client encodes them, and the integers
-- both sides read. The request decoder is "Kv.Request".
module Kv.Resp
  ( -- * Encoding requests
    encodeCommand
    -- * Replies
  , Reply (..)
  , encodeReply
  , encodeSized
  , plainSize
  , replySize
  , headerSize
  , bulkSize
  , writeReply
  , writeBulkHeader
  , writeArrayHeader
  , writeCrlf
  , writeBytes
  , showInt
  , sharedBulkBytes
  , decodeReply
  , readInteger
  , readStoredInteger
  , storedDecimal
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Weft.Net (byteAt)
import Data.Bits (countLeadingZeros, unsafeShiftR, (.|.))
import Data.Primitive.PrimArray (PrimArray, indexPrimArray, primArrayFromList)
import Data.Word (Word8, Word64)
import GHC.Exts (Word (..), timesWord2#)
import GHC.ForeignPtr (unsafeWithForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (plusPtr)
import GHC.Ptr (Ptr (..))
import Foreign.Storable (peekByteOff, poke, pokeByteOff)
import Data.Primitive.ByteArray (writeByteArray)

import Kv.Str (Str, sharedBulkBytes, strBuild, strByte, strLength, writeStr)

-- | A signed 64-bit integer written as redis writes and accepts one
-- (redis's @string2ll@): an optional @-@ and decimal digits, nothing else;
-- no leading zeros (so not @01@ or @-0@, but @0@); from -2^63 to 2^63-1.
readInteger :: ByteString -> Maybe Int
readInteger bs = integerOf (B.length bs) (byteAt bs)

-- | A stored string as 'readInteger' reads a string.
readStoredInteger :: Str -> Maybe Int
readStoredInteger s = integerOf (strLength s) (strByte s)
{-# INLINE readStoredInteger #-}

-- | 'readInteger' over a length and the byte at each index.
integerOf :: Int -> (Int -> Word8) -> Maybe Int
integerOf len byte
  | len == 0 || len > 20 = Nothing
  | len == 1 && byte 0 == 48 = Just 0
  | otherwise =
      let negative = byte 0 == 45
          start = if negative then 1 else 0
          -- The magnitude's limit: 2^63 for a negative number.
          limit = if negative then 9223372036854775808 else 9223372036854775807 :: Word64
          -- At most 18 digits cannot overflow: only longer numbers pay a
          -- division per digit for the check.
          checked = len - start > 18
          go !i !acc
            | i == len = Just acc
            | d < 48 || d > 57 = Nothing
            | checked && acc > (limit - fromIntegral (d - 48)) `quot` 10 = Nothing
            | otherwise = go (i + 1) (acc * 10 + fromIntegral (d - 48))
            where d = byte i
      in if start >= len || byte start < 49 || byte start > 57 then Nothing
         else case go start 0 of
           Nothing -> Nothing
           Just m -> Just (if negative then fromIntegral (negate m) else fromIntegral m)
{-# INLINE integerOf #-}

-- | A command as a client sends it: a multibulk array of bulk strings.
encodeCommand :: [ByteString] -> ByteString
encodeCommand = encodeReply . RArray . map RBulk

------------------------------------------------------------------------------
-- Replies

-- | A RESP2 reply.
data Reply
  = RSimple !ByteString   -- ^ @+OK@; must not contain CR or LF
  | RError !ByteString    -- ^ @-ERR ...@, the text without the @-@; no CR or LF
  | RInt !Int             -- ^ @:42@
  | RBulk !ByteString     -- ^ @$3\\r\\nfoo@, binary-safe
  | RStored !Str          -- ^ a stored string's bytes, sent as an 'RBulk' is
  | RNil                  -- ^ @$-1@, the missing bulk string
  | RArray [Reply]        -- ^ @*N@ followed by the elements
  | RNilArray             -- ^ @*-1@, the missing array
  | REncoded !ByteString  -- ^ a reply already encoded, as these bytes: an
                          -- array written where it was read (LRANGE)
  deriving (Eq, Show)

-- | The bytes of a reply, in one string of exactly its size.
encodeReply :: Reply -> ByteString
encodeReply r = encodeSized (replySize r) r

-- | The bytes of a reply whose size ('replySize') is known.
encodeSized :: Int -> Reply -> ByteString
encodeSized n r = BI.unsafeCreate n (\p -> () <$ writeReply p r)

-- | The size of a reply's bytes.
replySize :: Reply -> Int
replySize r = case r of
  RSimple s -> B.length s + 3
  RError s -> B.length s + 3
  RInt n -> decimalLength n + 3
  RBulk s -> bulkSize (B.length s)
  RStored s -> bulkSize (strLength s)
  RNil -> 5
  RArray xs -> elemsSize 0 0 xs
  RNilArray -> 5
  REncoded s -> B.length s
  where
    -- An array's header and elements in one strict pass.
    elemsSize :: Int -> Int -> [Reply] -> Int
    elemsSize !n !acc [] = headerSize n + acc
    elemsSize n acc (x : rest) = elemsSize (n + 1) (acc + replySize x) rest

-- | The size of a bulk string of n bytes: header, bytes and CRLF.
bulkSize :: Int -> Int
bulkSize n = headerSize n + n + 2

-- | The size of a bulk string's or an array's header (@$N\r\n@, @*N\r\n@).
headerSize :: Int -> Int
headerSize n = decimalLength n + 3

-- | Write a reply's bytes; returns their end.
writeReply :: Ptr Word8 -> Reply -> IO (Ptr Word8)
writeReply p r = case r of
  RSimple s -> poke p 43 >> writeBytes (p `plusPtr` 1) s >>= writeCrlf
  RError s -> poke p 45 >> writeBytes (p `plusPtr` 1) s >>= writeCrlf
  RInt n -> poke p 58 >> decimal (p `plusPtr` 1) n >>= writeCrlf
  RBulk s -> writeBulkHeader p (B.length s) >>= \q -> writeBytes q s >>= writeCrlf
  RStored s -> writeBulkHeader p (strLength s) >>= \q -> writeStr q s >>= writeCrlf
  RNil -> writeBytes p "$-1\r\n"
  RArray xs -> do
    q <- writeArrayHeader p (length xs)
    let elems !at [] = return at
        elems at (x : rest) = writeReply at x >>= \at' -> elems at' rest
    elems q xs
  RNilArray -> writeBytes p "*-1\r\n"
  REncoded s -> writeBytes p s

-- | Write a string's bytes; returns their end.
writeBytes :: Ptr Word8 -> ByteString -> IO (Ptr Word8)
writeBytes p (BI.PS fp off len) = do
  -- (Not withForeignPtr: Note [Reading bytes without keepAlive#].)
  unsafeWithForeignPtr fp (\src -> copyBytes p (src `plusPtr` off) len)
  return (p `plusPtr` len)

-- | Write @$N\r\n@, @*N\r\n@, @\r\n@; each returns the end.
writeBulkHeader, writeArrayHeader :: Ptr Word8 -> Int -> IO (Ptr Word8)
writeBulkHeader p n = poke p (36 :: Word8) >> decimal (p `plusPtr` 1) n >>= writeCrlf
writeArrayHeader p n = poke p (42 :: Word8) >> decimal (p `plusPtr` 1) n >>= writeCrlf

writeCrlf :: Ptr Word8 -> IO (Ptr Word8)
writeCrlf p = poke p (13 :: Word8) >> poke (p `plusPtr` 1) (10 :: Word8) >> return (p `plusPtr` 2)

-- | The size of a reply that has no bulk string of 'sharedBulkBytes' or
-- more, else -1. One walk, which evaluates the reply whole: computed on
-- the color that computed the reply, it leaves no work (or old values)
-- to the color that sends it.
plainSize :: Reply -> Int
plainSize r = case r of
  RBulk s | B.length s >= sharedBulkBytes -> -1
  RStored s | strLength s >= sharedBulkBytes -> -1
  RArray xs -> elems 0 0 xs
  _ -> replySize r
  where
    elems :: Int -> Int -> [Reply] -> Int
    elems !n !acc [] = if acc < 0 then -1 else headerSize n + acc
    elems n acc (x : rest) =
      let k = plainSize x in elems (n + 1) (if k < 0 || acc < 0 then -1 else acc + k) rest

-- | Digits of a decimal integer, with its sign.
decimalLength :: Int -> Int
decimalLength n = (if n < 0 then 1 else 0) + digitCount (magnitude n)

-- | How many decimal digits the number has: from its bit length, which
-- gives the count or one less, and one comparison with a power of ten
-- (a division per digit is what an integer reply used to cost most).
digitCount :: Word64 -> Int
digitCount m =
  let bits = 64 - countLeadingZeros (m .|. 1)
      -- 1233 / 4096 is just above log10 2.
      t = (bits * 1233) `unsafeShiftR` 12
  in max 1 (if m >= indexPrimArray powersOfTen t then t + 1 else t)

-- | 10 ^ i, for i from 0 to 19.
powersOfTen :: PrimArray Word64
powersOfTen = primArrayFromList (take 20 (iterate (* 10) 1))
{-# NOINLINE powersOfTen #-}

-- | A number divided by 100 and the remainder, by a multiplication: the
-- native code generator divides by a constant with a division
-- instruction, tens of cycles. The quotient is the high word of
-- (m / 4) * ceiling (2^68 / 100), shifted right by 2: exact for every
-- 64-bit m.
quotRem100 :: Word64 -> (Word64, Word64)
quotRem100 m =
  case fromIntegral (m `unsafeShiftR` 2) of
    W# quarter -> case timesWord2# quarter 0x28F5C28F5C28F5C3## of
      (# hi, _ #) -> let q = fromIntegral (W# hi) `unsafeShiftR` 2 in (q, m - q * 100)
{-# INLINE quotRem100 #-}

-- | The absolute value, which for 'minBound' (-2^63) only a 'Word64' holds.
magnitude :: Int -> Word64
magnitude n = if n < 0 then negate (fromIntegral n) else fromIntegral n

-- | An integer in decimal, as redis stores and writes it.
showInt :: Int -> ByteString
showInt n = BI.unsafeCreate (decimalLength n) (\p -> () <$ decimal p n)

-- | Write a decimal integer; returns the end.
decimal :: Ptr Word8 -> Int -> IO (Ptr Word8)
decimal p n = (p `plusPtr`) <$> decimalWith (pokeByteOff p) n

-- | An integer in decimal as a stored string (INCR's result).
storedDecimal :: Int -> Str
storedDecimal n = strBuild (decimalLength n) (\m -> () <$ decimalWith (writeByteArray m) n)

-- | Write a decimal integer through a writer of the byte at each index
-- from 0; returns how many bytes it wrote.
decimalWith :: (Int -> Word8 -> IO ()) -> Int -> IO Int
decimalWith put n = do
  let sign = if n < 0 then 1 else 0
      m0 = magnitude n
      len = digitCount m0
      -- Two digits per division, from the last one back.
      go !i m
        | m >= 100 = do
            let (q, r) = quotRem100 m
            pair (i - 1) r
            go (i - 2) q
        | m >= 10 = pair (i - 1) m
        | otherwise = put (sign + i) (fromIntegral (48 + m))
      pair i d = do
        let at = 2 * fromIntegral d
        peekByteOff digitPairs at >>= put (sign + i)
        peekByteOff digitPairs (at + 1) >>= put (sign + i + 1)
  if n < 0 then put 0 45 else return ()
  go (len - 1) m0
  return (sign + len)
{-# INLINE decimalWith #-}

-- | "00", "01", ... "99", back to back.
digitPairs :: Ptr Word8
digitPairs = Ptr "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"#

-- | Decode one reply from the front of the input: 'Right Nothing' if it is
-- incomplete, else the reply and the rest. For clients (the tests and the
-- benchmark's checks); not bounded.
decodeReply :: ByteString -> Either String (Maybe (Reply, ByteString))
decodeReply inp
  | B.null inp = Right Nothing
  | otherwise = case B.elemIndex 13 inp of
      Nothing -> Right Nothing
      Just i
        | i + 1 >= B.length inp -> Right Nothing
        | byteAt inp (i + 1) /= 10 -> Left "expected CRLF"
        | otherwise -> do
            let body = B.take (i - 1) (B.drop 1 inp)
                rest = B.drop (i + 2) inp
            case byteAt inp 0 of
              43 -> Right (Just (RSimple body, rest))
              45 -> Right (Just (RError body, rest))
              58 -> maybe (Left "bad integer") (\n -> Right (Just (RInt n, rest))) (readInteger body)
              36 -> case readInteger body of
                Just (-1) -> Right (Just (RNil, rest))
                Just n | n >= 0 -> if B.length rest < n + 2 then Right Nothing
                                   else if B.take 2 (B.drop n rest) /= "\r\n" then Left "expected CRLF after bulk"
                                   else Right (Just (RBulk (B.take n rest), B.drop (n + 2) rest))
                _ -> Left "bad bulk length"
              42 -> case readInteger body of
                Just (-1) -> Right (Just (RNilArray, rest))
                Just n | n >= 0 -> elems n [] rest
                _ -> Left "bad array length"
              c -> Left ("unknown reply type " ++ show (BI.w2c c))
  where
    elems :: Int -> [Reply] -> ByteString -> Either String (Maybe (Reply, ByteString))
    elems 0 acc rest = Right (Just (RArray (reverse acc), rest))
    elems k acc rest = do
      r <- decodeReply rest
      case r of
        Nothing -> Right Nothing
        Just (x, rest') -> elems (k - 1) (x : acc) rest'
