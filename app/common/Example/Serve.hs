-- | What the example servers share: the @--manager weft|ghc@ choice, and
-- one connection interface over both socket layers, so the same server
-- code runs on weft ("Weft.Net") or on @network@ (GHC's own I/O manager).
-- Both arms place connection threads on the capabilities round-robin, so
-- they differ only in the I/O manager. On SIGUSR1 the weft arm prints its
-- managers' dispatcher counters on stderr.
module Example.Serve
  ( ManagerChoice (..)
  , Conn (..)
  , serverMain
  , Limits (..)
  , Admit (..)
  , plainAdmit
  , defaultMinReceive
  , runServer
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import Data.IORef
import GHC.IO.Exception (IOErrorType (..), IOException (..))
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import System.Environment (getArgs, getProgName)
import System.Exit (exitFailure)
import System.IO (hPutStrLn, stderr, hSetBuffering, BufferMode (..))

import System.Posix.Signals (Handler (Catch), installHandler, sigUSR1)

import qualified Weft.Event as E
import qualified Weft.Net as W

-- | Which I/O manager serves the connections.
data ManagerChoice = WeftManager | GhcManager
  deriving (Eq, Show)

-- | One connection, whichever layer it is on.
data Conn = Conn
  { connRecv     :: Int -> IO B.ByteString
    -- ^ At most this many bytes; empty at end of stream.
  , connSendAll  :: B.ByteString -> IO ()
  , connSendMany :: [B.ByteString] -> IO ()
  }

-- | How long a connection whose handler returned may linger to let its
-- last reply reach the peer (see 'W.gracefulClose'): 1 s.
lingerMicros :: Int
lingerMicros = 1000000

-- | Parse @PORT ARGS... [--manager weft|ghc] [--idle-timeout SECONDS]
-- [--min-receive BYTES] [--max-clients N] [--evict POLICY]@ (the idle timeout, weft only,
-- defaults to the given microseconds; the minimum receive,
-- 'defaultMinReceive' by default, is how many received bytes count as
-- progress against it; the client limit, weft only, defaults to the fd
-- limit less 'W.reservedFds', and a full server admits as @admit@ says,
-- with @--evict none|stalled|stalled-then-idle@ its eviction), give the
-- positional arguments after the port to @setup@, and serve every
-- connection with the handler it returns, on 0.0.0.0:PORT, for ever. A
-- handler's exception closes its connection only.
serverMain :: String -> Int -> Int -> Admit -> ([String] -> Maybe (Conn -> IO ())) -> IO ()
serverMain usage nArgs defaultIdle admit setup = do
  hSetBuffering stderr LineBuffering
  args <- getArgs
  name <- getProgName
  let die msg = hPutStrLn stderr (name ++ ": " ++ msg ++ "\nusage: " ++ name ++ " " ++ usage) >> exitFailure
  case parse args of
    Left msg -> die msg
    Right (port : rest, choice, limits)
      | [(p, "")] <- reads port, length rest == nArgs, Just handler <- setup rest -> do
          hPutStrLn stderr (name ++ ": serving on port " ++ show (p :: Int) ++ " with the "
                            ++ (if choice == WeftManager then "weft" else "ghc") ++ " manager")
          runServer choice limits (SockAddrInet (fromIntegral p) 0) (\_ -> return ()) handler
    Right _ -> die "bad arguments"
  where
    parse = go [] WeftManager (Limits defaultIdle defaultMinReceive 0 admit)
    go pos m lim [] = Right (reverse pos, m, lim)
    go pos _ lim ("--manager" : "weft" : rest) = go pos WeftManager lim rest
    go pos _ lim ("--manager" : "ghc" : rest) = go pos GhcManager lim rest
    go _ _ _ ("--manager" : other) = Left ("unknown manager " ++ unwords (take 1 other))
    go pos m lim ("--idle-timeout" : secs : rest)
      | [(s, "")] <- reads secs, s >= (0 :: Double) = go pos m lim { limitIdle = round (s * 1e6) } rest
    go pos m lim ("--min-receive" : bytes : rest)
      | [(b, "")] <- reads bytes, b >= (0 :: Int) = go pos m lim { limitMinReceive = b } rest
    go pos m lim ("--max-clients" : n : rest)
      | [(k, "")] <- reads n, k > (0 :: Int) = go pos m lim { limitMaxClients = k } rest
    go pos m lim ("--evict" : policy : rest)
      | Just e <- W.parseEviction policy = go pos m lim { limitAdmit = (limitAdmit lim) { admitEviction = e } } rest
    go _ _ _ (opt@('-' : '-' : _) : _) = Left ("unknown option " ++ opt)
    go pos m lim (a : rest) = go (a : pos) m lim rest

-- | What bounds a weft connection's silence: its idle timeout in
-- microseconds (0: none), and how many received bytes count as progress
-- against it ('W.setMinimumReceive'); and the clients at most (0: from the
-- fd limit, 'W.serverMaxClients') and how a full server admits newcomers.
data Limits = Limits
  { limitIdle :: !Int, limitMinReceive :: !Int, limitMaxClients :: !Int, limitAdmit :: !Admit }

-- | How a full server treats a newcomer (Note [Making room under fd
-- pressure] in "Weft.Net.Internal.Serve"): which established connections
-- it may close for it, and what it tells a newcomer it refuses.
data Admit = Admit { admitEviction :: !W.Eviction, admitRefusal :: !B.ByteString }

-- | For protocols where idle clients are normal (echo, SimpleServer):
-- close none, refuse with a plain close.
plainAdmit :: Admit
plainAdmit = Admit W.EvictNone B.empty

-- | The minimum receive by default: 1 KiB. A request head trickled in at
-- less than 1 KiB per idle period does not hold a connection open; any
-- reply sent does.
defaultMinReceive :: Int
defaultMinReceive = 1024

-- | Serve on the address with the chosen manager until this thread is
-- killed (the listener is closed then). @ready@ gets the bound address
-- (useful with port 0). The limits apply to the weft arm.
runServer :: ManagerChoice -> Limits -> SockAddr -> (SockAddr -> IO ()) -> (Conn -> IO ()) -> IO ()
runServer WeftManager limits addr ready handler = serveWeft limits addr ready handler
runServer GhcManager _ addr ready handler = serveGhc addr ready handler

serveWeft :: Limits -> SockAddr -> (SockAddr -> IO ()) -> (Conn -> IO ()) -> IO ()
serveWeft (Limits idle minReceive maxClients (Admit eviction refusal)) addr ready handler = do
  _ <- installHandler sigUSR1 (Catch reportStats) Nothing
  let cfg = W.defaultServerConfig
        { W.serverIdleTimeout = idle, W.serverMinReceive = minReceive, W.serverOnReady = ready
        , W.serverMaxClients = maxClients, W.serverEviction = eviction, W.serverRefusal = refusal }
  W.serve cfg addr $ \s _ ->
    handler Conn { connRecv = W.recv s, connSendAll = W.sendAll s, connSendMany = W.sendMany s }
      >> W.gracefulClose s lingerMicros

-- | On SIGUSR1, one line on stderr with the sums of the managers' counters
-- that show what the dispatchers did, for the benchmarks.
reportStats :: IO ()
reportStats = do
  mgrs <- E.systemManagers
  stats <- mapM E.getManagerStats mgrs
  rings <- mapM E.getRingStats mgrs
  let total f = sum (map f stats)
      ring f = sum (map (maybe 0 f) rings)
  hPutStrLn stderr $ unwords
    [ "weft-stats", "spins=" ++ show (total E.statSpins), "spin_hits=" ++ show (total E.statSpinHits)
    , "spin_ns=" ++ show (total E.statSpinNanos), "blocking_polls=" ++ show (total E.statBlockingPolls)
    , "polls=" ++ show (total E.statNonBlockingPolls), "events=" ++ show (total E.statEvents)
    , "wakeups=" ++ show (total E.statWakeups)
    , "ring_receives=" ++ show (ring E.ringReceives), "ring_sends=" ++ show (ring E.ringSends)
    , "ring_accepts=" ++ show (ring E.ringAccepts), "no_buffer=" ++ show (ring E.ringReceivesNoBuffer)
    , "resubmits=" ++ show (ring E.ringResubmits), "kept=" ++ show (ring E.ringReceivesKept) ]

-- | The baseline: @network@'s calls, which wait in GHC's manager.
serveGhc :: SockAddr -> (SockAddr -> IO ()) -> (Conn -> IO ()) -> IO ()
serveGhc addr ready handler = bracket (N.socket N.AF_INET N.Stream N.defaultProtocol) N.close $ \l -> do
  N.setSocketOption l N.ReuseAddr 1
  N.bind l addr
  N.listen l 4096
  ready =<< N.getSocketName l
  caps <- getNumCapabilities
  next <- newIORef (0 :: Int)
  forever $ do
    accepted <- try (N.accept l)
    case accepted of
      Left e | ioe_type e == ResourceExhausted -> threadDelay 10000
             | otherwise -> hPutStrLn stderr ("accept: " ++ show e)
      Right (s, _) -> do
        cap <- atomicModifyIORef' next (\i -> ((i + 1) `rem` caps, i))
        let conn = Conn { connRecv = NB.recv s, connSendAll = NB.sendAll s
                        , connSendMany = NB.sendMany s }
        void $ mask_ $ forkOnWithUnmask cap $ \unmask -> unmask (do
          N.setSocketOption s N.NoDelay 1 `catch` \e -> const (return ()) (e :: IOException)
          handler conn
          N.gracefulClose s (lingerMicros `quot` 1000)) `catch` quiet `finally` N.close s
  where
    quiet :: SomeException -> IO ()
    quiet _ = return ()
