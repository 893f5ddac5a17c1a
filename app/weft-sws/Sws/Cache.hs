{-# LANGUAGE OverloadedStrings #-}
-- | weft-sws's response cache: every file under the document root, read
-- once at start-up and turned into a complete HTTP/1.1 response (status
-- line, @Content-Type@, @Content-Length@, body), kept in memory and looked
-- up by request path. Serving a file is then a map lookup and one send;
-- no request ever touches the file system.
--
-- Note [Only cached names are served]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- The cache is keyed by the paths found by walking the document root:
-- @/@, then names joined with @/@, where no name is empty, @.@ or @..@
-- (a directory listing never yields them), and no name starts with @.@
-- (dot-files such as @.git@ or @.htpasswd@ are skipped on purpose).
-- Symbolic links are not followed and not served, so a link cannot reach
-- outside the root. A request is answered from the cache or not at all,
-- so no request target, whatever its @..@ segments or escapes, can name a
-- file outside the root: it matches a key or gets a 404.
module Sws.Cache
  ( -- * Responses
    Response
  , Persistence (..)
  , prebuild
  , render
  , responseBytes
    -- * The cache
  , Cache
  , CacheLimits (..)
  , defaultCacheLimits
  , buildCache
  , cacheFromList
  , cacheLookup
  , cacheEntries
  , cacheBytes
    -- * Request paths
  , PathLookup (..)
  , lookupTarget
  , contentTypeFor
    -- * Fixed responses
  , notFound
  , methodNotAllowed
  , serviceUnavailable
  ) where

import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import Data.Char (toLower)
import Data.IORef
import qualified Data.Map.Strict as Map
import Data.Word (Word8)
import Foreign.C.Error (eFBIG, eNOTDIR)
import GHC.IO.Exception (IOErrorType (..))
import System.IO (hPutStrLn, stderr)
import System.Posix.ByteString.FilePath (RawFilePath)
import System.Posix.Directory.ByteString (closeDirStream, openDirStream, readDirStream)
import System.Posix.Files.ByteString
import qualified GHC.Foreign as GHC
import GHC.IO.Encoding (getFileSystemEncoding)

import Weft.Internal.Error (weftError)

------------------------------------------------------------------------------
-- Responses

-- | A response built ahead of time, for each way the connection may go on
-- after it. The keep-alive HTTP/1.1 form, by far the most common, is one
-- contiguous string (a single send); the other forms share its body.
data Response = Response
  { respKeepAlive :: !B.ByteString
    -- ^ The whole response, for an HTTP/1.1 connection that stays open.
  , respHeadLength :: !Int
    -- ^ Where the body starts in 'respKeepAlive'.
  , respHeadClose :: !B.ByteString
    -- ^ The head with @Connection: close@.
  , respHead10 :: !B.ByteString
    -- ^ The head with @Connection: keep-alive@, which an HTTP/1.0 client
    -- needs to see to keep the connection.
  }

-- | What happens to the connection after a response.
data Persistence
  = KeepAlive11  -- ^ HTTP/1.1, stays open (the default).
  | KeepAlive10  -- ^ HTTP/1.0 that asked for keep-alive, stays open.
  | CloseAfter   -- ^ Closed after the response.
  deriving (Eq, Show)

-- | Build a response from a status (e.g. @200 OK@), extra header lines
-- (without line ends) and a body. @Server@ and @Content-Length@ are added.
-- There is no @Date@ header: a response built once cannot carry the time.
prebuild :: B.ByteString -> [B.ByteString] -> B.ByteString -> Response
prebuild status headers body = Response
  { respKeepAlive = B.append (headWith []) body
  , respHeadLength = B.length (headWith [])
  , respHeadClose = headWith ["Connection: close"]
  , respHead10 = headWith ["Connection: keep-alive"]
  }
  where
    headWith extra = B.concat $
      ["HTTP/1.1 ", status, "\r\nServer: weft-sws\r\n"]
      ++ concatMap (\h -> [h, "\r\n"]) headers
      ++ ["Content-Length: ", C.pack (show (B.length body)), "\r\n"]
      ++ concatMap (\h -> [h, "\r\n"]) extra
      ++ ["\r\n"]

-- | The strings to send for a response (one for a kept HTTP/1.1
-- connection, a head and the shared body otherwise).
render :: Persistence -> Response -> [B.ByteString]
render KeepAlive11 r = [respKeepAlive r]
render KeepAlive10 r = [respHead10 r, B.drop (respHeadLength r) (respKeepAlive r)]
render CloseAfter r = [respHeadClose r, B.drop (respHeadLength r) (respKeepAlive r)]

-- | The bytes a response sends, as one string (for tests and sizes).
responseBytes :: Persistence -> Response -> B.ByteString
responseBytes p = B.concat . render p

-- | 404, with a one-line text body.
notFound :: Response
notFound = prebuild "404 Not Found" ["Content-Type: text/plain"] "404 Not Found\n"

-- | 503, for connections over the client limit.
serviceUnavailable :: Response
serviceUnavailable = prebuild "503 Service Unavailable" ["Content-Type: text/plain"]
  "503 Service Unavailable: too many clients\n"

-- | 405 for any method but GET, saying which one is allowed.
methodNotAllowed :: Response
methodNotAllowed = prebuild "405 Method Not Allowed" ["Allow: GET", "Content-Type: text/plain"]
  "405 Method Not Allowed: only GET is served\n"

------------------------------------------------------------------------------
-- The cache

-- | Responses by request path (Note [Only cached names are served]).
data Cache = Cache
  { cacheMap :: !(Map.Map B.ByteString Response)
  , cacheBytes :: !Int
    -- ^ Total size of the cached bodies, in bytes.
  }

-- | Bounds on what 'buildCache' loads, so a document root that is too
-- large fails loudly instead of exhausting memory.
data CacheLimits = CacheLimits
  { limitTotalBytes :: !Int
    -- ^ Most bytes of file content in all (default 512 MiB).
  , limitFiles :: !Int
    -- ^ Most files (default 100000).
  } deriving (Eq, Show)

defaultCacheLimits :: CacheLimits
defaultCacheLimits = CacheLimits (512 * 1024 * 1024) 100000

-- | Read every regular file under the directory into a cache, skipping
-- dot-files and symbolic links (Note [Only cached names are served]). A
-- directory holding @index.html@ is also served at its own path with a
-- trailing slash (the root at @/@). A file that cannot be read is reported
-- on stderr and skipped. Throws an 'IOError' if the root is not a readable
-- directory (@ENOTDIR@ if it is something else), or if the files exceed the
-- limits ('ResourceExhausted', @EFBIG@).
buildCache :: CacheLimits -> RawFilePath -> IO Cache
buildCache limits root = do
  rootStatus <- getFileStatus root
  unless (isDirectory rootStatus) $
    throwIO (weftError InappropriateType eNOTDIR "buildCache" (C.unpack root ++ " is not a directory"))
  found <- newIORef ([], 0 :: Int, 0 :: Int)
  let walk dir key = do
        names <- listDirectory dir
        forM_ names $ \name -> unless (C.isPrefixOf "." name) $ do
          let path = dir <> "/" <> name
              key' = key <> "/" <> name
          st <- try (getSymbolicLinkStatus path)
          case st of
            Left e -> skip path e
            Right s
              | isDirectory s -> walk path key'
              | isRegularFile s -> do
                  (_, files, bytes) <- readIORef found
                  let size = fromIntegral (fileSize s)
                  when (files + 1 > limitFiles limits || bytes + size > limitTotalBytes limits) $
                    throwIO (weftError ResourceExhausted eFBIG "buildCache"
                               (C.unpack root ++ " holds more than the cache limits (" ++ show limits ++ ")"))
                  body <- try (readRaw path)
                  case body of
                    Left e -> skip path e
                    Right b -> modifyIORef' found (\(es, n, total) ->
                      ((key', fileResponse key' b) : es, n + 1, total + B.length b))
              | otherwise -> return ()
  walk (dropTrailingSlash root) ""
  (entries, _, _) <- readIORef found
  return (cacheFromList entries)
  where
    skip path e = hPutStrLn stderr ("weft-sws: skipping " ++ C.unpack path ++ ": " ++ show (e :: IOException))
    dropTrailingSlash p
      | B.length p > 1 && C.last p == '/' = dropTrailingSlash (B.init p)
      | otherwise = p

-- | A cache of the given paths and their 200 responses; each directory
-- index (a path ending in @/index.html@) is also stored under its
-- directory's path with a trailing slash.
cacheFromList :: [(B.ByteString, Response)] -> Cache
cacheFromList entries = Cache
  { cacheMap = Map.fromList (entries ++ indexes)
  , cacheBytes = sum [ B.length (respKeepAlive r) - respHeadLength r | (_, r) <- entries ]
  }
  where
    indexes = [ (B.take (B.length k - B.length "index.html") k, r)
              | (k, r) <- entries, "/index.html" `B.isSuffixOf` k ]

-- | The response for an exact path, if cached.
cacheLookup :: Cache -> B.ByteString -> Maybe Response
cacheLookup c k = Map.lookup k (cacheMap c)
{-# INLINE cacheLookup #-}

-- | How many paths the cache answers.
cacheEntries :: Cache -> Int
cacheEntries = Map.size . cacheMap

fileResponse :: B.ByteString -> B.ByteString -> Response
fileResponse key = prebuild "200 OK" ["Content-Type: " <> contentTypeFor key]

-- | The names in a directory, without @.@ and @..@.
listDirectory :: RawFilePath -> IO [RawFilePath]
listDirectory dir = bracket (openDirStream dir) closeDirStream (go [])
  where
    go acc ds = do
      name <- readDirStream ds
      if B.null name then return acc
        else go (if name == "." || name == ".." then acc else name : acc) ds

-- | A whole file, by its raw path.
readRaw :: RawFilePath -> IO B.ByteString
readRaw path = do
  -- The name as the file system encoding decodes it, which round-trips
  -- any bytes (as the unix package decodes names).
  enc <- getFileSystemEncoding
  B.readFile =<< B.useAsCStringLen path (GHC.peekCStringLen enc)

-- | A @Content-Type@ from the path's extension; @application/octet-stream@
-- for anything unknown.
contentTypeFor :: B.ByteString -> B.ByteString
contentTypeFor path = case map toLower (C.unpack (extension path)) of
  "html" -> "text/html; charset=utf-8"
  "htm" -> "text/html; charset=utf-8"
  "css" -> "text/css"
  "js" -> "text/javascript"
  "json" -> "application/json"
  "txt" -> "text/plain; charset=utf-8"
  "xml" -> "application/xml"
  "svg" -> "image/svg+xml"
  "png" -> "image/png"
  "jpg" -> "image/jpeg"
  "jpeg" -> "image/jpeg"
  "gif" -> "image/gif"
  "ico" -> "image/x-icon"
  "webp" -> "image/webp"
  "pdf" -> "application/pdf"
  "wasm" -> "application/wasm"
  _ -> "application/octet-stream"
  where
    extension p =
      let name = snd (B.breakEnd (== slash) p)
          (stem, ext) = B.breakEnd (== dot) name
      in if B.null stem then "" else ext

------------------------------------------------------------------------------
-- Request paths

-- | What a request target names.
data PathLookup
  = Found !Response
  | NotCached
    -- ^ A well-formed target that names nothing in the cache (404).
  | BadTarget
    -- ^ A target that is not a path (400): not origin-form or
    -- absolute-form, or a broken percent-escape.

-- | Look a request target up: the path of an origin-form (@/a/b?q@) or
-- absolute-form (@http://host/a/b@) target, without its query, with
-- percent-escapes decoded, must be a cache key exactly. Never touches the
-- file system (Note [Only cached names are served]).
lookupTarget :: Cache -> B.ByteString -> PathLookup
lookupTarget cache target = case pathOf target >>= percentDecode of
  Nothing -> BadTarget
  Just path -> maybe NotCached Found (cacheLookup cache path)

-- | The path part of a target, without query or fragment.
pathOf :: B.ByteString -> Maybe B.ByteString
pathOf t
  | C.isPrefixOf "/" t = Just (stripQuery t)
  | Just rest <- schemeless = Just (let p = C.dropWhile (/= '/') rest in if B.null p then "/" else stripQuery p)
  | otherwise = Nothing
  where
    lower = C.map toLower (B.take 8 t)
    schemeless
      | C.isPrefixOf "http://" lower = Just (B.drop 7 t)
      | C.isPrefixOf "https://" lower = Just (B.drop 8 t)
      | otherwise = Nothing
    stripQuery = B.takeWhile (\b -> b /= question && b /= hash)

-- | Decode @%XX@ escapes; 'Nothing' for a broken one. Plain paths, the
-- common case, are returned as they are.
percentDecode :: B.ByteString -> Maybe B.ByteString
percentDecode s
  | B.notElem percent s = Just s
  | otherwise = B.pack <$> go (B.unpack s)
  where
    go [] = Just []
    go (b : rest)
      | b == percent = case rest of
          (h : l : rest') -> do
            hi <- hexValue h
            lo <- hexValue l
            ((hi * 16 + lo) :) <$> go rest'
          _ -> Nothing
      | otherwise = (b :) <$> go rest
    hexValue b
      | b >= 0x30 && b <= 0x39 = Just (b - 0x30)
      | b >= 0x41 && b <= 0x46 = Just (b - 0x37)
      | b >= 0x61 && b <= 0x66 = Just (b - 0x57)
      | otherwise = Nothing

slash, dot, question, hash, percent :: Word8
slash = 0x2F
dot = 0x2E
question = 0x3F
hash = 0x23
percent = 0x25
