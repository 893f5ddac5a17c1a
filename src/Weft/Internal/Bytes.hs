-- | Byte access to strict 'ByteString's for weft's parsers.
-- Internal and unstable: "Weft.Net" exports 'byteAt'.
module Weft.Internal.Bytes
  ( byteAt
  ) where

import qualified Data.ByteString.Internal as BI
import Data.Word (Word8)
import Foreign.Storable (peekByteOff)
import GHC.ForeignPtr (unsafeWithForeignPtr)

-- | @byteAt s i@: the byte at index @i@ of @s@, unchecked (as
-- 'Data.ByteString.Unsafe.unsafeIndex'): @i@ must be in @[0, length s)@.
--
-- Note [Reading bytes without keepAlive#]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- With GHC 9.0's base, 'unsafeIndex' reads through 'withForeignPtr', which
-- is built on @keepAlive#@: every read allocates a closure for the action
-- it keeps the buffer alive across (72 bytes per header line in weft-kv's
-- request decoder, measured with ticky). The action here cannot block or
-- throw, so 'unsafeWithForeignPtr' (a plain read and a @touch#@) is safe
-- and allocates nothing.
byteAt :: BI.ByteString -> Int -> Word8
byteAt (BI.PS fp off _) i =
  BI.accursedUnutterablePerformIO (unsafeWithForeignPtr fp (\p -> peekByteOff p (off + i)))
{-# INLINE byteAt #-}
