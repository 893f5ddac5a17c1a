{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | The server loop over "Weft.Net" sockets, accepting under fd
-- exhaustion, and making room for new clients ("Weft.Net" is the façade
-- and its documentation).
-- Internal and unstable (everything is exported; the façade picks the
-- API): import "Weft.Net".
module Weft.Net.Internal.Serve where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import qualified Data.IntMap.Strict as IM
import Data.List (sortOn)
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import Foreign.C.Error
import GHC.IO.Exception (IOException (..), IOErrorType (..))
import Network.Socket (SockAddr (..))
import System.IO (hPutStrLn, stderr)
import System.Posix.Types (Fd (..))

import qualified Weft
import Weft.Event.Internal.System (startSystemManagers)
import Weft.Net.Internal.Socket hiding (recvBuf)

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
-- acceptor's capability). Accepting rides out fd exhaustion
-- ('acceptPatiently'), and meanwhile closes the connections that have
-- made progress least recently to make room for new clients (Note [Making
-- room under fd pressure]); every capability's manager is started first,
-- so fd exhaustion cannot keep one from starting. Throws an 'IOError' if
-- the address cannot be bound.
serve :: ServerConfig -> SockAddr -> (Socket -> SockAddr -> IO ()) -> IO ()
serve cfg addr handler = do
  -- Out of fds later, a manager could not start: start them all now.
  startSystemManagers
  caps <- getNumCapabilities
  live <- newIORef IM.empty
  let accepting l pick = forever (acceptMakingRoom (makeRoom live) l >>= spawn live pick)
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
      next <- newIORef (0 :: Int)
      let roundRobin = do
            i <- readIORef next
            writeIORef next ((i + 1) `rem` caps)
            return i
      accepting l roundRobin
  where
    spawn live pick (conn, peer) = do
      cap <- pick
      let Fd key = socketFd conn
      trackProgress conn
      atomicModifyIORef' live (\m -> (IM.insert (fromIntegral key) conn m, ()))
      void $ mask_ $ forkOnWithUnmask cap $ \unmask ->
        unmask (setUp conn >> handler conn peer)
          `catch` (\e -> do
                      -- What a handler throws once its connection was
                      -- closed to make room is the closing, not news.
                      ours <- (== Just conn) . IM.lookup (fromIntegral key) <$> readIORef live
                      when ours (serverOnException cfg peer e `catch` ignore))
          `finally` (atomicModifyIORef' live (\m -> (forget (fromIntegral key) m, ())) >> close conn)
      where
        -- A connection closed to make room leaves the table then, and
        -- frees its fd number before its handler ends: a newer connection
        -- may hold it by now.
        forget = IM.update (\c -> if c == conn then Nothing else Just c)
    setUp conn = do
      when (serverNoDelay cfg) $ setNoDelay conn True `catch` \e -> ignore (toException (e :: IOException))
      when (serverMinReceive cfg > 0) $ setMinimumReceive conn (serverMinReceive cfg)
      when (serverIdleTimeout cfg > 0) $ setIdleTimeout conn (serverIdleTimeout cfg)
    ignore :: SomeException -> IO ()
    ignore _ = return ()

-- Note [Making room under fd pressure]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- When accept fails for want of fds, the connections already open hold
-- them all. Waiting for some to close is right when they are busy; but
-- clients that hold connections and make no progress (idle keep-alives,
-- heads that trickle in one byte at a time) could keep a server shut to
-- everyone else for as long as they like. So at each back-off step of an
-- exhaustion burst, 'serve' closes some of the open connections that have
-- made progress least recently: one in 16 of them (at least one), oldest
-- progress first, among those that made none for 'evictionGraceNs' (250
-- ms); an accept counts as progress, and so does a syscall that moved
-- bytes (received bytes only in steps of 'serverMinReceive'). The grace
-- keeps a steady client from losing to one accepted a moment ago (a
-- slowloris that has yet to show it makes no progress): the next steps of
-- the burst get to the newcomers once they have aged. The burst's last
-- report says how many were closed. Their handlers see the socket closed
-- (@EBADF@) and end.

-- | A connection that made progress this recently (nanoseconds) is not
-- closed to make room.
evictionGraceNs :: Word64
evictionGraceNs = 250000000

-- | Close the connections 'leastProgressing' picks, taking them out of
-- the table first; returns how many.
makeRoom :: IORef (IM.IntMap Socket) -> IO Int
makeRoom live = do
  conns <- IM.toList <$> readIORef live
  victims <- leastProgressing [ (c, k) | (k, c) <- conns ]
  gone <- atomicModifyIORef' live (\m -> (foldr IM.delete m victims, [ c | k <- victims, Just c <- [IM.lookup k m] ]))
  mapM_ close gone
  return (length gone)

-- | Which of a server's open connections to close to make room for new
-- clients when accept has run out of fds (Note [Making room under fd
-- pressure]): the sixteenth of them (at least one) that made progress
-- least recently, among those that made none for the last 250 ms,
-- oldest first. Each connection comes with what the caller needs to
-- close it (a server on "Weft.Color" posts the close to the connection's
-- color). Its socket should be tracked ('trackProgress', or an idle
-- timeout); an untracked one counts as making no progress since ever.
-- 'serve' does this itself; a server with its own accept loop calls it
-- from the action it gives 'acceptMakingRoom'.
leastProgressing :: [(Socket, a)] -> IO [a]
leastProgressing conns = do
  now <- getMonotonicTimeNSec
  stamped <- forM conns $ \(s, x) -> (\t -> (t, x)) <$> lastProgress s
  let stale = [ tx | tx@(t, _) <- stamped, now - min now t >= evictionGraceNs ]
  return (take (max 1 (length conns `div` 16)) (map snd (sortOn fst stale)))

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
-- closed). ('serve' also closes the least active connections meanwhile:
-- Note [Making room under fd pressure].)
acceptPatiently :: Socket -> IO (Socket, SockAddr)
acceptPatiently = acceptMakingRoom (return 0)

-- | 'acceptPatiently', running the action at each back-off step of an fd
-- exhaustion burst: it may close connections to free fds (see
-- 'leastProgressing'), and returns how many it closed; the count is
-- reported when accepting resumes. Throws what 'acceptPatiently' throws.
acceptMakingRoom :: IO Int -> Socket -> IO (Socket, SockAddr)
acceptMakingRoom room l = go Nothing 0
  where
    go backoff closed = do
      r <- try (accept l)
      case r of
        Right conn -> do
          when (backoff /= Nothing) $
            hPutStrLn stderr ("weft: accept on fd " ++ show (socketFd l) ++ ": resumed"
                              ++ (if closed > 0 then " (closed " ++ show closed ++ " connections that had made the least progress)" else ""))
          return conn
        Left e
          | errnoIs e exhaustion -> do
              when (backoff == Nothing) $ hPutStrLn stderr
                ("weft: accept on fd " ++ show (socketFd l) ++ ": " ++ ioe_description e
                 ++ "; pausing accepts, open connections are still served")
              freed <- room
              let delay = maybe 1000 (\d -> min 100000 (2 * d)) backoff
              -- Out of fds, weft may be unable to start this capability's
              -- manager for the delay: fall back to GHC's timer then, so
              -- the loop never dies of the exhaustion it rides out.
              Weft.threadDelay delay `catch` \(_ :: IOException) -> threadDelay delay
              go (Just delay) (closed + freed)
          | errnoIs e [eCONNABORTED, ePROTO, ePERM] -> go backoff closed
          | otherwise -> throwIO e
    exhaustion = [eMFILE, eNFILE, eNOBUFS, eNOMEM]
    errnoIs e errs = maybe False (\n -> Errno n `elem` errs) (ioe_errno e)
