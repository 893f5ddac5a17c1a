{-# LANGUAGE CPP, OverloadedStrings, ScopedTypeVariables #-}
-- | weft-warp's tests: one WAI application served by Weft.Warp and by stock
-- warp, exercised over loopback by a raw client, each test asserting the
-- exact response on both servers (so the suite shows the two agree); then
-- what only weft promises: no connection wait reaches GHC's I/O manager,
-- and fds and watches return to where they were.
module Main (main) where

import Control.Concurrent
import Control.Concurrent.Async
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.IORef
import Data.List (isPrefixOf, sort, stripPrefix)
import Data.Maybe (isNothing, listToMaybe, mapMaybe)
import Numeric (readHex)
import Text.Read (readMaybe)
import Foreign.C.Error (Errno (..), eINVAL, eNODATA)
import GHC.Clock (getMonotonicTime)
import GHC.IO.Exception (IOErrorType (..), IOException (..))
#if MIN_VERSION_base(4,18,0)
import GHC.Conc.Sync (ThreadStatus (..), listThreads, threadLabel, threadStatus)
#endif
import qualified Network.Socket as N
import Network.Wai (Application)
import qualified Network.Wai.Handler.Warp as Warp
import Network.Wai.Handler.Warp.Internal (Connection (connSendFile), FileId (..), warpVersion)
import System.Directory (getTemporaryDirectory, listDirectory, removeFile)
import System.Environment (setEnv, unsetEnv)
import System.Exit (ExitCode (..))
import System.FilePath ((</>))
import System.IO
import System.CPUTime (getCPUTime)
import System.Posix.Files (readSymbolicLink)
import System.Posix.Resource
import System.Timeout (timeout)
import System.Process (readProcessWithExitCode)
import Test.Hspec

import qualified Weft.Event as E
import qualified Weft.Net as Net
import qualified Weft.Warp as Weft
import Weft.Warp.Internal.Connection (weftConnection)

import Client
import TestApp

data Server = Weft | Stock
  deriving (Eq, Show, Enum, Bounded)

main :: IO ()
main = do
  -- GHC's I/O manager made its epoll instances when the RTS started, before
  -- weft made any: they are the ones open now.
  ghcEpolls <- epollFds
  tmp <- getTemporaryDirectory
  let path = tmp </> "weft-warp-test-file"
  B.writeFile path fileContent
  (`finally` removeFile path) $ hspec $ do
    forM_ [minBound .. maxBound] $ \server -> describe (show server) (agreement server path)
    describe "Weft only" (weftOnly ghcEpolls path)

------------------------------------------------------------------------------
-- Running a server

baseSettings :: Server -> Warp.Settings
baseSettings Weft = Weft.defaultSettings
baseSettings Stock = Warp.defaultSettings

runOn :: Server -> Warp.Settings -> N.Socket -> Application -> IO ()
runOn Weft = Weft.runSettingsSocket
runOn Stock = Warp.runSettingsSocket

-- | A loopback listener on a free port.
openListener :: IO (N.Socket, Int)
openListener = do
  sock <- N.socket N.AF_INET N.Stream N.defaultProtocol
  N.setSocketOption sock N.ReuseAddr 1
  N.bind sock (N.SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
  N.listen sock 1024
  port <- fromIntegral <$> N.socketPort sock
  return (sock, port)

-- | Serve the application with the settings (changed from the server's
-- defaults) while the action runs; the action gets the port. The server
-- is killed afterwards.
withServer :: Server -> (Warp.Settings -> Warp.Settings) -> Application -> (Int -> IO a) -> IO a
withServer server change app act = bracket openListener (N.close . fst) $ \(sock, port) -> do
  started <- newEmptyMVar
  let set = Warp.setBeforeMainLoop (putMVar started ()) (change (baseSettings server))
  withAsync (runOn server set sock app) $ \srv -> do
    r <- race (waitCatch srv) (takeMVar started)
    case r of
      Left e -> throwIO (userError ("the server did not start: " ++ show e))
      Right () -> act port

quiet :: Warp.Settings -> Warp.Settings
quiet = Warp.setOnException (\_ _ -> return ())

------------------------------------------------------------------------------
-- What both servers must do alike

-- | The Server header line warp writes (its own version).
serverLine :: B.ByteString
serverLine = "Server: Warp/" <> BC.pack warpVersion <> "\r\n"

-- The responses warp writes (less the Date header).
helloResp :: B.ByteString
helloResp = "HTTP/1.1 200 OK\r\n" <> serverLine <> "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"

agreement :: Server -> FilePath -> Spec
agreement server path = do
  let serve act = withServer server quiet (testApp path) act
  it "keeps a connection alive across requests" $ serve $ \port -> within 10 "keep-alive" $ do
    c <- connectTo port
    forM_ [1 .. 3 :: Int] $ \_ -> do
      r <- request c "GET" "/hello" ""
      rawOf r `shouldBe` helloResp
    closeConn c

  it "answers pipelined requests in order" $ serve $ \port -> within 10 "pipelining" $ do
    c <- connectTo port
    let get p = "GET " <> p <> " HTTP/1.1\r\nHost: localhost\r\n\r\n"
    sendRaw c (get "/hello" <> get "/stream" <> get "/echo" <> get "/hello")
    rs <- replicateM 4 (readResponse c)
    map rawOf rs `shouldBe`
      [ helloResp, streamResp
      , "HTTP/1.1 200 OK\r\n" <> serverLine <> "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n0:"
      , helloResp ]
    closeConn c

  it "reads a chunked request body" $ serve $ \port -> within 10 "chunked body" $ do
    c <- connectTo port
    sendRaw c "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
    sendRaw c "5\r\nhello\r\n"
    threadDelay 20000
    sendRaw c "6\r\n world\r\n0\r\n\r\n"
    r <- readResponse c
    rawOf r `shouldBe` "HTTP/1.1 200 OK\r\n" <> serverLine <> "Content-Type: text/plain\r\nContent-Length: 14\r\n\r\n11:hello world"
    closeConn c

  it "answers Expect: 100-continue before the body comes" $ serve $ \port -> within 10 "100-continue" $ do
    c <- connectTo port
    sendRaw c "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n"
    interim <- readResponse c
    rawOf interim `shouldBe` "HTTP/1.1 100 Continue\r\n\r\n"
    sendRaw c "payload"
    r <- readResponse c
    rawOf r `shouldBe` "HTTP/1.1 200 OK\r\n" <> serverLine <> "Content-Type: text/plain\r\nContent-Length: 9\r\n\r\n7:payload"
    closeConn c

  it "streams a response in chunks" $ serve $ \port -> within 10 "stream" $ do
    c <- connectTo port
    r <- request c "GET" "/stream" ""
    rawOf r `shouldBe` streamResp
    closeConn c

  it "sends a whole file (responseFile)" $ serve $ \port -> within 20 "file" $ do
    c <- connectTo port
    expectFile c "/file" "" 200 fileBytes Nothing fileContent
    -- The connection is still good.
    r2 <- request c "GET" "/hello" ""
    rawOf r2 `shouldBe` helloResp
    closeConn c

  it "sends byte ranges of a file (Range)" $ serve $ \port -> within 10 "range" $ do
    c <- connectTo port
    expectFile c "/file" "Range: bytes=100000-100099\r\n" 206 100
      (Just "bytes 100000-100099/3145745") (B.take 100 (B.drop 100000 fileContent))
    expectFile c "/file" "Range: bytes=-10\r\n" 206 10
      (Just "bytes 3145735-3145744/3145745") (B.drop (fileBytes - 10) fileContent)
    closeConn c

  it "sends a part of a file (FilePart)" $ serve $ \port -> within 10 "part" $ do
    c <- connectTo port
    expectFile c "/part" "" 200 5000 (Just "bytes 1000-5999/3145745") (B.take 5000 (B.drop 1000 fileContent))
    closeConn c

  it "answers HEAD with headers only" $ serve $ \port -> within 10 "HEAD" $ do
    c <- connectTo port
    r <- request c "HEAD" "/hello" ""
    rawOf r `shouldBe` "HTTP/1.1 200 OK\r\n" <> serverLine <> "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\n"
    -- Nothing was sent after the headers: the next response comes clean.
    r2 <- request c "GET" "/hello" ""
    rawOf r2 `shouldBe` helloResp
    closeConn c

  it "answers 500 when the application throws" $ serve $ \port -> within 10 "500" $ do
    c <- connectTo port
    r <- request c "GET" "/boom" ""
    rawOf r `shouldBe` "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n" <> serverLine <> "Content-Type: text/plain; charset=utf-8\r\n\r\n0014\r\nSomething went wrong\r\n0\r\n\r\n"
    closeConn c

  it "answers a malformed request with 400 and closes" $ serve $ \port -> within 10 "malformed" $ do
    c <- connectTo port
    sendRaw c "GET /hello XTTP/1.1\r\n\r\n"
    rest <- readUntilClosed c
    dropDate rest `shouldBe` "HTTP/1.0 400 Bad Request\r\n" <> serverLine <> "Content-Type: text/plain; charset=utf-8\r\n\r\nBad Request"
    closeConn c
    -- A line that is not HTTP at all is closed without an answer.
    c2 <- connectTo port
    sendRaw c2 "NOT HTTP AT ALL\r\n\r\n"
    readUntilClosed c2 `shouldReturn` ""
    closeConn c2

  it "serves 200 concurrent clients" $ serve $ \port -> within 30 "200 clients" $ do
    results <- forConcurrently [1 .. 200 :: Int] $ \i -> do
      c <- connectTo port
      rs <- forM [1 .. 5 :: Int] $ \k -> do
        let body = BC.pack (show (i * 10 + k))
        sendRaw c ("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: " <> BC.pack (show (B.length body)) <> "\r\n\r\n" <> body)
        r <- readResponse c
        return (rBody r == BC.pack (show (B.length body)) <> ":" <> body)
      closeConn c
      return (and rs)
    length (filter id results) `shouldBe` 200

  it "closes an idle connection after the timeout, not before" $
    withServer server (Warp.setTimeout 1 . quiet) (testApp path) $ \port -> within 10 "idle timeout" $ do
      c <- connectTo port
      r <- request c "GET" "/hello" ""
      rawOf r `shouldBe` helloResp
      t0 <- getMonotonicTime
      rest <- readUntilClosed c
      t1 <- getMonotonicTime
      rest `shouldBe` ""
      -- warp's reaper: after one to two periods.
      (t1 - t0) `shouldSatisfy` (\d -> d >= 0.9 && d < 2.6)
      closeConn c

  it "drops a connection setOnOpen refuses, and reports every open and close" $ do
    opens <- newIORef (0 :: Int)
    closes <- newIORef (0 :: Int)
    let count r = atomicModifyIORef' r (\n -> (n + 1, n + 1))
        -- Refuse every second connection (the clients come one by one).
        set = Warp.setOnOpen (\_ -> odd <$> count opens)
            . Warp.setOnClose (\_ -> void (count closes)) . quiet
    withServer server set (testApp path) $ \port -> within 10 "onOpen" $ do
      forM_ [1 .. 8 :: Int] $ \i -> do
        c <- connectTo port
        sendRaw c "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"
        if odd i
          then (rawOf <$> readResponse c) `shouldReturn` helloResp
          else readUntilClosed c `shouldReturn` ""
        closeConn c
      -- Each connection's close is reported once its thread is done.
      let settled k = do
            (o, cl) <- (,) <$> readIORef opens <*> readIORef closes
            if o == cl || k == (0 :: Int) then return (o, cl) else threadDelay 20000 >> settled (k - 1)
      settled 100 `shouldReturn` (8, 8)

  it "shuts down gracefully with a request in flight" $ do
    stop <- newEmptyMVar
    (sock, port) <- openListener
    started <- newEmptyMVar
    let set = Warp.setInstallShutdownHandler (putMVar stop)
            . Warp.setGracefulShutdownTimeout (Just 5)
            . Warp.setBeforeMainLoop (putMVar started ())
            . quiet $ baseSettings server
    (`finally` N.close sock) $ withAsync (runOn server set sock (testApp path)) $ \srv -> within 10 "shutdown" $ do
      takeMVar started
      c <- connectTo port
      sendRaw c "GET /slow HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
      threadDelay 100000
      join (takeMVar stop)
      -- The listener is closed: no new connection gets in.
      refused <- try (connectTo port)
      either (\(_ :: IOException) -> return ()) (\c' -> closeConn c' >> expectationFailure "a connection was accepted after shutdown") refused
      r <- readResponse c
      rawOf r `shouldBe` "HTTP/1.1 200 OK\r\n" <> serverLine <> "Content-Type: text/plain\r\nContent-Length: 4\r\n\r\nslow"
      closeConn c
      -- With the last connection gone, the run function returns.
      done <- race (threadDelay 3000000) (waitCatch srv)
      either (const (expectationFailure "the server did not return after shutdown")) (`shouldSatisfy` isRight) done

  it "speaks HTTP/2 with prior knowledge (curl)" $ serve $ \port -> within 20 "HTTP/2" $ do
    let url p = "http://127.0.0.1:" ++ show port ++ p
        curl args = readProcessWithExitCode "curl" (["-s", "--http2-prior-knowledge", "--max-time", "10"] ++ args) ""
    (code, out, err) <- curl ["-w", "\n%{http_version} %{http_code}", url "/hello"]
    (code, out, err) `shouldBe` (ExitSuccess, "hello\n2 200", "")
    (code2, out2, _) <- curl ["-d", "over h2", "-w", "\n%{http_version} %{http_code}", url "/echo"]
    (code2, out2) `shouldBe` (ExitSuccess, "7:over h2\n2 200")
    (code3, out3, _) <- curl ["-w", "%{http_version} %{http_code} %{size_download}", "-o", "/dev/null", url "/file"]
    (code3, out3) `shouldBe` (ExitSuccess, "2 200 " ++ show fileBytes)
  where
    isRight = either (const False) (const True)

streamResp :: B.ByteString
streamResp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" <> serverLine <> "Content-Type: text/plain\r\n\r\n0003\r\none\r\n0004\r\ntwo,\r\n0005\r\nthree\r\n0\r\n\r\n"

-- | Request a file (with extra header lines) and expect warp's head for
-- the status, length and content range, and exactly these bytes.
expectFile :: Conn -> B.ByteString -> B.ByteString -> Int -> Int -> Maybe B.ByteString -> B.ByteString -> IO ()
expectFile c path extra status len range bytes = do
  r <- request c "GET" path extra
  rHead r `shouldBe` fileHead status len range
  rBody r `shouldBe` bytes

fileHead :: Int -> Int -> Maybe B.ByteString -> B.ByteString
fileHead status len range = B.concat
  [ if status == 200 then "HTTP/1.1 200 OK\r\n" else "HTTP/1.1 206 Partial Content\r\n"
  , maybe "" (\r -> "Content-Range: " <> r <> "\r\n") range
  , "Content-Length: ", BC.pack (show len), "\r\n"
  , "Accept-Ranges: bytes\r\n"
  , serverLine, "Content-Type: application/octet-stream\r\n\r\n" ]

dropDate :: B.ByteString -> B.ByteString
dropDate = B.intercalate "\r\n" . filter (not . ("Date:" `B.isPrefixOf`)) . splitCRLF
  where
    splitCRLF bs = case B.breakSubstring "\r\n" bs of
      (a, b) | B.null b -> [a]
             | otherwise -> a : splitCRLF (B.drop 2 b)

------------------------------------------------------------------------------
-- What only weft promises

-- | The error has this type and errno, and is located in weft.
weftErrorOf :: IOErrorType -> Errno -> IOException -> Expectation
weftErrorOf ty (Errno errno) e = do
  (ioe_type e, ioe_errno e) `shouldBe` (ty, Just errno)
  ioe_location e `shouldSatisfy` ("weft: " `isPrefixOf`)

-- | A connected pair of weft sockets on loopback: the body gets the
-- accepted one and its peer; both are closed afterwards.
withWeftPair :: (Net.Socket -> Net.Socket -> IO a) -> IO a
withWeftPair body = do
  l <- Net.listen (N.SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
  (`finally` Net.close l) $ do
    addr <- Net.localAddress l
    peer <- within 5 "connect" (Net.connect addr)
    (`finally` Net.close peer) $ do
      (s, _) <- within 5 "accept" (Net.accept l)
      body s peer `finally` Net.close s

-- | At least n bytes from a weft socket (fewer at end of stream).
recvAtLeast :: Net.Socket -> Int -> IO B.ByteString
recvAtLeast s n = go B.empty
  where
    go acc
      | B.length acc >= n = return acc
      | otherwise = do
          b <- Net.recv s 4096
          if B.null b then return acc else go (acc <> b)

weftOnly :: [Int] -> FilePath -> Spec
weftOnly ghcEpolls path = do
  describe "errors: IOErrors with the documented type and errno, located \"weft: ...\"" $ do
    it "runEnv with a PORT that is no number: InvalidArgument, EINVAL, before serving" $
      (`finally` unsetEnv "PORT") $ do
        setEnv "PORT" "http"
        r <- within 5 "runEnv" (try (Weft.runEnv 0 (testApp path)))
        either (weftErrorOf InvalidArgument eINVAL) (\() -> expectationFailure "runEnv returned") r

    it "a file that ends before the range connSendFile was given: EOF, ENODATA" $ do
      tmp <- getTemporaryDirectory
      let short = tmp </> "weft-warp-test-short-file"
      B.writeFile short "ten bytes!"
      (`finally` removeFile short) $ withWeftPair $ \s peer -> do
        conn <- weftConnection Weft.defaultSettings s
        r <- within 5 "connSendFile" $
          try (connSendFile conn FileId { fileIdPath = short, fileIdFd = Nothing } 0 100 (return ())
                            ["HTTP/1.1 200 OK\r\n\r\n"])
        either (weftErrorOf EOF eNODATA) (\() -> expectationFailure "the short file was sent as whole") r
        -- What the file had went out before the error.
        got <- within 5 "the bytes sent" (recvAtLeast peer 29)
        got `shouldBe` "HTTP/1.1 200 OK\r\n\r\nten bytes!"

  it "waits for no connection in GHC's I/O manager (stock warp does)" $ do
    ghcEpolls `shouldSatisfy` (not . null)
    weftEvents0 <- weftEvents
    (weftSockets, weftMoved) <- loadAndInspect Weft
    weftEvents1 <- weftEvents
    stockSockets <- fst <$> loadAndInspect Stock
    -- Stock warp waits in GHC's manager, so the inspection can see it.
    stockSockets `shouldSatisfy` (>= 20)
    weftSockets `shouldBe` 0
    weftMoved `shouldBe` True
    (weftEvents1 - weftEvents0) `shouldSatisfy` (> 1000)

  it "runs the connection timeouts on one manager per capability (stock warp: one)" $ do
#if MIN_VERSION_base(4,18,0)
    caps <- getNumCapabilities
    counts <- forM [Weft, Stock] $ \server -> do
      existing <- reapers
      withServer server quiet (testApp path) $ \port -> within 20 "reapers" $ do
        -- Round-robin placement puts some on every capability.
        conns <- forM [1 .. 4 * caps] $ \_ -> do
          c <- connectTo port
          (rawOf <$> request c "GET" "/hello" "") `shouldReturn` helloResp
          return c
        -- A manager's reaper thread runs while it holds connections.
        new <- filter (`notElem` existing) <$> reapers
        mapM_ closeConn conns
        return (length new)
    case counts of
      [_, 0] -> pendingWith "this auto-update does not name its reaper threads"
      _ -> counts `shouldBe` [caps, 1]
#else
    pendingWith "listing threads needs GHC 9.6 or later"
#endif

  it "at WEFT_MAX_CLIENTS, answers a newcomer 503 while every connection is being worked for" $ do
    setEnv "WEFT_MAX_CLIENTS" "2"
    (`finally` unsetEnv "WEFT_MAX_CLIENTS") $ withServer Weft quiet (testApp path) $ \port -> within 10 "limit" $ do
      unsetEnv "WEFT_MAX_CLIENTS"
      a <- connectTo port
      b <- connectTo port
      -- Two requests the application takes 300 ms over.
      forM_ [a, b] $ \c -> sendRaw c "GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n"
      threadDelay 100000
      c <- connectTo port
      rStatus <$> readResponse c `shouldReturn` 503
      forM_ [a, b] $ \x -> rStatus <$> readResponse x `shouldReturn` 200
      mapM_ closeConn [a, b, c]

  it "out of fds, answers every client (weft: served, 503, or closed when idle) and never spins" $ do
    -- The bound covers the worst case the steps below allow: every client
    -- answered only at the end of its 2 s, one after another.
    forM_ [Weft, Stock] $ \server -> withServer server quiet (testApp path) $ \port -> within 120 "EMFILE" $ do
      c0 <- connectTo port
      (rawOf <$> request c0 "GET" "/hello" "") `shouldReturn` helloResp
      lim <- getResourceLimit ResourceOpenFiles
      highest <- maximum <$> openFdList
      let restore = setResourceLimit ResourceOpenFiles lim
      (`finally` restore) $ do
        setResourceLimit ResourceOpenFiles lim { softLimit = ResourceLimit (fromIntegral highest + 41) }
        -- Clients until this process (client and server alike) is out of
        -- fds: the last connections wait in the listen queue, unaccepted.
        let open acc = do
              r <- try (connectTo port)
              case r of
                Right c -> open (c : acc)
                Left (_ :: IOException) -> return (reverse acc)
        clients <- open []
        length clients `shouldSatisfy` (>= 10)
        if server == Weft then do
          -- weft takes the waiting clients in, closing idle connections
          -- for them or answering 503 (Note [Making room under fd
          -- pressure] in "Weft.Net.Internal.Serve"); then it waits, with
          -- no busy loop.
          -- (Closing and admitting connections while the clients keep
          -- opening takes a second or so.)
          threadDelay 1500000
          cpu0 <- getCPUTime
          threadDelay 300000
          cpu1 <- getCPUTime
          (fromIntegral (cpu1 - cpu0) / 1e9 :: Double) `shouldSatisfy` (< 60)
          -- Every client gets an answer: served, refused with 503, or its
          -- idle connection closed; none waits unanswered.
          forM_ (c0 : clients) $ \c -> do
            r <- try (timeout 2000000 (request c "GET" "/hello" ""))
            case r of
              Right (Just resp) -> (rawOf resp == helloResp || rStatus resp == 503) `shouldBe` True
              Right Nothing -> expectationFailure "a client got no answer within 2 s"
              Left (_ :: SomeException) -> return ()
          mapM_ closeConn clients
          restore
          c1 <- connectTo port
          (rawOf <$> request c1 "GET" "/hello" "") `shouldReturn` helloResp
          closeConn c1
        else do
          threadDelay 100000
          cpu0 <- getCPUTime
          threadDelay 300000
          cpu1 <- getCPUTime
          let cpuMs = fromIntegral (cpu1 - cpu0) / 1e9 :: Double
          let stock = stockOnEmfile
          -- Stock warp from 3.3.27 on backs off (by waiting or by giving
          -- up); before, it retries in a busy loop.
          if stock == RetriesBusily
            then cpuMs `shouldSatisfy` (> 150)
            else cpuMs `shouldSatisfy` (< 60)
          -- The open connection is served throughout.
          (rawOf <$> request c0 "GET" "/hello" "") `shouldReturn` helloResp
          -- Once fds are free again, the waiting clients are accepted and
          -- served (but by a warp that stopped accepting).
          let (gone, waiting) = splitAt 10 clients
          mapM_ closeConn gone
          restore
          if stock == StopsAccepting
            -- The last client came after the server ran out: never accepted.
            then forM_ (drop (length waiting - 1) waiting) $ \c -> do
              sendRaw c "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"
              timeout 1000000 (readResponse c) >>= (`shouldSatisfy` isNothing) . fmap rawOf
            else forM_ waiting $ \c -> (rawOf <$> request c "GET" "/hello" "") `shouldReturn` helloResp
          mapM_ closeConn waiting
      closeConn c0

  it "returns every fd and watch after a load" $ do
    let settle = threadDelay 200000
    -- weft's own fds (an epoll and an eventfd per capability) stay open.
    E.startSystemManagers
    settle
    fds0 <- openFds
    watches0 <- weftWatches
    _ <- loadAndInspect Weft
    -- Closing is done by the server's threads after the clients leave.
    let settled (k :: Int) = do
          fds <- openFds
          w <- weftWatches
          if (fds, w) == (fds0, watches0) || k == 0 then return (fds, w) else settle >> settled (k - 1)
    final <- settled 25
    final `shouldBe` (fds0, watches0)
  where
    -- Serve a few thousand requests (a file among them) over 20 keep-alive
    -- connections, then, with the connections open and idle, count the
    -- sockets registered with GHC's epoll instances.
    loadAndInspect server = withServer server quiet (testApp path) $ \port -> within 60 "load" $ do
      events0 <- weftEvents
      conns <- forConcurrently [1 .. 20 :: Int] $ \i -> do
        c <- connectTo port
        forM_ [1 .. 150 :: Int] $ \k -> do
          r <- request c "GET" (if (i + k) `mod` 50 == 0 then "/part" else "/hello") ""
          unless (rStatus r `elem` [200, 206]) (throwIO (userError ("status " ++ show (rStatus r))))
        return c
      threadDelay 100000
      registered <- concat <$> mapM epollTargets ghcEpolls
      -- Only this server's connections: a socket of an earlier test's
      -- server may still be closing in GHC's manager.
      ours <- connectionInodes port
      sockets <- length <$> filterM (fmap (maybe False (`elem` ours)) . socketInode) registered
      events1 <- weftEvents
      mapM_ closeConn conns
      return (sockets, events1 > events0)

#if MIN_VERSION_base(4,18,0)
-- | The live threads named as time-manager names its reapers.
reapers :: IO [ThreadId]
reapers = filterM isReaper =<< listThreads
  where
    isReaper t = do
      name <- threadLabel t
      status <- threadStatus t
      return (name == Just "WAI timeout manager (Reaper)" && status `notElem` [ThreadFinished, ThreadDied])
#endif

-- | What a server does when accept fails with EMFILE.
data OnEmfile
  = BacksOff        -- ^ waits, and accepts again once fds are free (weft)
  | RetriesBusily   -- ^ retries at once, in a loop
  | StopsAccepting  -- ^ ends its accept loop for good
  deriving (Eq, Show)

-- | Stock warp's answer to EMFILE at accept, by its version.
stockOnEmfile :: OnEmfile
#if MIN_VERSION_warp(3,4,3)
stockOnEmfile = BacksOff        -- waits for a connection to close
#elif MIN_VERSION_warp(3,3,27)
stockOnEmfile = StopsAccepting
#else
stockOnEmfile = RetriesBusily
#endif

-- | Open fds that are epoll instances.
epollFds :: IO [Int]
epollFds = do
  fds <- openFdList
  filterM (\fd -> ("anon_inode:[eventpoll]" ==) <$> linkOf fd) fds

-- | The fds registered with an epoll instance (its fdinfo's tfd lines).
epollTargets :: Int -> IO [Int]
epollTargets ep = do
  info <- readFileStrict ("/proc/self/fdinfo/" ++ show ep)
  return (mapMaybe target (lines info))
  where
    target l = case words l of
      ("tfd:" : n : _) -> Just (read n)
      _ -> Nothing

-- | The inode of the socket an fd of this process is, if it is one.
socketInode :: Int -> IO (Maybe Int)
socketInode fd = do
  l <- linkOf fd
  return $ case stripPrefix "socket:[" l of
    Just rest -> readMaybe (takeWhile (/= ']') rest)
    Nothing -> Nothing

-- | The inodes of the IPv4 TCP sockets whose local port is this one (a
-- server's listener and accepted connections), from /proc/net/tcp.
connectionInodes :: Int -> IO [Int]
connectionInodes port = do
  table <- readFileStrict "/proc/self/net/tcp"
  return [ n | l <- drop 1 (lines table), (_ : local : _ : _ : _ : _ : _ : _ : _ : inode : _) <- [words l]
                           , Just p <- [localPort local], p == port, Just n <- [readMaybe inode] ]
  where
    localPort a = case break (== ':') a of
      (_, ':' : hex) -> fst <$> listToMaybe (readHex hex)
      _ -> Nothing

linkOf :: Int -> IO String
linkOf fd = readSymbolicLink ("/proc/self/fd/" ++ show fd) `catch` \(_ :: IOException) -> return ""

openFdList :: IO [Int]
openFdList = sort . map read <$> listDirectory "/proc/self/fd"

openFds :: IO Int
openFds = length <$> openFdList

readFileStrict :: FilePath -> IO String
readFileStrict p = withFile p ReadMode $ \h -> do
  s <- hGetContents h
  length s `seq` return s

weftEvents :: IO Int
weftEvents = sum <$> (mapM (fmap E.statEvents . E.getManagerStats) =<< E.systemManagers)

weftWatches :: IO Int
weftWatches = sum <$> (mapM (fmap E.statWatches . E.getManagerStats) =<< E.systemManagers)
