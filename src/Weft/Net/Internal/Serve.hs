{-# LANGUAGE BangPatterns, RankNTypes, ScopedTypeVariables #-}
-- | The server loop over "Weft.Net" sockets, and admitting clients: the
-- client limit, refusals, and closing a stalled or idle connection for a
-- newcomer ("Weft.Net" is the façade and its documentation).
-- Internal and unstable (everything is exported; the façade picks the
-- API): import "Weft.Net".
module Weft.Net.Internal.Serve where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import qualified Data.IntMap.Strict as IM
import qualified Data.ByteString as B
import Data.Maybe (fromMaybe)
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import Foreign.C.Error
import GHC.IO.Exception (IOException (..), IOErrorType (..))
import Network.Socket (SockAddr (..))
import System.Environment (lookupEnv)
import System.IO (hPutStrLn, stderr)
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Types (Fd (..))
import Foreign.C.Types (CInt (..), CLong (..))

import qualified Weft
import Weft.Event.Internal.System (startSystemManagers)
import Weft.Internal.Error (invalidArgument)
import Weft.Net.Internal.Eviction
import Weft.Net.Internal.Socket

import Weft.Net.Internal.Calls
------------------------------------------------------------------------------
-- Servers

-- | How 'serve' runs.
data ServerConfig = ServerConfig
  { serverListen      :: !ListenOptions
  , serverReusePort   :: !Bool
    -- ^ One @SO_REUSEPORT@ listener and acceptor per capability, instead of
    -- one acceptor for all (the default, which has no thundering herd).
  , serverNoDelay     :: !Bool
    -- ^ Set @TCP_NODELAY@ on accepted connections (default 'True').
  , serverIdleTimeout :: !Int
    -- ^ Per-connection idle timeout in microseconds ('setIdleTimeout');
    -- 0 (the default) for none.
  , serverMinReceive  :: !Int
    -- ^ Bytes a connection must receive for that to count as progress
    -- against its idle timeout ('setMinimumReceive'); 0 (the default):
    -- any byte. Sends always count.
  , serverMaxClients  :: !Int
    -- ^ Connections served at once at most; a newcomer beyond is refused
    -- (Note [Making room under fd pressure]). 0 (the default): the soft
    -- @RLIMIT_NOFILE@ at start less 'reservedFds'.
  , serverRefusal     :: !B.ByteString
    -- ^ What a refused newcomer is sent before the close (default: nothing;
    -- an HTTP server sends a 503 with @Connection: close@).
  , serverEviction    :: !Eviction
    -- ^ Which established connection, if any, a full server closes to
    -- serve a newcomer instead of refusing it (default 'EvictNone').
  , serverOnReady     :: SockAddr -> IO ()
    -- ^ Called with the bound address once listening.
  , serverOnException :: SockAddr -> SomeException -> IO ()
    -- ^ Called with what a connection's handler threw (its connection is
    -- closed anyway). The default reports to stderr, except for the usual
    -- end of a connection: a reset, a broken pipe, an idle timeout.
  }

-- | The defaults described at each field.
defaultServerConfig :: ServerConfig
defaultServerConfig = ServerConfig
  { serverListen = defaultListenOptions
  , serverReusePort = False
  , serverNoDelay = True
  , serverIdleTimeout = 0
  , serverMinReceive = 0
  , serverMaxClients = 0
  , serverRefusal = B.empty
  , serverEviction = EvictNone
  , serverOnReady = \_ -> return ()
  , serverOnException = reportUnusual
  }

reportUnusual :: SockAddr -> SomeException -> IO ()
reportUnusual peer e = case fromException e of
  Just io | ioe_type io `elem` [ResourceVanished, TimeExpired] -> return ()
  _ -> case fromException e of
    Just ThreadKilled -> return ()
    _ -> hPutStrLn stderr ("weft: connection from " ++ show peer ++ ": " ++ show e)

-- | Listen on the address and serve each connection on its own thread,
-- with the peer's address, until this thread is killed (the listeners
-- close then; connections already being served carry on). The connection
-- is closed when its handler returns or throws; what it throws goes to
-- 'serverOnException' and never stops the server. Handler threads are
-- placed on the capabilities round-robin (with 'serverReusePort', on their
-- acceptor's capability). At most 'serverMaxClients' connections are
-- served at once; a newcomer beyond them, or one that arrives while the
-- process is out of fds, is refused ('serverRefusal'), unless
-- 'serverEviction' lets a stalled or idle connection be closed for it
-- (Note [Making room under fd pressure]); every capability's manager is
-- started first, so fd exhaustion cannot keep one from starting. Throws
-- an 'IOError' if the address cannot be bound.
serve :: ServerConfig -> SockAddr -> (Socket -> SockAddr -> IO ()) -> IO ()
serve cfg addr handler = do
  -- Out of fds later, a manager could not start: start them all now.
  startSystemManagers
  caps <- getNumCapabilities
  clients <- newClients
  let accepting l pick =
        bracket (admitClients (serverMaxClients cfg) (serverEviction cfg) (serverRefusal cfg) clients) closeAdmission $ \adm ->
          forever (acceptAdmitting adm l >>= spawn clients pick)
  if serverReusePort cfg
    then do
      let opts = (serverListen cfg) { listenReusePort = True }
      first <- listenWith opts addr
      -- Port 0: the other listeners must join the port the first one got.
      bound <- localAddress first `onException` close first
      rest <- replicateM (caps - 1) (listenWith opts bound) `onException` close first
      let listeners = first : rest
      (`finally` mapM_ close listeners) $ do
        serverOnReady cfg bound
        done <- newEmptyMVar
        acceptors <- forM (zip [0 ..] listeners) $ \(cap, l) ->
          forkOn cap (accepting l (return cap) `finally` putMVar done ())
        -- Returns when an acceptor fails, or this thread is killed.
        takeMVar done `finally` mapM_ killThread acceptors
    else bracket (listenWith (serverListen cfg) addr) close $ \l -> do
      serverOnReady cfg =<< localAddress l
      accepting l nextCapability
  where
    spawn clients pick (conn, peer) = do
      cap <- pick
      trackProgress conn
      addClient clients conn
      void $ mask_ $ forkOnWithUnmask cap $ \unmask ->
        unmask (setUp conn >> handler conn peer)
          `catch` (\e -> do
                      -- What a handler throws once its connection was
                      -- closed for a newcomer is the closing, not news.
                      ours <- isClient clients conn
                      when ours (serverOnException cfg peer e `catch` ignore))
          `finally` (removeClient clients conn >> close conn)
    setUp conn = do
      when (serverNoDelay cfg) $ setNoDelay conn True `catch` \e -> ignore (toException (e :: IOException))
      when (serverMinReceive cfg > 0) $ setMinimumReceive conn (serverMinReceive cfg)
      when (serverIdleTimeout cfg > 0) $ setIdleTimeout conn (serverIdleTimeout cfg)
    ignore :: SomeException -> IO ()
    ignore _ = return ()

-- | The capability the next connection's thread goes to: all of them in
-- turn, shared by every server in the process ('serve', "Weft.Warp"), so
-- that two servers do not both start at capability 0.
nextCapability :: IO Int
nextCapability = do
  caps <- getNumCapabilities
  atomicModifyIORef' placement (\i -> let cap = i `rem` caps in ((cap + 1) `rem` caps, cap))

{-# NOINLINE placement #-}
placement :: IORef Int
placement = unsafePerformIO (newIORef 0)

-- | Fork a connection's thread onto the next capability ('nextCapability'),
-- for good, with asynchronous exceptions masked and the function that
-- unmasks them handed over (as 'forkIOWithUnmask'): where 'serve' places
-- its handlers, for servers that accept connections themselves.
forkRoundRobin :: ((forall a. IO a -> IO a) -> IO ()) -> IO ThreadId
forkRoundRobin io = do
  cap <- nextCapability
  forkOnWithUnmask cap io

-- Note [Making room under fd pressure]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A server that is full (at its client limit, or out of fds) must still
-- answer a newcomer, and must not let newcomers push out the clients it
-- serves. So:
--
-- * A limit on clients, derived from @RLIMIT_NOFILE@ as redis derives
--   @maxclients@ (the soft limit less 'reservedFds' for everything else
--   the process opens), or set. A newcomer over it is accepted and
--   refused: it gets the protocol's refusal (HTTP 503, redis's @-ERR max
--   number of clients reached@, or nothing) and a close.
--
-- * A reserve: one fd held open for nothing else. When accept fails for
--   want of fds anyway (other files took them), the reserve is released,
--   the newcomer accepted into it and refused, and the reserve taken
--   again; so even then a client waits in the backlog only for as long as
--   the server takes to reach it. If the reserve cannot be had back, the
--   accept backs off as 'acceptPatiently' does until fds free up.
--
-- * Before refusing, a full server may close one established connection
--   instead, by its 'Eviction' policy and what each connection is doing
--   (Note [What a connection waits for] in "Weft.Net.Internal.Socket"):
--   never one that the server is working for, never one that made
--   progress within 'evictionGraceNs'; first a connection stalled in the
--   middle of a request or on a peer that does not read (the slowloris
--   signature: with a minimum receive, trickled bytes are no progress),
--   then, for HTTP only, one idle between requests. For protocols where
--   idleness is normal ('EvictNone', the default) nothing established is
--   closed; their idle timeout, if set, is what ends idle clients.

-- | Fds a server leaves to the rest of the process when it derives its
-- client limit from @RLIMIT_NOFILE@ (as redis does).
reservedFds :: Int
reservedFds = 32

-- | The client limit: the given one if positive; else @WEFT_MAX_CLIENTS@
-- if it is set to a positive number (for servers whose configuration has
-- no such setting, e.g. "Weft.Warp"'s, which is warp's); else the soft
-- @RLIMIT_NOFILE@ less 'reservedFds' (at least 1; 'maxBound' if
-- unlimited).
clientLimit :: Int -> IO Int
clientLimit n
  | n > 0 = return n
  | otherwise = do
      env <- lookupEnv "WEFT_MAX_CLIENTS"
      case reads (fromMaybe "" env) of
        [(k, "")] | k > 0 -> return k
        _ -> fromRLimit
  where
    fromRLimit = do
      lim <- c_fd_limit
      return (if lim < 0 then maxBound else max 1 (fromIntegral lim - reservedFds))

-- | The eviction policy of a server whose configuration has no setting for
-- it (e.g. "Weft.Warp"'s, which is warp's): the one @WEFT_EVICTION@ names
-- ('parseEviction'), else the given default. A name that is no policy is
-- an 'IOError' (invalid argument), not a silent default.
evictionSetting :: Eviction -> IO Eviction
evictionSetting def = do
  env <- lookupEnv "WEFT_EVICTION"
  case env of
    Nothing -> return def
    Just "" -> return def
    Just name -> maybe (ioError (invalidArgument "evictionSetting"
                                   ("WEFT_EVICTION=" ++ name ++ " names no eviction policy")))
                       return (parseEviction name)

-- | The connections a server serves, by fd number, and how many: what
-- its client limit counts and its eviction chooses from.
data Clients = Clients !(IORef (IM.IntMap Socket)) !(IORef Int)

newClients :: IO Clients
newClients = Clients <$> newIORef IM.empty <*> newIORef 0

clientKey :: Socket -> Int
clientKey s = let Fd k = socketFd s in fromIntegral k

-- | Count a connection the server now serves.
addClient :: Clients -> Socket -> IO ()
addClient (Clients live count) s = do
  atomicModifyIORef' live (\m -> (IM.insert (clientKey s) s m, ()))
  atomicModifyIORef' count (\n -> (n + 1, ()))

-- | Take a connection out; 'False' if it was out already (closed for a
-- newcomer). Its fd number may be another connection's by then, so only
-- this connection's entry is removed.
removeClient :: Clients -> Socket -> IO Bool
removeClient (Clients live count) s = do
  ours <- atomicModifyIORef' live $ \m ->
    if IM.lookup (clientKey s) m == Just s then (IM.delete (clientKey s) m, True) else (m, False)
  when ours $ atomicModifyIORef' count (\n -> (n - 1, ()))
  return ours

-- | Is the connection still counted (not closed for a newcomer)?
isClient :: Clients -> Socket -> IO Bool
isClient (Clients live _) s = (== Just s) . IM.lookup (clientKey s) <$> readIORef live

-- | The admission of a server whose connections are in the table: full at
-- the client limit ('clientLimit' of the given number), closing for a
-- newcomer what the policy allows ('chooseVictim'; taken out of the table
-- first, so its handler's end neither reports the close nor counts it
-- twice), refusing with the given bytes.
admitClients :: Int -> Eviction -> B.ByteString -> Clients -> IO Admission
admitClients maxClients policy refusal clients@(Clients live count) = do
  limit <- clientLimit maxClients
  let full = (>= limit) <$> readIORef count
      evict = do
        conns <- IM.elems <$> readIORef live
        victim <- chooseVictim policy [ (c, c) | c <- conns ]
        mapM_ (\c -> removeClient clients c >> close c) victim
        return (() <$ victim)
  newAdmission full evict refusal

-- | How 'acceptAdmitting' admits the connections it accepts.
data Admission = Admission
  { admFull    :: IO Bool
    -- ^ Is the server at its client limit?
  , admEvict   :: IO (Choice ())
    -- ^ Close one established connection to serve a newcomer, if the
    -- policy allows one ('chooseVictim'): 'CloseFor' if it did.
  , admRefusal :: B.ByteString
    -- ^ Sent to a refused client before the close (empty: just close).
  , admReserve :: IORef CInt
    -- ^ The reserve fd; -1 while it is out, -2 once the admission is closed.
  , admRefilling :: IORef Bool
    -- ^ A thread is retrying to take the reserve back.
  }

-- | An admission with its reserve fd; release it with 'closeAdmission'.
newAdmission :: IO Bool -> IO (Choice ()) -> B.ByteString -> IO Admission
newAdmission full evict refusal = do
  fd <- c_reserve_fd
  Admission full evict refusal <$> newIORef fd <*> newIORef False

-- | An admission with no reserve, never full: accepting backs off while
-- out of fds ('acceptPatiently').
patientAdmission :: IO Admission
patientAdmission = Admission (return False) (return Refuse) B.empty <$> newIORef (-2) <*> newIORef False

-- | Sleep in weft. Out of fds, weft may be unable to start this
-- capability's manager: GHC's timer then, so that a loop riding out fd
-- exhaustion never dies of it.
pause :: Int -> IO ()
pause us = Weft.threadDelay us `catch` \(_ :: IOException) -> threadDelay us

-- | Close the reserve fd.
closeAdmission :: Admission -> IO ()
closeAdmission adm = do
  fd <- atomicModifyIORef' (admReserve adm) (\fd -> (-2, fd))
  when (fd >= 0) (void (c_close fd))

-- | Take the reserve fd again if it is out; whether it is held. If it
-- cannot be had now, a thread retries every 50 ms until it is, so that a
-- server that stops accepting (no newcomer, or a stop) still gets its
-- reserve back once fds free up.
refillReserve :: Admission -> IO Bool
refillReserve adm = do
  got <- tryRefill adm
  closed <- (== -2) <$> readIORef (admReserve adm)
  unless (got || closed) $ do
    start <- atomicModifyIORef' (admRefilling adm) (\r -> (True, not r))
    when start $ void $ forkIO $ do
      let retry = do
            pause 50000
            done <- tryRefill adm
            ended <- (== -2) <$> readIORef (admReserve adm)
            if done || ended then writeIORef (admRefilling adm) False else retry
      retry
  return got

tryRefill :: Admission -> IO Bool
tryRefill adm = do
  fd <- readIORef (admReserve adm)
  if fd >= 0 then return True else if fd == -2 then return False else do
    new <- c_reserve_fd
    if new < 0 then return False else do
      -- The admission may have been closed meanwhile.
      kept <- atomicModifyIORef' (admReserve adm) (\old -> if old == -1 then (new, True) else (old, False))
      unless kept (void (c_close new))
      return kept

-- | What 'acceptOnReserve' found.
data Reserved
  = ReservedClient !Socket !SockAddr
    -- ^ A newcomer, accepted into the reserve's fd: serve it if a
    -- connection is closed for it, else refuse it; then 'refillReserve'.
  | NoneWaiting
    -- ^ No newcomer was waiting; the reserve is held again.
  | ReserveOut
    -- ^ The reserve is out (or fds ran out again before the accept):
    -- accepting backs off until fds free up, closing a connection the
    -- policy allows at each step.

-- | Out of fds at accept (@EMFILE@ and the like, 'outOfFds'): release the
-- reserve fd and accept one waiting newcomer into it, so that it can be
-- answered (Note [Making room under fd pressure]). Never blocks; throws
-- what 'tryAccept' throws otherwise.
acceptOnReserve :: Admission -> Socket -> IO Reserved
acceptOnReserve adm l = do
  reserve <- atomicModifyIORef' (admReserve adm) (\fd -> if fd >= 0 then (-1, fd) else (fd, fd))
  if reserve < 0 then ReserveOut <$ refillReserve adm else do
    _ <- c_close reserve
    r <- try (tryAccept l)
    case r of
      Right (Just (s, peer)) -> return (ReservedClient s peer)
      Right Nothing -> NoneWaiting <$ refillReserve adm
      Left e | outOfFds e -> ReserveOut <$ refillReserve adm
             | otherwise -> refillReserve adm >> throwIO e

-- | Did the call fail for want of fds (or of kernel memory for one)?
outOfFds :: IOException -> Bool
outOfFds e = maybe False (\n -> Errno n `elem` [eMFILE, eNFILE, eNOBUFS, eNOMEM]) (ioe_errno e)

-- | How long a full server waits at most (µs) for a connection it may
-- close for a newcomer to age past 'evictionGraceNs' before refusing the
-- newcomer; and how long it waits at most between two looks.
admissionPatience, admissionStep :: Int
admissionPatience = 1000000
admissionStep = 250000

-- | For 'WaitFor' @ns@: how long (µs) to wait before looking again, at most
-- 'admissionStep'.
admissionWait :: Word64 -> Int
admissionWait ns = min admissionStep (fromIntegral (ns `quot` 1000) + 1000)

-- | Accept the next connection the server will serve (Note [Making room
-- under fd pressure]): a newcomer while the server is full is refused
-- ('refuseClient') unless an established connection is closed for it;
-- out of fds, the reserve is used to accept and answer newcomers
-- ('acceptOnReserve'), and if it cannot be, accepting backs off as
-- 'acceptPatiently' does. Throws what 'accept' throws otherwise.
acceptAdmitting :: Admission -> Socket -> IO (Socket, SockAddr)
acceptAdmitting adm l = go Nothing (0 :: Int)
  where
    go backoff refused = do
      r <- try (accept l)
      case r of
        Right conn -> do
          full <- admFull adm
          admit (if full then Just (admFull adm) else Nothing) conn backoff refused
        Left e
          | outOfFds e -> do
              when (backoff == Nothing) $ hPutStrLn stderr
                ("weft: accept on fd " ++ show (socketFd l) ++ ": " ++ ioe_description e
                 ++ "; open connections are still served")
              got <- acceptOnReserve adm l
              let burst = Just (fromMaybe 1000 backoff)
              case got of
                -- Full for want of an fd until the reserve can be had back.
                ReservedClient s peer -> admit (Just (not <$> refillReserve adm)) (s, peer) burst refused
                NoneWaiting -> waitReady Reading l >> go burst refused
                -- Closing a connection the policy allows frees an fd.
                ReserveOut -> do
                  _ <- admEvict adm
                  let delay = maybe 1000 (\d -> min 100000 (2 * d)) backoff
                  pause delay
                  go (Just delay) refused
          | errnoIs e [eCONNABORTED, ePROTO, ePERM] -> go backoff refused
          | otherwise -> throwIO e
    -- @full@: how to tell whether the server is still full, if it is.
    admit full conn@(s, _) backoff refused = do
      served <- maybe (return True) (makeRoom 0) full
      if served
        then do
          _ <- refillReserve adm
          when (backoff /= Nothing || refused > 0) $ hPutStrLn stderr
            ("weft: accept on fd " ++ show (socketFd l) ++ ": serving again"
             ++ (if refused > 0 then " (refused " ++ show refused ++ " clients meanwhile)" else ""))
          return conn
        else do
          refuseClient (admRefusal adm) s
          _ <- refillReserve adm
          go backoff (refused + 1)
    -- A newcomer is refused only if the server is still full once nothing
    -- may be closed for it: room can appear meanwhile (a client leaves, fds
    -- come back after an accept found none).
    makeRoom :: Int -> IO Bool -> IO Bool
    makeRoom waited stillFull = do
      choice <- admEvict adm
      case choice of
        CloseFor () -> return True
        WaitFor ns | waited < admissionPatience -> do
          let us = admissionWait ns
          pause us
          full <- stillFull
          if full then makeRoom (waited + us) stillFull else return True
        _ -> not <$> stillFull
    errnoIs e errs = maybe False (\n -> Errno n `elem` errs) (ioe_errno e)

-- | Refuse a client without waiting for it: send the refusal if its socket
-- takes it at once, end the sending side, discard what the client already
-- sent (so the close is not a reset that could destroy the refusal) and
-- close.
refuseClient :: B.ByteString -> Socket -> IO ()
refuseClient refusal s = do
  let quietly act = void (try act :: IO (Either IOException ()))
  unless (B.null refusal) $ quietly (void (trySendMany s [refusal]))
  quietly (shutdownSend s)
  quietly (void (discardInput s 65536))
  close s

-- | Which of the connections to close for a newcomer, under the policy,
-- now ('pickVictim', from each socket's 'connectionStanding'). Each
-- connection comes with what the caller needs to close it (a server on
-- "Weft.Color" posts the close to the connection's color).
chooseVictim :: Eviction -> [(Socket, a)] -> IO (Choice a)
chooseVictim EvictNone _ = return Refuse
chooseVictim policy conns = do
  now <- getMonotonicTimeNSec
  standings <- forM conns $ \(s, x) -> (\st -> (st, x)) <$> connectionStanding s
  return (pickVictim policy now standings)

-- | Accept connections for ever and hand each to the action (which should
-- fork), with 'acceptPatiently'. Throws what that throws.
acceptLoop :: Socket -> ((Socket, SockAddr) -> IO ()) -> IO ()
acceptLoop l handOff = forever (acceptPatiently l >>= handOff)

-- | 'accept', riding out fd exhaustion: on @EMFILE@, @ENFILE@, @ENOBUFS@ or
-- @ENOMEM@ it reports once per burst on stderr, backs off in weft (1 ms,
-- doubling to 100 ms) and tries again, so connections already open keep
-- being served and accepting resumes when fds free up. Connections that
-- fail before they are accepted (@ECONNABORTED@, @EPROTO@, @EPERM@) are
-- skipped. Other errors are thrown (e.g. @EBADF@ once the listener is
-- closed). A server that should answer newcomers while out of fds uses
-- 'acceptAdmitting' (Note [Making room under fd pressure]).
acceptPatiently :: Socket -> IO (Socket, SockAddr)
acceptPatiently l = patientAdmission >>= (`acceptAdmitting` l)

foreign import ccall unsafe "weft_net_fd_limit"
  c_fd_limit :: IO CLong

foreign import ccall unsafe "weft_net_reserve_fd"
  c_reserve_fd :: IO CInt
