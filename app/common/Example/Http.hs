{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- | The HTTP/1.1 side of @weft-pong@, an example keep-alive server that
-- answers every request with a fixed @PONG@, for benchmarking with wrk.
--
-- Nothing here touches a socket: 'servePong' is written against abstract
-- @recv@ and @sendMany@ functions so that the same connection logic runs over
-- both socket layers the benchmark compares, and so that it can be tested
-- with fake connections.
--
-- The parser is deliberately small but strict (RFC 9112): it understands
-- exactly what it needs to find where one request ends and the next begins
-- (the head, @Content-Length@, @Connection@) and rejects everything it cannot
-- frame safely, such as @Transfer-Encoding@, conflicting lengths and
-- obsolete line folding. Every input is bounded by 'Limits', so a peer can
-- never make a connection hold more than 'maxHeaderBytes' of unparsed input.
module Example.Http
  ( -- * Responses
    pongResponse
  , pongResponseOf
  , tooManyClientsResponse
    -- * Limits
  , Limits (..)
  , defaultLimits
    -- * Parsing a request head
  , Request (..)
  , Parse (..)
  , parseRequest
    -- * Errors
  , HttpError (..)
  , errorStatus
  , errorResponse
    -- * Serving a connection
  , servePong
  , servePongWith
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import qualified Weft.Net as Bytes (byteAt)
import Data.Word (Word8)

-- | The answer to every well-formed request: status 200 with the 4-byte body
-- @PONG@, 42 bytes in all. It carries no @Connection@ header; the answer
-- to a request that does not keep the connection alive says
-- @Connection: close@ ('servePong').
pongResponse :: ByteString
pongResponse = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nPONG"

-- | A pong answer with a body of the given number of bytes (negative
-- counts as 0): @PONG@ repeated and cut to that length, e.g. to compare
-- with a server sending files of that size. @pongResponseOf 4@ is
-- 'pongResponse'.
pongResponseOf :: Int -> ByteString
pongResponseOf n0 = B.concat
  [ "HTTP/1.1 200 OK\r\nContent-Length: ", C.pack (show n), "\r\n\r\n"
  , B.take n (B.concat (replicate (n `div` 4 + 1) "PONG")) ]
  where n = max 0 n0

-- | Per-connection resource limits. None may be negative.
data Limits = Limits
  { maxHeaderBytes :: !Int
    -- ^ Longest request head in bytes: any leading empty lines, the request
    -- line, the header lines and the final empty line, line ends included.
    -- This also bounds how much unparsed input a connection buffers.
  , maxHeaderCount :: !Int
    -- ^ Most header lines in one request.
  , maxBodyBytes :: !Int
    -- ^ Largest accepted @Content-Length@, in bytes. Bodies are discarded as
    -- they stream in, so this bounds time spent reading, not memory.
  } deriving (Eq, Show)

-- | 8192 header bytes, 100 headers, 1 MiB (1048576 bytes) of body.
defaultLimits :: Limits
defaultLimits = Limits
  { maxHeaderBytes = 8192
  , maxHeaderCount = 100
  , maxBodyBytes = 1048576
  }

-- | A parsed request head; only what framing and the reply need.
data Request = Request
  { requestMethod :: !ByteString
    -- ^ The method as sent (case-sensitive, e.g. @GET@).
  , requestTarget :: !ByteString
    -- ^ The request target as sent; never empty, no spaces or controls.
  , requestMinorVersion :: !Int
    -- ^ 1 for HTTP/1.1, 0 for HTTP/1.0.
  , requestKeepAlive :: !Bool
    -- ^ Whether the connection stays open after this request: HTTP/1.1
    -- unless @Connection: close@, HTTP/1.0 only with @Connection: keep-alive@.
  , requestBodyLength :: !Int
    -- ^ Body length in bytes from @Content-Length@, 0 without one.
  } deriving (Eq, Show)

-- | Why a request was rejected. Each maps to a status with 'errorStatus'.
data HttpError
  = BadRequest String
    -- ^ Malformed request line or header; the text says what (400).
  | HeaderTooLarge
    -- ^ The head exceeds 'maxHeaderBytes' (431).
  | TooManyHeaders
    -- ^ More than 'maxHeaderCount' header lines (431).
  | BodyTooLarge
    -- ^ @Content-Length@ exceeds 'maxBodyBytes' (413).
  | NotImplemented String
    -- ^ A feature this server does not do, e.g. @Transfer-Encoding@ (501).
  | VersionNotSupported
    -- ^ A well-formed version other than HTTP/1.0 or HTTP/1.1 (505).
  deriving (Eq, Show)

-- | The answer to a client refused for want of room (HTTP 503, closing).
tooManyClientsResponse :: ByteString
tooManyClientsResponse =
  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 20\r\nConnection: close\r\n\r\ntoo many connections"

-- | The response status code for an error: 400, 431, 431, 413, 501 and 505.
errorStatus :: HttpError -> Int
errorStatus e = case e of
  BadRequest _ -> 400
  HeaderTooLarge -> 431
  TooManyHeaders -> 431
  BodyTooLarge -> 413
  NotImplemented _ -> 501
  VersionNotSupported -> 505

-- | A complete error response: the status line, @Connection: close@ (the
-- connection cannot be resynchronised after a bad head, so it is always the
-- last response) and a one-line plain-text body with its exact length.
errorResponse :: HttpError -> ByteString
errorResponse e = B.concat
  [ "HTTP/1.1 ", status, "\r\nContent-Type: text/plain\r\nContent-Length: "
  , C.pack (show (B.length body)), "\r\nConnection: close\r\n\r\n", body ]
  where
    status = C.pack (show (errorStatus e) ++ " " ++ reason)
    body = C.pack (show (errorStatus e) ++ " " ++ reason ++ detail ++ "\n")
    reason = case e of
      BadRequest _ -> "Bad Request"
      HeaderTooLarge -> "Request Header Fields Too Large"
      TooManyHeaders -> "Request Header Fields Too Large"
      BodyTooLarge -> "Content Too Large"
      NotImplemented _ -> "Not Implemented"
      VersionNotSupported -> "HTTP Version Not Supported"
    detail = case e of
      BadRequest why -> ": " ++ printable why
      NotImplemented what -> ": " ++ printable what
      _ -> ""
    -- Our messages are ASCII already; this keeps the body one clean line
    -- (and its length right) should a caller build one that is not.
    printable = map (\c -> if c >= ' ' && c <= '~' then c else '?')

-- | The result of 'parseRequest'.
data Parse
  = Parsed !Request !Int
    -- ^ A complete head, and the number of bytes it took from the start of
    -- the buffer (leading empty lines included). The body, if any, follows.
  | NeedMore
    -- ^ Nothing wrong so far, but the head is not complete. Only returned
    -- while the buffer holds at most 'maxHeaderBytes' bytes.
  | ParseError !HttpError
    -- ^ The input cannot be a valid request (or breaks a limit).
  deriving (Eq, Show)

-- | Parse one request head from the start of the buffer.
--
-- Accepts CRLF or bare LF line ends, and skips empty lines before the request
-- line (RFC 9112, section 2.2). Never answers 'NeedMore' for a buffer longer
-- than 'maxHeaderBytes', so a caller that only appends while it gets
-- 'NeedMore' buffers a bounded amount. Input that cannot start a request
-- line (e.g. binary garbage) fails with 'BadRequest' as soon as that is
-- clear, without waiting for a line end.
--
-- Looks at no more than 'maxHeaderBytes' bytes, so the cost of a call is
-- bounded by the limit however large the buffer is.
parseRequest :: Limits -> ByteString -> Parse
parseRequest lim buf = case B.elemIndex lf (B.drop start hd) of
  Nothing -> case partialRequestLine (dropCR (B.drop start hd)) of
    Just err -> ParseError err
    Nothing -> incomplete
  Just j -> case requestLine (dropCR (B.take j (B.drop start hd))) of
    Left err -> ParseError err
    Right (method, target, minor) ->
      headers method target minor (start + j + 1) 0 noFields
  where
    -- Everything past the limit is irrelevant: a head that ends there is
    -- too large anyway. Cutting it off here bounds every scan below.
    hd = B.take (maxHeaderBytes lim) buf
    incomplete
      | B.length buf > maxHeaderBytes lim = ParseError HeaderTooLarge
      | otherwise = NeedMore
    start = skipEmptyLines hd 0

    headers method target minor !pos !count fields =
      case B.elemIndex lf (B.drop pos hd) of
        Nothing -> incomplete
        Just j
          | B.null line -> finish method target minor (pos + j + 1) fields
          | count >= maxHeaderCount lim -> ParseError TooManyHeaders
          | otherwise -> case headerLine line fields of
              Left err -> ParseError err
              Right fields' -> headers method target minor (pos + j + 1) (count + 1) fields'
          where line = dropCR (B.take j (B.drop pos hd))

    finish method target minor used fields
      | fieldTransferEncoding fields = ParseError (NotImplemented "Transfer-Encoding")
      | otherwise = case bodyLength fields of
          Nothing -> ParseError BodyTooLarge
          Just len -> Parsed Request
            { requestMethod = method
            , requestTarget = target
            , requestMinorVersion = minor
            , requestKeepAlive = keepAlive
            , requestBodyLength = len
            } used
      where
        keepAlive
          | fieldClose fields = False
          | minor == 1 = True
          | otherwise = fieldKeepAlive fields

    bodyLength fields = case fieldContentLength fields of
      Nothing -> Just 0
      Just digits -> boundedDecimal (maxBodyBytes lim) digits

-- | Skip empty lines (CRLF or LF) from the given offset.
skipEmptyLines :: ByteString -> Int -> Int
skipEmptyLines s = go
  where
    go !i
      | byteAt s i == lf = go (i + 1)
      | byteAt s i == cr && byteAt s (i + 1) == lf = go (i + 2)
      | otherwise = i

-- | Check a complete request line (line end removed): method SP target SP
-- version. The version is judged last so that a garbled line is a 400, and
-- only a well-formed but unsupported version is a 505.
requestLine :: ByteString -> Either HttpError (ByteString, ByteString, Int)
requestLine l
  | B.null method = bad "invalid method"
  | B.take 1 r1 /= " " = bad "invalid method"
  | B.null target = bad "missing request target"
  | B.take 1 r2 /= " " = bad "invalid request target"
  | not (versionShaped version) = bad "invalid HTTP version"
  | version == "HTTP/1.1" = Right (method, target, 1)
  | version == "HTTP/1.0" = Right (method, target, 0)
  | otherwise = Left VersionNotSupported
  where
    (method, r1) = B.span isTokenByte l
    (target, r2) = B.break isSpaceOrControl (B.drop 1 r1)
    version = B.drop 1 r2

-- | Check a request line whose end has not arrived yet: 'Nothing' while it
-- could still become valid, the error once it cannot. Every prefix of a line
-- 'requestLine' accepts passes, so this only ever rejects early what would
-- be rejected later anyway.
partialRequestLine :: ByteString -> Maybe HttpError
partialRequestLine l
  | B.null r1 = Nothing
  | B.null method || B.head r1 /= space = Just (BadRequest "invalid method")
  | B.null r2 = Nothing
  | B.null target || B.head r2 /= space = Just (BadRequest "invalid request target")
  | versionPrefix (B.tail r2) = Nothing
  | otherwise = Just (BadRequest "invalid HTTP version")
  where
    (method, r1) = B.span isTokenByte l
    (target, r2) = B.break isSpaceOrControl (B.tail r1)

-- | Whether the bytes have the shape @HTTP/d.d@.
versionShaped :: ByteString -> Bool
versionShaped v = B.length v == 8 && versionPrefix v

-- | Whether the bytes could begin a version of the shape @HTTP/d.d@.
versionPrefix :: ByteString -> Bool
versionPrefix v = n <= 8 && B.take 5 v `B.isPrefixOf` "HTTP/" && ok 5
  where
    n = B.length v
    ok !i
      | i >= n = True
      | i == 6 = Bytes.byteAt v i == 0x2E && ok (i + 1) -- '.'
      | otherwise = isDigit (Bytes.byteAt v i) && ok (i + 1)

-- | What the headers say about framing and the connection.
data Fields = Fields
  { fieldContentLength :: !(Maybe ByteString)
    -- ^ Digits without leading zeros, so that duplicates compare by value.
  , fieldTransferEncoding :: !Bool
  , fieldClose :: !Bool
  , fieldKeepAlive :: !Bool
  }

noFields :: Fields
noFields = Fields Nothing False False False

-- | Check one header line (line end removed) and note what matters.
headerLine :: ByteString -> Fields -> Either HttpError Fields
headerLine l fields = case B.uncons rest of
  Just (0x3A, afterColon) | not (B.null name) ->
    let value = trimBlanks afterColon
    in if B.any (not . isValueByte) value then bad "invalid header value"
       else case B.length name of
         -- Dispatching on the length first keeps the common case, a header
         -- we ignore, to one comparison.
         14 | name `equalsLower` "content-length" -> contentLength value
         17 | name `equalsLower` "transfer-encoding" ->
           Right fields { fieldTransferEncoding = True }
         10 | name `equalsLower` "connection" ->
           Right (foldr connection fields (B.split 0x2C value))
         _ -> Right fields
  -- A line starting with whitespace continues the previous one (obs-fold);
  -- RFC 9112 lets a server reject it, and unfolding is not worth the risk.
  _ | B.null name && startsBlank -> bad "obsolete line folding"
    | otherwise -> bad "invalid header name"
  where
    -- A name is a token, so whitespace before the colon fails here (400,
    -- as RFC 9112 section 5.1 requires).
    (name, rest) = B.span isTokenByte l
    startsBlank = maybe False (isBlank . fst) (B.uncons l)

    contentLength value
      | B.null value || B.any (not . isDigit) value = bad "invalid Content-Length"
      | otherwise = case fieldContentLength fields of
          Just previous | previous /= digits -> bad "conflicting Content-Length"
          _ -> Right fields { fieldContentLength = Just digits }
      where digits = B.dropWhile (== 0x30) value

    connection option fs
      | o `equalsLower` "close" = fs { fieldClose = True }
      | o `equalsLower` "keep-alive" = fs { fieldKeepAlive = True }
      | otherwise = fs
      where o = trimBlanks option

-- | The value of a decimal string, or 'Nothing' if it exceeds the bound.
-- Checked before each step, so it cannot overflow however long the string.
boundedDecimal :: Int -> ByteString -> Maybe Int
boundedDecimal bound = B.foldl' step (Just 0)
  where
    step Nothing _ = Nothing
    step (Just acc) b
      | acc > (bound - d) `div` 10 = Nothing
      | otherwise = Just (acc * 10 + d)
      where d = fromIntegral b - 0x30

-- | ASCII case-insensitive equality against a lower-case literal, without
-- building a lowered copy.
equalsLower :: ByteString -> ByteString -> Bool
equalsLower s lower = B.length s == B.length lower && go 0
  where
    go !i
      | i >= B.length s = True
      | otherwise = toLower (Bytes.byteAt s i) == Bytes.byteAt lower i && go (i + 1)
    toLower b
      | b >= 0x41 && b <= 0x5A = b + 0x20
      | otherwise = b

-- | Drop one trailing CR, turning a CRLF line into an LF one.
dropCR :: ByteString -> ByteString
dropCR s
  | not (B.null s) && B.last s == cr = B.init s
  | otherwise = s

-- | Drop optional whitespace (spaces and tabs) at both ends.
trimBlanks :: ByteString -> ByteString
trimBlanks = B.dropWhileEnd isBlank . B.dropWhile isBlank

-- | The byte at an offset as an 'Int', or -1 past the end.
byteAt :: ByteString -> Int -> Int
byteAt s i
  | i < B.length s = fromIntegral (Bytes.byteAt s i)
  | otherwise = -1

lf, cr :: Num a => a
lf = 0x0A
cr = 0x0D

space :: Word8
space = 0x20

bad :: String -> Either HttpError a
bad = Left . BadRequest

isDigit :: Word8 -> Bool
isDigit b = b >= 0x30 && b <= 0x39

isBlank :: Word8 -> Bool
isBlank b = b == space || b == 0x09

isSpaceOrControl :: Word8 -> Bool
isSpaceOrControl b = b <= space || b == 0x7F

-- | Field values may hold visible characters, spaces, tabs and obs-text;
-- a stray CR, NUL or other control is refused rather than passed on.
isValueByte :: Word8 -> Bool
isValueByte b = b == 0x09 || (b >= space && b /= 0x7F)

-- | RFC 9110 @tchar@: letters, digits and @!#$%&'*+-.^_`|~@. Called for
-- every byte of methods and header names, hence plain comparisons.
isTokenByte :: Word8 -> Bool
isTokenByte b
  | b >= 0x5E = b <= 0x7A || b == 0x7C || b == 0x7E -- caret, _, `, a-z, |, ~
  | b >= 0x41 = b <= 0x5A -- A-Z
  | b >= 0x30 = b <= 0x39 -- 0-9
  | otherwise = b == 0x21 || (b >= 0x23 && b <= 0x27) || b == 0x2A || b == 0x2B
      || b == 0x2D || b == 0x2E -- ! # $ % & ' * + - .

-- | Serve one connection until it should close.
--
-- @recv@ returns the next chunk of input, empty at end of stream.
-- @sendMany@ must send all the given chunks, in order (a gather write).
--
-- Requests are answered in order with 'pongResponse' (its head alone for
-- @HEAD@ requests, which must not get a body). All the requests
-- completed by one chunk of input (pipelining) are answered in one
-- @sendMany@ call, so a pipelined burst costs one write. Request bodies are
-- discarded as they arrive, never buffered; an incomplete head is buffered
-- only up to 'maxHeaderBytes'.
--
-- Returns, leaving the close to the caller:
--
-- * after answering a request that does not keep the connection alive
--   (the answer then says @Connection: close@, so that the client does
--   not send its next request on a connection about to close: RFC 9112,
--   section 9.6);
-- * after sending 'errorResponse' for a request that fails to parse
--   (behind the answers to any requests before it);
-- * at end of stream (a partial request then is dropped unanswered).
--
-- Exceptions from @recv@ and @sendMany@ propagate, so the caller decides
-- what a reset connection means.
servePong :: Limits -> IO ByteString -> ([ByteString] -> IO ()) -> IO ()
servePong = servePongWith pongResponse

-- | 'servePong' answering with the given response (a complete message with
-- a head ending in an empty line, e.g. from 'pongResponseOf'), or its head
-- alone for @HEAD@ requests.
servePongWith :: ByteString -> Limits -> IO ByteString -> ([ByteString] -> IO ()) -> IO ()
servePongWith response lim recv sendMany = await B.empty 0
  where
    -- Wait for input. @pending@ is the start of an incomplete head (at most
    -- maxHeaderBytes); @skip@ counts body bytes still to discard. At most
    -- one of the two is non-empty.
    await pending !skip = do
      chunk <- recv
      if B.null chunk
        -- End of stream. Each chunk's answers went out before the next
        -- recv, so nothing is queued here.
        then return ()
        else if skip >= B.length chunk
          then await pending (skip - B.length chunk)
          -- Appending copies, and parseRequest rescans from the start,
          -- but pending is bounded by the limit, so a head trickling in
          -- costs at most a limit's worth of work per chunk, and appending
          -- to an empty pending (the common case) copies nothing.
          else answer (pending <> B.drop skip chunk) []

    -- Take every complete request off the buffer; queued answers are kept
    -- newest first.
    answer buf queued = case parseRequest lim buf of
      NeedMore -> send queued >> await buf 0
      ParseError err -> send (errorResponse err : queued)
      Parsed req used
        | not (requestKeepAlive req) -> send (closing (answerFor response req) : queued)
        | B.length rest >= body -> answer (B.drop body rest) queued'
        | otherwise -> send queued' >> await B.empty (body - B.length rest)
        where
          rest = B.drop used buf
          body = requestBodyLength req
          queued' = answerFor response req : queued

    send [] = return ()
    send queued = sendMany (reverse queued)

-- | An answer that announces the close that follows it: @Connection:
-- close@ added to its head.
closing :: ByteString -> ByteString
closing answer = B.concat [hd, "\r\nConnection: close", rest]
  where (hd, rest) = B.breakSubstring "\r\n\r\n" answer

-- | The answer to a request: the response, without its body for @HEAD@.
-- A HEAD response announces the length a GET would have but must not carry
-- the bytes (RFC 9110, section 9.3.2); sending them would make the client
-- read the body as the start of the next response.
answerFor :: ByteString -> Request -> ByteString
answerFor response req
  | requestMethod req == "HEAD" = B.append headEnd "\r\n\r\n"
  | otherwise = response
  where headEnd = fst (B.breakSubstring "\r\n\r\n" response)
