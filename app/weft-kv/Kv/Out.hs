{-# LANGUAGE BangPatterns #-}
-- | A connection's output: replies written straight into a pinned buffer,
-- in the order they are to be sent (Note [Replies in place]). Every
-- function must run on the connection's color.
module Kv.Out
  ( Out
  , newOut
  , Piece (..)
  , piece
  , outPiece
  , outWaiting
  , outChunks
  , outSent
  , outClear
  ) where

import Control.Monad (when)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import Data.Primitive.PrimArray
import Data.Word (Word8)
import Control.Monad.Primitive (RealWorld)
import Foreign.ForeignPtr (ForeignPtr)
import Foreign.Ptr (Ptr, plusPtr)
import GHC.ForeignPtr (mallocPlainForeignPtrBytes, unsafeWithForeignPtr)

import qualified Weft.Net as Net

import Kv.Str (strLength, strString)
import Kv.Resp (Reply (..), encodeSized, headerSize, plainSize, sharedBulkBytes, writeArrayHeader, writeBulkHeader, writeBytes, writeCrlf, writeReply)

-- Note [Replies in place]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- A reply is written, in its turn (Note [Reply order] in "Kv.Conn"),
-- straight into the connection's buffer: a pinned byte array, written
-- from its start, whose bytes from 'openFrom' to 'end' are the open run
-- of replies not yet handed to a send. A pipeline's replies thus lie
-- side by side, and go out with one send, with no string per reply and
-- no copy to join them. A bulk string of 'sharedBulkBytes' or more is
-- not copied: the run so far is closed (a slice of the buffer joins the
-- closed chunks), the stored string itself follows it, and a new run
-- starts after. So replies that carry one large stored value share its
-- memory.
--
-- A reply travels from the color that computed it to the connection's as
-- a 'Piece': a scalar reply (an integer, a string, OK) as itself, with
-- its size, and written in place; an array already encoded there, into
-- one string of its size, which is copied into the buffer. Arrays
-- (LRANGE, MGET) are lists of many small objects; encoded where they
-- are made, they die young, where carried to the connection's color
-- they lived until its turn, and the collector copied them. A short
-- array of scalars ('shortArray': ZPOPMIN's pair, an empty array) is
-- carried as a scalar is: a few cells cost the collector less than a
-- string of its own costs to make and copy. Its elements must not be
-- stored strings ('RStored'), which leave their color only as copies
-- (Note [Stored strings] in "Kv.Str"); encoding makes that copy.
--
-- A slice handed to a send may be sent only in part; the buffer is
-- written again from its start only once everything is sent, and a
-- reply that does not fit in the room left closes the run and moves to a
-- new buffer (large enough for it), leaving the old one to the slices.
-- A connection starts with 'outBufferBytes' (redis keeps 16 KiB per
-- client); after everything is sent, a buffer grown beyond 'keptBytes' is
-- let go, so a connection keeps at most that much between bursts of
-- large replies.

-- | A connection's output.
data Out = Out
  { outBuffer :: !(IORef (ForeignPtr Word8))
  , outClosed :: !(IORef [ByteString])
    -- ^ Closed chunks not yet sent, latest first.
  , outMarks  :: !(MutablePrimArray RealWorld Int)
    -- ^ 'capacity', 'openFrom', 'end' and 'waiting'.
  }

-- | The marks: the buffer's size; where the open run starts; where the
-- next reply goes; the bytes not yet sent (closed chunks and open run).
capacity, openFrom, end, waiting :: Int
capacity = 0
openFrom = 1
end = 2
waiting = 3

-- | The size of a new connection's buffer.
outBufferBytes :: Int
outBufferBytes = 4096

-- | The largest buffer kept once everything is sent.
keptBytes :: Int
keptBytes = 65536

newOut :: IO Out
newOut = do
  marks <- newPrimArray 4
  setPrimArray marks 0 4 0
  buf <- mallocPlainForeignPtrBytes outBufferBytes
  writePrimArray marks capacity outBufferBytes
  Out <$> newIORef buf <*> newIORef [] <*> pure marks

mark :: Out -> Int -> IO Int
mark o = readPrimArray (outMarks o)
{-# INLINE mark #-}

setMark :: Out -> Int -> Int -> IO ()
setMark o = writePrimArray (outMarks o)
{-# INLINE setMark #-}

-- | The bytes waiting to be sent.
outWaiting :: Out -> IO Int
outWaiting o = mark o waiting

-- | A reply ready for a connection's output, made on the color that
-- computed it (Note [Replies in place]): measured ('plainSize', which
-- evaluates it), or, for an array, already encoded.
data Piece = Measured !Int !Reply | Encoded !ByteString

-- | A reply as a 'Piece'.
piece :: Reply -> Piece
piece r = case r of
  RArray xs | n >= 0, not (shortArray 0 xs) -> Encoded (encodeSized n r)
  REncoded bs -> Encoded bs
  _ -> Measured n r
  where n = plainSize r
-- Inlined, so that a caller taking the piece apart at once ('whole' in
-- "Kv.Conn") does not build it.
{-# INLINE piece #-}

-- | Is an array (its elements after the first k) at most 'shortItems'
-- long, every element a scalar but a stored string?
shortArray :: Int -> [Reply] -> Bool
shortArray !_ [] = True
shortArray k (x : rest) = k < shortItems && scalar && shortArray (k + 1) rest
  where
    scalar = case x of
      RSimple _ -> True
      RError _ -> True
      RInt _ -> True
      RBulk _ -> True
      RNil -> True
      RNilArray -> True
      _ -> False

-- | The most elements of an array carried unencoded ('shortArray').
shortItems :: Int
shortItems = 4

-- | Append a reply.
outPiece :: Out -> Piece -> IO ()
outPiece o (Measured n r) = measured o n r
outPiece o (Encoded bs)
  | B.length bs >= sharedBulkBytes = reference o bs
  | otherwise = put o (B.length bs) (`writeBytes` bs)
{-# INLINE outPiece #-}

-- | Append a reply of the given 'plainSize'.
measured :: Out -> Int -> Reply -> IO ()
measured o n r
  | n < 0 = shared o r
  | otherwise = put o n (`writeReply` r)

-- | A reply with large bulk strings: the small parts written, the large
-- strings referenced.
shared :: Out -> Reply -> IO ()
shared o r = case r of
  RBulk s | B.length s >= sharedBulkBytes -> do
    put o (headerSize (B.length s)) (`writeBulkHeader` B.length s)
    reference o s
    put o 2 writeCrlf
  RStored s | strLength s >= sharedBulkBytes -> shared o (RBulk (strString s))
  RArray xs -> do
    put o (headerSize (length xs)) (`writeArrayHeader` length xs)
    mapM_ (\x -> measured o (plainSize x) x) xs
  _ -> measured o (plainSize r) r

-- | Send a string from where it is: the open run is closed, and the
-- string follows it.
reference :: Out -> ByteString -> IO ()
reference o bs = do
  close o
  modifyIORef' (outClosed o) (bs :)
  bump o waiting (B.length bs)

-- | Make room for n more bytes in the open run: a new buffer if the
-- current one has not that much left.
room :: Out -> Int -> IO ()
room o n = do
  cap <- mark o capacity
  e <- mark o end
  when (cap - e < n) $ do
    close o
    -- Twice as large: a connection whose batches of replies outgrow the
    -- buffer soon has one that holds a batch.
    let cap' = min keptBytes (2 * cap) `max` (2 * n)
    buf <- mallocPlainForeignPtrBytes cap'
    writeIORef (outBuffer o) buf
    setMark o capacity cap'
    setMark o openFrom 0
    setMark o end 0

-- | Write n bytes at the end of the open run, making room first.
put :: Out -> Int -> (Ptr Word8 -> IO (Ptr Word8)) -> IO ()
put o n f = do
  room o n
  buf <- readIORef (outBuffer o)
  e <- mark o end
  _ <- unsafeWithForeignPtr buf (\p -> f (p `plusPtr` e))
  setMark o end (e + n)
  bump o waiting n
{-# INLINE put #-}

bump :: Out -> Int -> Int -> IO ()
bump o which d = mark o which >>= setMark o which . (+ d)
{-# INLINE bump #-}

-- | Close the open run: its bytes join the closed chunks.
close :: Out -> IO ()
close o = do
  from <- mark o openFrom
  e <- mark o end
  when (e > from) $ do
    buf <- readIORef (outBuffer o)
    modifyIORef' (outClosed o) (BI.PS buf from (e - from) :)
    setMark o openFrom e

-- | Everything waiting, in order, to be sent (the open run is closed).
outChunks :: Out -> IO [ByteString]
outChunks o = close o >> reverse <$> readIORef (outClosed o)

-- | The first n bytes of 'outChunks' were sent.
outSent :: Out -> Int -> IO ()
outSent o n = do
  chunks <- reverse <$> readIORef (outClosed o)
  let rest = Net.dropBytes n chunks
  writeIORef (outClosed o) (reverse rest)
  bump o waiting (negate n)
  left <- mark o waiting
  when (left == 0) $ do
    -- Nothing refers to the buffer any more: write it again from its
    -- start, or let a grown one go.
    cap <- mark o capacity
    when (cap > keptBytes) $ do
      buf <- mallocPlainForeignPtrBytes outBufferBytes
      writeIORef (outBuffer o) buf
      setMark o capacity outBufferBytes
    setMark o openFrom 0
    setMark o end 0

-- | Forget everything waiting (the connection is closed).
outClear :: Out -> IO ()
outClear o = do
  writeIORef (outClosed o) []
  setMark o openFrom 0
  setMark o end 0
  setMark o waiting 0

