-- | The example servers' per-connection code, over either socket layer.
module Example.Servers
  ( simpleServer
  , simpleReply
  , echoServer
  , pongServer
  , pongServerWith
  ) where

import Control.Monad (replicateM_, unless)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC

import Example.Http
import Example.Serve

-- | SimpleServer (Mio §3.1): read exactly @req@ bytes, in as many pieces
-- as they come, reply with the given bytes, repeat; stop at end of stream.
-- No parsing: the cost measured is the I/O manager's. Bytes of the next
-- request that come early (a pipelining client) count towards it.
simpleServer :: Int -> B.ByteString -> Conn -> IO ()
simpleServer req reply conn = loop 0
  where
    loop have = do
      chunk <- connRecv conn 4096
      unless (B.null chunk) $ do
        let total = have + B.length chunk
        replicateM_ (total `quot` req) (connSendAll conn reply)
        loop (total `rem` req)

-- | A reply of exactly @n@ bytes that looks like an HTTP response.
simpleReply :: Int -> B.ByteString
simpleReply n = B.take n (header <> BC.replicate n 'x')
  where header = BC.pack ("HTTP/1.1 200 OK\r\nContent-Length: " ++ show (max 0 (n - 38)) ++ "\r\n\r\n")

-- | Send back what comes, until end of stream.
echoServer :: Conn -> IO ()
echoServer conn = do
  chunk <- connRecv conn 4096
  unless (B.null chunk) $ do
    connSendAll conn chunk
    echoServer conn

-- | HTTP/1.1 keep-alive pong ("Example.Http").
pongServer :: Conn -> IO ()
pongServer = pongServerWith pongResponse

-- | 'pongServer' answering with the given response ('servePongWith').
pongServerWith :: B.ByteString -> Conn -> IO ()
pongServerWith response conn = servePongWith response defaultLimits (connRecv conn 4096) (connSendMany conn)
