{-# LANGUAGE BangPatterns, MagicHash, OverloadedStrings #-}
-- | RESP2, the Redis wire protocol, as weft-kv speaks it: an incremental
-- request decoder and a reply encoder, both pure.
--
-- The decoder takes input in whatever chunks the socket delivers and
-- returns every command completed so far; a command split over any number
-- of chunks decodes the same as one that arrives whole (the test suite
-- checks this over arbitrary chunkings). It accepts the two request forms
-- Redis clients send: multibulk arrays of bulk strings (@*2\\r\\n$3\\r\\nGET\\r\\n...@)
-- and inline commands (@PING\\r\\n@: words separated by blanks, quoted as
-- redis quotes them, 'inlineWords').
--
-- Every input is bounded by 'Limits': a connection never buffers more than
-- one header line of unparsed input ('maxLine') plus the bulk string being
-- received ('maxBulk'). Input that breaks the protocol or a limit yields a
-- 'ProtocolError', after which the connection cannot be resynchronised and
-- must be answered with the error and closed.
module Kv.Resp
  ( -- * Limits
    Limits (..)
  , defaultLimits
    -- * Decoding requests
  , Decoder
  , newDecoder
  , Decoded (..)
  , ProtocolError (..)
  , feed
  , inlineWords
    -- * Encoding requests
  , encodeCommand
    -- * Replies
  , Reply (..)
  , encodeReply
  , encodeSized
  , plainSize
  , replySize
  , headerSize
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
import qualified Data.ByteString.Unsafe as BU
import Weft.Net (byteAt)
import Data.Word (Word8, Word64)
import GHC.ForeignPtr (unsafeWithForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (plusPtr)
import GHC.Ptr (Ptr (..))
import Foreign.Storable (peekByteOff, poke, pokeByteOff)
import Data.Primitive.ByteArray (writeByteArray)

import Kv.Str (Str, sharedBulkBytes, strBuild, strByte, strLength, writeStr)

------------------------------------------------------------------------------
-- Limits

-- | What one connection may send. All sizes in bytes.
data Limits = Limits
  { maxBulk :: !Int
    -- ^ Longest bulk string (one argument). A longer declared length is a
    -- 'ProtocolError' as soon as its header arrives, before any of it is
    -- buffered.
  , maxLine :: !Int
    -- ^ Longest inline command or header line (@*N@, @$N@), line end
    -- included.
  , maxArgs :: !Int
    -- ^ Most arguments in one multibulk command.
  } deriving (Eq, Show)

-- | 64 MiB bulk strings, 64 KiB lines, 1048576 arguments (Redis's own
-- defaults for the last two).
defaultLimits :: Limits
defaultLimits = Limits
  { maxBulk = 64 * 1024 * 1024
  , maxLine = 64 * 1024
  , maxArgs = 1024 * 1024
  }

------------------------------------------------------------------------------
-- Decoding requests

-- | Where the decoder stands between chunks.
data Decoder = Decoder !ByteString !Pending
  -- The unconsumed input (only ever an incomplete header or inline line,
  -- at most 'maxLine' bytes), and what the next bytes belong to.

data Pending
  = Between
    -- ^ Between commands.
  | Args !Int [ByteString]
    -- ^ In a multibulk command: arguments still to come, and the ones
    -- received so far (latest first).
  | Body !Int [ByteString] !Int [ByteString]
    -- ^ In a bulk string: bytes still to come (its line end included), the
    -- pieces received so far (latest first), then as 'Args'.

-- | The words of an inline command line, as redis splits them: blanks
-- separate words; inside a word, a "double-quoted" part takes the escapes
-- @\\n \\r \\t \\b \\a \\xHH@ and @\\c@ for any other byte c, a
-- 'single-quoted' part takes @\\'@, and a closing quote must end its
-- word. 'Nothing' if a quote is not closed, or closed inside a word. A
-- line without quotes is split in place.
inlineWords :: ByteString -> Maybe [ByteString]
inlineWords l
  | not (B.any (\c -> c == 34 || c == 39) l) = Just (filter (not . B.null) (B.splitWith isSep l))
  | otherwise = go [] l
  where
    isSep c = c == 32 || c == 9 || c == 10 || c == 13 || c == 0
    isSpace c = c == 32 || (c >= 9 && c <= 13)
    go acc s = case B.dropWhile isSpace s of
      rest | B.null rest -> Just (reverse acc)
           | otherwise -> word [] rest >>= \(w, rest') -> go (B.pack (reverse w) : acc) rest'
    -- The bytes of the word so far are kept reversed.
    word acc s = case B.uncons s of
      Nothing -> Just (acc, B.empty)
      Just (c, t)
        | isSep c -> Just (acc, s)
        | c == 34 -> double acc t
        | c == 39 -> single acc t
        | otherwise -> word (c : acc) t
    double acc s = case B.uncons s of
      Nothing -> Nothing
      Just (92, t)
        | Just (120, h) <- B.uncons t, B.length h >= 2, Just hi <- hex (B.index h 0), Just lo <- hex (B.index h 1) ->
            double (hi * 16 + lo : acc) (B.drop 2 h)
        | Just (e, t') <- B.uncons t -> double (unescape e : acc) t'
      Just (34, t) -> closing acc t
      Just (c, t) -> double (c : acc) t
    single acc s = case B.uncons s of
      Nothing -> Nothing
      Just (92, t) | Just (39, t') <- B.uncons t -> single (39 : acc) t'
      Just (39, t) -> closing acc t
      Just (c, t) -> single (c : acc) t
    closing acc t = case B.uncons t of
      Just (c, _) | not (isSpace c) -> Nothing
      _ -> Just (acc, t)
    unescape e = case e of
      110 -> 10; 114 -> 13; 116 -> 9; 98 -> 8; 97 -> 7; _ -> e
    hex c | c >= 48 && c <= 57 = Just (c - 48)
          | c >= 97 && c <= 102 = Just (c - 87)
          | c >= 65 && c <= 70 = Just (c - 55)
          | otherwise = Nothing

-- | A decoder at the start of a connection.
newDecoder :: Decoder
newDecoder = Decoder B.empty Between

-- | Why input cannot be decoded. The message is the text of the error
-- reply (e.g. @ERR Protocol error: invalid bulk length@).
newtype ProtocolError = ProtocolError ByteString
  deriving (Eq, Show)

-- | What one chunk of input completed: the commands, in order (each a
-- non-empty argument list, the command name first), then either the
-- decoder to feed the next chunk to, or the protocol error that ends the
-- connection (the commands before it are still valid).
data Decoded = Decoded [[ByteString]] (Either ProtocolError Decoder)

-- | Decode a chunk of input. The returned arguments may share memory with
-- the chunk: copy what you keep for long.
--
-- The decoder walks the input by position and slices out only the
-- arguments (Note [Decoding by position]).
feed :: Limits -> Decoder -> ByteString -> Decoded
feed lim (Decoder held pending) chunk = case pending of
  Between -> between 0 []
  Args n acc -> args 0 n acc []
  Body need pieces n acc -> body need pieces n acc
  where
    input | B.null held = chunk
          | otherwise = B.append held chunk
    total = B.length input
    byte = byteAt input

    suspend cmds st p = Decoded (reverse cmds) (Right (Decoder (BU.unsafeDrop p input) st))
    failed cmds msg = Decoded (reverse cmds) (Left (ProtocolError msg))

    -- Between commands, at position p.
    between :: Int -> [[ByteString]] -> Decoded
    between !p cmds
      | p >= total = suspend cmds Between total
      | byte p == 42 {- '*' -} = case lineEndIn (maxLine lim) input p of
          cr | cr == lineIncomplete -> suspend cmds Between p
             | cr == lineTooLong -> failed cmds "ERR Protocol error: too big mbulk count string"
             | cr == lineBadEnd -> failed cmds "ERR Protocol error: expected CRLF after the multibulk length"
             | otherwise -> case decimalIn input (p + 1) cr of
            n | n == invalidNumber -> failed cmds "ERR Protocol error: invalid multibulk length"
              | n <= 0 -> between (cr + 2) cmds        -- an empty command: nothing to run
              | n <= maxArgs lim -> args (cr + 2) n [] cmds
              | otherwise -> failed cmds "ERR Protocol error: invalid multibulk length"
      | otherwise = case B.elemIndex 10 (BU.unsafeDrop p input) of
          Nothing
            | total - p >= maxLine lim -> failed cmds "ERR Protocol error: too big inline request"
            | otherwise -> suspend cmds Between p
          Just i
            | i >= maxLine lim -> failed cmds "ERR Protocol error: too big inline request"
            | otherwise ->
                let l = BU.unsafeTake i (BU.unsafeDrop p input)
                    l' = if not (B.null l) && B.last l == 13 then B.init l else l
                in case inlineWords l' of
                     Nothing -> failed cmds "ERR Protocol error: unbalanced quotes in request"
                     Just ws -> between (p + i + 1) (if null ws then cmds else ws : cmds)

    -- In a multibulk command with n arguments still to come, at p.
    args :: Int -> Int -> [ByteString] -> [[ByteString]] -> Decoded
    args !p !n acc cmds
      | n == 0 = let !cmd = reverse acc in between p (cmd : cmds)
      | p >= total = suspend cmds (Args n acc) total
      | byte p /= 36 {- '$' -} =
          failed cmds ("ERR Protocol error: expected '$', got '" <> B.singleton (byte p) <> "'")
      | otherwise = case lineEndIn (maxLine lim) input p of
          cr | cr == lineIncomplete -> suspend cmds (Args n acc) p
             | cr == lineTooLong -> failed cmds "ERR Protocol error: too big bulk count string"
             | cr == lineBadEnd -> failed cmds "ERR Protocol error: expected CRLF after the bulk length"
             | otherwise -> case decimalIn input (p + 1) cr of
            -- Over the limit is redis's "invalid bulk length" too.
            len | len == invalidNumber || len < 0 || len > maxBulk lim ->
                    failed cmds "ERR Protocol error: invalid bulk length"
                | otherwise ->
                    let start = cr + 2
                        end = start + len
                    in if end + 2 <= total
                         then if byte end == 13 && byte (end + 1) == 10
                           then let !arg = BU.unsafeTake len (BU.unsafeDrop start input)
                                in args (end + 2) (n - 1) (arg : acc) cmds
                           else failed cmds "ERR Protocol error: expected CRLF after the bulk string"
                         else Decoded (reverse cmds)
                                (Right (Decoder B.empty (Body (len + 2 - (total - start)) [BU.unsafeDrop start input] n acc)))

    -- Resuming in a bulk string that needs more bytes (its CRLF included).
    body need pieces n acc
      | total >= need =
          let whole = B.concat (reverse (BU.unsafeTake need input : pieces))
              len = B.length whole - 2
          in if byteAt whole len == 13 && byteAt whole (len + 1) == 10
               then args need (n - 1) (BU.unsafeTake len whole : acc) []
               else failed [] "ERR Protocol error: expected CRLF after the bulk string"
      | total == 0 = Decoded [] (Right (Decoder B.empty (Body need pieces n acc)))
      | otherwise = Decoded [] (Right (Decoder B.empty (Body (need - total) (input : pieces) n acc)))


-- | What 'decimalIn' returns for anything but a decimal of at most 18
-- digits (which can never be this).
invalidNumber :: Int
invalidNumber = minBound

-- | Where the header line that starts at p in the input ends, for lines
-- of at most the given length: the index of its CR, or 'lineIncomplete',
-- 'lineTooLong' or 'lineBadEnd'. An 'Int' rather than a sum type, and top
-- level: so the scan returns an unboxed number and allocates nothing (as a
-- local function of 'feed' returning a constructor it allocated a closure
-- and a result per header line).
lineEndIn :: Int -> ByteString -> Int -> Int
lineEndIn maxLen input p = scan p
  where
    total = B.length input
    scan !i
      | i - p >= maxLen = lineTooLong
      | i >= total = lineIncomplete
      | c == 13 || c == 10 =
          if i + 2 - p > maxLen then lineTooLong
          else if c /= 13 then lineBadEnd
          else if i + 1 >= total then lineIncomplete
          else if byteAt input (i + 1) /= 10 then lineBadEnd
          else i
      | otherwise = scan (i + 1)
      where c = byteAt input i

lineIncomplete, lineTooLong, lineBadEnd :: Int
lineIncomplete = -1 -- ^ the line goes on past the input
lineTooLong = -2    -- ^ the line is longer than allowed
lineBadEnd = -3     -- ^ a CR not followed by LF, or a bare LF

-- | The decimal number in [from, to) of the input, or 'invalidNumber'.
-- Top level and not inlined, like 'lineEndIn': inlined into 'feed', its
-- digit loop was a closure allocated for every header line.
decimalIn :: ByteString -> Int -> Int -> Int
decimalIn input from to
  | from < to && byteAt input from == 45 {- '-' -} =
      let v = digitsIn input (from + 1) to in if v == invalidNumber then v else negate v
  | otherwise = digitsIn input from to

-- | The unsigned decimal in [from, to), or 'invalidNumber'.
digitsIn :: ByteString -> Int -> Int -> Int
digitsIn input start to
  | start >= to || to - start > 18 = invalidNumber
  | otherwise = go start 0
  where
    go !i !acc
      | i == to = acc
      | d >= 48 && d <= 57 = go (i + 1) (acc * 10 + fromIntegral (d - 48))
      | otherwise = invalidNumber
      where d = byteAt input i

-- Note [Decoding by position]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A command of n arguments arrives as 2n + 1 lines. Slicing out every line
-- and every number would allocate several strings per argument, which in
-- a server decoding hundreds of thousands of commands a second is most of
-- the work. So the decoder keeps one input string and moves an index
-- through it, reading header lines and numbers in place; the only strings
-- it makes are the arguments themselves (slices, not copies). Only a bulk
-- string that spans chunks is copied, once, when its last piece comes.
-- Between chunks the decoder keeps the unconsumed bytes, which are at most
-- one incomplete header or inline line.

-- | A signed 64-bit integer written as redis writes and accepts one
-- (redis's @string2ll@): an optional @-@ and decimal digits, nothing else;
-- no leading zeros (so not @01@ or @-0@, but @0@); from -2^63 to 2^63-1.
readInteger :: ByteString -> Maybe Int
readInteger bs = integerOf (B.length bs) (byteAt bs)

-- | A stored string as 'readInteger' reads a string.
readStoredInteger :: Str -> Maybe Int
readStoredInteger s = integerOf (strLength s) (strByte s)

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
          go !i !acc
            | i == len = Just acc
            | d < 48 || d > 57 = Nothing
            | acc > (limit - fromIntegral (d - 48)) `quot` 10 = Nothing
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
  RBulk s -> headerSize (B.length s) + B.length s + 2
  RStored s -> headerSize (strLength s) + strLength s + 2
  RNil -> 5
  RArray xs -> elemsSize 0 0 xs
  RNilArray -> 5
  where
    -- An array's header and elements in one strict pass.
    elemsSize :: Int -> Int -> [Reply] -> Int
    elemsSize !n !acc [] = headerSize n + acc
    elemsSize n acc (x : rest) = elemsSize (n + 1) (acc + replySize x) rest

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

-- | How many decimal digits the number has: by comparison with powers of
-- ten, since a division per digit is what an integer reply used to cost
-- most.
digitCount :: Word64 -> Int
digitCount m = go 1 10
  where
    go !k !p
      | m < p || k == 20 = k
      | otherwise = go (k + 1) (p * 10)

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
            let (q, r) = m `quotRem` 100
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
