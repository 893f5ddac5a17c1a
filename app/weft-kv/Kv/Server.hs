{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | weft-kv's server: connections and commands as colored events on a
-- "Weft.Color" runtime.
--
-- A connection's I/O (reading, decoding, ordering and writing replies)
-- runs as events of the connection's color, derived from its fd; each
-- command runs as an event of its key's color ("Kv.Store"). Nothing in
-- the server takes a lock: every piece of mutable state belongs to one
-- color. Handlers never block: sockets are non-blocking, and a read or
-- write that would block continues when the connection's 'FdWatch' posts
-- it (an edge-triggered watch registered once, so a wait costs no
-- @epoll_ctl@).
module Kv.Server
  ( ServerConfig (..)
  , defaultServerConfig
  , keyColorsFor
  , runServer
  ) where

import Control.Exception hiding (Handler)
import Control.Monad
import Data.Bits ((.&.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.IntMap.Strict as IntMap
import Data.IORef
import Data.Maybe (isJust)
import Data.Primitive.PrimArray (newPrimArray, setPrimArray)
import System.IO (hPutStrLn, stderr)
import Foreign.C.Types (CInt)
import Network.Socket (SockAddr)
import System.Posix.Types (Fd (..))

import Weft.Color (Handler, RuntimeClosed (..), handler, post, rearmRead, rearmWrite)
import qualified Weft.Color as Color
import qualified Weft.Net as Net
import Weft.Timer (getSystemTimerManager, registerTimeout)

import Kv.Batch
import Kv.Conn
import Kv.Out
import Kv.Request
import Kv.Gate (newGates)
import Kv.Store (newStore, storeColors)
import Kv.Transaction (abandonTransaction)

-- | How 'runServer' runs.
data ServerConfig = ServerConfig
  { serverLimits  :: !Limits
    -- ^ What a connection may send (the bulk-string limit among them).
  , serverRuntime :: !Color.Config
    -- ^ The colored runtime's configuration (policy, workers).
  , serverOnReady :: SockAddr -> IO ()
    -- ^ Called with the bound address once listening.
  , serverTimeout :: !Int
    -- ^ Microseconds a client may stay silent before its connection is
    -- closed, as redis's @timeout@; 0 (the default, as redis's) for never.
  , serverMinReceive :: !Int
    -- ^ Received bytes that count as activity against the timeout
    -- ('Net.setMinimumReceive'; default 1 KiB), so a command trickled in
    -- more slowly does not keep a connection.
  , serverOutputLimit :: !Int
    -- ^ Bytes of replies a connection may have waiting to be sent
    -- (default 64 MiB; 0 for no limit). A connection over it is closed at
    -- once, as redis's @client-output-buffer-limit@ closes a client over
    -- its hard limit (Note [Output limits]).
  , serverSendStall :: !Int
    -- ^ Microseconds a connection's waiting replies may go without the
    -- client taking a byte of them before the connection is closed
    -- (default 60 s, redis's soft-limit seconds; 0 for never).
  , serverMaxClients :: !Int
    -- ^ Clients served at once at most, as redis's @maxclients@; a client
    -- beyond them is answered @-ERR max number of clients reached@ and
    -- closed. 0 (the default): the soft @RLIMIT_NOFILE@ less
    -- 'Net.reservedFds', as redis derives it.
  , serverEviction :: !Net.Eviction
    -- ^ Which established client a full server may close for a newcomer
    -- (Note [Making room under fd pressure] in "Weft.Net.Internal.Serve").
    -- Default 'Net.EvictNone', as redis: an idle client is normal, and only
    -- its timeout ends it. 'Net.EvictStalled' closes a client stalled in
    -- the middle of a command or not reading its replies.
  , serverKeyColors :: !Int
    -- ^ How many colors keys spread over (Note [One store per color] in
    -- "Kv.Store"): a power of two up to 65536, or 0 (the default) for
    -- 'keyColorsFor' the runtime's cores. A read's commands cost an
    -- event per key color they touch, so fewer colors batch a pipeline of
    -- unrelated keys into fewer events; more give the runtime a finer
    -- grain to steal.
  }

-- | The key colors of the default: one per core of the runtime, as a
-- power of two (1 on one core, 2 on two, 4 on three or four), at most
-- 65536: every core has a key color to run, and a read's commands on
-- unrelated keys cost as few events as the cores allow (docs/benchmarks.md,
-- "weft-kv with random keys"). More colors give the runtime a finer
-- grain to steal, at an event per color a read touches.
keyColorsFor :: Int -> Int
keyColorsFor cores = min 65536 (until (>= max 1 cores) (* 2) 1)

-- | 'defaultLimits', 'Color.defaultConfig', nothing on ready, no timeout
-- (1 KiB of minimum receive once one is set), 64 MiB of waiting replies
-- at most, and 60 s for a client to take some of them.
defaultServerConfig :: ServerConfig
defaultServerConfig = ServerConfig defaultLimits Color.defaultConfig (\_ -> return ()) 0 1024 (64 * 1048576) 60000000 0
                                  Net.EvictNone 0

-- | Serve the Redis protocol on the address until this thread is killed;
-- then stop accepting, let the runtime finish the events it accepted, and
-- close the connections still open. Throws an 'IOError' if the address
-- cannot be bound.
runServer :: ServerConfig -> SockAddr -> IO ()
runServer cfg addr = do
  rt <- Color.newRuntime (serverRuntime cfg)
  store <- newStore (if serverKeyColors cfg > 0 then serverKeyColors cfg else keyColorsFor (Color.runtimeCores rt))
  live <- newIORef IntMap.empty
  ids <- newIORef 1
  gates <- newGates (storeColors store)
  let env = Env rt store (serverLimits cfg) live ids (serverTimeout cfg, serverMinReceive cfg)
                (serverOutputLimit cfg) (serverSendStall cfg) gates (resultsArrived env)
  limit <- Net.clientLimit (serverMaxClients cfg)
  let full = (>= limit) . IntMap.size <$> readIORef live
  (bracket (Net.listen addr) Net.close $ \l -> do
      serverOnReady cfg =<< Net.localAddress l
      bracket (Net.newAdmission full (evict env) maxClientsReached) Net.closeAdmission $ \adm ->
        forever (Net.acceptAdmitting adm l >>= adopt env))
    `finally` (Color.shutdown rt >> closeRemaining live)
  where
    -- A victim leaves the open ones at once (so the newcomer counts in
    -- its place) and is closed on its color.
    evict env = do
      conns <- IntMap.elems <$> readIORef (envLive env)
      victim <- Net.chooseVictim (serverEviction cfg) [ (connSocket c, c) | c <- conns ]
      forM_ victim $ \c -> do
        forget env c
        post (envRuntime env) (connColor c) hEvict (closeConn env c) `catch` \RuntimeClosed -> closeConn env c
      return (() <$ victim)
    closeRemaining live = do
      conns <- atomicModifyIORef' live (\m -> (IntMap.empty, IntMap.elems m))
      forM_ conns (Net.close . connSocket)

-- Note [Output limits]
-- ~~~~~~~~~~~~~~~~~~~~~
-- Pausing the reads bounds what a client can make the server buffer by
-- pipelining ('maxOutBytes', Note [Reply order] in "Kv.Conn"), but not by what its
-- commands answer: the commands already read may each reply with a large
-- value or collection, and a client that never reads keeps its waiting
-- replies forever. So, as redis's @client-output-buffer-limit@ does for
-- the clients it limits:
--
-- * a connection whose waiting replies exceed 'serverOutputLimit' bytes
--   (64 MiB) is closed at once, replies dropped;
--
-- * a connection whose socket took no byte for 'serverSendStall' (60 s)
--   while replies wait is closed: a timer armed when a send first leaves
--   replies behind checks, on the connection's color, whether 'sentCount'
--   moved since, and re-arms while replies still wait.
--
-- Each closure is logged on stderr, with the client's address, as redis
-- logs one. A client that reads its replies, however slowly, meets
-- neither limit: pipelining more than the pause threshold only pauses.

-- Note [Replies after the reads]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A read's commands may all be answered within its event (Note [Work on
-- the connection's color] in "Kv.Batch"), but the replies are not sent
-- there: the read posts a 'settle' event to its color instead, which runs
-- after the events already waiting there, the reads of the other
-- connections that became readable with it. Sent at once, each reply
-- would find its client asleep, waiting for it, and each send would pay
-- for waking the client (on loopback, most of the server's system time);
-- sent after the other reads, the replies go out together while the
-- client is busy with the first of them, as redis sends its replies when
-- its loop has read every ready client.

-- | Send when this much output is waiting, even with replies outstanding.
flushBytes :: Int
flushBytes = 65536

-- | Stop reading at this many outstanding commands...
maxInFlight :: Int
maxInFlight = 4096

-- | ...or this many unsent bytes.
maxOutBytes :: Int
maxOutBytes = 1048576

-- | Bytes read per recv.
chunkSize :: Int
chunkSize = 16384

-- | At most this many full chunks are read per readable event, so that a
-- fast sender does not keep its color (and core) to itself.
chunksPerEvent :: Int
chunksPerEvent = 4

-- | ...for at most this many microseconds.
lingerMicros :: Int
lingerMicros = 1000000

hRead, hWrite, hStall, hEvict, hSettle :: Handler
hRead = handler "kv-read"
hSettle = handler "kv-settle"
hWrite = handler "kv-write"
hStall = handler "kv-stall"
hEvict = handler "kv-evict"

------------------------------------------------------------------------------
-- Connections

-- | Take over an accepted connection (on the acceptor's thread): own its
-- fd, and read from it on its color.
adopt :: Env -> (Net.Socket, SockAddr) -> IO ()
adopt env (sock, peer) = do
  Net.setNoDelay sock True `catch` \(_ :: IOException) -> return ()
  Net.trackProgress sock
  let (timeout, minReceive) = envTimeout env
  -- An expired timeout shuts the socket down: its next receive is Broken.
  when (timeout > 0) $ do
    Net.setMinimumReceive sock minReceive
    Net.setIdleTimeout sock timeout
  let Fd fd = Net.socketFd sock
      color = fdColor (storeColors (envStore env)) fd
  -- The watch's bodies need the connection, which needs the watch.
  rec <- newIORef (error "weft-kv: a watch fired before its connection existed")
  let onRead = readIORef rec >>= readable env
      onWrite = readIORef rec >>= writable env
  w <- try (Color.watchSocket (envRuntime env) sock color (hRead, onRead) (hWrite, onWrite))
  case w of
    Left (_ :: IOException) -> Net.close sock
    Right fw -> do
      counts <- newPrimArray 3
      setPrimArray counts 0 3 0
      cid <- atomicModifyIORef' (envNextId env) (\i -> (i + 1, i))
      c <- Conn sock peer fw color cid <$> newIORef B.empty <*> newIORef newDecoder <*> pure counts
             <*> newIORef IntMap.empty <*> newOut <*> newIORef False <*> newIORef Open
             <*> newIORef True <*> newIORef False <*> newIORef False <*> newIORef noneHeld
             <*> newIORef Nothing <*> newIORef [] <*> newIORef Nothing <*> newIORef Nothing
      writeIORef rec c
      atomicModifyIORef' (envLive env) (\m -> (IntMap.insert cid c m, ()))
      post (envRuntime env) color hRead (readable env c) `catch` \RuntimeClosed -> closeConn env c

-- | What a client beyond 'serverMaxClients' is told, as redis tells it.
maxClientsReached :: ByteString
maxClientsReached = B.pack (map (fromIntegral . fromEnum) "-ERR max number of clients reached\r\n")

-- | A connection's color: one of the key colors (of which there are a
-- power of two), by its fd, spread over them (an odd multiplier, so
-- consecutive fds alternate home cores). A key color, so that its
-- commands on keys of that color run in its own event (Note [Work on the
-- connection's color] in "Kv.Batch").
fdColor :: Int -> CInt -> Int
fdColor colors fd = (fromIntegral fd * 40503) .&. (colors - 1)

-- | The connection is readable (or was just adopted).
readable :: Env -> Conn -> IO ()
readable env c = do
  writeIORef (connReading c) False
  writeIORef (connDrained c) False
  phase <- readIORef (connPhase c)
  case phase of
    Open -> readChunks chunksPerEvent
    _ -> return ()
  where
    readChunks :: Int -> IO ()
    readChunks k = do
      r <- recvChunk (connSocket c)
      case r of
        Got bs -> do
          dec <- readIORef (connDecoder c)
          let Decoded cmds next = feed (envLimits env) dec bs
              new = Held cmds 0 (either (\(ProtocolError msg) -> Just msg) (const Nothing) next) False
          held <- readIORef (connHeld c)
          ended <- if holding held then False <$ writeIORef (connHeld c) (held `andThen` new)
                   else dispatch env c new
          held' <- holding <$> readIORef (connHeld c)
          case next of
            _ | ended -> finish True
            -- The error is an item, answered in its turn; no more input.
            Left _ -> finish True
            Right dec' -> do
              writeIORef (connDecoder c) dec'
              let full = B.length bs == chunkSize
              if full && k > 1 && not held' then readChunks (k - 1) else do
                unless full (writeIORef (connDrained c) True)
                settleLater
        Again -> writeIORef (connDrained c) True >> settleLater
        Ended -> finish False
        Broken -> closeConn env c
    -- Behind the events already waiting on the color: the other
    -- connections' reads (Note [Replies after the reads]).
    settleLater = post (envRuntime env) (connColor c) hSettle (settle env c) `catch` \RuntimeClosed -> return ()
    finish linger = do
      -- A client whose input ends while it is blocked is gone, as redis
      -- sees it: nothing would take the reply it waits for. (One that
      -- broke the protocol after a blocking command gets its reply first.)
      blocked <- readIORef (connBlocked c)
      case blocked of
        Just _ | not linger -> closeConn env c
        _ -> do
          writeIORef (connPhase c) (Finishing linger)
          settle env c

-- | Results back on the connection's color.
resultsArrived :: Env -> Conn -> [[Result]] -> IO ()
resultsArrived env c batches = do
  phase <- readIORef (connPhase c)
  case phase of
    Closed -> return ()
    _ -> do
      placeResults env c batches
      settle env c

-- | After any change: send what is due, close if finished, and read again
-- if there is room.
settle :: Env -> Conn -> IO ()
settle env c = do
  sendDue
  held <- holding <$> readIORef (connHeld c)
  outstanding <- outstandingCount c
  phase <- readIORef (connPhase c)
  size' <- outWaiting (connOut c)
  writing' <- readIORef (connWriting c)
  case phase of
    Closed -> return ()
    _ | envOutputLimit env > 0 && size' > envOutputLimit env ->
          dropClient env c ("over the output limit of " ++ show (envOutputLimit env) ++ " bytes of waiting replies")
    Open -> do
      reading <- readIORef (connReading c)
      -- A blocked client is read on while what it sent after the blocking
      -- command stays small, so that its close is seen, as redis sees it
      -- (Note [Blocked commands] in "Kv.Batch").
      readOn <- if not held then return True else do
        blocked <- readIORef (connBlocked c)
        Held cmds _ malformed _ <- readIORef (connHeld c)
        return (isJust blocked && null (drop heldReadsWhileBlocked cmds) && malformed == Nothing)
      when (not reading && readOn && outstanding < maxInFlight && size' < maxOutBytes) (armRead env c)
    Finishing linger | outstanding == 0 && not held && size' == 0 && not writing' ->
      if linger then startLinger env c else closeConn env c
    _ -> return ()
  where
    sendDue = do
      resumeHeld env c
      outstanding0 <- outstandingCount c
      size <- outWaiting (connOut c)
      writing <- readIORef (connWriting c)
      -- The send may bring the waiting replies under 'maxOutBytes' with
      -- no writable event to come: the next window starts now, and if it
      -- ran here (Note [Work on the connection's color] in "Kv.Batch"),
      -- its replies are due now. Each round sends, then starts held
      -- commands or finds none; a full socket ends it.
      when (size > 0 && not writing && (outstanding0 == 0 || size >= flushBytes)) $
        flush env c >> sendDue

-- | The most reads a blocked client's held commands may span before its
-- reads pause.
heldReadsWhileBlocked :: Int
heldReadsWhileBlocked = 16

-- | Dispatch the commands held behind a survey or a dispatch window once
-- nothing is outstanding and the waiting replies are below 'maxOutBytes'
-- (Note [Store-wide commands] in "Kv.Batch").
resumeHeld :: Env -> Conn -> IO ()
resumeHeld env c = do
  held <- readIORef (connHeld c)
  -- The common case, on every 'settle': nothing held, nothing more read.
  when (holding held) $ do
    outstanding <- outstandingCount c
    phase <- readIORef (connPhase c)
    let live = case phase of Open -> True; Finishing _ -> True; _ -> False
    size <- outWaiting (connOut c)
    -- Replies waiting to be sent hold back the next window too (Note
    -- [Back-pressure on large replies] in "Kv.Conn").
    when (live && outstanding == 0 && size < maxOutBytes) $ do
      writeIORef (connHeld c) noneHeld
      ended <- dispatch env c held
      -- The commands may all have run on this color (Note [Work on the
      -- connection's color] in "Kv.Batch"), with the rest held again.
      if ended then writeIORef (connPhase c) (Finishing True) else resumeHeld env c

-- | Send the output; on a full socket buffer, keep the rest and continue
-- when writable.
flush :: Env -> Conn -> IO ()
flush env c = do
  chunks <- outChunks (connOut c)
  r <- sendChunks (connSocket c) chunks
  case r of
    Left () -> closeConn env c
    Right sent -> do
      outSent (connOut c) sent
      addCount c sentCount sent
      left <- outWaiting (connOut c)
      when (left > 0) $ do
        writeIORef (connWriting c) True
        armStall env c
        watch env c (rearmWrite (connWatch c))

-- | The socket takes output again.
writable :: Env -> Conn -> IO ()
writable env c = do
  writing <- readIORef (connWriting c)
  writeIORef (connWriting c) False
  phase <- readIORef (connPhase c)
  case phase of
    Closed -> return ()
    _ | not writing -> return ()
    _ -> do
      size <- outWaiting (connOut c)
      when (size > 0) (flush env c)
      settle env c

-- | Read again: wait for an edge if the last read drained the socket,
-- else read at once, as no edge will announce the data left (Note
-- [Persistent watches] in "Weft.Color.Internal.Io").
armRead :: Env -> Conn -> IO ()
armRead env c = do
  writeIORef (connReading c) True
  drained <- readIORef (connDrained c)
  if drained
    -- A short read ends a read as EAGAIN would, and says as much for the
    -- eviction policy (Note [What a connection waits for] in
    -- "Weft.Net.Internal.Socket").
    then Net.awaitingPeer (connSocket c) >> watch env c (rearmRead (connWatch c))
    else post (envRuntime env) (connColor c) hRead (readable env c)
           `catch` \RuntimeClosed -> closeConn env c

-- | Arm the stall check, unless armed (Note [Output limits]).
armStall :: Env -> Conn -> IO ()
armStall env c = do
  armed <- readIORef (connStall c)
  unless (armed || envSendStall env <= 0) $ do
    writeIORef (connStall c) True
    mark <- getCount c sentCount
    mgr <- getSystemTimerManager
    let check = post (envRuntime env) (connColor c) hStall (stalled mark) `catch` \RuntimeClosed -> return ()
    void (registerTimeout mgr (envSendStall env) check)
  where
    stalled mark = do
      writeIORef (connStall c) False
      phase <- readIORef (connPhase c)
      writing <- readIORef (connWriting c)
      sent <- getCount c sentCount
      case phase of
        Closed -> return ()
        _ | not writing -> return ()
          | sent == mark -> dropClient env c
              ("not reading its replies for " ++ show (envSendStall env `quot` 1000) ++ " ms")
          | otherwise -> armStall env c

-- | Close a connection that broke an output limit, and say so.
dropClient :: Env -> Conn -> String -> IO ()
dropClient env c why = do
  hPutStrLn stderr ("weft-kv: closing the client at " ++ show (connPeer c) ++ ", " ++ why)
  closeConn env c

-- | Rearm the watch; an fd that cannot be watched any more is closed.
watch :: Env -> Conn -> IO () -> IO ()
watch env c arm = arm `catch` \(_ :: IOException) -> closeConn env c

-- | All replies are out after our decision to close: close gracefully,
-- discarding the peer's input for at most 'lingerMicros'
-- ('Color.lingerClose').
startLinger :: Env -> Conn -> IO ()
startLinger env c = do
  writeIORef (connPhase c) Lingering
  Color.lingerClose (connWatch c) (connSocket c) lingerMicros (forget env c)

-- | Close the connection (idempotent), lingering or not. Closing through
-- weft's managers ends the watch, so no event of it is posted any more;
-- events already posted find the connection 'Closed'.
closeConn :: Env -> Conn -> IO ()
closeConn env c = do
  phase <- readIORef (connPhase c)
  case phase of
    Closed -> return ()
    _ -> do
      writeIORef (connPhase c) Closed
      abandonBlock env c
      abandonTransaction env c
      outClear (connOut c)
      writeIORef (connEarly c) IntMap.empty
      forget env c
      Net.close (connSocket c)

-- | Take the connection out of the open ones.
forget :: Env -> Conn -> IO ()
forget env c = atomicModifyIORef' (envLive env) (\m -> (IntMap.delete (connId c) m, ()))

------------------------------------------------------------------------------
-- Non-blocking socket calls

data Received = Got !ByteString | Again | Ended | Broken

-- | One non-blocking receive of up to 'chunkSize' bytes.
recvChunk :: Net.Socket -> IO Received
recvChunk sock = do
  r <- try (Net.tryRecv sock chunkSize)
  return $ case r of
    Right (Just bs) | B.null bs -> Ended
                    | otherwise -> Got bs
    Right Nothing -> Again
    Left (_ :: IOException) -> Broken

-- | Send as much of the chunks as the socket takes now (gather writes,
-- no copying): the byte count, or 'Left' if the connection is broken.
sendChunks :: Net.Socket -> [ByteString] -> IO (Either () Int)
sendChunks sock = go 0
  where
    go !sent [] = return (Right sent)
    go !sent chunks = do
      r <- try (Net.trySendMany sock chunks)
      case r of
        Left (_ :: IOException) -> return (Left ())
        Right Nothing -> return (Right sent)
        Right (Just 0) -> return (Right sent)
        -- One gather write takes at most 1024 strings: go on while it
        -- takes everything offered.
        Right (Just k) -> go (sent + k) (Net.dropBytes k chunks)
