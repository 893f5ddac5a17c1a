{-# LANGUAGE OverloadedStrings #-}
-- | weft-pong's HTTP handling: the request-head parser against hand-written
-- cases and properties, and the connection loop against fake connections
-- that record every gather write.
module Test.Http (spec, main) where

import Control.Exception (ErrorCall (..), throwIO)
import Control.Monad (forM_, unless)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import Data.IORef
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess, prop)
import Test.QuickCheck

import Example.Http

main :: IO ()
main = hspec spec

spec :: Spec
spec = do
  responseSpec
  parseSpec
  parsePropertySpec
  serveSpec
  servePropertySpec

-- * Responses

responseSpec :: Spec
responseSpec = describe "responses" $ do
  it "pongResponse is the exact 42-byte answer" $ do
    B.length pongResponse `shouldBe` 42
    pongResponse `shouldBe` "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nPONG"

  it "pongResponseOf builds a body of the asked length, PONG repeated" $ do
    pongResponseOf 4 `shouldBe` pongResponse
    pongResponseOf 6 `shouldBe` "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPONGPO"
    pongResponseOf (-1) `shouldBe` "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    let big = pongResponseOf 1024
    B.length big `shouldBe` B.length "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + 1024

  it "servePongWith answers GET with its response and HEAD with that response's head" $ do
    out <- newIORef []
    input <- newIORef ["HEAD / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]
    let recv = atomicModifyIORef' input (\cs -> (drop 1 cs, mconcat (take 1 cs)))
    servePongWith (pongResponseOf 6) defaultLimits recv (\bs -> modifyIORef' out (bs :))
    readIORef out `shouldReturn` [["HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n", pongResponseOf 6]]

  it "errorStatus maps each error to its status" $
    map errorStatus
      [ BadRequest "x", HeaderTooLarge, TooManyHeaders, BodyTooLarge
      , NotImplemented "x", VersionNotSupported ]
      `shouldBe` [400, 431, 431, 413, 501, 505]

  it "errorResponse is complete, closes, and has a correct Content-Length" $
    forM_ allErrors $ \err -> do
      let resp = errorResponse err
          (hd, body) = B.breakSubstring "\r\n\r\n" resp
          bodyText = B.drop 4 body
      C.unpack resp `shouldStartWith` ("HTTP/1.1 " ++ show (errorStatus err) ++ " ")
      headerLines hd `shouldContain` ["Connection: close"]
      headerLines hd `shouldContain` ["Content-Length: " ++ show (B.length bodyText)]
      B.length bodyText `shouldSatisfy` (\n -> n > 0 && n < 200)

  it "errorResponse keeps a caller's odd message on one line" $ do
    let body = snd (B.breakSubstring "\r\n\r\n" (errorResponse (BadRequest "a\r\nb\200")))
    C.count '\n' body `shouldBe` 3 -- the separator's own newline is two of them
  where
    headerLines = map C.unpack . drop 1 . splitOn "\r\n"
    allErrors =
      [ BadRequest "invalid method", HeaderTooLarge, TooManyHeaders, BodyTooLarge
      , NotImplemented "Transfer-Encoding", VersionNotSupported ]

-- * Parsing

parseSpec :: Spec
parseSpec = describe "parseRequest" $ do
  it "parses a simple GET" $ do
    let raw = "GET /index.html HTTP/1.1\r\nHost: example\r\nUser-Agent: t\r\n\r\n"
    parse raw `shouldBe` Parsed (Request "GET" "/index.html" 1 True 0) (B.length raw)

  it "reports the head's length and leaves what follows alone" $ do
    let raw = "POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\n"
    parse (raw <> "abcGET / HTTP/1.1\r\n\r\n")
      `shouldBe` Parsed (Request "POST" "/p" 1 True 3) (B.length raw)

  it "accepts bare LF line ends" $ do
    let raw = "GET / HTTP/1.1\nHost: x\n\n"
    parse raw `shouldBe` Parsed (Request "GET" "/" 1 True 0) (B.length raw)

  it "accepts mixed line ends" $ do
    let raw = "GET / HTTP/1.1\r\nHost: x\n\r\n"
    parse raw `shouldBe` Parsed (Request "GET" "/" 1 True 0) (B.length raw)

  it "skips leading empty lines and counts them as consumed" $ do
    let raw = "\r\n\n\r\nGET / HTTP/1.1\r\n\r\n"
    parse raw `shouldBe` Parsed (Request "GET" "/" 1 True 0) (B.length raw)

  it "waits for more while only empty lines have arrived" $ do
    parse "\r\n\r\n" `shouldBe` NeedMore
    parse "\r\n\r" `shouldBe` NeedMore
    parse "" `shouldBe` NeedMore

  describe "keep-alive" $ do
    it "HTTP/1.1 keeps alive by default" $
      keepAlive "GET / HTTP/1.1\r\n\r\n" `shouldBe` Just True
    it "HTTP/1.1 closes on Connection: close, in any case and in a list" $ do
      keepAlive "GET / HTTP/1.1\r\nConnection: close\r\n\r\n" `shouldBe` Just False
      keepAlive "GET / HTTP/1.1\r\nconnection:CLOSE\r\n\r\n" `shouldBe` Just False
      keepAlive "GET / HTTP/1.1\r\nConnection: foo , Close ,bar\r\n\r\n" `shouldBe` Just False
    it "HTTP/1.1 is not fooled by close as part of another token" $
      keepAlive "GET / HTTP/1.1\r\nConnection: closed, x-close\r\n\r\n" `shouldBe` Just True
    it "HTTP/1.0 closes by default" $
      keepAlive "GET / HTTP/1.0\r\nHost: x\r\n\r\n" `shouldBe` Just False
    it "HTTP/1.0 keeps alive with Connection: keep-alive" $ do
      keepAlive "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" `shouldBe` Just True
      keepAlive "GET / HTTP/1.0\r\nCONNECTION: Keep-Alive\r\n\r\n" `shouldBe` Just True
    it "close wins over keep-alive" $
      keepAlive "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
        `shouldBe` Just False
    it "records the minor version" $ do
      minorOf "GET / HTTP/1.0\r\n\r\n" `shouldBe` Just 0
      minorOf "GET / HTTP/1.1\r\n\r\n" `shouldBe` Just 1

  describe "Content-Length" $ do
    it "is read case-insensitively with surrounding whitespace" $
      bodyOf "PUT / HTTP/1.1\r\ncontent-LENGTH: \t 17 \r\n\r\n" `shouldBe` Just 17
    it "allows duplicates with the same value" $
      bodyOf "PUT / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 005\r\n\r\n"
        `shouldBe` Just 5
    it "rejects duplicates with different values" $
      status "PUT / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
        `shouldBe` Just 400
    it "rejects anything but digits" $
      forM_ ["", "+5", "-1", "5 5", "0x10", "5,5", "1e3"] $ \v ->
        status ("PUT / HTTP/1.1\r\nContent-Length: " <> v <> "\r\n\r\n") `shouldBe` Just 400
    it "accepts exactly maxBodyBytes and rejects one more with 413" $ do
      let withLength n = "PUT / HTTP/1.1\r\nContent-Length: " <> C.pack (show n) <> "\r\n\r\n"
      bodyOf (withLength (maxBodyBytes defaultLimits))
        `shouldBe` Just (maxBodyBytes defaultLimits)
      status (withLength (maxBodyBytes defaultLimits + 1)) `shouldBe` Just 413
    it "rejects values too long for an Int with 413, not a wrapped number" $
      status ("PUT / HTTP/1.1\r\nContent-Length: " <> C.replicate 40 '9' <> "\r\n\r\n")
        `shouldBe` Just 413

  it "answers Transfer-Encoding with 501" $ do
    status "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" `shouldBe` Just 501
    status "POST / HTTP/1.1\r\ntransfer-encoding: identity\r\nContent-Length: 3\r\n\r\n"
      `shouldBe` Just 501

  describe "versions" $ do
    it "answers a well-formed other version with 505" $
      forM_ ["HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/3.1"] $ \v ->
        parse ("GET / " <> v <> "\r\n\r\n") `shouldBe` ParseError VersionNotSupported
    it "rejects a malformed version with 400" $
      forM_ ["http/1.1", "HTTP/1.1x", "HTTP/11", "HTTP/1", "HTTP/1.1 ", "HTTP/a.b", ""] $ \v ->
        status ("GET / " <> v <> "\r\n\r\n") `shouldBe` Just 400

  describe "malformed request lines" $ do
    forM_
      [ ("a missing target", "GET HTTP/1.1\r\n\r\n")
      , ("a doubled space", "GET  / HTTP/1.1\r\n\r\n")
      , ("a tab separator", "GET\t/ HTTP/1.1\r\n\r\n")
      , ("a space in the target", "GET /a b HTTP/1.1\r\n\r\n")
      , ("a non-token method", "GE(T / HTTP/1.1\r\n\r\n")
      , ("a bare CR", "GET / HTTP/1.1\rX\r\n\r\n")
      , ("an HTTP/0.9 line", "GET /\r\n\r\n")
      , ("a leading space", " GET / HTTP/1.1\r\n\r\n") ] $ \(what, raw) ->
      it ("rejects " ++ what ++ " with 400") $ status raw `shouldBe` Just 400

  describe "malformed headers" $ do
    forM_
      [ ("whitespace before the colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n")
      , ("a missing colon", "GET / HTTP/1.1\r\nHost x\r\n\r\n")
      , ("an empty name", "GET / HTTP/1.1\r\n: x\r\n\r\n")
      , ("a control byte in a value", "GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n")
      , ("a bare CR in a value", "GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n") ] $ \(what, raw) ->
      it ("rejects " ++ what ++ " with 400") $ status raw `shouldBe` Just 400
    it "rejects obsolete line folding, with spaces or tabs, as such" $ do
      parse "GET / HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n"
        `shouldBe` ParseError (BadRequest "obsolete line folding")
      parse "GET / HTTP/1.1\r\nX-A: 1\r\n\tcontinued\r\n\r\n"
        `shouldBe` ParseError (BadRequest "obsolete line folding")
    it "accepts empty values and obs-text" $
      keepAlive "GET / HTTP/1.1\r\nX-Empty:\r\nX-Text: caf\233\r\n\r\n" `shouldBe` Just True

  describe "garbage" $ do
    it "rejects binary input from its first impossible byte" $ do
      parse "\0" `shouldBe` ParseError (BadRequest "invalid method")
      status "\x16\x03\x01\x02\x00" `shouldBe` Just 400 -- a TLS ClientHello
      status "GET /\0" `shouldBe` Just 400
      status "GET / HTTP/2" `shouldBe` Nothing -- could still be HTTP/2.0 (505)
      status "GET / HTTPS" `shouldBe` Just 400
    it "rejects an endless token without a line end at the limit with 431" $ do
      let limit = maxHeaderBytes defaultLimits
      parse (C.replicate limit 'A') `shouldBe` NeedMore
      parse (C.replicate (limit + 1) 'A') `shouldBe` ParseError HeaderTooLarge

  describe "limits" $ do
    let limit = maxHeaderBytes defaultLimits
        headOf n = let prefix = "GET / HTTP/1.1\r\nX-Pad: "
                   in prefix <> C.replicate (n - B.length prefix - 4) 'p' <> "\r\n\r\n"
    it "accepts a head of exactly maxHeaderBytes" $ do
      B.length (headOf limit) `shouldBe` limit
      parse (headOf limit) `shouldBe` Parsed (Request "GET" "/" 1 True 0) limit
    it "rejects a head one byte longer with 431" $
      parse (headOf (limit + 1)) `shouldBe` ParseError HeaderTooLarge
    it "counts leading empty lines towards the head" $
      parse ("\r\n" <> headOf (limit - 1)) `shouldBe` ParseError HeaderTooLarge
    it "rejects an unfinished head once the buffer passes the limit" $ do
      let partial n = B.take n (headOf (limit * 2))
      parse (partial limit) `shouldBe` NeedMore
      parse (partial (limit + 1)) `shouldBe` ParseError HeaderTooLarge
    it "accepts maxHeaderCount headers and rejects one more with 431" $ do
      parse (withHeaders 100) `shouldSatisfy` isParsed
      parse (withHeaders 101) `shouldBe` ParseError TooManyHeaders
    it "rejects too many headers before the head is complete" $
      parse (B.take (B.length (withHeaders 101) - 2) (withHeaders 101))
        `shouldBe` ParseError TooManyHeaders
    it "applies custom limits" $ do
      let lim = Limits { maxHeaderBytes = 64, maxHeaderCount = 1, maxBodyBytes = 10 }
      parseRequest lim "GET / HTTP/1.1\r\nA: 1\r\n\r\n" `shouldSatisfy` isParsed
      parseRequest lim "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n" `shouldBe` ParseError TooManyHeaders
      parseRequest lim "GET / HTTP/1.1\r\nContent-Length: 11\r\n\r\n" `shouldBe` ParseError BodyTooLarge
      parseRequest lim ("GET /" <> C.replicate 60 'x' <> " HTTP/1.1\r\n\r\n")
        `shouldBe` ParseError HeaderTooLarge
  where
    keepAlive = fmap requestKeepAlive . parsedRequest
    minorOf = fmap requestMinorVersion . parsedRequest
    bodyOf = fmap requestBodyLength . parsedRequest

parsePropertySpec :: Spec
parsePropertySpec = describe "parseRequest properties" $ do
  prop "every proper prefix of a valid head needs more" $
    forAll genRequest $ \r ->
      let h = rqHead r
      in conjoin [ counterexample (show (B.take i h)) (parse (B.take i h) === NeedMore)
                 | i <- [0 .. B.length h - 1] ]
         .&&. parse h === Parsed (rqExpected r) (B.length h)

  prop "a verdict never changes as more bytes arrive" $
    forAll genLimits $ \lim -> forAll genNoise $ \buf -> forAll genNoise $ \more ->
      let v = parseRequest lim buf
      in v /= NeedMore ==> verdict v === verdict (parseRequest lim (buf <> more))

  prop "never needs more than maxHeaderBytes, never consumes more" $
    forAll genLimits $ \lim -> forAll genNoise $ \buf ->
      let v = parseRequest lim buf
      in length (show v) > 0 && case v of
           NeedMore -> B.length buf <= maxHeaderBytes lim
           Parsed _ used -> used > 0 && used <= min (B.length buf) (maxHeaderBytes lim)
           ParseError _ -> True

  prop "is total on arbitrary bytes" $ \ws ->
    let v = parse (B.pack ws) in length (show v) > 0

-- * The connection loop

serveSpec :: Spec
serveSpec = describe "servePong" $ do
  it "answers one request per recv and returns at end of stream" $ do
    r <- serve ["GET / HTTP/1.1\r\n\r\n", "GET /2 HTTP/1.1\r\n\r\n"]
    runSends r `shouldBe` [[pongResponse], [pongResponse]]
    runUnread r `shouldBe` []

  it "answers HEAD with the head of pongResponse only" $ do
    r <- serve ["HEAD / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]
    runSends r `shouldBe` [[pongHead, pongResponse]]
    pongHead `shouldBe` "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"

  it "answers three pipelined requests in one chunk with one sendMany" $ do
    r <- serve [B.concat (replicate 3 "GET / HTTP/1.1\r\nHost: x\r\n\r\n")]
    runSends r `shouldBe` [replicate 3 pongResponse]

  it "answers a request arriving byte by byte, once, after its last byte" $ do
    let raw = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    r <- serve (map B.singleton (B.unpack raw))
    runSends r `shouldBe` [[pongResponse]]

  it "skips a body split across chunks and answers the next request" $ do
    -- The body is "GET / HT" ++ "TP": it must not be answered as a request.
    r <- serve [ "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nGET / HT"
               , "TP", "GET / HTTP/1.1\r\n\r\n" ]
    runSends r `shouldBe` [[pongResponse], [pongResponse]]
    r' <- serve [ "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nGET / HT"
                , "TPGET / HTTP/1.1\r\n\r\n" ]
    runSends r' `shouldBe` [[pongResponse], [pongResponse]]

  it "skips a body spread over many chunks without answering it" $ do
    let body = B.concat (replicate 100 "GET / HTTP/1.1\r\n\r\n")
    r <- serve (["PUT / HTTP/1.1\r\nContent-Length: " <> C.pack (show (B.length body)) <> "\r\n\r\n"]
                ++ chunksOf 7 body ++ ["GET / HTTP/1.1\r\n\r\n"])
    concat (runSends r) `shouldBe` replicate 2 pongResponse

  it "stops after a request that closes, reading and answering no more" $ do
    r <- serve [ "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n"
               , "GET / HTTP/1.1\r\n\r\n" ]
    -- The last answer announces the close.
    runSends r `shouldBe` [[pongResponse, closingPong]]
    runUnread r `shouldBe` ["GET / HTTP/1.1\r\n\r\n"]

  it "stops after an HTTP/1.0 request without keep-alive" $ do
    r <- serve ["GET / HTTP/1.0\r\n\r\n", "GET / HTTP/1.0\r\n\r\n"]
    runSends r `shouldBe` [[closingPong]]
    length (runUnread r) `shouldBe` 1

  it "keeps an HTTP/1.0 keep-alive connection open" $ do
    r <- serve ["GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "GET / HTTP/1.0\r\n\r\n"]
    runSends r `shouldBe` [[pongResponse], [closingPong]]

  it "answers a malformed request line with 400 and stops" $ do
    r <- serve ["GET /a b HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\n\r\n"]
    length (runSends r) `shouldBe` 1
    statusesOf r `shouldBe` [400]
    runUnread r `shouldBe` ["GET / HTTP/1.1\r\n\r\n"]

  it "sends earlier pipelined answers and the error in one sendMany" $ do
    r <- serve ["GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nBAD\0REQUEST\r\n\r\n"]
    length (runSends r) `shouldBe` 1
    statusesOf r `shouldBe` [200, 200, 400]

  it "answers garbage with 400 without waiting for a line end" $ do
    r <- serveEndless "\x16\x03\x01\x00\xa5\x01" (B.replicate 1000 0)
    statusesOf (fst r) `shouldBe` [400]
    snd r `shouldBe` 6

  it "answers an endless header line with 431 after a bounded read" $
    checkBounded "GET / HTTP/1.1\r\nX-Long: " (C.replicate 1000 'a')

  it "answers an endless request line with 431 after a bounded read" $
    checkBounded "GET /" (C.replicate 1000 'a')

  it "answers endless empty lines with 431 after a bounded read" $
    checkBounded "" (C.concat (replicate 500 "\r\n"))

  it "answers 101 headers with 431" $ do
    r <- serve [withHeaders 101]
    statusesOf r `shouldBe` [431]

  it "answers too many headers arriving one per chunk with 431" $ do
    r <- serveEndless "GET / HTTP/1.1\r\n" "X-H: 1\r\n"
    statusesOf (fst r) `shouldBe` [431]
    snd r `shouldSatisfy` (< 16 + 9 * 102)

  it "answers Transfer-Encoding with 501" $ do
    r <- serve ["POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]
    statusesOf r `shouldBe` [501]

  it "answers conflicting Content-Length with 400" $ do
    r <- serve ["POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"]
    statusesOf r `shouldBe` [400]

  it "answers a too-large Content-Length with 413" $ do
    r <- serve ["POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n"]
    statusesOf r `shouldBe` [413]

  it "answers HTTP/2.0 with 505" $ do
    r <- serve ["GET / HTTP/2.0\r\n\r\n"]
    statusesOf r `shouldBe` [505]

  it "drops a partial request at end of stream without an error response" $ do
    r <- serve ["GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHo", "st: x\r\n"]
    runSends r `shouldBe` [[pongResponse]]

  it "drops a partial body at end of stream" $ do
    r <- serve ["POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc"]
    runSends r `shouldBe` [[pongResponse]]

  it "returns at once on an empty connection" $ do
    r <- serve []
    runSends r `shouldBe` []

  it "lets exceptions from recv propagate" $ do
    calls <- newIORef (0 :: Int)
    let recv = do
          n <- atomicModifyIORef' calls (\n -> (n + 1, n))
          if n == 0 then pure "GET / HTTP/1.1\r\n\r\n" else throwIO (ErrorCall "reset")
    servePong defaultLimits recv (\_ -> pure ()) `shouldThrow` (== ErrorCall "reset")

  it "lets exceptions from sendMany propagate" $ do
    calls <- newIORef (0 :: Int)
    let recv = do
          n <- atomicModifyIORef' calls (\n -> (n + 1, n))
          if n < 3 then pure "GET / HTTP/1.1\r\n\r\n" else throwIO (ErrorCall "no send")
    servePong defaultLimits recv (\_ -> throwIO (ErrorCall "epipe"))
      `shouldThrow` (== ErrorCall "epipe")
  where
    checkBounded first filler = do
      (r, consumed) <- serveEndless first filler
      statusesOf r `shouldBe` [431]
      consumed `shouldSatisfy` (< 2 * maxHeaderBytes defaultLimits + B.length filler)

servePropertySpec :: Spec
servePropertySpec = describe "servePong properties" $ modifyMaxSuccess (const 300) $ do
  prop "any split of a pipelined stream gives the same answers" $
    forAll (listOf1 genRequest) $ \reqs -> forAll genClose $ \close ->
      let stream = B.concat (map rqBytes reqs) <> close
          expected = map rqAnswer reqs ++ [closingPong | not (B.null close)]
      in forAll (genSplit stream) $ \chunks -> ioProperty $ do
           whole <- serve [stream]
           split <- serve chunks
           pure $ conjoin
             [ counterexample "one chunk, one sendMany" (runSends whole === [expected])
             , counterexample "same answers" (concat (runSends split) === expected)
             , counterexample "no empty sendMany" (notElem [] (runSends split))
             , counterexample "at most one sendMany per chunk"
                 (length (runSends split) <= length chunks) ]

-- | 'pongResponse' as the last answer on a connection: it announces the
-- close.
closingPong :: ByteString
closingPong = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nPONG"

-- * Fake connections

-- | What a fake connection saw: the sendMany calls in order, and the input
-- chunks never read.
data Run = Run
  { runSends :: [[ByteString]]
  , runUnread :: [ByteString]
  }

-- | Serve a connection whose input is the given chunks, then end of stream.
-- Reading past the end of stream is a test failure.
serve :: [ByteString] -> IO Run
serve chunks = do
  input <- newIORef (map Just chunks ++ [Nothing])
  out <- newIORef []
  let recv = do
        next <- atomicModifyIORef' input (\cs -> (drop 1 cs, take 1 cs))
        case next of
          [Just c] -> pure c
          [Nothing] -> pure B.empty
          _ -> throwIO (ErrorCall "recv called after end of stream")
  servePong defaultLimits recv (\bs -> modifyIORef' out (bs :))
  Run <$> (reverse <$> readIORef out) <*> (concatMap (maybe [] pure) <$> readIORef input)

-- | Serve a connection that sends @first@ and then @filler@ forever; return
-- what was sent and how many bytes servePong read. Gives up (failing) after
-- far more input than any limit allows, so a bug cannot hang the suite.
serveEndless :: ByteString -> ByteString -> IO (Run, Int)
serveEndless first filler = do
  delivered <- newIORef (0 :: Int)
  out <- newIORef []
  let recv = do
        n <- readIORef delivered
        unless (n < 1000000) $ throwIO (ErrorCall "servePong kept reading")
        let c = if n == 0 && not (B.null first) then first else filler
        writeIORef delivered (n + B.length c)
        pure c
  servePong defaultLimits recv (\bs -> modifyIORef' out (bs :))
  sends <- reverse <$> readIORef out
  consumed <- readIORef delivered
  pure (Run sends [], consumed)

-- | The status codes of all responses sent, in order. Every response we
-- produce is 'pongResponse' or an 'errorResponse', each a complete message.
statusesOf :: Run -> [Int]
statusesOf = map statusOf . concat . runSends
  where
    statusOf resp
      | resp == pongResponse || resp == pongHead = 200
      | otherwise = read (C.unpack (B.take 3 (B.drop 9 resp)))

-- * Generators

-- | A valid keep-alive request: its full bytes (head and body), its head,
-- and what parsing the head must give.
data Rq = Rq
  { rqBytes :: ByteString
  , rqHead :: ByteString
  , rqExpected :: Request
  , rqAnswer :: ByteString
  }

instance Show Rq where
  show = show . rqBytes

genRequest :: Gen Rq
genRequest = do
  eol <- elements ["\r\n", "\n"]
  blanks <- chooseInt (0, 2)
  method <- elements ["GET", "POST", "HEAD", "M-SEARCH", "x~!"]
  target <- ("/" <>) . C.pack <$> listOf (elements "abc/?=%&.-_~")
  http10 <- frequency [(4, pure False), (1, pure True)]
  -- Few enough headers to stay within maxHeaderCount and maxHeaderBytes.
  nExtra <- chooseInt (0, 30)
  extra <- vectorOf nExtra
    (elements ["Host: bench", "User-Agent:wrk", "X-Spaced: a  b", "Accept: */*"])
  bodyLen <- frequency [(2, pure Nothing), (1, Just <$> chooseInt (0, 300))]
  -- Bodies that look like requests catch a loop that parses instead of skips.
  body <- case bodyLen of
    Nothing -> pure B.empty
    Just n -> B.take n . B.concat <$> vectorOf (n + 1)
      (elements ["GET / HTTP/1.1\r\n\r\n", "\0\r\n\255", "xxxxxxxxxx"])
  let headers = extra
        ++ ["Connection: keep-alive" | http10]
        ++ maybe [] (\n -> ["Content-Length: " <> C.pack (show n)]) bodyLen
      requestLine = method <> " " <> target <> (if http10 then " HTTP/1.0" else " HTTP/1.1")
      hd = B.concat (replicate blanks eol) <> B.concat (map (<> eol) (requestLine : headers)) <> eol
  pure Rq
    { rqBytes = hd <> body
    , rqHead = hd
    , rqExpected = Request method target (if http10 then 0 else 1) True (B.length body)
    , rqAnswer = if method == "HEAD" then pongHead else pongResponse
    }

-- | Nothing, or a final closing request followed by bytes that must never be
-- read as a request.
genClose :: Gen ByteString
genClose = elements
  [ "", "GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n"
  , "GET /last HTTP/1.0\n\n\0garbage" ]

-- | Split into non-empty chunks, from single bytes to the whole.
genSplit :: ByteString -> Gen [ByteString]
genSplit s
  | B.null s = pure []
  | otherwise = do
      n <- frequency [(3, chooseInt (1, 8)), (2, chooseInt (1, 200)), (1, pure (B.length s))]
      (B.take n s :) <$> genSplit (B.drop n s)

-- | Small limits, so generated inputs reach them.
genLimits :: Gen Limits
genLimits = Limits <$> chooseInt (1, 80) <*> chooseInt (1, 4) <*> chooseInt (0, 20)

-- | Bytes built from HTTP-ish fragments, to reach the parser's corners.
genNoise :: Gen ByteString
genNoise = B.concat <$> listOf (elements
  [ "GET", "POST", " ", "  ", "/", "/x", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1"
  , "\r\n", "\n", "\r", ":", ": ", "Host", "Content-Length", "Transfer-Encoding"
  , "Connection", "close", "keep-alive", "1", "0", "99", ",", "\t", "\0", "\255", "a" ])

-- * Helpers

-- | What a HEAD request gets: pongResponse without its body.
pongHead :: ByteString
pongHead = B.take 38 pongResponse

parse :: ByteString -> Parse
parse = parseRequest defaultLimits

parsedRequest :: ByteString -> Maybe Request
parsedRequest raw = case parse raw of
  Parsed r _ -> Just r
  _ -> Nothing

isParsed :: Parse -> Bool
isParsed Parsed {} = True
isParsed _ = False

-- | The status of a failed parse; Nothing if it did not fail.
status :: ByteString -> Maybe Int
status raw = case parse raw of
  ParseError e -> Just (errorStatus e)
  _ -> Nothing

-- | A parse result with error details reduced to the status, for comparing
-- verdicts whose messages may differ.
verdict :: Parse -> Either Int (Maybe (Request, Int))
verdict p = case p of
  ParseError e -> Left (errorStatus e)
  Parsed r n -> Right (Just (r, n))
  NeedMore -> Right Nothing

-- | A GET with @n@ distinct header lines.
withHeaders :: Int -> ByteString
withHeaders n = "GET / HTTP/1.1\r\n"
  <> B.concat [ "X-H" <> C.pack (show i) <> ": v\r\n" | i <- [1 .. n] ] <> "\r\n"

chunksOf :: Int -> ByteString -> [ByteString]
chunksOf n s
  | B.null s = []
  | otherwise = B.take n s : chunksOf n (B.drop n s)

splitOn :: ByteString -> ByteString -> [ByteString]
splitOn sep s = case B.breakSubstring sep s of
  (a, rest)
    | B.null rest -> [a]
    | otherwise -> a : splitOn sep (B.drop (B.length sep) rest)
