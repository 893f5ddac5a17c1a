{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- | The text forms weft-kv shares with redis: floats as redis reads and
-- writes them, and redis's glob patterns (KEYS, CONFIG GET).
module Kv.Text
  ( readDouble
  , readBound
  , formatDouble
  , LongDoubleSum (..)
  , addLongDouble
  , finiteLongDouble
  , globMatch
  ) where

import Data.Bits ((.|.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import qualified Data.ByteString.Unsafe as BU
import Data.Int (Int8)
import Data.Word (Word8)
import Foreign.C.String (CString)
import Foreign.C.Types (CDouble (..), CInt (..), CSize (..))
import Foreign.Marshal.Alloc (alloca, allocaBytes)
import Foreign.Ptr (Ptr, castPtr, minusPtr, nullPtr)
import Foreign.Storable (peek)
import System.IO.Unsafe (unsafeDupablePerformIO)

import Kv.Resp (readInteger)

foreign import ccall unsafe "stdlib.h strtod"
  c_strtod :: CString -> Ptr CString -> IO CDouble

foreign import ccall unsafe "weft_kv_ld_finite"
  c_ldFinite :: Ptr Word8 -> CSize -> IO CInt

foreign import ccall unsafe "weft_kv_ld_add"
  c_ldAdd :: Ptr Word8 -> CSize -> Ptr Word8 -> CSize -> Ptr Word8 -> IO CInt

-- | What INCRBYFLOAT's addition came to, in C's long double (redis's
-- type, which Haskell has none of; app/weft-kv/cbits/kv_longdouble.c).
data LongDoubleSum
  = Sum !ByteString  -- ^ the sum in redis's form (@%.17Lf@, no trailing zeros)
  | BadStart         -- ^ the value added to is not a float
  | BadIncrement     -- ^ the increment is not a float
  | NotFinite        -- ^ the sum is NaN or infinite

-- | Add an increment to a value (none: 0) as INCRBYFLOAT and HINCRBYFLOAT
-- do, each read as redis reads a long double (the whole string, no
-- leading space, not NaN, not overflowing).
addLongDouble :: Maybe ByteString -> ByteString -> LongDoubleSum
addLongDouble start incr = unsafeDupablePerformIO $
  withBytes start $ \sp sl -> withBytes (Just incr) $ \ip il -> allocaBytes longDoubleChars $ \out -> do
    n <- c_ldAdd sp sl ip il out
    case n of
      -1 -> return BadStart
      -2 -> return BadIncrement
      _ | n < 0 -> return NotFinite
        | otherwise -> Sum <$> B.packCStringLen (castPtr out, fromIntegral n)
  where
    longDoubleChars = 5 * 1024
    -- A null pointer says there is no start; an empty string may have
    -- one (the empty string's), so it is passed as a byte of room.
    withBytes Nothing k = k nullPtr 0
    withBytes (Just b) k
      | B.null b = allocaBytes 1 (\p -> k p 0)
      | otherwise = BU.unsafeUseAsCStringLen b $ \(p, l) -> k (castPtr p) (fromIntegral l)

-- | Whether a string is a long double as redis reads one ('Nothing' if
-- not), and whether it is finite.
finiteLongDouble :: ByteString -> Maybe Bool
finiteLongDouble b = unsafeDupablePerformIO $ BU.unsafeUseAsCStringLen b $ \(p, l) -> do
  r <- c_ldFinite (castPtr p) (fromIntegral l)
  return (if r < 0 then Nothing else Just (r == 1))

-- | A float as redis reads one (a ZADD score): what C's @strtod@ accepts
-- (decimal or hexadecimal, @inf@, @infinity@), the whole string, and
-- not empty, not starting with white space, not NaN, not so large that it
-- overflows to infinity nor so small that it underflows to zero.
readDouble :: ByteString -> Maybe Double
readDouble s
  | Just n <- readInteger s = Just (fromIntegral n)   -- the common case, without strtod
  | B.null s || isSpace (BU.unsafeHead s) = Nothing
  | otherwise = unsafeDupablePerformIO $ B.useAsCString s $ \p -> alloca $ \endp -> do
      CDouble d <- c_strtod p endp
      end <- peek endp
      let whole = end `minusPtr` p == B.length s
          -- strtod reports overflow and underflow in errno, which another
          -- Haskell thread's call may overwrite on this OS thread; the
          -- results tell the same: an infinity from digits, a zero from
          -- digits that are not all zero.
          overflowed = isInfinite d && not (C.any (\c -> c == 'i' || c == 'I') s)
          underflowed = d == 0 && C.any (`C.elem` "123456789") (mantissa s)
      return $ if whole && not (isNaN d) && not overflowed && not underflowed then Just d else Nothing
  where
    isSpace c = c == 32 || (c >= 9 && c <= 13)
    -- The digits before the exponent ('e' in decimal, 'p' in hexadecimal,
    -- whose mantissa digits a-f are not zero either).
    mantissa t
      | B.isPrefixOf "0x" body || B.isPrefixOf "0X" body =
          C.map (\c -> if C.elem c "abcdefABCDEF" then '1' else c) (C.takeWhile (\c -> c /= 'p' && c /= 'P') (B.drop 2 body))
      | otherwise = C.takeWhile (\c -> c /= 'e' && c /= 'E') body
      where body = C.dropWhile (\c -> c == '+' || c == '-') t

-- | A float as redis reads a range bound (ZRANGE ... BYSCORE), with
-- @strtod@ alone: up to the first NUL byte, white space first allowed, an
-- empty string is 0, overflow gives an infinity; 'Nothing' if anything
-- follows the number or it is NaN.
readBound :: ByteString -> Maybe Double
readBound s = unsafeDupablePerformIO $ B.useAsCString s $ \p -> alloca $ \endp -> do
  CDouble d <- c_strtod p endp
  end <- peek endp
  let whole = end `minusPtr` p == B.length (B.takeWhile (/= 0) s)
  return (if whole && not (isNaN d) then Just d else Nothing)

-- | A float as redis 7.0 writes one: @inf@, @-inf@, or C's @%.17g@ (17
-- significant digits, correctly rounded; trailing zeros dropped; an
-- exponent below -4 or from 17 up in @e+XX@ form).
formatDouble :: Double -> ByteString
formatDouble d
  | isInfinite d = if d > 0 then "inf" else "-inf"
  | isNaN d = "nan"
  | d == 0 = if isNegativeZero d then "-0" else "0"
  | otherwise = C.pack (sign ++ body)
  where
    sign = if d < 0 then "-" else ""
    r = toRational (abs d)
    -- The decimal exponent e with 10^e <= r < 10^(e+1).
    e0 = let guess = floor (logBase 10 (abs d) :: Double) :: Int
         in case [ g | g <- [guess + 1, guess, guess - 1], 10 ^^ g <= r ] of
              g : _ -> g
              [] -> guess - 2
    -- 17 significant digits, rounded half to even as glibc's printf does.
    scaled = round (r * 10 ^^ (16 - e0)) :: Integer
    (digits, e) = if scaled >= 10 ^ (17 :: Int) then (scaled `quot` 10, e0 + 1) else (scaled, e0)
    ds = show digits
    trimmed = reverse (dropWhile (== '0') (reverse ds))
    body
      | e < -4 || e >= 17 =
          let mant = case trimmed of
                [x] -> [x]
                (x : rest) -> x : '.' : rest
                [] -> "0"
              ex = abs e
          in mant ++ "e" ++ (if e < 0 then "-" else "+") ++ (if ex < 10 then "0" else "") ++ show ex
      | e >= 0 =
          let (whole, frac) = splitAt (e + 1) ds
              frac' = reverse (dropWhile (== '0') (reverse frac))
          in whole ++ (if null frac' then "" else '.' : frac')
      | otherwise = "0." ++ replicate (negate e - 1) '0' ++ trimmed

-- | Does the string match the glob pattern, as redis's @stringmatchlen@
-- decides: @*@, @?@, classes @[abc]@, @[^a]@, @[a-z]@, and @\\@ quoting
-- the next character; with 'True', letters match either case.
globMatch :: Bool -> ByteString -> ByteString -> Bool
globMatch nocase pat0 str0 = go pat0 str0 == Matched
  where
    fold c = if nocase && c >= 65 && c <= 90 then c .|. 32 else c
    same a b = fold a == fold b
    go :: ByteString -> ByteString -> Match
    go p s
      | B.null p = if B.null s then Matched else Failed
      | B.null s = if B.all (== 42) p then Matched else Failed
      | otherwise = case BU.unsafeHead p of
          42 -> star (B.dropWhile (== 42) p) s
          63 -> next (B.tail p) (B.tail s)
          91 -> let (ok, rest) = klass (B.tail p) (BU.unsafeHead s)
                in if ok then next rest (B.tail s) else Failed
          92 | B.length p >= 2 -> literal (B.tail p) s
          _ -> literal p s
    literal p s = if same (BU.unsafeHead p) (BU.unsafeHead s) then next (B.tail p) (B.tail s) else Failed
    next = go
    -- After stars: the rest must match some suffix. Once a try fails by
    -- running out of string, longer suffixes cannot match either.
    star p s
      | B.null p = Matched
      | otherwise = tryFrom s
      where
        tryFrom t
          | B.null t = GaveUp
          | otherwise = case go p t of
              Matched -> Matched
              GaveUp -> GaveUp
              Failed -> tryFrom (B.tail t)
    -- A class after its '[': whether the byte is in it, and the pattern
    -- after its ']' (an unterminated class ends the pattern).
    klass p0 c = let (negated, p1) = case B.uncons p0 of
                       Just (94, afterCaret) -> (True, afterCaret)
                       _ -> (False, p0)
                     (hit, rest) = members p1 False
                 in (hit /= negated, rest)
      where
        members p !hit = case B.unpack (B.take 3 p) of
          [] -> (hit, B.empty)
          (92 : x : _) -> members (B.drop 2 p) (hit || x == c)
          (93 : _) -> (hit, B.drop 1 p)
          [a, 45, b] -> members (B.drop 3 p) (hit || inRange a b)
          (x : _) -> members (B.drop 1 p) (hit || same x c)
        -- redis compares C chars, signed here: a reversed range is
        -- swapped, then with 'nocase' all three are lower-cased.
        inRange a b = let (lo, hi) = (min (signed a) (signed b), max (signed a) (signed b))
                          low x = if nocase && x >= 65 && x <= 90 then x + 32 else x
                          sc = low (signed c)
                      in sc >= low lo && sc <= low hi
    signed :: Word8 -> Int
    signed w = fromIntegral (fromIntegral w :: Int8)

data Match = Matched | Failed | GaveUp deriving Eq
