{-# LANGUAGE OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands that grow a string or reach into it by position:
-- APPEND, GETRANGE, SETRANGE, GETBIT and SETBIT, under redis's limit on a
-- string's size. Values are immutable, so a write copies the string: each
-- APPEND, SETRANGE or SETBIT costs the string's length.
module Kv.Bytes
  ( byteCommands
  ) where

import Data.Bits (complement, shiftL, shiftR, testBit, (.&.), (.|.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Maybe (isJust)
import Data.Word (Word8)
import Foreign.Marshal.Utils (copyBytes, fillBytes)
import Foreign.Ptr (castPtr, plusPtr)
import Foreign.Storable (peekByteOff, pokeByteOff)

import Kv.Plan
import Kv.Resp
import Kv.Store
import Kv.Str (strCopy, strLength, strString)

-- | The commands of this module, for "Kv.Command"'s table.
byteCommands :: [Command]
byteCommands =
  [ ("GETRANGE", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (OnKey k . getrangeOp i))))
  , ("APPEND", (Exactly 2, \[k, v] -> OnKey k (appendOp v)))
  , ("SETRANGE", (Exactly 3, \[k, off, x] -> withInt off (setrangeCommand k x)))
  , ("GETBIT", (Exactly 2, \[k, off] -> withBitOffset off (OnKey k . getbitOp)))
  , ("SETBIT", (Exactly 3, setbitCommand))
  ]

-- | The longest string APPEND, SETRANGE and SETBIT make: redis's
-- @proto-max-bulk-len@ default, 512 MiB.
maxStringBytes :: Int
maxStringBytes = 512 * 1024 * 1024

-- | GETRANGE key start end: the bytes from start to end, both inclusive,
-- negative ones counted from the end, as redis clamps them.
getrangeOp :: Int -> Int -> KeyOp
getrangeOp start end _ _ v = case v of
  Nothing -> Outcome Keep (RBulk B.empty)
  Just (VString stored) -> Outcome Keep (RBulk (slice (strString stored)))
  Just _ -> Outcome Keep wrongType
  where
    slice s
      | start < 0 && end < 0 && start > end = B.empty
      | otherwise =
          let n = B.length s
              a = max 0 (if start < 0 then n + start else start)
              b0 = if end < 0 then n + end else end
              b = min (n - 1) (max 0 b0)
          in if n == 0 || a > b then B.empty else B.take (b - a + 1) (B.drop a s)

-- | APPEND: the string's new length; a missing key is an empty string. A
-- result over 'maxStringBytes' is an error, and the string stays.
appendOp :: ByteString -> KeyOp
appendOp more _ _ v = case v of
  Nothing -> grown B.empty
  Just (VString s) -> grown (strString s)
  Just _ -> Outcome Keep wrongType
  where
    grown s
      | B.length s > maxStringBytes - B.length more = Outcome Keep exceedsMaximum
      | otherwise = let s' = s <> more in Outcome (Replace (VString (strCopy s'))) (RInt (B.length s'))

-- | redis's error for a string that would pass 'maxStringBytes'.
exceedsMaximum :: Reply
exceedsMaximum = RError "ERR string exceeds maximum allowed size (proto-max-bulk-len)"

-- | SETRANGE key offset value: overwrite from the offset, padding with
-- zero bytes; the new length. As redis decides: a negative offset is an
-- error; an empty value changes nothing (0 for a missing key, which is
-- not created); a result over 'maxStringBytes' is an error.
setrangeCommand :: ByteString -> ByteString -> Int -> Plan
setrangeCommand k x off
  | off < 0 = Answer (RError "ERR offset is out of range")
  | otherwise = OnKey k op
  where
    tooLong = off > maxStringBytes - B.length x
    op _ _ v = case v of
      Nothing | B.null x -> Outcome Keep (RInt 0)
              | tooLong -> Outcome Keep exceedsMaximum
              | otherwise -> write B.empty
      Just (VString s) | B.null x -> Outcome Keep (RInt (strLength s))
                       | tooLong -> Outcome Keep exceedsMaximum
                       | otherwise -> write (strString s)
      Just _ -> Outcome Keep wrongType
    write s = let s' = overwrite s off x in Outcome (Replace (VString (strCopy s'))) (RInt (B.length s'))

-- | The string with @x@ written from @off@, zero-padded as needed.
overwrite :: ByteString -> Int -> ByteString -> ByteString
overwrite s off x = BI.unsafeCreate n $ \p -> do
  fillBytes p 0 n
  BU.unsafeUseAsCStringLen s $ \(src, len) -> copyBytes p (castPtr src) len
  BU.unsafeUseAsCStringLen x $ \(src, len) -> copyBytes (p `plusPtr` off) (castPtr src) len
  where n = max (B.length s) (off + B.length x)

-- | A bit offset as GETBIT and SETBIT read one: an integer from 0 to the
-- last bit of a 'maxStringBytes' string.
withBitOffset :: ByteString -> (Int -> Plan) -> Plan
withBitOffset s k = case readInteger s of
  Just off | off >= 0 && off `shiftR` 3 < maxStringBytes -> k off
  _ -> Answer (RError "ERR bit offset is not an integer or out of range")

-- | GETBIT: the bit at the offset, 0 past the end or for a missing key.
getbitOp :: Int -> KeyOp
getbitOp off _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VString s) -> RInt (bitAt (strString s) off)
  Just _ -> wrongType

-- | The bit at the offset (bit 0 the most significant of byte 0), 0 past
-- the end.
bitAt :: ByteString -> Int -> Int
bitAt s off
  | off `shiftR` 3 < B.length s = if testBit (BU.unsafeIndex s (off `shiftR` 3)) (7 - off .&. 7) then 1 else 0
  | otherwise = 0

-- | SETBIT key offset value: set or clear the bit, growing the string
-- with zero bytes to hold it (even to clear it, as redis does); the bit's
-- old value.
setbitCommand :: [ByteString] -> Plan
setbitCommand [k, off, b] = withBitOffset off $ \o -> case readInteger b of
  Just on | on == 0 || on == 1 -> OnKey k (setbitOp o (on == 1))
  _ -> Answer (RError "ERR bit is not an integer or out of range")
setbitCommand _ = Answer syntaxError

setbitOp :: Int -> Bool -> KeyOp
setbitOp off on _ _ v = case v of
  Nothing -> set B.empty
  Just (VString s) -> set (strString s)
  Just _ -> Outcome Keep wrongType
  where
    byte = off `shiftR` 3
    mask = 1 `shiftL` (7 - off .&. 7) :: Word8
    set s = let old = bitAt s off
                s' = BI.unsafeCreate (max (B.length s) (byte + 1)) $ \p -> do
                  fillBytes p 0 (max (B.length s) (byte + 1))
                  BU.unsafeUseAsCStringLen s $ \(src, len) -> copyBytes p (castPtr src) len
                  w <- peekByteOff p byte :: IO Word8
                  pokeByteOff p byte (if on then w .|. mask else w .&. complement mask)
                -- A key that exists, whose bit and length stay, is not
                -- changed (redis signals no change either).
                same = isJust v && B.length s' == B.length s && (old == 1) == on
            in Outcome (if same then Keep else Replace (VString (strCopy s'))) (RInt old)
