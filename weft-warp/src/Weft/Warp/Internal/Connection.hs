{-# LANGUAGE CPP #-}
-- | warp's 'Connection' over a weft socket: every receive, send, gather
-- send, file send and close of an HTTP connection goes through "Weft.Net",
-- so each of its waits is a wait in weft (an edge-triggered watch on the
-- capability's manager), never one in GHC's I/O manager.
--
-- Unstable: an internal module of weft-warp; use "Weft.Warp".
module Weft.Warp.Internal.Connection
  ( weftConnection
  , recvChunkBytes
  ) where

import Control.Exception
import Control.Monad (unless, when)
import qualified Data.ByteString as B
import Data.IORef
import Data.Int (Int64)
import Foreign.C.Error (eNODATA)
import Foreign.Ptr (plusPtr)
import GHC.IO.Exception (IOErrorType (..), IOException (..))
import Network.Wai.Handler.Warp (InvalidRequest (ConnectionClosedByPeer))
#if MIN_VERSION_warp(3,3,22)
import Network.Wai.Handler.Warp.Internal
  (Connection (..), FileId (..), Settings (..), createWriteBuffer)
#else
import Network.Wai.Handler.Warp.Internal
  (Connection (..), FileId (..), Settings (..), allocateBuffer, freeBuffer)
#endif
import System.IO (IOMode (ReadMode), openBinaryFile)
import System.Posix.IO (closeFd, handleToFd)
import System.Posix.Types (Fd)
#if MIN_VERSION_warp(3,3,22)
import System.IO.Unsafe (unsafeInterleaveIO)
#endif

import Weft.Internal.Error (weftError)
import Weft.Net (Socket)
import qualified Weft.Net as Net

-- | The most one 'connRecv' returns: warp's receive buffer size.
recvChunkBytes :: Int
recvChunkBytes = 16384

-- | The size of a connection's write buffer, warp's own (warp 3.3.22 and
-- later grow it when a response needs more).
writeBufferBytes :: Int
writeBufferBytes = 16384

-- | A 'Connection' for a weft socket, with warp's behaviour:
--
-- * 'connRecv' returns at most 16 KiB, exactly what arrived; an empty
--   string at the end of the stream, and also once the connection was
--   closed (as warp's does, so a receive after a timeout's close ends the
--   connection quietly).
-- * A peer that is gone (a reset, a broken pipe) makes the sends throw
--   'ConnectionClosedByPeer', which warp treats as the usual end of a
--   connection.
-- * 'connSendFile' sends the header with @MSG_MORE@ and then the file with
--   a @sendfile(2)@ loop (Note [Sending files]).
-- * 'connClose' closes at once, or lingers (a graceful close, in weft)
--   for warp's @settingsGracefulCloseTimeout1@ (HTTP\/1) or @2@ (HTTP\/2)
--   milliseconds when that is positive.
--
-- The socket is owned by the connection from here on: 'connClose' closes
-- it, and warp frees the write buffer ('connFree' on warp 3.3.21; warp
-- frees the buffer in 'connWriteBuffer' itself from 3.3.22 on).
weftConnection :: Settings -> Socket -> IO Connection
weftConnection set s = do
  isH2 <- newIORef False
#if MIN_VERSION_warp(3,3,22)
  -- warp frees the write buffer (and any bigger one it swapped in).
  writeBuffer <- newIORef =<< createWriteBuffer writeBufferBytes
  -- Only HTTP/2 reads it (at its start, while the socket is open), so an
  -- HTTP/1 connection spends no getsockname(2) on it.
  local <- unsafeInterleaveIO (Net.localAddress s)
#else
  writeBuffer <- allocateBuffer writeBufferBytes
#endif
  return Connection
    { connSendMany = peerGone . Net.sendMany s
    , connSendAll = peerGone . Net.sendAll s
    , connSendFile = sendFileWith s
    , connClose = do
        h2 <- readIORef isH2
        let ms = if h2 then settingsGracefulCloseTimeout2 set else settingsGracefulCloseTimeout1 set
        if ms <= 0 then Net.close s else Net.gracefulClose s (ms * 1000)
    , connRecv = endIfClosed (Net.recv s recvChunkBytes)
    , connRecvBuf = \buf size -> endIfClosed' False (fill buf size)
    , connWriteBuffer = writeBuffer
    , connHTTP2 = isH2
#if MIN_VERSION_warp(3,3,22)
    , connMySockAddr = local
#else
    , connFree = freeBuffer writeBuffer
    , connBufferSize = writeBufferBytes
#endif
    }
  where
    fill buf size
      | size <= 0 = return True
      | otherwise = do
          n <- Net.recvBuf s buf size
          if n == 0 then return False else fill (buf `plusPtr` n) (size - n)
    endIfClosed = endIfClosed' B.empty
    -- A closed socket fails with EBADF, an 'InvalidArgument' error.
    endIfClosed' none act = act `catch` \e ->
      if ioe_type e == InvalidArgument then return none else throwIO e

-- | Turn a vanished peer into warp's 'ConnectionClosedByPeer'.
peerGone :: IO a -> IO a
peerGone act = act `catch` \e ->
  if ioe_type e == ResourceVanished then throwIO ConnectionClosedByPeer else throwIO e

-- Note [Sending files]
-- ~~~~~~~~~~~~~~~~~~~~
-- warp hands 'connSendFile' a file (by path, or an fd from its fd cache),
-- a byte range, a hook to call as bytes go out (it tickles the connection's
-- timeout), and the response header. The header goes first, flagged
-- MSG_MORE so that it leaves in the same segment as the file's first bytes;
-- then sendfile(2) runs from the range's start, each call waiting in weft
-- while the socket's buffer is full, with the hook after each call. A file
-- that ends before the range does is an 'EOF' error (@ENODATA@, for code
-- that tests the errno): the response is cut short, and warp closes the
-- connection. An empty range sends the header alone, without the flag, so
-- nothing is held back.

sendFileWith :: Socket -> FileId -> Integer -> Integer -> IO () -> [B.ByteString] -> IO ()
sendFileWith s fid offset count hook headers
  | count <= 0 = peerGone (Net.sendMany s headers)
  | otherwise = peerGone $ do
      unless (null headers) (Net.sendManyMore s headers)
      case fileIdFd fid of
        Just fd -> from fd
        Nothing -> bracket (handleToFd =<< openBinaryFile (fileIdPath fid) ReadMode) closeFd from
  where
    from fd = loop fd (fromInteger offset) (fromInteger count)
    loop :: Fd -> Int64 -> Int64 -> IO ()
    loop fd off left = when (left > 0) $ do
      sent <- Net.sendFile s fd off left
      when (sent == 0) $ throwIO (shortFile (fileIdPath fid))
      hook
      loop fd (off + sent) (left - sent)

shortFile :: FilePath -> IOException
shortFile path = (weftError EOF eNODATA "connSendFile" "the file ended before the range did")
                  { ioe_filename = Just path }
