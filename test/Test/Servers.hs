-- | The example servers over loopback, on weft and on GHC's manager: many
-- concurrent clients, pipelining, resets, half-close, garbage, oversized
-- headers and idle clients. Other clients must be served throughout.
module Test.Servers (spec, recvAll, statusOf) where

import Control.Concurrent
import Control.Concurrent.Async (forConcurrently_)
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import Test.Hspec

import Example.Http (pongResponse)
import Example.Serve
import Example.Servers
import Support
import Test.Net (connectClient, recvExactly)
import qualified Weft.Event as E

-- | Run an example server on a free loopback port for the body's duration.
withServer :: ManagerChoice -> Int -> (Conn -> IO ()) -> (SockAddr -> IO a) -> IO a
withServer choice idle handler body = do
  ready <- newEmptyMVar
  let addr = SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1))
  bracket (forkIO (runServer choice (Limits idle defaultMinReceive 0 plainAdmit) addr (putMVar ready) handler)) killThread $ \_ ->
    body =<< within 5 "server start" (takeMVar ready)

withClient :: SockAddr -> (N.Socket -> IO a) -> IO a
withClient addr = bracket (connectClient addr) N.close

-- | Everything until the server closes.
recvAll :: N.Socket -> IO B.ByteString
recvAll s = go []
  where go acc = do
          c <- NB.recv s 4096
          if B.null c then return (B.concat (reverse acc)) else go (c : acc)

request :: B.ByteString
request = BC.pack "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: weighttp/0.3\r\nConnection: keep-alive\r\n\r\n"

statusOf :: B.ByteString -> B.ByteString
statusOf = B.take 3 . B.drop 9

-- | A good client still gets its pong.
pongStillServed :: SockAddr -> Expectation
pongStillServed addr = withClient addr $ \c -> do
  NB.sendAll c request
  within 2 "pong" (recvExactly c (B.length pongResponse)) `shouldReturn` pongResponse

spec :: E.BackendKind -> Spec
spec kind = describe "example servers" $
  forM_ (WeftManager : [ GhcManager | kind == E.EPollBackend ]) $ \choice ->
    describe (show choice) $ do
      it "SimpleServer answers 40 concurrent clients, requests split and pipelined" $
        withServer choice 0 (simpleServer 90 (simpleReply 323)) $ \addr -> do
          B.length request `shouldBe` 90
          within 30 "clients" $ forConcurrently_ [1 .. 40 :: Int] $ \_ -> withClient addr $ \c ->
            forM_ [1 .. 20 :: Int] $ \_ -> do
              NB.sendAll c (B.take 40 request)
              NB.sendAll c (B.drop 40 request)
              r <- recvExactly c 323
              r `shouldBe` simpleReply 323
          withClient addr $ \c -> do
            NB.sendAll c (B.concat (replicate 3 request))
            within 2 "three replies" (recvExactly c (3 * 323)) `shouldReturn` B.concat (replicate 3 (simpleReply 323))

      it "echo returns every byte, and ends on a half-close" $
        withServer choice 0 echoServer $ \addr -> withClient addr $ \c -> do
          let payload = B.pack [ fromIntegral i | i <- [0 .. 70000 :: Int] ]
          _ <- forkIO (NB.sendAll c payload >> N.shutdown c N.ShutdownSend)
          within 5 "echo" (recvAll c) `shouldReturn` payload

      it "pong answers pipelined requests in order, in one reply" $
        withServer choice 0 pongServer $ \addr -> withClient addr $ \c -> do
          NB.sendAll c (B.concat (replicate 3 request))
          within 2 "pongs" (recvExactly c (3 * 42)) `shouldReturn` B.concat (replicate 3 pongResponse)

      it "pong answers garbage with 400 and closes; others are still served" $
        withServer choice 0 pongServer $ \addr -> do
          withClient addr $ \c -> do
            NB.sendAll c (B.pack [0, 1, 2, 200, 13, 10, 13, 10])
            reply <- within 2 "reply" (recvAll c)
            statusOf reply `shouldBe` BC.pack "400"
          pongStillServed addr

      it "pong answers oversized or too many headers with 431 and closes" $
        withServer choice 0 pongServer $ \addr -> do
          withClient addr $ \c -> do
            _ <- forkIO $ void (try (NB.sendAll c (BC.pack "GET / HTTP/1.1\r\nX-Big: " <> BC.replicate 20000 'a'))
                                  :: IO (Either IOException ()))
            reply <- within 2 "reply" (recvAll c)
            statusOf reply `shouldBe` BC.pack "431"
          withClient addr $ \c -> do
            let headers = B.concat [ BC.pack ("X-H" ++ show i ++ ": v\r\n") | i <- [1 .. 101 :: Int] ]
            NB.sendAll c (BC.pack "GET / HTTP/1.1\r\n" <> headers <> BC.pack "\r\n")
            reply <- within 2 "reply" (recvAll c)
            statusOf reply `shouldBe` BC.pack "431"
          pongStillServed addr

      it "pong survives clients that reset mid-request" $
        withServer choice 0 pongServer $ \addr -> do
          forM_ [1 .. 20 :: Int] $ \_ -> do
            c <- connectClient addr
            NB.sendAll c (B.take 30 request)
            N.setSockOpt c N.Linger (N.StructLinger 1 0)
            N.close c
          pongStillServed addr

      when (choice == WeftManager) $
        it "pong closes a slow client at the idle timeout and keeps serving" $
          withServer choice 200000 pongServer $ \addr -> withClient addr $ \slow -> do
            NB.sendAll slow (B.take 20 request)
            r <- within 3 "slow client closed" (recvAll slow)
            r `shouldBe` B.empty
            pongStillServed addr
