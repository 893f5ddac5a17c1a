{-# LANGUAGE OverloadedStrings #-}
-- | weft-sws, the colored static web server, in-process on loopback with a
-- temporary document root, under two policies (no stealing, and Mely's):
-- exact bytes and keep-alive, pipelining, requests split byte by byte,
-- 404s that never escape the root, 400 and 431 then close, 405, resets,
-- half-closes, HTTP/1.0, idle timeouts, the client limit, fd exhaustion,
-- and 200 concurrent clients.
-- After the bad clients, good ones must still be served, and every
-- connection must be accounted for (the open-client count returns to 0).
module Test.Sws (spec) where

import Control.Concurrent
import Control.Concurrent.Async (forConcurrently_, mapConcurrently_, wait, withAsync)
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.IORef
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import System.Directory
import System.FilePath ((</>))
import System.Posix.Files (createSymbolicLink)
import Test.Hspec

import Support
import Sws.Cache
import Sws.Server
import Test.Net (connectClient, keepsClientsWhenFull, makesRoomForNewcomers, recvExactly, recvToEnd)
import Test.Servers (recvAll, statusOf)
import Weft.Color
import qualified Weft.Net as W

-- | The files of the test document root.
helloBody, indexBody, pageBody :: B.ByteString
helloBody = B.pack [ fromIntegral (33 + i `mod` 90) | i <- [0 .. 1023 :: Int] ]
indexBody = "<h1>index</h1>\n"
pageBody = "<p>page</p>\n"

-- | A 200 response as a client must see it, written out independently of
-- the server's code.
ok :: B.ByteString -> B.ByteString -> B.ByteString
ok contentType body = B.concat
  [ "HTTP/1.1 200 OK\r\nServer: weft-sws\r\nContent-Type: ", contentType
  , "\r\nContent-Length: ", BC.pack (show (B.length body)), "\r\n\r\n", body ]

helloOk, indexOk, pageOk, notFoundReply :: B.ByteString
helloOk = ok "text/plain; charset=utf-8" helloBody
indexOk = ok "text/html; charset=utf-8" indexBody
pageOk = ok "text/html; charset=utf-8" pageBody
notFoundReply = "HTTP/1.1 404 Not Found\r\nServer: weft-sws\r\nContent-Type: text/plain\r\n\
                \Content-Length: 14\r\n\r\n404 Not Found\n"

get :: B.ByteString -> B.ByteString
get path = "GET " <> path <> " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: weft-test\r\n\r\n"

-- | A document root in a fresh temporary directory: two files, an index, a
-- dot-file and a symbolic link to a file outside the root.
withDocRoot :: (FilePath -> IO a) -> IO a
withDocRoot body = do
  tmp <- getTemporaryDirectory
  let make k = do
        let dir = tmp </> ("weft-sws-test-" ++ show (k :: Int))
        exists <- doesPathExist dir
        if exists then make (k + 1) else dir <$ createDirectory dir
  bracket (make 0) removeDirectoryRecursive $ \dir -> do
    let root = dir </> "root"
    createDirectory root
    createDirectory (root </> "sub")
    B.writeFile (root </> "hello.txt") helloBody
    B.writeFile (root </> "index.html") indexBody
    B.writeFile (root </> "sub" </> "page.html") pageBody
    B.writeFile (root </> ".secret") "secret\n"
    B.writeFile (dir </> "outside.txt") "outside\n"
    createSymbolicLink (dir </> "outside.txt") (root </> "link.txt")
    body root

-- | Run a server on a free loopback port under the policy; afterwards every
-- connection must have been closed and counted down.
withSws :: Policy -> (ServerConfig -> ServerConfig) -> (Server -> SockAddr -> IO a) -> IO a
withSws policy tweak body = withDocRoot $ \root -> do
  cache <- buildCache defaultCacheLimits (BC.pack root)
  -- A fixed two-core topology: these tests are about serving, and it
  -- spares each runtime reading /sys.
  let rt = defaultConfig { cfgPolicy = policy, cfgTopology = Just (flatTopology 2) }
      cfg = tweak defaultServerConfig { cfgRuntime = rt }
  bracket (startServer cfg cache (SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))) stopServer $ \srv -> do
    r <- body srv (serverAddress srv)
    eventually "every connection closed and counted" ((== 0) <$> serverClients srv)
    return r

withClient :: SockAddr -> (N.Socket -> IO a) -> IO a
withClient addr = bracket (connectClient addr) N.close

-- | Send a request and expect exactly these bytes back.
expectReply :: N.Socket -> B.ByteString -> B.ByteString -> Expectation
expectReply c req reply = do
  NB.sendAll c req
  within 2 "reply" (recvExactly c (B.length reply)) `shouldReturn` reply

-- | What a refused newcomer gets, written out independently of the
-- server's code.
refusal503 :: B.ByteString
refusal503 = "HTTP/1.1 503 Service Unavailable\r\nServer: weft-sws\r\nContent-Type: text/plain\r\n\
             \Content-Length: 42\r\nConnection: close\r\n\r\n503 Service Unavailable: too many clients\n"

-- | A full server whose clients are all busy refuses a newcomer (Note
-- [Making room under fd pressure] in "Weft.Net.Internal.Serve"): the
-- clients connect and ask for a page every 5 ms (so none is ever idle
-- past the eviction grace); the newcomer connects and must get exactly
-- 'refusal503' and the end of the stream within 3 s (the server looks for
-- a connection it may close for up to 'W.admissionPatience'), and every
-- busy client must be answered throughout.
refusedWhileBusy :: SockAddr -> [N.Socket] -> N.Socket -> Expectation
refusedWhileBusy addr busy newcomer = do
  forM_ busy $ \c -> N.connect c addr >> expectReply c (get "/sub/page.html") pageOk
  stop <- newIORef False
  let talk c = do
        expectReply c (get "/sub/page.html") pageOk
        threadDelay 5000
        done <- readIORef stop
        unless done (talk c)
  withAsync (mapConcurrently_ talk busy) $ \talkers -> do
    N.connect newcomer addr
    within 3 "the refusal" (recvToEnd newcomer) `shouldReturn` refusal503
    writeIORef stop True
    within 5 "the busy clients" (wait talkers)

-- | A fresh client still gets the file.
stillServed :: SockAddr -> Expectation
stillServed addr = withClient addr $ \c -> expectReply c (get "/hello.txt") helloOk

spec :: Spec
spec = describe "weft-sws" $ do
  describe "request targets" $ do
    let cache = cacheFromList [ ("/a.txt", prebuild "200 OK" [] "A"), ("/d/index.html", prebuild "200 OK" [] "I") ]
        found t = case lookupTarget cache t of
          Found r -> Just (responseBytes KeepAlive11 r)
          _ -> Nothing
        isBad t = case lookupTarget cache t of
          BadTarget -> True
          _ -> False
    it "serves exact keys, with queries and escapes, and directory indexes" $ do
      fmap (B.takeWhileEnd (/= 10)) (found "/a.txt?x=1#f") `shouldBe` Just "A"
      fmap (B.takeWhileEnd (/= 10)) (found "/%61.txt") `shouldBe` Just "A"
      fmap (B.takeWhileEnd (/= 10)) (found "http://example.com/a.txt") `shouldBe` Just "A"
      fmap (B.takeWhileEnd (/= 10)) (found "/d/") `shouldBe` Just "I"
    it "never resolves dot segments, and rejects what is not a path" $ do
      map found ["/d/../a.txt", "/./a.txt", "/%2e%2e/a.txt", "/d", "a.txt"] `shouldBe` replicate 5 Nothing
      map isBad ["a.txt", "*", "/%zz", "/%2"] `shouldBe` [True, True, True, True]
    it "loads regular files only, indexes directories, and refuses a root over its limits" $ withDocRoot $ \root -> do
      loaded <- buildCache defaultCacheLimits (BC.pack root)
      cacheEntries loaded `shouldBe` 4
      let paths = ["/hello.txt", "/index.html", "/", "/sub/page.html", "/sub/", "/link.txt", "/.secret"]
      [ p | p <- paths, Just _ <- [cacheLookup loaded p] ] `shouldBe` ["/hello.txt", "/index.html", "/", "/sub/page.html"]
      cacheBytes loaded `shouldBe` B.length helloBody + B.length indexBody + B.length pageBody
      buildCache defaultCacheLimits { limitFiles = 2 } (BC.pack root) `shouldThrow` anyIOException
      buildCache defaultCacheLimits { limitTotalBytes = 1000 } (BC.pack root) `shouldThrow` anyIOException
      buildCache defaultCacheLimits (BC.pack (root </> "hello.txt")) `shouldThrow` anyIOException

    it "guesses content types from extensions" $
      map contentTypeFor ["/a.HTML", "/b.css", "/c.png", "/d", "/e.tar.gz", "/.x/y"]
        `shouldBe` [ "text/html; charset=utf-8", "text/css", "image/png", "application/octet-stream"
                   , "application/octet-stream", "application/octet-stream" ]

  forM_ [NoStealing, Mely] $ \policy -> describe (policyName policy) $ do
    it "serves exact bytes, keeping one connection alive across requests" $
      withSws policy id $ \_ addr -> withClient addr $ \c ->
        forM_ [1 .. 3 :: Int] $ \_ -> do
          expectReply c (get "/hello.txt") helloOk
          expectReply c (get "/") indexOk
          expectReply c (get "/sub/page.html") pageOk

    it "answers pipelined requests in order, and requests split byte by byte" $
      withSws policy id $ \_ addr -> withClient addr $ \c -> do
        expectReply c (B.concat [get "/hello.txt", get "/missing", get "/sub/page.html"])
          (B.concat [helloOk, notFoundReply, pageOk])
        N.setSocketOption c N.NoDelay 1
        forM_ (B.unpack (get "/index.html")) $ \b -> NB.sendAll c (B.singleton b) >> threadDelay 100
        within 2 "reply" (recvExactly c (B.length indexOk)) `shouldReturn` indexOk

    it "answers 404 for unknown paths, dot-files, links and escapes from the root, and keeps serving" $
      withSws policy id $ \_ addr -> withClient addr $ \c -> do
        forM_ ["/nope", "/.secret", "/link.txt", "/../outside.txt", "/sub/../../outside.txt", "/%2e%2e/outside.txt"] $ \p ->
          expectReply c (get p) notFoundReply
        expectReply c (get "/hello.txt") helloOk

    it "answers garbage with 400 and closes; others are still served" $
      withSws policy id $ \_ addr -> do
        withClient addr $ \c -> do
          NB.sendAll c (B.pack [0, 1, 2, 200, 13, 10, 13, 10])
          reply <- within 2 "reply" (recvAll c)
          statusOf reply `shouldBe` "400"
          reply `shouldSatisfy` BC.isInfixOf "Connection: close"
        stillServed addr

    it "answers other methods with 405, skips their bodies and keeps the connection" $
      withSws policy id $ \_ addr -> withClient addr $ \c -> do
        NB.sendAll c "POST /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        NB.sendAll c (get "/hello.txt")
        let allowed = "HTTP/1.1 405 Method Not Allowed\r\nServer: weft-sws\r\nAllow: GET\r\n\
                      \Content-Type: text/plain\r\nContent-Length: 43\r\n\r\n\
                      \405 Method Not Allowed: only GET is served\n"
        within 2 "replies" (recvExactly c (B.length allowed + B.length helloOk)) `shouldReturn` (allowed <> helloOk)

    it "answers an oversized head with 431 and closes; others are still served" $
      withSws policy id $ \_ addr -> do
        withClient addr $ \c -> do
          _ <- forkIO $ void (try (NB.sendAll c ("GET / HTTP/1.1\r\nX-Big: " <> BC.replicate 20000 'a'))
                                :: IO (Either IOException ()))
          reply <- within 2 "reply" (recvAll c)
          statusOf reply `shouldBe` "431"
        stillServed addr

    it "survives clients that reset mid-request or half-close" $
      withSws policy id $ \_ addr -> do
        forM_ [1 .. 20 :: Int] $ \_ -> do
          c <- connectClient addr
          NB.sendAll c (B.take 20 (get "/hello.txt"))
          N.setSockOpt c N.Linger (N.StructLinger 1 0)
          N.close c
        -- A request then a half-close: the whole reply, then the close.
        withClient addr $ \c -> do
          NB.sendAll c (get "/hello.txt")
          N.shutdown c N.ShutdownSend
          within 2 "reply and close" (recvAll c) `shouldReturn` helloOk
        stillServed addr

    it "closes a slow client at the idle timeout and keeps serving others" $
      withSws policy (\c -> c { cfgIdleTimeout = 200000 }) $ \srv addr -> withClient addr $ \slow -> do
        NB.sendAll slow (B.take 20 (get "/hello.txt"))
        stillServed addr
        within 3 "slow client closed" (recvAll slow) `shouldReturn` B.empty
        eventually "the slow client counted out" ((== 0) <$> serverClients srv)

    it "closes after the reply when asked, and keeps HTTP/1.0 alive only on request" $
      withSws policy id $ \_ addr -> do
        withClient addr $ \c -> do
          NB.sendAll c "GET /sub/page.html HTTP/1.1\r\nConnection: close\r\n\r\n"
          reply <- within 2 "reply" (recvAll c)
          reply `shouldBe` B.concat [ B.take (B.length pageOk - B.length pageBody - 2) pageOk
                                    , "Connection: close\r\n\r\n", pageBody ]
        withClient addr $ \c -> do
          NB.sendAll c "GET /sub/page.html HTTP/1.0\r\n\r\n"
          reply <- within 2 "reply" (recvAll c)
          reply `shouldSatisfy` BC.isInfixOf "Connection: close\r\n"
        withClient addr $ \c -> do
          let keep = B.concat [ B.take (B.length pageOk - B.length pageBody - 2) pageOk
                              , "Connection: keep-alive\r\n\r\n", pageBody ]
          forM_ [1 .. 2 :: Int] $ \_ ->
            expectReply c "GET /sub/page.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" keep

    it "over the client limit, with every client busy, answers a newcomer exactly 503 and a close, and admits again below it" $
      withSws policy (\c -> c { cfgMaxClients = 3 }) $ \srv addr -> do
        busy <- replicateM 3 (N.socket N.AF_INET N.Stream N.defaultProtocol)
        newcomer <- N.socket N.AF_INET N.Stream N.defaultProtocol
        (`finally` mapM_ N.close (newcomer : busy)) $ do
          refusedWhileBusy addr busy newcomer
          serverRefused srv `shouldReturn` 1
          mapM_ N.close (take 1 busy)
          eventually "a client left" ((== 2) <$> serverClients srv)
          stillServed addr

    it "with cfgEviction EvictNone, at the limit keeps its idle keep-alive clients and answers newcomers 503" $
      withSws policy (\c -> c { cfgMaxClients = 8, cfgEviction = W.EvictNone }) $ \_ addr ->
        keepsClientsWhenFull False addr refusal503 $ \c -> expectReply c (get "/hello.txt") helloOk

    it "out of fds at accept, with every client busy, answers a newcomer from its reserve fd: exactly 503 and a close" $
      withSws policy id $ \srv addr -> do
        startManagers
        -- Client sockets made before the limit drops; connecting needs no fd.
        busy <- replicateM 3 (N.socket N.AF_INET N.Stream N.defaultProtocol)
        newcomer <- N.socket N.AF_INET N.Stream N.defaultProtocol
        (`finally` mapM_ N.close (newcomer : busy)) $ withFdHeadroom 3 $ \liftLimit -> do
          refusedWhileBusy addr busy newcomer
          serverRefused srv `shouldReturn` 1
          liftLimit
          forM_ busy $ \c -> expectReply c (get "/hello.txt") helloOk
          stillServed addr

    it "out of fds at accept: admitted clients are served, each newcomer gets exactly 503 from the reserve, all served after" $
      withSws policy (\c -> c { cfgEviction = W.EvictNone }) $ \srv addr -> do
        startManagers
        -- Client sockets made before the limit drops; connecting needs no fd.
        clients <- replicateM 8 (N.socket N.AF_INET N.Stream N.defaultProtocol)
        let (admitted, newcomers) = splitAt 3 clients
        (`finally` mapM_ N.close clients) $ withFdHeadroom 3 $ \liftLimit -> do
          mapM_ (`N.connect` addr) admitted
          eventually "three admitted" ((== 3) <$> serverClients srv)
          forM_ newcomers $ \c -> do
            N.connect c addr
            within 2 "a newcomer's refusal" (recvToEnd c) `shouldReturn` refusal503
          serverClients srv `shouldReturn` 3
          serverRefused srv `shouldReturn` 5
          forM_ admitted $ \c -> expectReply c (get "/hello.txt") helloOk
          liftLimit
          forM_ admitted $ \c -> expectReply c (get "/sub/page.html") pageOk
          stillServed addr

    it "out of fds at accept, closes idle keep-alive clients for newcomers, never the busy one" $
      withSws policy id $ \_ addr -> makesRoomForNewcomers addr $ \c -> expectReply c (get "/hello.txt") helloOk

    it "serves 200 concurrent clients, each several requests" $
      withSws policy id $ \srv addr -> do
        within 5 "clients" $ forConcurrently_ [1 .. 200 :: Int] $ \i -> withClient addr $ \c ->
          forM_ [1 .. 5 :: Int] $ \j ->
            if even (i + j) then expectReply c (get "/hello.txt") helloOk
              else expectReply c (get "/sub/page.html") pageOk
        stats' <- stats (serverRuntime srv)
        sum (map csHandlerErrors stats') `shouldBe` 0
