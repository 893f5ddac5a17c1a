{-# LANGUAGE OverloadedStrings #-}
-- | The WAI application the tests serve, on weft and on stock warp alike.
module TestApp
  ( testApp
  , fileBytes
  , fileContent
  ) where

import Control.Concurrent (threadDelay)
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Char8 as BC
import qualified Data.ByteString.Lazy as BL
import Network.HTTP.Types
import Network.Wai

-- | The served file's size: several socket buffers' worth, so sendfile
-- must wait for the client to read.
fileBytes :: Int
fileBytes = 3 * 1024 * 1024 + 17

-- | What the served file holds: a pattern that shows any byte out of place.
fileContent :: B.ByteString
fileContent = B.pack [ fromIntegral ((i * 7 + i `div` 251) `mod` 256) | i <- [0 .. fileBytes - 1] ]

-- | Routes:
--
-- * @/hello@: 5 bytes, with a Content-Length.
-- * @/echo@: the request body, prefixed by its length.
-- * @/stream@: three chunks, streamed (chunked encoding).
-- * @/file@: the file at the path (Range requests honoured by warp).
-- * @/part@: bytes 1000 to 5999 of the file, as a file part.
-- * @/boom@: the application throws (warp answers 500).
-- * @/slow@: answers after 300 ms.
testApp :: FilePath -> Application
testApp path req respond = case pathInfo req of
  ["hello"] -> respond (sized "hello")
  ["echo"] -> do
    body <- strictRequestBody req
    respond (sized (BL.fromStrict (BC.pack (show (BL.length body))) <> ":" <> body))
  ["stream"] -> respond $ responseStream status200 [(hContentType, "text/plain")] $ \write flush -> do
    write (BB.byteString "one") >> flush
    write (BB.byteString "two,") >> flush
    write (BB.byteString "three")
  ["file"] -> respond (responseFile status200 [(hContentType, "application/octet-stream")] path Nothing)
  ["part"] -> respond $ responseFile status200 [(hContentType, "application/octet-stream")] path
    (Just (FilePart 1000 5000 (fromIntegral fileBytes)))
  ["boom"] -> error "the test application fails on purpose"
  ["slow"] -> threadDelay 300000 >> respond (sized "slow")
  _ -> respond (responseLBS status404 [] "not found")
  where
    sized body = responseLBS status200
      [(hContentType, "text/plain"), (hContentLength, BC.pack (show (BL.length body)))] body
