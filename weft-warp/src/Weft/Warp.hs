{-# LANGUAGE RankNTypes #-}
-- | Run a WAI application on weft: warp's API, with every connection's
-- accept, receive, send, file send and close going through weft's sockets
-- ("Weft.Net") and weft's per-capability managers.
--
-- Porting a warp application is an import change: replace
--
-- > import Network.Wai.Handler.Warp
--
-- with
--
-- > import Weft.Warp
--
-- A whole program:
--
-- > {-# LANGUAGE OverloadedStrings #-}
-- > import Network.HTTP.Types (status200)
-- > import Network.Wai (responseLBS)
-- > import Weft.Warp   -- was: import Network.Wai.Handler.Warp
-- >
-- > main :: IO ()
-- > main = runSettings (setPort 8080 (setTimeout 30 defaultSettings)) $ \_req respond ->
-- >   respond (responseLBS status200 [] "hello")
--
-- This module exports everything "Network.Wai.Handler.Warp" exports (warp
-- 3.3.21 to 3.4), with the same names and types. Warp parses the requests, runs
-- the application and writes the responses (HTTP\/1.1 and HTTP\/2) exactly
-- as it always does; what changes is underneath:
--
-- * The listening socket is taken over by weft. Accepting waits in weft,
--   and a full server still answers newcomers ('Weft.Net.acceptAdmitting';
--   Note [Making room under fd pressure] in "Weft.Net.Internal.Serve"): at
--   most the soft @RLIMIT_NOFILE@ less 'Weft.Net.reservedFds' connections
--   (or @WEFT_MAX_CLIENTS@, if set)
--   are served at once, and a newcomer that finds the server full (by that
--   count, or out of fds: a reserve fd lets it be accepted even then)
--   gets a connection closed for it, one stalled in the middle of a
--   request or idle between requests ('Weft.Net.EvictStalledThenIdle', as
--   nginx and HTTP allow; @WEFT_EVICTION=none|stalled@ chooses another
--   policy, 'Weft.Net.evictionSetting'), or else a 503 with
--   @Connection: close@. Stock
--   warp, by version, retries in a busy loop, stops accepting, or waits for
--   one of its connections to close.
-- * Each connection's 'Connection' is built on a weft socket: receives,
--   sends, gather sends, @sendfile(2)@ for 'Network.Wai.responseFile', and
--   the (graceful) close. None of its waits reaches GHC's I/O manager.
-- * Connections are placed on the capabilities round-robin, by this
--   module's 'defaultSettings' (its 'settingsFork'), and stay there.
-- * The connection timeouts ('setTimeout') run on one timeout manager per
--   capability instead of one shared by all (Note [Per-capability timeout
--   managers] in "Weft.Warp.Internal.Run"), on warp 3.3 and on warp 3.4.2
--   and later; warp 3.4.0 and 3.4.1 give no way to, so there they run on
--   warp's one manager. Either way their semantics are warp's: an idle
--   connection is closed after between one and two timeout periods.
--
-- What still runs on GHC's own I/O manager and timers: warp's date-cache
-- thread (about one 'threadDelay' a second under load), the reapers of the
-- timeout managers (one wakeup per period per capability), the optional fd
-- and file-info caches, the timeout of a graceful shutdown, and whatever
-- I\/O the application does itself. Reading regular files (for HTTP\/2
-- file responses) blocks a capability briefly, as with stock warp.
--
-- Settings are honoured as in warp, with two that change meaning:
--
-- * 'setFork': the default (this module's 'defaultSettings') forks each
--   connection onto the next capability, round-robin. A custom fork
--   replaces that placement; the connection still uses weft's sockets.
--   Settings built from warp's own @defaultSettings@ keep warp's fork (the
--   RTS places the threads).
-- * 'setManager': a custom timeout manager is used as given, shared by
--   all capabilities; without one, weft-warp makes one per capability.
--
-- 'setInstallShutdownHandler' receives an action that closes weft's
-- listening socket; warp then stops accepting, waits for the open
-- connections (at most 'setGracefulShutdownTimeout') and returns, as it
-- does on stock warp.
module Weft.Warp
  ( -- * Running an application
    run
  , runEnv
  , runSettings
  , runSettingsSocket
    -- * Settings
  , defaultSettings
    -- * Testing
  , withApplication
  , withApplicationSettings
  , testWithApplication
  , testWithApplicationSettings
    -- * Everything else, as warp has it
  , module Network.Wai.Handler.Warp
  ) where

import Control.Concurrent
import Control.Concurrent.Async (race)
import Control.Exception
import Control.Monad (void, when)
import qualified Data.ByteString.Char8 as C
import Data.Streaming.Network (bindPortTCP)
import Network.Socket (Socket)
import qualified Network.Socket as N
import Network.Wai (Application)
import Network.Wai.Handler.Warp hiding
  ( run, runEnv, runSettings, runSettingsSocket, defaultSettings
  , withApplication, withApplicationSettings, testWithApplication, testWithApplicationSettings )
import qualified Network.Wai.Handler.Warp as Warp
import Network.Wai.Handler.Warp.Internal
  (Connection (..), Settings (..), Transport (TCP))
import System.Environment (lookupEnv)

import Weft.Event (startSystemManagers)
import Weft.Internal.Error (invalidArgument)
import qualified Weft.Net as Net
import Weft.Warp.Internal.Connection (weftConnection)
import Weft.Warp.Internal.Run (runConnections)

-- | warp's default settings, with connections forked onto the capabilities
-- round-robin. Use it (rather than warp's) so connections are spread
-- evenly and stay on their capability.
defaultSettings :: Settings
defaultSettings = Warp.defaultSettings { settingsFork = \io -> void (Net.forkRoundRobin io) }

-- | Run an application on the given port (on all interfaces), with
-- 'defaultSettings'. Throws an 'IOError' if the port cannot be bound.
run :: Port -> Application -> IO ()
run port = runSettings (setPort port defaultSettings)

-- | Run an application on the port in the @PORT@ environment variable, or
-- on the given port if it is not set; with 'defaultSettings'. Throws an
-- 'InvalidArgument' 'IOError' (@EINVAL@) if @PORT@ is not a number, before
-- serving anything.
runEnv :: Port -> Application -> IO ()
runEnv port app = do
  var <- lookupEnv "PORT"
  case var of
    Nothing -> run port app
    Just text -> case reads text of
      ((p, "") : _) -> run p app
      _ -> ioError (invalidArgument "runEnv" ("invalid value in $PORT: " ++ text))

-- | Run an application with the given settings: bind the settings' host
-- and port (as warp does, with @SO_REUSEADDR@), then 'runSettingsSocket'.
-- Returns after a shutdown ('setInstallShutdownHandler'). Throws an
-- 'IOError' if the address cannot be bound.
runSettings :: Settings -> Application -> IO ()
runSettings set app =
  bracket (bindPortTCP (settingsPort set) (settingsHost set)) N.close $ \sock ->
    runSettingsSocket set sock app

-- | Serve an application on a listening socket. weft takes the socket
-- over: it is closed here (weft owns a duplicate of its fd, which it
-- closes when serving ends), so closing it afterwards does nothing. To
-- stop the server, use 'setInstallShutdownHandler' (graceful: open
-- connections are waited for, at most 'setGracefulShutdownTimeout'), or
-- kill the thread (abrupt, as with warp). Starts weft's managers on every
-- capability first, so running out of fds later cannot keep one from
-- starting. Throws an 'IOError' if that fails.
runSettingsSocket :: Settings -> Socket -> Application -> IO ()
runSettingsSocket set0 sock app = do
  startSystemManagers
  -- The connections being served, for the client limit and for choosing
  -- one to close for a newcomer.
  clients <- Net.newClients
  let acceptOne adm listener = do
        (s, peer) <- Net.acceptAdmitting adm listener
        Net.trackProgress s
        Net.addClient clients s
        return (makeConnection (void . Net.removeClient clients) s, peer)
  listener <- Net.fromNetworkSocket sock
  (`finally` Net.close listener) $
    bracket (Net.evictionSetting Net.EvictStalledThenIdle >>= \policy ->
               Net.admitClients 0 policy refusalResponse clients) Net.closeAdmission $ \adm -> do
      settingsInstallShutdownHandler set0 (Net.close listener)
      runConnections set0 (acceptOne adm listener) app
  where
    -- Runs on the connection's own thread, masked: warp closes the
    -- connection it returns; if it throws, the socket is closed here.
    makeConnection forget s = (`onException` (forget s >> Net.close s)) $ do
      -- Fails on a Unix-domain socket: harmless.
      Net.setNoDelay s True `catch` \e -> const (return ()) (e :: IOException)
      conn <- weftConnection set0 s
      return (conn { connClose = forget s >> connClose conn }, TCP)

-- | What a newcomer is told when the server is full and no connection can
-- be closed for it.
refusalResponse :: C.ByteString
refusalResponse = C.pack
  "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

-- | Run the application on a free loopback port while the action runs,
-- with 'defaultSettings'; the action gets the port. The server starts
-- before the action and is stopped (abruptly) after it.
withApplication :: IO Application -> (Port -> IO a) -> IO a
withApplication = withApplicationSettings defaultSettings

-- | 'withApplication' with settings. Throws 'ErrorCall' if the server
-- stops on its own before the action returns.
withApplicationSettings :: Settings -> IO Application -> (Port -> IO a) -> IO a
withApplicationSettings set0 mkApp action = do
  app <- mkApp
  bracket openFreePort (N.close . snd) $ \(port, sock) -> do
    started <- newEmptyMVar
    let set = set0 { settingsBeforeMainLoop = putMVar started () >> settingsBeforeMainLoop set0 }
    result <- race (runSettingsSocket set sock app) (takeMVar started >> action port)
    case result of
      Left () -> throwIO (ErrorCall "Weft.Warp.withApplication: the server stopped")
      Right x -> return x

-- | 'withApplication', where an exception the application throws (one
-- 'defaultShouldDisplayException' would show) is also thrown to the
-- calling thread, so a test fails with it.
testWithApplication :: IO Application -> (Port -> IO a) -> IO a
testWithApplication = testWithApplicationSettings defaultSettings

-- | 'testWithApplication' with settings.
testWithApplicationSettings :: Settings -> IO Application -> (Port -> IO a) -> IO a
testWithApplicationSettings set mkApp action = do
  caller <- myThreadId
  app <- mkApp
  let checked req respond = app req respond `catch` \e -> do
        when (defaultShouldDisplayException e) (throwTo caller e)
        throwIO e
  withApplicationSettings set (return checked) action
