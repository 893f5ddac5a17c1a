{-# LANGUAGE OverloadedStrings #-}
-- | A raw HTTP/1.1 client over weft sockets for the tests: it sends bytes
-- as given and reads responses exactly as they come, so a test can assert
-- a server's bytes (less the Date header, which changes every second).
module Client
  ( Conn
  , connectTo
  , closeConn
  , sendRaw
  , Resp (..)
  , readResponse
  , readHeadResponse
  , rawOf
  , readUntilClosed
  , request
  , within
  ) where

import Control.Exception
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.Char (toLower)
import Data.IORef
import Network.Socket (SockAddr (..), tupleToHostAddress)
import Numeric (readHex)

import qualified Weft
import qualified Weft.Net as Net

-- | A client connection and the bytes read past the last response.
data Conn = Conn { connSocket :: Net.Socket, connPending :: IORef B.ByteString }

connectTo :: Int -> IO Conn
connectTo port = do
  s <- Net.connect (SockAddrInet (fromIntegral port) (tupleToHostAddress (127, 0, 0, 1)))
  Conn s <$> newIORef B.empty

closeConn :: Conn -> IO ()
closeConn = Net.close . connSocket

sendRaw :: Conn -> B.ByteString -> IO ()
sendRaw c = Net.sendAll (connSocket c)

-- | One response: its status, its status line and headers as sent (without
-- the Date and Last-Modified headers, which depend on the clock and on
-- when the test wrote its file), and its body as sent (chunk framing
-- included).
data Resp = Resp { rStatus :: Int, rHead :: B.ByteString, rBody :: B.ByteString }
  deriving (Eq, Show)

-- | The response's bytes as sent, less the Date header.
rawOf :: Resp -> B.ByteString
rawOf r = rHead r <> rBody r

-- | Read one response to a request other than HEAD.
readResponse :: Conn -> IO Resp
readResponse = readResp False

-- | Read one response to a HEAD request (no body follows the headers).
readHeadResponse :: Conn -> IO Resp
readHeadResponse = readResp True

readResp :: Bool -> Conn -> IO Resp
readResp isHead c = do
  headBytes <- takeUntil "\r\n\r\n"
  let ls = BC.lines (B.take (B.length headBytes - 2) headBytes)
      statusLine = mconcat (take 1 ls)
      status = read (BC.unpack (BC.takeWhile (/= ' ') (BC.drop 1 (BC.dropWhile (/= ' ') statusLine))))
      headers = [ (BC.map toLower name, BC.dropWhile (== ' ') (B.drop 1 rest))
                | l <- drop 1 ls, let (name, rest) = BC.break (== ':') (stripCR l) ]
      kept = [ l | l <- ls, BC.map toLower (BC.takeWhile (/= ':') l) `notElem` ["date", "last-modified"] ]
      headText = B.concat [ l <> "\n" | l <- kept ] <> "\r\n"
  body <-
    if isHead || status < 200 || status == 204 || status == 304 then return B.empty
    else case lookup "content-length" headers of
      Just n -> takeExactly (read (BC.unpack n))
      Nothing | lookup "transfer-encoding" headers == Just "chunked" -> chunks B.empty
              | otherwise -> readUntilClosed c
  return (Resp status headText body)
  where
    stripCR l = if BC.isSuffixOf "\r" l then B.init l else l
    chunks acc = do
      sizeLine <- takeUntil "\r\n"
      size <- case readHex (BC.unpack (BC.takeWhile (/= '\r') sizeLine)) of
        (n, _) : _ -> return n
        [] -> throwIO (userError ("bad chunk size line: " ++ show sizeLine))
      if size == (0 :: Int)
        then do
          end <- takeUntil "\r\n"
          return (acc <> sizeLine <> end)
        else do
          chunk <- takeExactly (size + 2)
          chunks (acc <> sizeLine <> chunk)
    takeUntil marker = do
      buf <- readIORef (connPending c)
      let (before, after) = B.breakSubstring marker buf
      if B.null after
        then more >> takeUntil marker
        else do
          writeIORef (connPending c) (B.drop (B.length marker) after)
          return (before <> marker)
    takeExactly n = do
      buf <- readIORef (connPending c)
      if B.length buf >= n
        then writeIORef (connPending c) (B.drop n buf) >> return (B.take n buf)
        else more >> takeExactly n
    more = do
      bs <- Net.recv (connSocket c) 65536
      if B.null bs then throwIO (userError "client: the server closed the connection mid-response")
        else modifyIORef' (connPending c) (<> bs)

-- | Everything until the server closes the connection (a reset counts as
-- a close).
readUntilClosed :: Conn -> IO B.ByteString
readUntilClosed c = do
  pending <- atomicModifyIORef' (connPending c) (\p -> (B.empty, p))
  let go acc = do
        r <- try (Net.recv (connSocket c) 65536)
        case r of
          Right bs | not (B.null bs) -> go (acc <> bs)
          Right _ -> return acc
          Left e -> const (return acc) (e :: IOException)
  go pending

-- | One GET-style request with the given method and path (and headers
-- lines, each ending in CRLF), on the connection; its response.
request :: Conn -> B.ByteString -> B.ByteString -> B.ByteString -> IO Resp
request c method path extra = do
  sendRaw c (method <> " " <> path <> " HTTP/1.1\r\nHost: localhost\r\n" <> extra <> "\r\n")
  if method == "HEAD" then readHeadResponse c else readResponse c

-- | Bound a test step: fail if it takes longer than the given seconds.
within :: Double -> String -> IO a -> IO a
within secs what act = do
  r <- Weft.timeout (round (secs * 1e6)) act
  maybe (throwIO (userError (what ++ ": no answer within " ++ show secs ++ " s"))) return r
