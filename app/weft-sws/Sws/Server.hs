{-# LANGUAGE OverloadedStrings, ScopedTypeVariables #-}
-- | SWS, the static web server of the Mely paper (§5.3.1), as colored
-- event handlers on "Weft.Color": every step of serving a request is a
-- short handler that never blocks, and the color of each event says which
-- events must not run at the same time.
--
-- = Handlers and colors
--
-- * __Epoll__ is weft's I/O managers: every socket has an 'FdWatch',
--   registered once, edge-triggered; a handler that meets @EAGAIN@
--   rearms it and returns, and the watch posts the handler again once the
--   socket is ready (no syscall per wait).
-- * __Accept__ (color 'acceptColor') accepts up to 'cfgAcceptBatch' pending
--   connections, refuses those over 'cfgMaxClients', and re-arms on the
--   listener (or posts itself again if the batch ran out first).
-- * __ReadRequest__, __ParseRequest__, __CheckInCache__, __WriteResponse__,
--   __404__, __BadRequest__ (400, 405, 431, 501, 505) and __Close__ have
--   the connection's fd as their color, so one connection's events run one
--   at a time and in order, while different connections are served in
--   parallel.
-- * __DecClientAccepted__ has 'acceptColor', like Accept, because both
--   update the client count: sharing a color serialises them, so the count
--   needs no lock.
--
-- A request's events follow each other: ReadRequest, ParseRequest,
-- CheckInCache (or 404, or BadRequest), WriteResponse, then ParseRequest
-- again if pipelined bytes remain, else a wait for the next request.
--
-- Note [Connection state]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- A connection's mutable state ('Conn') is touched only by events of its
-- color, which the runtime never runs concurrently and runs in posting
-- order (with the memory ordering of its queue locks between them), so
-- plain 'IORef's suffice. The one exception is 'stopServer', which only
-- posts a Close event in the connection's color. A closed connection may
-- still receive events that were posted or armed before it closed; every
-- handler first checks 'connClosed', and the socket itself refuses any
-- syscall once closed ("Weft.Net"), so a stale event never touches a
-- reused fd number.
--
-- Note [Bounded buffering]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A connection reads only when its output is fully sent and its input
-- holds no complete request: then the input is shorter than
-- 'maxHeaderBytes' (or the parser would have failed), so it never holds
-- more than that plus one read. Output is at most one response plus its
-- head. Request bodies are discarded as they arrive, never kept.
--
-- (Over 600 lines: the handlers and the Accept handler's admission share
-- the 'Server' and 'Conn' records and the Notes above, read together.)
module Sws.Server
  ( -- * Configuration
    ServerConfig (..)
  , defaultServerConfig
    -- * Running
  , Server
  , startServer
  , serverAddress
  , serverRuntime
  , serverClients
  , serverRefused
  , stopServer
    -- * Handlers
  , acceptColor
  , handlerCosts
  ) where

import Control.Concurrent (threadDelay)
import Control.Exception hiding (Handler)
import Control.Monad
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.IntMap.Strict as IntMap
import Foreign.C.Error
import GHC.IO.Exception (IOException (..))
import Network.Socket (SockAddr)
import System.IO (fixIO, hPutStrLn, stderr)
import System.Posix.Types (Fd (..))

import Example.Http
import Sws.Cache
import Weft.Color
import qualified Weft.Net as W
import qualified Weft.Timer as T

------------------------------------------------------------------------------
-- Configuration

-- | How the server runs.
data ServerConfig = ServerConfig
  { cfgRuntime     :: !Config
    -- ^ The colored runtime's configuration: policy, batch, cores.
  , cfgMaxClients  :: !Int
    -- ^ Most connections open at once; a connection accepted beyond it
    -- is answered 503 and closed, unless a connection is closed for it
    -- ('cfgEviction'). 0 (the default): the soft @RLIMIT_NOFILE@ less
    -- 'W.reservedFds'.
  , cfgEviction    :: !W.Eviction
    -- ^ Which connection a full server may close for a newcomer (default
    -- 'W.EvictStalledThenIdle': a stalled one, else one idle between
    -- requests, as HTTP allows).
  , cfgAcceptBatch :: !Int
    -- ^ Most connections one Accept event takes before it lets other
    -- events run (default 64).
  , cfgIdleTimeout :: !Int
    -- ^ Microseconds a connection may stay silent (no byte received or
    -- sent) before it is closed; 0 for never (default 60 s).
  , cfgMinReceive  :: !Int
    -- ^ Received bytes that count as activity against the idle timeout
    -- ('W.setMinimumReceive'; default 1 KiB): a request head trickled in
    -- more slowly does not hold a connection open.
  , cfgLimits      :: !Limits
    -- ^ Request head limits ('defaultLimits': 8 KiB of head, 100 header
    -- lines, 1 MiB of discarded body).
  }

-- | The defaults described at each field, on 'defaultConfig' (the Mely
-- policy) with 'serverStealMargin'.
defaultServerConfig :: ServerConfig
defaultServerConfig = ServerConfig
  { cfgRuntime = defaultConfig { cfgStealMargin = serverStealMargin }
  , cfgMaxClients = 0
  , cfgEviction = W.EvictStalledThenIdle
  , cfgAcceptBatch = 64
  , cfgIdleTimeout = 60000000
  , cfgMinReceive = 1024
  , cfgLimits = defaultLimits
  }

-- | The steal margin of a weft-sws runtime, in ns (5 ms; the runtime's
-- default is 50 µs). A stolen connection's color runs one
-- request's events (a few µs) and goes home, so a steal moves almost no
-- work for its cost: the thief's wake-up, both locks and the connection's
-- data crossing caches. The OS already runs a capability whose core is
-- taken on an idle one, so a short queue is served about as soon without
-- a steal; stealing is kept for a real backlog, such as a core stuck
-- behind long handlers (docs/results/stealing.md has the measurements).
serverStealMargin :: Int
serverStealMargin = 5000000

-- | The color shared by Accept and DecClientAccepted: 1, as in the paper
-- (so on two or more cores it starts away from color 0's core). Fds 0–2
-- are never connections, so no connection has this color unless its fd
-- folds onto it (fd 65537 and so on), which only serialises the two.
acceptColor :: Color
acceptColor = 1

------------------------------------------------------------------------------
-- Handlers

-- Note [Handler costs]
-- ~~~~~~~~~~~~~~~~~~~~
-- Costs are expected run times in nanoseconds, for time-left stealing:
-- a color is worth stealing when its queued cost exceeds the measured
-- cost of a steal. They are the median run times of each handler, timed
-- with the monotonic clock around every event in a one-worker server
-- under wrk on loopback (2-core x86-64 VM, 1 KiB file, 64 keep-alive
-- connections, then 64 connections closing after each request, then
-- requests for a missing file), rounded:
--
--   ReadRequest 2.1 µs (a recv), ParseRequest 1.1 µs (a ~60-byte head),
--   CheckInCache 0.6 µs (a map lookup and a post), WriteResponse 8.3 µs
--   (a 1.1 KiB send; on loopback it also runs the receiver's side of
--   TCP), Close 14 µs (shutdown, linger set-up, the drain and close),
--   Accept 16 µs per event (accept4 and connection set-up, for the
--   connections it batches), 404 0.3 µs, DecClientAccepted 0.2 µs.
--
-- BadRequest builds its error text, ~1 µs. Their ratios matter more than
-- their values: the runtime compares them with a measured steal cost
-- (a few µs), so a color with just a short event queued is not worth
-- moving, but one with a write, or a read, parse and write, ahead of it
-- is.
--
-- Penalties (Mely §3.3) discourage stealing events whose data is large
-- and long-lived in the cache of the core that queued them. ParseRequest
-- and WriteResponse run right after the read that filled the connection's
-- buffers on the connection's core, so they get penalty 2; the rest touch
-- little data and keep 1. Accept gets priority 1 so that a core runs
-- pending accepts before more requests of already open connections.
hAccept, hRead, hParse, hCache, hWrite, hClose, hDec, hBad, h404, hStop :: Handler
hAccept = (handler "Accept") { handlerCost = 16000, handlerPriority = 1 }
hRead = (handler "ReadRequest") { handlerCost = 2000 }
hParse = (handler "ParseRequest") { handlerCost = 1000, handlerPenalty = 2 }
hCache = (handler "CheckInCache") { handlerCost = 600 }
hWrite = (handler "WriteResponse") { handlerCost = 8000, handlerPenalty = 2 }
hClose = (handler "Close") { handlerCost = 14000 }
hDec = (handler "DecClientAccepted") { handlerCost = 200 }
hBad = (handler "BadRequest") { handlerCost = 1000 }
h404 = (handler "404") { handlerCost = 300 }
hStop = handler "Stop"

-- | Every handler with its cost (ns), penalty and priority, for reports.
handlerCosts :: [(String, Int, Int, Int)]
handlerCosts = [ (handlerName h, handlerCost h, handlerPenalty h, handlerPriority h)
               | h <- [hAccept, hRead, hParse, hCache, hWrite, hClose, hDec, hBad, h404] ]

------------------------------------------------------------------------------
-- State

-- | A running server.
data Server = Server
  { srvRuntime  :: !Runtime
  , srvConfig   :: !ServerConfig
  , srvCache    :: !Cache
  , srvListener :: !W.Socket
  , srvListenWatch :: !FdWatch
  , srvAddress  :: !SockAddr
  , srvClients  :: !(IORef Int)
    -- ^ Open connections; only Accept and DecClientAccepted change it.
  , srvRefused  :: !(IORef Int)
    -- ^ Connections refused over the limit (Accept only).
  , srvOpen     :: !(IORef (IntMap.IntMap Conn))
    -- ^ The open connections by fd, for 'stopServer' (acceptColor only).
  , srvStopping :: !(IORef Bool)
  , srvAdmission :: !W.Admission
    -- ^ Its reserve fd (Note [Making room under fd pressure] in
    -- "Weft.Net.Internal.Serve"); the limit and eviction are Accept's.
  , srvBackoff  :: !(IORef Int)
    -- ^ The current accept back-off in µs after fd exhaustion; 0 if none.
  , srvEvicted  :: !(IORef Int)
    -- ^ Connections closed to make room in this exhaustion burst.
  }

-- | One connection (Note [Connection state]).
data Conn = Conn
  { connSocket  :: !W.Socket
  , connFd      :: !Fd
  , connColor   :: !Color
  , connWatch   :: !FdWatch
    -- ^ Posts 'readRequest' and 'writeResponse' (Note [Persistent watches]
    -- in "Weft.Color.Internal.Io").
  , connDrained :: !(IORef Bool)
    -- ^ The last receive got less than it asked for, so new bytes will
    -- come with an edge; after a full one, read again before waiting.
  , connInput   :: !(IORef B.ByteString)
    -- ^ Received bytes not yet parsed (Note [Bounded buffering]).
  , connSkip    :: !(IORef Int)
    -- ^ Body bytes still to discard.
  , connOutput  :: !(IORef [B.ByteString])
    -- ^ Bytes not yet sent.
  , connClosing :: !(IORef Bool)
    -- ^ Close once the output is sent.
  , connClosed  :: !(IORef Bool)
  }

-- | The address the server listens on.
serverAddress :: Server -> SockAddr
serverAddress = srvAddress

-- | The server's colored runtime, for its statistics.
serverRuntime :: Server -> Runtime
serverRuntime = srvRuntime

-- | How many connections are open.
serverClients :: Server -> IO Int
serverClients = readIORef . srvClients

-- | How many connections were refused for being over the limit.
serverRefused :: Server -> IO Int
serverRefused = readIORef . srvRefused

------------------------------------------------------------------------------
-- Starting and stopping

-- | Start a runtime, listen on the address (port 0 picks one: see
-- 'serverAddress') and serve the cache until 'stopServer'. Throws an
-- 'IOError' if the address cannot be bound.
startServer :: ServerConfig -> Cache -> SockAddr -> IO Server
startServer cfg0 cache addr = do
  limit <- W.clientLimit (cfgMaxClients cfg0)
  let cfg = cfg0 { cfgMaxClients = limit }
  listener <- W.listen addr
  -- Only its reserve is used: Accept decides when the server is full.
  adm <- W.newAdmission (return False) (return W.Refuse) B.empty
  (`onException` (W.close listener >> W.closeAdmission adm)) $ do
    bound <- W.localAddress listener
    rt <- newRuntime (cfgRuntime cfg)
    srv <- fixIO $ \srv -> do
      lw <- watchSocket rt listener acceptColor
              (hAccept, acceptConnections srv) (hAccept, return ())
      Server rt cfg cache listener lw bound <$> newIORef 0 <*> newIORef 0
        <*> newIORef IntMap.empty <*> newIORef False <*> pure adm <*> newIORef 0 <*> newIORef 0
    post rt acceptColor hAccept (acceptConnections srv)
    return srv

-- | Stop accepting, close every open connection, and stop the runtime once
-- they are closed (waiting at most 2 s for them). Requests in progress are
-- cut off.
stopServer :: Server -> IO ()
stopServer srv = do
  let rt = srvRuntime srv
  post rt acceptColor hStop $ do
    writeIORef (srvStopping srv) True
    W.close (srvListener srv)
    open <- readIORef (srvOpen srv)
    forM_ (IntMap.elems open) $ \c -> post rt (connColor c) hClose (closeConn srv c Abort)
  let wait :: Int -> IO ()
      wait k = do
        n <- readIORef (srvClients srv)
        when (n > 0 && k > 0) (threadDelay 2000 >> wait (k - 1))
  wait 1000
  shutdown rt
  W.closeAdmission (srvAdmission srv)


------------------------------------------------------------------------------
-- Accept

-- | Accept: take up to a batch of pending connections.
--
-- A newcomer over 'cfgMaxClients', or taken into the reserve fd when
-- accept fails for want of fds ('W.acceptOnReserve'), is served only if
-- a connection is closed for it ('cfgEviction', as 'W.acceptAdmitting'
-- does). If one will have aged past the grace
-- soon, the newcomer is held and accepting pauses: a timer posts Accept
-- again to look once more, for at most 'W.admissionPatience' in all;
-- then it is refused with a 503 ('W.refuseClient').
acceptConnections :: Server -> IO ()
acceptConnections srv = do
  stopping <- readIORef (srvStopping srv)
  unless stopping $ go (cfgAcceptBatch (srvConfig srv))
  where
    rt = srvRuntime srv
    listener = srvListener srv
    adm = srvAdmission srv
    go 0 = post rt acceptColor hAccept (acceptConnections srv)
    go k = do
      r <- try (W.tryAccept listener)
      case r of
        Right Nothing -> do
          resumed
          rearmRead (srvListenWatch srv)
        Right (Just (s, _)) -> do
          resumed
          goOn <- admit overLimit s 0
          when goOn (go (k - 1))
        Left e
          -- The connection failed before it was accepted; Linux also
          -- passes pending network errors on through accept. Skip it.
          | errnoIn e skippable -> go (k - 1)
          | W.outOfFds e -> do
              exhausted e
              got <- W.acceptOnReserve adm listener
              case got of
                W.ReservedClient s _ -> do
                  goOn <- admit (not <$> W.refillReserve adm) s 0
                  when goOn (go (k - 1))
                W.NoneWaiting -> rearmRead (srvListenWatch srv)
                W.ReserveOut -> backOff
          | otherwise -> do
              stopping <- readIORef (srvStopping srv)
              -- A closed listener is how a stop looks from here.
              unless stopping $ do
                hPutStrLn stderr ("weft-sws: accept failed, no longer accepting: " ++ show e)
    overLimit = (>= cfgMaxClients (srvConfig srv)) <$> readIORef (srvClients srv)
    -- Out of fds with the reserve out too: open connections keep being
    -- served, and accepting resumes after a pause (1 ms, doubling to
    -- 100 ms) on a timer, which posts Accept again. Meanwhile a stalled
    -- or idle connection is closed at each step, if there is one, to
    -- free an fd.
    backOff = do
      evict
      old <- readIORef (srvBackoff srv)
      let delay = if old <= 1 then 1000 else min 100000 (2 * old)
      writeIORef (srvBackoff srv) delay
      later delay (acceptConnections srv) (return ())
    exhausted e = do
      old <- readIORef (srvBackoff srv)
      when (old == 0) $ do
        hPutStrLn stderr ("weft-sws: accept: " ++ ioe_description e ++ "; open connections are still served")
        writeIORef (srvBackoff srv) 1
    resumed = do
      old <- readIORef (srvBackoff srv)
      when (old /= 0) $ do
        writeIORef (srvBackoff srv) 0
        evicted <- readIORef (srvEvicted srv)
        writeIORef (srvEvicted srv) 0
        hPutStrLn stderr ("weft-sws: accept: resumed" ++ (if evicted > 0
          then " (closed " ++ show evicted ++ " stalled or idle connections)" else ""))
    -- Run an Accept-colored action after a delay (µs); if the runtime is
    -- gone by then, the other one.
    later delay act gone = do
      mgr <- T.getSystemTimerManager
      void $ T.registerTimeout mgr delay $
        post rt acceptColor hAccept act `catch` \RuntimeClosed -> gone
    -- Serve a newcomer, or make room for it while the server is full
    -- (@full@ tells whether it still is); whether this Accept goes on
    -- (not if the newcomer is held).
    admit :: IO Bool -> W.Socket -> Int -> IO Bool
    admit full s waited = do
      isFull <- full
      if not isFull then serve s >> return True else do
        victim <- chooseVictim
        case victim of
          W.CloseFor c -> closeFor c >> serve s >> return True
          W.WaitFor ns | waited < W.admissionPatience -> do
            let us = W.admissionWait ns
            later us (held full s (waited + us)) (W.close s)
            return False
          _ -> do
            modifyIORef' (srvRefused srv) (+ 1)
            W.refuseClient refusal s
            _ <- W.refillReserve adm
            return True
    chooseVictim = do
      open <- IntMap.elems <$> readIORef (srvOpen srv)
      W.chooseVictim (cfgEviction (srvConfig srv)) [ (connSocket c, c) | c <- open ]
    evict = chooseVictim >>= mapM_ closeFor
    closeFor c = do
      post rt (connColor c) hClose (closeConn srv c Abort)
      modifyIORef' (srvEvicted srv) (+ 1)
    refusal = responseBytes CloseAfter serviceUnavailable
    held full s waited = do
      stopping <- readIORef (srvStopping srv)
      if stopping then W.close s else do
        goOn <- admit full s waited
        when goOn (acceptConnections srv)
    serve s = do
      _ <- W.refillReserve adm
      n <- readIORef (srvClients srv)
      made <- try (newConn srv s)
      case made of
        Left (_ :: IOException) -> W.close s
        Right c -> do
          writeIORef (srvClients srv) (n + 1)
          modifyIORef' (srvOpen srv) (IntMap.insert (fdInt (connFd c)) c)
          setUp c `catch` \(_ :: IOException) -> return ()
          -- The request often arrives with the connection: try to
          -- read it at once rather than wait for readiness first.
          post rt (connColor c) hRead (readRequest srv c)
    skippable = [ eCONNABORTED, ePROTO, ePERM, eNETDOWN, eNOPROTOOPT, eHOSTDOWN, eNONET
                , eHOSTUNREACH, eOPNOTSUPP, eNETUNREACH ]
    setUp c = do
      W.setNoDelay (connSocket c) True
      W.trackProgress (connSocket c)
      when (cfgIdleTimeout (srvConfig srv) > 0) $ do
        W.setMinimumReceive (connSocket c) (cfgMinReceive (srvConfig srv))
        W.setIdleTimeout (connSocket c) (cfgIdleTimeout (srvConfig srv))

-- | A connection and its watch; throws an 'IOError' if the socket cannot
-- be watched.
newConn :: Server -> W.Socket -> IO Conn
newConn srv s = fixIO $ \c -> do
  w <- watchSocket (srvRuntime srv) s (fdInt fd) (hRead, readRequest srv c) (hWrite, writeResponse srv c)
  Conn s fd (fdInt fd) w <$> newIORef False <*> newIORef B.empty <*> newIORef 0
    <*> newIORef [] <*> newIORef False <*> newIORef False
  where fd = W.socketFd s

-- | DecClientAccepted: a connection is gone.
decClients :: Server -> Conn -> IO ()
decClients srv c = do
  modifyIORef' (srvClients srv) (subtract 1)
  -- Its fd may already belong to a newer connection, accepted between the
  -- close and this event: remove the entry only if it is this one.
  modifyIORef' (srvOpen srv) (IntMap.update (\o -> if connClosed o == connClosed c then Nothing else Just o)
                                            (fdInt (connFd c)))

------------------------------------------------------------------------------
-- Serving a connection

-- | Run a connection's handler body unless the connection is closed; an
-- exception closes the connection (a reset or a broken pipe quietly,
-- anything else with a report), so no connection is ever leaked.
step :: Server -> Conn -> IO () -> IO ()
step srv c body = do
  closed <- readIORef (connClosed c)
  unless closed $ body `catch` \(e :: SomeException) -> do
    case fromException e of
      Just (_ :: IOException) -> return ()
      Nothing -> hPutStrLn stderr ("weft-sws: connection on fd " ++ show (connFd c) ++ ": " ++ show e)
    closeConn srv c Abort

-- | Post the next event of a connection.
next :: Server -> Conn -> Handler -> (Server -> Conn -> IO ()) -> IO ()
next srv c h body = post (srvRuntime srv) (connColor c) h (body srv c)
{-# INLINE next #-}

-- | ReadRequest: receive what is there, or wait for it.
readRequest :: Server -> Conn -> IO ()
readRequest srv c = step srv c $ do
  r <- W.tryRecv (connSocket c) readSize
  writeIORef (connDrained c) (maybe True ((< readSize) . B.length) r)
  case r of
    Nothing -> awaitReadable srv c
    Just chunk
      -- End of stream. Input never holds a complete request when we read
      -- (Note [Bounded buffering]), so there is nothing left to answer:
      -- an unfinished request is dropped.
      | B.null chunk -> closeConn srv c Abort
      | otherwise -> do
          skip <- readIORef (connSkip c)
          if skip >= B.length chunk
            then do
              writeIORef (connSkip c) (skip - B.length chunk)
              next srv c hRead readRequest
            else do
              writeIORef (connSkip c) 0
              modifyIORef' (connInput c) (<> B.drop skip chunk)
              next srv c hParse parseRequestEvent

-- | Wait until the connection is readable, then ReadRequest. After a
-- receive that filled its buffer, bytes may be waiting that no edge will
-- announce, so that case reads again at once instead.
awaitReadable :: Server -> Conn -> IO ()
awaitReadable srv c = do
  drained <- readIORef (connDrained c)
  if drained
    then W.awaitingPeer (connSocket c) >> rearmRead (connWatch c)
    else next srv c hRead readRequest

-- | Bytes asked of each receive.
readSize :: Int
readSize = 4096

-- | ParseRequest: take one request head off the input.
parseRequestEvent :: Server -> Conn -> IO ()
parseRequestEvent srv c = step srv c $ do
  buf <- readIORef (connInput c)
  case parseRequest (cfgLimits (srvConfig srv)) buf of
    NeedMore -> next srv c hRead readRequest
    ParseError err -> next srv c hBad (\s k -> badRequest s k err)
    Parsed req used -> do
      let rest = B.drop used buf
          body = requestBodyLength req
      if B.length rest >= body
        then writeIORef (connInput c) (B.drop body rest)
        else writeIORef (connInput c) B.empty >> writeIORef (connSkip c) (body - B.length rest)
      let persistence
            | not (requestKeepAlive req) = CloseAfter
            | requestMinorVersion req == 0 = KeepAlive10
            | otherwise = KeepAlive11
      if requestMethod req == "GET"
        then next srv c hCache (\s k -> checkInCache s k (requestTarget req) persistence)
        -- Error management, like BadRequest, but the request was framed,
        -- so the connection can go on.
        else next srv c hBad (\s k -> step s k (respond s k persistence methodNotAllowed))

-- | CheckInCache: find the prebuilt response for the target.
checkInCache :: Server -> Conn -> B.ByteString -> Persistence -> IO ()
checkInCache srv c target persistence = step srv c $
  case lookupTarget (srvCache srv) target of
    Found r -> respond srv c persistence r
    NotCached -> next srv c h404 (\s k -> step s k (respond s k persistence notFound))
    BadTarget -> next srv c hBad (\s k -> badRequest s k (BadRequest "invalid request target"))

-- | BadRequest: answer a request that cannot be served with its error
-- status, then close (the input cannot be trusted to frame another).
badRequest :: Server -> Conn -> HttpError -> IO ()
badRequest srv c err = step srv c $ do
  writeIORef (connInput c) B.empty
  modifyIORef' (connOutput c) (++ [errorResponse err])
  writeIORef (connClosing c) True
  next srv c hWrite writeResponse

-- | Queue a response and post WriteResponse.
respond :: Server -> Conn -> Persistence -> Response -> IO ()
respond srv c persistence r = do
  modifyIORef' (connOutput c) (++ render persistence r)
  when (persistence == CloseAfter) $ writeIORef (connClosing c) True
  next srv c hWrite writeResponse

-- | WriteResponse: send what the socket takes; wait for room if it fills.
writeResponse :: Server -> Conn -> IO ()
writeResponse srv c = step srv c $ do
  out <- readIORef (connOutput c)
  r <- W.trySendMany (connSocket c) out
  case r of
    Nothing -> awaitWritable
    Just sent -> do
      let rest = W.dropBytes sent out
      writeIORef (connOutput c) rest
      if not (null rest) then awaitWritable else do
        closing <- readIORef (connClosing c)
        pending <- readIORef (connInput c)
        if closing then next srv c hClose (\s k -> closeConn s k Graceful)
          -- Pipelined requests are already here.
          else if not (B.null pending) then next srv c hParse parseRequestEvent
          -- A keep-alive client sends its next request only after reading
          -- this response, so a receive now would almost always find
          -- nothing: wait for readiness straight away.
          else awaitReadable srv c
  where
    awaitWritable = rearmWrite (connWatch c)

------------------------------------------------------------------------------
-- Close

-- | How a connection ends.
data Closing
  = Abort
    -- ^ At once: the peer is gone or finished, or the server stops.
  | Graceful
    -- ^ After a last response: shut the sending side, then drain what the
    -- peer still sends until it closes, for at most 'lingerMicros' and
    -- 'W.lingerBytes' in all. Closing with unread input would make the
    -- kernel send a reset, which can destroy that response before the
    -- peer reads it (a 431 to a head that is still arriving, say).

lingerMicros :: Int
lingerMicros = 1000000

-- | Close: end the connection (idempotent). A graceful close hands the
-- socket to 'lingerClose', which closes it after the drain; the
-- connection counts as closed from the start, so that its other events
-- do nothing.
closeConn :: Server -> Conn -> Closing -> IO ()
closeConn srv c how = do
  closed <- readIORef (connClosed c)
  unless closed $ do
    writeIORef (connClosed c) True
    writeIORef (connOutput c) []
    writeIORef (connInput c) B.empty
    let gone = post (srvRuntime srv) acceptColor hDec (decClients srv c)
    case how of
      Abort -> W.close (connSocket c) >> gone
      Graceful -> lingerClose (connWatch c) (connSocket c) lingerMicros gone

------------------------------------------------------------------------------
-- Helpers

fdInt :: Fd -> Int
fdInt (Fd n) = fromIntegral n

errnoIn :: IOException -> [Errno] -> Bool
errnoIn e errs = maybe False (\n -> Errno n `elem` errs) (ioe_errno e)
