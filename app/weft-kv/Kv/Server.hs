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
  , runServer
  ) where

import Control.Exception hiding (Handler)
import Control.Monad
import Control.Monad.Primitive (RealWorld)
import Data.Bits ((.&.))
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.IntMap.Strict as IntMap
import Data.IORef
import Data.Primitive.PrimArray (MutablePrimArray, newPrimArray, readPrimArray, setPrimArray, writePrimArray)
import Data.Maybe (isJust)
import System.IO (hPutStrLn, stderr)
import Foreign.C.Types (CInt)
import Network.Socket (SockAddr)
import System.Posix.Types (Fd (..))

import Weft.Color (FdWatch, Handler, Runtime, RuntimeClosed (..), handler, post, rearmRead, rearmWrite)
import qualified Weft.Color as Color
import qualified Weft.Net as Net
import Weft.Timer (TimeoutKey, getSystemTimerManager, registerTimeout)

import Kv.Command
import Kv.Plan (ok)
import Kv.Resp
import Kv.Store

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
  }

-- | 'defaultLimits', 'Color.defaultConfig', nothing on ready, no timeout
-- (1 KiB of minimum receive once one is set), 64 MiB of waiting replies
-- at most, and 60 s for a client to take some of them.
defaultServerConfig :: ServerConfig
defaultServerConfig = ServerConfig defaultLimits Color.defaultConfig (\_ -> return ()) 0 1024 (64 * 1048576) 60000000

-- | Serve the Redis protocol on the address until this thread is killed;
-- then stop accepting, let the runtime finish the events it accepted, and
-- close the connections still open. Throws an 'IOError' if the address
-- cannot be bound.
runServer :: ServerConfig -> SockAddr -> IO ()
runServer cfg addr = do
  rt <- Color.newRuntime (serverRuntime cfg)
  store <- newStore
  live <- newIORef IntMap.empty
  let env = Env rt store (serverLimits cfg) live (serverTimeout cfg, serverMinReceive cfg)
                (serverOutputLimit cfg) (serverSendStall cfg)
  (bracket (Net.listen addr) Net.close $ \l -> do
      serverOnReady cfg =<< Net.localAddress l
      forever (Net.acceptMakingRoom (makeRoom env) l >>= adopt env))
    `finally` (Color.shutdown rt >> closeRemaining live)
  where
    closeRemaining live = do
      conns <- atomicModifyIORef' live (\m -> (IntMap.empty, IntMap.elems m))
      forM_ conns (Net.close . connSocket)

------------------------------------------------------------------------------
-- State

-- | What every event of the server shares; all of it immutable or, for
-- the connection table, touched only when connections come and go.
data Env = Env
  { envRuntime :: !Runtime
  , envStore   :: !Store
  , envLimits  :: !Limits
  , envLive    :: !(IORef (IntMap.IntMap Conn))
    -- ^ Open connections by fd, for closing them at shutdown.
  , envTimeout :: !(Int, Int)
    -- ^ The idle timeout and minimum receive ('serverTimeout').
  , envOutputLimit :: !Int
  , envSendStall :: !Int
  }

-- | A connection. Every field is read and written only by events of
-- 'connColor' (the acceptor creates it before the first such event).
data Conn = Conn
  { connSocket  :: !Net.Socket
  , connPeer    :: !SockAddr
  , connWatch   :: !FdWatch
  , connColor   :: !Int
  , connDecoder :: !(IORef Decoder)
  , connCounts  :: !(MutablePrimArray RealWorld Int)
    -- ^ Unboxed counts, updated for every command and reply: 'seqCount',
    -- 'nextCount', 'outSizeCount' and 'sentCount'.
  , connEarly   :: !(IORef (IntMap.IntMap Early))
    -- ^ Replies that came before their turn, and multi-key commands
    -- being joined, by sequence number.
  , connOut     :: !(IORef [ByteString])
    -- ^ Replies in their turn, not yet sent (latest first).
  , connStall   :: !(IORef Bool)
    -- ^ A stall check is armed.
  , connPhase   :: !(IORef Phase)
  , connReading :: !(IORef Bool)
    -- ^ A read is coming: the watch is rearmed for it, or it is posted.
  , connDrained :: !(IORef Bool)
    -- ^ The last read got less than it asked for (or @EAGAIN@), so the
    -- next data will announce itself with an edge.
  , connWriting :: !(IORef Bool)
    -- ^ The watch is rearmed for writing (the socket's buffer was full).
  , connHeld    :: !(IORef Held)
    -- ^ Commands decoded but held back behind a survey until the
    -- commands before it have run (Note [Store-wide commands]); reading
    -- pauses while there are any.
  }

-- | A connection's counts ('connCounts'): the sequence number the next
-- command gets; the sequence number of the next reply to send; the bytes
-- of the replies in 'connOut'; the bytes sent so far, which a stall check
-- compares (Note [Output limits]).
seqCount, nextCount, outSizeCount, sentCount :: Int
seqCount = 0
nextCount = 1
outSizeCount = 2
sentCount = 3

getCount :: Conn -> Int -> IO Int
getCount c = readPrimArray (connCounts c)
{-# INLINE getCount #-}

setCount :: Conn -> Int -> Int -> IO ()
setCount c = writePrimArray (connCounts c)
{-# INLINE setCount #-}

addCount :: Conn -> Int -> Int -> IO ()
addCount c i d = getCount c i >>= \v -> setCount c i (v + d)
{-# INLINE addCount #-}

-- | Commands sent but not yet answered in order.
outstandingCount :: Conn -> IO Int
outstandingCount c = (-) <$> getCount c seqCount <*> getCount c nextCount

-- | Commands decoded, in order, and the protocol error that ended the
-- input after them, if any.
data Held = Held [[ByteString]] !(Maybe ByteString)

noneHeld :: Held
noneHeld = Held [] Nothing

-- | Is anything held?
holding :: Held -> Bool
holding (Held cmds malformed) = not (null cmds) || isJust malformed

-- | What was held, then what came after it.
andThen :: Held -> Held -> Held
andThen (Held cmds _) (Held more malformed) = Held (cmds ++ more) malformed

-- | A reply waiting for its turn.
data Early
  = Encoded ![ByteString]
  | Joining !Int !(IntMap.IntMap Reply) ([Reply] -> Reply)
    -- ^ Parts still to come, the parts so far by position, the join.

data Phase
  = Open
    -- ^ Reading commands.
  | Finishing !Bool
    -- ^ No more commands will be read (the peer ended its input, sent
    -- QUIT, or broke the protocol): send the replies still due, then
    -- close, lingering first ('True') if the close is ours.
  | Lingering
    -- ^ Replies sent, and the connection handed to 'Color.lingerClose',
    -- so that unread input does not make the kernel reset the connection
    -- and destroy the last reply.
  | Closed

-- Note [Reply order]
-- ~~~~~~~~~~~~~~~~~~
-- A client may pipeline: send many commands before reading a reply, and
-- it reads the replies in the order of the commands. The commands of one
-- pipeline may hit different keys, hence different colors, which run in
-- any order and in parallel. So the connection gives each command a
-- sequence number ('seqCount') when it decodes it, on the connection's
-- color. The command runs on its key's color (Note [Batches per color]),
-- where its reply is encoded and posted back to the connection's color
-- with that number. There, a
-- reply whose number is 'nextCount' goes to the output ('connOut'),
-- followed by any replies that were waiting for it in 'connEarly'; a reply
-- that comes early waits in 'connEarly'. Replies decided on the
-- connection's color itself (PING, errors) take the same path at once.
-- Both sides of the reorder step run on the connection's color, so it
-- needs no lock, and 'nextCount' only ever grows, one reply at a time.
--
-- Output is sent once nothing is outstanding ('nextCount' has caught up
-- with 'seqCount'), or once it holds 'flushBytes': so a pipeline's replies
-- go out in one send, and a single command's reply goes out at once. A
-- connection stops reading while it has 'maxInFlight' commands
-- outstanding or 'maxOutBytes' unsent, and resumes when below both, so a
-- client that pipelines without reading its replies cannot make the
-- server buffer without bound.

-- Note [Output limits]
-- ~~~~~~~~~~~~~~~~~~~~~
-- Pausing the reads bounds what a client can make the server buffer by
-- pipelining ('maxOutBytes', Note [Reply order]), but not by what its
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

-- Note [Multi-key commands]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- MSET, MGET, DEL and EXISTS name several keys, possibly of several
-- colors. The command takes one sequence number and leaves a 'Joining'
-- entry under it in 'connEarly'; each key's operation runs on its key's
-- color (in that color's event for the batch, Note [Batches per color])
-- and its result goes back with the command's number and the key's
-- position. When the last part arrives (on the connection's color, so
-- again without a lock) the parts, in argument order, are joined into the
-- one reply (a sum, OK, an array), which then takes its turn as in
-- Note [Reply order]. Each key changes atomically, but the command as a
-- whole does not: another client may see some keys of an MSET updated
-- and others not yet. Parts on one key (DEL k k) run in argument order,
-- as they share a color. When all the keys share one color (one key
-- named several times, or keys that hash alike) the command needs no
-- joining: one event of that color runs every part in order and encodes
-- the joined reply, as for a single-key command, and the whole command
-- is then atomic.

-- | Send when this much output is waiting, even with replies outstanding.
flushBytes :: Int
flushBytes = 65536

-- | Output up to this size is sent as one string ('flush').
joinBytes :: Int
joinBytes = 16384

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

hRead, hWrite, hCommand, hReply, hExpire, hClose, hStall :: Handler
hRead = handler "kv-read"
hWrite = handler "kv-write"
hCommand = handler "kv-command"
hReply = handler "kv-reply"
hExpire = handler "kv-expire"
hClose = handler "kv-close"
hStall = handler "kv-stall"

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
      color = fdColor fd
  -- The watch's bodies need the connection, which needs the watch.
  rec <- newIORef (error "weft-kv: a watch fired before its connection existed")
  let onRead = readIORef rec >>= readable env
      onWrite = readIORef rec >>= writable env
  w <- try (Color.watchSocket (envRuntime env) sock color (hRead, onRead) (hWrite, onWrite))
  case w of
    Left (_ :: IOException) -> Net.close sock
    Right fw -> do
      counts <- newPrimArray 4
      setPrimArray counts 0 4 0
      c <- Conn sock peer fw color <$> newIORef newDecoder <*> pure counts
             <*> newIORef IntMap.empty <*> newIORef [] <*> newIORef False <*> newIORef Open
             <*> newIORef True <*> newIORef False <*> newIORef False <*> newIORef noneHeld
      writeIORef rec c
      atomicModifyIORef' (envLive env) (\m -> (IntMap.insert (fromIntegral fd) c m, ()))
      post (envRuntime env) color hRead (readable env c) `catch` \RuntimeClosed -> closeConn env c

-- | Out of fds: close the connections that made the least progress
-- ('Net.leastProgressing'), each on its color; returns how many.
makeRoom :: Env -> IO Int
makeRoom env = do
  conns <- IntMap.elems <$> readIORef (envLive env)
  victims <- Net.leastProgressing [ (connSocket c, c) | c <- conns ]
  forM_ victims $ \c -> post (envRuntime env) (connColor c) hClose (closeConn env c)
    `catch` \RuntimeClosed -> return ()
  return (length victims)

-- | A connection's color: its fd, spread over the color space (an odd
-- multiplier, so consecutive fds alternate home cores).
fdColor :: CInt -> Int
fdColor fd = (fromIntegral fd * 40503) .&. 0xffff

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
              new = Held cmds (either (\(ProtocolError msg) -> Just msg) (const Nothing) next)
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
                settle env c
        Again -> writeIORef (connDrained c) True >> settle env c
        Ended -> finish False
        Broken -> closeConn env c
    finish linger = do
      writeIORef (connPhase c) (Finishing linger)
      settle env c

-- | A command's work on one color: its sequence number, then the key and
-- operation of a single-key command, or the keys, operations and their
-- positions among the command's keys, of a multi-key command.
data Work
  = Work !Int !ByteString KeyOp
  | WorkParts !Int [(Int, ByteString, KeyOp)]
  | WorkAll !Int [(ByteString, KeyOp)] ([Reply] -> Reply)
    -- ^ A multi-key command whose keys all have this color: its parts
    -- and their join, done in one go (Note [Multi-key commands]).
  | WorkFlush !Int !(IORef Int)
    -- ^ FLUSHDB's part on this color, and the colors still to flush: the
    -- last one answers (Note [Store-wide commands]).

-- | What a 'Work' answered: a whole command's encoded reply, or one part
-- of a multi-key command.
data Result = Whole !Int ![ByteString] | Parts !Int [(Int, Reply)]

-- | Give each command a sequence number and start it, one event per key
-- color for the whole batch (Note [Batches per color]). Returns whether a
-- QUIT or a protocol error ended the input (the commands after it are
-- dropped). A survey that must wait holds the rest back in 'connHeld'.
dispatch :: Env -> Conn -> Held -> IO Bool
dispatch env c (Held cmds0 malformed) = do
  (ended, groups) <- go cmds0 NoWork
  case groups of
    NoWork -> return ()
    OneColor color works -> start color works
    Colors m -> forM_ (IntMap.toList m) (uncurry start)
  return ended
  where
    rt = envRuntime env
    start color works = post rt color hCommand (runWorks env c color (reverse works))
    go [] !groups = case malformed of
      Nothing -> return (False, groups)
      -- The protocol error, answered in its turn; no more input.
      Just msg -> do
        s <- takeSeq c
        place c s (encodeReplyChunks (RError msg))
        return (True, groups)
    go items@(cmd : rest) !groups = case plan cmd of
      Surveying op -> storeWide $ \s -> do
        r <- readNow >>= \now -> survey (envStore env) now op
        place c s (encodeReplyChunks r)
        go rest groups
      Flushing -> storeWide $ \s -> do
        colors <- occupiedColors (envStore env)
        if null colors then place c s (encodeReplyChunks ok) >> go rest groups else do
          left <- newIORef (length colors)
          go rest (foldr (\color -> add color (WorkFlush s left)) groups colors)
      Answer r -> do
        s <- takeSeq c
        place c s (encodeReplyChunks r)
        if isQuit cmd then return (True, groups) else go rest groups
      OnKey key op -> do
        s <- takeSeq c
        go rest (add (keyColor key) (Work s key op) groups)
      OnKeys parts@((key0, _) : more) joinParts
        | all ((== color0) . keyColor . fst) more -> do
            s <- takeSeq c
            go rest (add color0 (WorkAll s parts joinParts) groups)
        where color0 = keyColor key0
      OnKeys parts joinParts -> do
        s <- takeSeq c
        modifyIORef' (connEarly c) (IntMap.insert s (Joining (length parts) IntMap.empty joinParts))
        -- The command's parts by color, in argument order within each.
        let byColor = IntMap.fromListWith (++)
              [ (keyColor key, [(i, key, op)]) | (i, (key, op)) <- zip [0 ..] parts ]
        go rest (IntMap.foldrWithKey (\color ps g -> add color (WorkParts s (reverse ps)) g) groups byColor)
      where
        -- A store-wide command runs once every command before it has run
        -- (nothing outstanding, nothing posted in this batch); until then
        -- it and the rest wait in 'connHeld' (Note [Store-wide commands]).
        storeWide run = do
          outstanding <- outstandingCount c
          if noWork groups && outstanding == 0
            then takeSeq c >>= run
            else (False, groups) <$ writeIORef (connHeld c) (Held items malformed)

-- | A batch's work by color, each color's latest first. Most batches
-- (one key, or one command) have one color: that case allocates no map.
data Groups = NoWork | OneColor !Int [Work] | Colors !(IntMap.IntMap [Work])

add :: Int -> Work -> Groups -> Groups
add !color !w NoWork = OneColor color [w]
add color w (OneColor color0 ws)
  | color == color0 = OneColor color0 (w : ws)
  | otherwise = Colors (IntMap.insert color [w] (IntMap.singleton color0 ws))
add color w (Colors m) = Colors (IntMap.alter (Just . maybe [w] (w :)) color m)

noWork :: Groups -> Bool
noWork NoWork = True
noWork _ = False

-- Note [Store-wide commands]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- DBSIZE, KEYS and FLUSHDB touch every key, hence every one of the 65536
-- key colors. An event per color would cost about 4 µs in all (post, run,
-- answer): 0.3 s per command. Instead, such a command runs only once
-- every command the client sent before it has run (nothing outstanding,
-- nothing posted in its batch); until then it and the commands after it
-- wait in 'connHeld', reading pauses, and 'settle' resumes them when the
-- replies are in. Then:
--
-- * DBSIZE and KEYS read every color's map from the connection's color
--   ('survey'): each map is immutable, and reading the 'IORef' that holds
--   it is safe from any thread. About 1 ms, plus 1 ms per 30,000 keys.
--
-- * FLUSHDB and FLUSHALL write, so they run on the colors that hold keys
--   ('occupiedColors', read as a survey does): a 'WorkFlush' part joins
--   each such color's group of the batch, so it deletes the keys before
--   the commands the client sends after it run. The colors count down a
--   shared counter, and the last one answers; no other color posts a
--   result. A store of 100,000 keys (on some 50,000 colors) takes about
--   0.1 s; an empty one nothing.
--
-- The client sees its own writes, as with redis. Unlike redis's, the
-- result is not one snapshot of the store when other clients write at
-- the same time: each key is seen (or deleted) before or after another
-- client's command on it, never half-way, and a key another client sets
-- while a flush runs may survive it, as if set just after.

-- Note [Batches per color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- The commands decoded from one read are grouped by key color, in order:
-- each color gets one event that runs its commands one after another, and
-- posts their results back to the connection's color in one event. A
-- pipeline of 16 commands on one key thus costs two events instead of 32,
-- and an MSET of keys that share a color one round trip. Grouping keeps
-- the order of commands within a color, and the colors of one read run in
-- any order anyway, so what each command sees is what it would see with
-- one event per command. Ordering replies is Note [Reply order]'s job.

-- | Run a color's share of a batch, on that color.
runWorks :: Env -> Conn -> Int -> [Work] -> IO ()
runWorks env c color works = do
  -- One clock read for the batch: it only decides which keys have expired.
  now <- readNow
  let arm = armExpiry env
      runOne key op = runKeyOp (envStore env) arm now key op
      -- The results, latest first; flushing colors but the last have
      -- nothing to answer.
      go acc [] = return acc
      go acc (w : rest) = case w of
        Work s key op -> do
          r <- runOne key op
          let !chunks = encodeReplyChunks r
          go (Whole s chunks : acc) rest
        WorkParts s ps -> do
          rs <- mapM (\(i, key, op) -> (,) i <$> runOne key op) ps
          go (Parts s rs : acc) rest
        WorkAll s ps joinParts -> do
          rs <- mapM (uncurry runOne) ps
          let !chunks = encodeReplyChunks (joinParts rs)
          go (Whole s chunks : acc) rest
        WorkFlush s left -> do
          flushColor (envStore env) color
          n <- atomicModifyIORef' left (\n -> (n - 1, n - 1))
          go (if n == 0 then Whole s (encodeReplyChunks ok) : acc else acc) rest
  results <- go [] works
  unless (null results) $ post (envRuntime env) (connColor c) hReply (resultsArrived env c (reverse results))

takeSeq :: Conn -> IO Int
takeSeq c = do
  s <- getCount c seqCount
  setCount c seqCount (s + 1)
  return s

-- | Results back on the connection's color.
resultsArrived :: Env -> Conn -> [Result] -> IO ()
resultsArrived env c results = do
  phase <- readIORef (connPhase c)
  case phase of
    Closed -> return ()
    _ -> do
      forM_ results $ \r -> case r of
        Whole s chunks -> place c s chunks
        Parts s parts -> partsArrived c s parts
      settle env c

-- | One color's parts of a multi-key command, by position
-- (Note [Multi-key commands]).
partsArrived :: Conn -> Int -> [(Int, Reply)] -> IO ()
partsArrived c s new = do
  early <- readIORef (connEarly c)
  case IntMap.lookup s early of
    Just (Joining left parts joinParts) -> do
      let left' = left - length new
          parts' = foldl (\m (i, r) -> IntMap.insert i r m) parts new
      if left' > 0
        then writeIORef (connEarly c) (IntMap.insert s (Joining left' parts' joinParts) early)
        else do
          writeIORef (connEarly c) (IntMap.delete s early)
          place c s (encodeReplyChunks (joinParts (IntMap.elems parts')))
    _ -> return ()

-- | Put a reply in its place (Note [Reply order]).
place :: Conn -> Int -> [ByteString] -> IO ()
place c s chunks = do
  next <- getCount c nextCount
  if s /= next
    then modifyIORef' (connEarly c) (IntMap.insert s (Encoded chunks))
    else do
      output chunks
      early <- readIORef (connEarly c)
      if IntMap.null early then setCount c nextCount (s + 1) else catchUp early (s + 1)
  where
    output cs = do
      out <- readIORef (connOut c)
      size <- getCount c outSizeCount
      let push !o !n [] = writeIORef (connOut c) o >> setCount c outSizeCount n
          push o n (x : xs) = push (x : o) (n + B.length x) xs
      push out size cs
    catchUp early n = case IntMap.lookup n early of
      Just (Encoded cs) -> output cs >> catchUp (IntMap.delete n early) (n + 1)
      _ -> writeIORef (connEarly c) early >> setCount c nextCount n

-- | After any change: send what is due, close if finished, and read again
-- if there is room.
settle :: Env -> Conn -> IO ()
settle env c = do
  resumeHeld env c
  held <- holding <$> readIORef (connHeld c)
  outstanding <- outstandingCount c
  size <- getCount c outSizeCount
  writing <- readIORef (connWriting c)
  when (size > 0 && not writing && (outstanding == 0 || size >= flushBytes)) (flush env c)
  phase <- readIORef (connPhase c)
  size' <- getCount c outSizeCount
  writing' <- readIORef (connWriting c)
  case phase of
    Closed -> return ()
    _ | envOutputLimit env > 0 && size' > envOutputLimit env ->
          dropClient env c ("over the output limit of " ++ show (envOutputLimit env) ++ " bytes of waiting replies")
    Open -> do
      reading <- readIORef (connReading c)
      when (not reading && not held && outstanding < maxInFlight && size' < maxOutBytes) (armRead env c)
    Finishing linger | outstanding == 0 && not held && size' == 0 && not writing' ->
      if linger then startLinger env c else closeConn env c
    _ -> return ()

-- | Dispatch the commands held behind a survey once nothing is
-- outstanding (Note [Store-wide commands]).
resumeHeld :: Env -> Conn -> IO ()
resumeHeld env c = do
  held <- readIORef (connHeld c)
  -- The common case, on every 'settle': nothing held, nothing more read.
  when (holding held) $ do
    outstanding <- outstandingCount c
    phase <- readIORef (connPhase c)
    let live = case phase of Open -> True; Finishing _ -> True; _ -> False
    when (live && outstanding == 0) $ do
      writeIORef (connHeld c) noneHeld
      ended <- dispatch env c held
      when ended $ writeIORef (connPhase c) (Finishing True)

-- | Send the output; on a full socket buffer, keep the rest and continue
-- when writable.
flush :: Env -> Conn -> IO ()
flush env c = do
  out <- readIORef (connOut c)
  size <- getCount c outSizeCount
  -- Small output (a pipeline's replies are often a few bytes each) is
  -- joined into one string: one plain send, one copy in the kernel.
  let chunks = case out of
        [_] -> out
        _ | size <= joinBytes -> [joinLatestFirst size out]
          | otherwise -> reverse out
  r <- sendChunks (connSocket c) chunks
  case r of
    Left () -> closeConn env c
    Right sent -> do
      let rest = Net.dropBytes sent chunks
      writeIORef (connOut c) (reverse rest)
      addCount c outSizeCount (negate sent)
      addCount c sentCount sent
      unless (null rest) $ do
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
      size <- getCount c outSizeCount
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
    then watch env c (rearmRead (connWatch c))
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
      writeIORef (connOut c) []
      writeIORef (connEarly c) IntMap.empty
      forget env c
      Net.close (connSocket c)

-- | Take the connection out of the open ones, unless its fd number
-- already belongs to a newer connection.
forget :: Env -> Conn -> IO ()
forget env c = atomicModifyIORef' (envLive env) (\m -> (IntMap.update keepOthers fd m, ()))
  where
    Fd fd' = Net.socketFd (connSocket c)
    fd = fromIntegral fd'
    keepOthers o = if connPhase o == connPhase c then Nothing else Just o

------------------------------------------------------------------------------
-- Expiry

-- | Register a key's expiry timer (for the key's deadline, after a delay
-- in microseconds): when it fires, an event of the key's color deletes
-- the key if it is due (the timer itself runs on a weft dispatcher, which
-- must not touch the store).
armExpiry :: Env -> ByteString -> Int -> Int -> IO TimeoutKey
armExpiry env key deadline us = do
  mgr <- getSystemTimerManager
  let !owned = B.copy key
  registerTimeout mgr us $
    post (envRuntime env) (keyColor owned) hExpire (expireDue (envStore env) (armExpiry env) owned deadline)
      `catch` \RuntimeClosed -> return ()

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
