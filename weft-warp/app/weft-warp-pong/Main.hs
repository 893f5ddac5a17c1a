{-# LANGUAGE OverloadedStrings #-}
-- | warp's pong benchmark application (a 4-byte body), served by weft
-- (Weft.Warp) or by stock warp, from one binary, so that the two differ
-- only in the server underneath.
--
-- > weft-warp-pong PORT [--server weft|warp] [--host HOST] [--timeout SECONDS]
module Main (main) where

import qualified Data.ByteString.Builder as BB
import Network.HTTP.Types (hContentLength, hContentType, status200)
import Network.Wai (Application, responseBuilder)
import qualified Network.Wai.Handler.Warp as Warp
import System.Environment (getArgs)
import System.Exit (exitFailure)
import System.IO (hPutStrLn, stderr)
import Data.String (fromString)
import Text.Read (readMaybe)

import qualified Weft.Warp as Weft

data Options = Options { optServer :: String, optHost :: String, optTimeout :: Int }

main :: IO ()
main = do
  args <- getArgs
  case args of
    (portText : rest) | Just port <- readMaybe portText -> case options (Options "weft" "127.0.0.1" 30) rest of
      Right o -> serve o port
      Left err -> usage err
    _ -> usage "a port is needed"
  where
    options o ("--server" : s : rest) = options o { optServer = s } rest
    options o ("--host" : h : rest) = options o { optHost = h } rest
    options o ("--timeout" : t : rest) | Just n <- readMaybe t = options o { optTimeout = n } rest
    options o [] = Right o
    options _ (x : _) = Left ("unknown option " ++ x)
    usage err = do
      hPutStrLn stderr ("weft-warp-pong: " ++ err ++ "\nusage: weft-warp-pong PORT [--server weft|warp] [--host HOST] [--timeout SECONDS]")
      exitFailure

serve :: Options -> Int -> IO ()
serve o port = case optServer o of
  "weft" -> Weft.runSettings (configure Weft.defaultSettings) pong
  "warp" -> Warp.runSettings (configure Warp.defaultSettings) pong
  other -> hPutStrLn stderr ("weft-warp-pong: unknown server " ++ other ++ " (weft or warp)") >> exitFailure
  where
    configure = Warp.setPort port . Warp.setHost (fromString (optHost o)) . Warp.setTimeout (optTimeout o)

pong :: Application
pong _ respond = respond $
  responseBuilder status200 [(hContentType, "text/plain"), (hContentLength, "4")] (BB.byteString "PONG")
