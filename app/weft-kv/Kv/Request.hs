{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- | Requests as weft-kv reads them: an incremental RESP2 request decoder
-- whose commands are views of the input they came in ('Commands').
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
-- one header line of unparsed input ('maxLine') plus the command being
-- received (each of its bulk strings at most 'maxBulk'). Input that breaks
-- the protocol or a limit yields a 'ProtocolError', after which the
-- connection cannot be resynchronised and must be answered with the error
-- and closed.
module Kv.Request
  ( -- * Limits
    Limits (..)
  , defaultLimits
    -- * Commands
  , Commands
  , commandsEnd
  , nextCommand
  , argCount
  , argAt
  , argsFrom
  , commandLists
  , commandOf
    -- * Decoding
  , Decoder
  , newDecoder
  , Decoded (..)
  , ProtocolError (..)
  , feed
  ) where

import Control.Monad.ST (ST, runST)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.Primitive.PrimArray

import Weft.Net (byteAt)

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
-- Commands

-- Note [Commands as views]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A read of a pipelining client holds dozens of commands. Decoded into
-- lists of argument strings, each argument cost a string and a list cell,
-- and each command two reversed lists, most of it garbage a moment later.
-- So the decoder returns the commands of a read as one 'Commands': the
-- input they were read from and one array of numbers, laid out command
-- after command as
--
-- >  argument count, then per argument: its start in the input, its length
--
-- A command is named by the index of its count ('nextCommand' steps to
-- the next one). A command's arguments are sliced out of the input only
-- when it runs ('argAt', 'argsFrom'), and what is stored is copied then
-- (the input is shared with the other commands of the read).
--
-- Two kinds of command are not views of the read they complete in, and
-- come as a 'Commands' of their own: a command that began in an earlier
-- read, whose bytes (all of them, headers included) are joined into one
-- string when its last byte arrives (one copy, as joining a bulk string's
-- pieces was before), with its positions counted from its start; and an
-- inline command with quoted words, whose words are unescaped into a new
-- string. Commands in several 'Commands' keep their order: a decoded
-- chunk is a list of them.
--
-- The array is never empty and holds no command without arguments (an
-- empty multibulk or blank inline line is skipped at decoding).

-- | Commands decoded from one stretch of input, as views of it (Note
-- [Commands as views]).
data Commands = Commands !ByteString !(PrimArray Int)

-- | The index after the last command: a command index is below it.
commandsEnd :: Commands -> Int
commandsEnd (Commands _ a) = sizeofPrimArray a
{-# INLINE commandsEnd #-}

-- | The command after the one at this index.
nextCommand :: Commands -> Int -> Int
nextCommand (Commands _ a) i = i + 1 + 2 * indexPrimArray a i
{-# INLINE nextCommand #-}

-- | How many arguments the command at this index has, its name included
-- (at least one).
argCount :: Commands -> Int -> Int
argCount (Commands _ a) = indexPrimArray a
{-# INLINE argCount #-}

-- | An argument of the command at an index (0 is its name), sharing the
-- input's memory.
argAt :: Commands -> Int -> Int -> ByteString
argAt (Commands buf a) i j =
  BU.unsafeTake (indexPrimArray a (i + 2 + 2 * j)) (BU.unsafeDrop (indexPrimArray a (i + 1 + 2 * j)) buf)
{-# INLINE argAt #-}

-- | The arguments of the command at an index from the given one on, as a
-- list made at once (no thunk per argument).
argsFrom :: Commands -> Int -> Int -> [ByteString]
argsFrom cs i from = go (argCount cs i - 1) []
  where
    go !j acc
      | j < from = acc
      | otherwise = let !arg = argAt cs i j in go (j - 1) (arg : acc)

-- | One command from its arguments, the name first: at index 0 of a
-- 'Commands' of its own (a command a transaction queued, planned when
-- EXEC runs).
commandOf :: [ByteString] -> Commands
commandOf args = Commands (B.concat args) (primArrayFromList (length args : positions 0 args))
  where
    positions !_ [] = []
    positions at (a : rest) = at : B.length a : positions (at + B.length a) rest

-- | Every command, as its argument list (for tests and messages).
commandLists :: Commands -> [[ByteString]]
commandLists cs = go 0
  where go i | i >= commandsEnd cs = []
             | otherwise = argsFrom cs i 0 : go (nextCommand cs i)

------------------------------------------------------------------------------
-- Decoding

-- | Where the decoder stands between chunks.
data Decoder = Decoder !ByteString !Pending
  -- The unconsumed input (only ever an incomplete header or inline line,
  -- at most 'maxLine' bytes), and what the next bytes belong to.

data Pending
  = Between
    -- ^ Between commands.
  | Begun !Int [ByteString] !Int [Int] !Int !Int
    -- ^ In a command begun in earlier input: its argument count; its bytes
    -- before the unconsumed input (latest piece first) and how many; its
    -- arguments so far, as positions from its start (each one's length,
    -- then its start, latest first); the arguments whose headers are still
    -- to come; and, if inside a bulk string, the bytes of it still to come
    -- (its CRLF included), else 0.

-- | A decoder at the start of a connection.
newDecoder :: Decoder
newDecoder = Decoder B.empty Between

-- | Why input cannot be decoded. The message is the text of the error
-- reply (e.g. @ERR Protocol error: invalid bulk length@).
newtype ProtocolError = ProtocolError ByteString
  deriving (Eq, Show)

-- | What one chunk of input completed: the commands, in order (Note
-- [Commands as views]), then either the decoder to feed the next chunk
-- to, or the protocol error that ends the connection (the commands
-- before it are still valid).
data Decoded = Decoded [Commands] (Either ProtocolError Decoder)

-- | Where the commands of the chunk being decoded go: a growing array
-- and the numbers in it, and the 'Commands' already closed (latest
-- first).
data Positions s = Positions !(MutablePrimArray s Int) !Int [Commands]

-- | Decode a chunk of input. The commands share memory with the chunk:
-- copy what you keep for long.
--
-- The decoder walks the input by position and records where arguments
-- are (Note [Decoding by position], Note [Commands as views]).
feed :: Limits -> Decoder -> ByteString -> Decoded
feed lim (Decoder held pending) chunk = runST $ do
  arr <- newPrimArray firstRoom
  let out0 = Positions arr 0 []
  case pending of
    Between -> between 0 out0
    Begun argc pieces base offs left need
      | need == 0 -> continued 0 argc pieces base offs left out0
      | total >= need ->
          if byteBefore pieces (need - 2) == 13 && byteBefore pieces (need - 1) == 10
            then continued need argc pieces base offs left out0
            else failed out0 "ERR Protocol error: expected CRLF after the bulk string"
      | otherwise ->
          let pieces' = if total == 0 then pieces else input : pieces
          in suspendWith out0 (Begun argc pieces' (base + total) offs left (need - total)) total
  where
    input | B.null held = chunk
          | otherwise = B.append held chunk
    total = B.length input
    byte = byteAt input
    -- Room for the numbers of a read of small commands, within reason.
    firstRoom = max 16 (min 8192 (total `quot` 6))

    -- The byte at a position of the input, or (negative) before it, in the
    -- latest piece of a command begun earlier.
    byteBefore pieces q
      | q >= 0 = byte q
      | (p : _) <- pieces = byteAt p (B.length p + q)
      | otherwise = 0

    closePositions :: Positions s -> ST s [Commands]
    closePositions (Positions arr n done)
      | n == 0 = return done
      | otherwise = do
          shrinkMutablePrimArray arr n
          a <- unsafeFreezePrimArray arr
          return (Commands input a : done)

    suspendWith :: Positions s -> Pending -> Int -> ST s Decoded
    suspendWith out st p = do
      done <- closePositions out
      return (Decoded (reverse done) (Right (Decoder (BU.unsafeDrop p input) st)))

    failed :: Positions s -> ByteString -> ST s Decoded
    failed out msg = do
      done <- closePositions out
      return (Decoded (reverse done) (Left (ProtocolError msg)))

    -- Append a number, growing the array if it is full.
    push :: Positions s -> Int -> ST s (Positions s)
    push (Positions arr n done) v = do
      size <- getSizeofMutablePrimArray arr
      arr' <- if n < size then return arr else resizeMutablePrimArray arr (2 * size)
      writePrimArray arr' n v
      return (Positions arr' (n + 1) done)
    {-# INLINE push #-}

    -- A command that is not a view of this input goes after the ones
    -- before it (Note [Commands as views]).
    alone :: Positions s -> Commands -> ST s (Positions s)
    alone out cmd = do
      done <- closePositions out
      arr <- newPrimArray firstRoom
      return (Positions arr 0 (cmd : done))

    -- Between commands, at position p.
    between :: Int -> Positions s -> ST s Decoded
    between !p !out
      | p >= total = suspendWith out Between total
      | byte p == 42 {- '*' -} = case lineEndIn (maxLine lim) input p of
          cr | cr == lineIncomplete -> suspendWith out Between p
             | cr == lineTooLong -> failed out "ERR Protocol error: too big mbulk count string"
             | cr == lineBadEnd -> failed out "ERR Protocol error: expected CRLF after the multibulk length"
             | otherwise -> case decimalIn input (p + 1) cr of
            n | n == invalidNumber -> failed out "ERR Protocol error: invalid multibulk length"
              | n <= 0 -> between (cr + 2) out        -- an empty command: nothing to run
              | n <= maxArgs lim -> do
                  let Positions _ start _ = out
                  out' <- push out n
                  args (cr + 2) n p start out'
              | otherwise -> failed out "ERR Protocol error: invalid multibulk length"
      | otherwise = case B.elemIndex 10 (BU.unsafeDrop p input) of
          Nothing
            | total - p >= maxLine lim -> failed out "ERR Protocol error: too big inline request"
            | otherwise -> suspendWith out Between p
          Just i
            | i >= maxLine lim -> failed out "ERR Protocol error: too big inline request"
            | otherwise -> do
                let lineEnd = if i > 0 && byte (p + i - 1) == 13 then p + i - 1 else p + i
                    l = BU.unsafeTake (lineEnd - p) (BU.unsafeDrop p input)
                if B.any (\c -> c == 34 || c == 39) l
                  then case inlineWords l of
                    Nothing -> failed out "ERR Protocol error: unbalanced quotes in request"
                    Just [] -> between (p + i + 1) out
                    Just ws -> alone out (quotedCommand ws) >>= between (p + i + 1)
                  else inline p lineEnd (p + i + 1) out

    -- An inline line without quotes, [from, to), its words recorded in
    -- place; then on at next.
    inline :: Int -> Int -> Int -> Positions s -> ST s Decoded
    inline from to next out0@(Positions _ start0 _) = push out0 0 >>= word from 0
      where
        word !q !k out
          | q >= to = finish k out
          | isSep (byte q) = word (q + 1) k out
          | otherwise = do
              let e = wordEnd q
              out' <- push out q >>= (`push` (e - q))
              word e (k + 1) out'
        wordEnd !q | q < to && not (isSep (byte q)) = wordEnd (q + 1)
                   | otherwise = q
        finish k out@(Positions arr _ done)
          | k == 0 = between next (Positions arr start0 done)   -- a blank line
          | otherwise = writePrimArray arr start0 k >> between next out

    -- In a multibulk command of this input that began at cmd (its count at
    -- start in the array), with n arguments still to come, at p.
    args :: Int -> Int -> Int -> Int -> Positions s -> ST s Decoded
    args !p !n !cmd !start !out
      | n == 0 = between p out
      | p >= total = spillAt out p n 0
      | byte p /= 36 {- '$' -} =
          failed (dropBegun out) ("ERR Protocol error: expected '$', got '" <> B.singleton (byte p) <> "'")
      | otherwise = case lineEndIn (maxLine lim) input p of
          cr | cr == lineIncomplete -> spillAt out p n 0
             | cr == lineTooLong -> failed (dropBegun out) "ERR Protocol error: too big bulk count string"
             | cr == lineBadEnd -> failed (dropBegun out) "ERR Protocol error: expected CRLF after the bulk length"
             | otherwise -> case decimalIn input (p + 1) cr of
            -- Over the limit is redis's "invalid bulk length" too.
            len | len == invalidNumber || len < 0 || len > maxBulk lim ->
                    failed (dropBegun out) "ERR Protocol error: invalid bulk length"
                | otherwise -> do
                    let begin = cr + 2
                        end = begin + len
                    out' <- push out begin >>= (`push` len)
                    if end + 2 <= total
                      then if byte end == 13 && byte (end + 1) == 10
                        then args (end + 2) (n - 1) cmd start out'
                        else failed (dropBegun out) "ERR Protocol error: expected CRLF after the bulk string"
                      else spillAt out' total (n - 1) (end + 2 - total)
      where
        -- The command so far leaves this input's array.
        dropBegun (Positions arr _ done) = Positions arr start done
        -- The input ends within the command, at q: the command goes on as
        -- begun in earlier input, its positions counted from its start.
        spillAt o@(Positions arr m _) q left need = do
          argc <- readPrimArray arr start
          offs <- relative arr (start + 1) m
          let piece = BU.unsafeTake (q - cmd) (BU.unsafeDrop cmd input)
          suspendWith (dropBegun o) (Begun argc [piece] (q - cmd) offs left need) q
        relative arr from to = go from []
          where go !k acc | k >= to = return acc
                          | otherwise = do
                              s <- readPrimArray arr k
                              l <- readPrimArray arr (k + 1)
                              go (k + 2) (l : (s - cmd) : acc)

    -- In a command begun in earlier input, at p of this one (which is base
    -- bytes into the command).
    continued :: Int -> Int -> [ByteString] -> Int -> [Int] -> Int -> Positions s -> ST s Decoded
    continued !p !argc pieces !base offs !n !out
      | n == 0 = do
          let whole = B.concat (reverse (BU.unsafeTake p input : pieces))
              cmd = Commands whole (primArrayFromListN (1 + 2 * argc) (argc : reverse offs))
          alone out cmd >>= between p
      | p >= total = suspendWith out (Begun argc (grown total) (base + total) offs n 0) total
      | byte p /= 36 {- '$' -} =
          failed out ("ERR Protocol error: expected '$', got '" <> B.singleton (byte p) <> "'")
      | otherwise = case lineEndIn (maxLine lim) input p of
          cr | cr == lineIncomplete -> suspendWith out (Begun argc (grown p) (base + p) offs n 0) p
             | cr == lineTooLong -> failed out "ERR Protocol error: too big bulk count string"
             | cr == lineBadEnd -> failed out "ERR Protocol error: expected CRLF after the bulk length"
             | otherwise -> case decimalIn input (p + 1) cr of
            len | len == invalidNumber || len < 0 || len > maxBulk lim ->
                    failed out "ERR Protocol error: invalid bulk length"
                | otherwise ->
                    let begin = cr + 2
                        end = begin + len
                        offs' = len : (base + begin) : offs
                    in if end + 2 <= total
                         then if byte end == 13 && byte (end + 1) == 10
                           then continued (end + 2) argc pieces base offs' (n - 1) out
                           else failed out "ERR Protocol error: expected CRLF after the bulk string"
                         else suspendWith out (Begun argc (grown total) (base + total) offs' (n - 1) (end + 2 - total)) total
      where
        grown q | q == 0 = pieces
                | otherwise = BU.unsafeTake q input : pieces

    isSep c = c == 32 || c == 9 || c == 10 || c == 13 || c == 0

-- | An inline command's words, unescaped, as a 'Commands' of its own.
quotedCommand :: [ByteString] -> Commands
quotedCommand ws = Commands (B.concat ws) (primArrayFromListN (1 + 2 * length ws) (length ws : go 0 ws))
  where go !_ [] = []
        go at (w : rest) = at : B.length w : go (at + B.length w) rest

-- | The words of an inline command line, as redis splits them: blanks
-- separate words; inside a word, a "double-quoted" part takes the escapes
-- @\\n \\r \\t \\b \\a \\xHH@ and @\\c@ for any other byte c, a
-- 'single-quoted' part takes @\\'@, and a closing quote must end its
-- word. 'Nothing' if a quote is not closed, or closed inside a word.
-- ('feed' splits a line without quotes in place, and calls this only for
-- the others.)
inlineWords :: ByteString -> Maybe [ByteString]
inlineWords = go []
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
-- through it, reading header lines and numbers in place, and records only
-- where each argument is (Note [Commands as views]). Only a command that
-- spans chunks is copied, once, when its last byte comes. Between chunks
-- the decoder keeps the unconsumed bytes, which are at most one incomplete
-- header or inline line, and the pieces of a command begun.
