{-# LANGUAGE CPP #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | warp's main loop over weft's accepts, with the connection timeouts on
-- one timeout manager per capability where warp and @time-manager@ allow
-- it.
--
-- Unstable: an internal module of weft-warp; use "Weft.Warp".
--
-- Note [Per-capability timeout managers]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- warp registers every connection with one timeout manager (a reaper from
-- @time-manager@): registering and cancelling are atomic updates of one
-- 'IORef' that every connection on every capability touches, so accepting
-- on one core and serving on another contend for one cache line. Here a
-- connection is added to the manager of the capability its thread runs on
-- (weft-warp forks each connection onto a capability and keeps it there),
-- so registering touches only that capability's state. Tickling, pausing
-- and resuming a connection's timer are single writes to its own handle
-- either way.
--
-- Each per-capability manager keeps warp's semantics exactly: its reaper
-- wakes every timeout period, marks the connections that were active since
-- its last pass inactive, and kills those that stayed inactive for a whole
-- pass. So an idle connection is closed after between one and two timeout
-- periods (30 to 60 s by default), never before one; a paused timer (the
-- application is running) never fires. The reapers sleep with GHC's
-- 'threadDelay': one wakeup per period per capability with connections, not
-- per request. When the managers stop (the server returns), the timeouts
-- of the connections still registered fire, as warp's do.
--
-- How a connection reaches its capability's manager depends on what the
-- warp in use lets a caller do; the managers and their semantics are the
-- same:
--
-- * warp 3.4.2 and later export the pieces of their main loop
--   ('serveConnection', 'withII'): weft-warp runs the loop itself (the
--   same steps as warp's: fork, register a kill-thread handle, count the
--   connection, 'settingsOnOpen'/'settingsOnClose', graceful shutdown)
--   and gives each capability an 'InternalInfo' with its own manager;
--   the date, fd and file-info caches stay shared.
-- * Before @time-manager@ 0.1 (warp 3.3), 'T.Manager' is a 'Reaper':
--   warp's loop runs, given one manager that adds each handle to the
--   calling capability's reaper.
-- * warp 3.4.0 and 3.4.1 have neither: their one shared manager is used.
--
-- A manager given with 'setManager' is used as given, shared by all.
module Weft.Warp.Internal.Run
  ( runConnections
  ) where

import Network.Socket (SockAddr)
import Network.Wai (Application)
import Network.Wai.Handler.Warp.Internal (Connection, Settings (..), Transport)
#if MIN_VERSION_warp(3,4,2)
import Control.Concurrent (getNumCapabilities, myThreadId, threadCapability)
import Control.Concurrent.STM
import qualified Control.Exception as E
import Control.Monad (replicateM, void, when)
import Data.IORef (readIORef)
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)
import Network.Wai.Handler.Warp.Internal
  (Connection (..), InternalInfo (..), WriteBuffer (..), serveConnection, withII)
import qualified System.TimeManager as T
import Weft.Timer (timeout)
#else
import Network.Wai.Handler.Warp.Internal (runSettingsConnectionMakerSecure)
#endif
#if !MIN_VERSION_time_manager(0,1,0)
import Control.Concurrent (getNumCapabilities, myThreadId, threadCapability)
import Control.Exception (bracket)
import Control.Monad (replicateM)
import Control.Reaper (Reaper (..))
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)
import Data.Foldable (toList)
import qualified System.TimeManager as T
#endif

-- | warp's @runSettingsConnectionMakerSecure@: accept with the action (it
-- returns a connection maker, run on the connection's thread, and the
-- peer), serve each connection, and when accepting fails (the listener was
-- closed) report it to 'settingsOnException', wait for the open
-- connections (at most 'settingsGracefulShutdownTimeout') and return.
-- The connection timeouts run per capability (Note [Per-capability timeout
-- managers]).
runConnections :: Settings -> IO (IO (Connection, Transport), SockAddr) -> Application -> IO ()
#if MIN_VERSION_warp(3,4,2)
runConnections set getConnMaker app = do
  settingsBeforeMainLoop set
  open <- newTVarIO (0 :: Int)
  withII set $ \ii -> withInfos ii $ \infos -> do
    -- Masked, so a connection accepted is always handed to its thread
    -- (which closes it); interruptible at the accept's wait.
    E.mask_ (acceptLoop open infos)
    -- Async exceptions allowed: killing the server skips the wait.
    case settingsGracefulShutdownTimeout set of
      Nothing -> waitNone open
      Just s -> void (timeout (s * 1000000) (waitNone open))
  where
    waitNone open = atomically (readTVar open >>= \n -> when (n > 0) retry)
    acceptLoop open infos = do
      E.allowInterrupt
      r <- E.try getConnMaker
      case r of
        -- weft's accept rides out fd exhaustion and skips aborted
        -- connections itself; what it throws ends the loop.
        Left (e :: E.IOException) -> settingsOnException set Nothing (E.toException e)
        Right (mkConn, peer) -> do
          settingsFork set $ \unmask ->
            -- Everything, async exceptions included, goes to the handler,
            -- as in warp: nothing escapes a connection's thread.
            E.handle (settingsOnException set Nothing) $
              E.bracket mkConn closeConnection (serve open infos unmask peer)
          acceptLoop open infos
    serve open infos unmask peer (conn, transport) = do
      ii <- infoHere infos
      T.withHandleKillThread (timeoutManager ii) (return ()) $ \th -> unmask $
        E.bracket (opened open peer) (\_ -> closed open peer) $ \goingOn ->
          when goingOn (serveConnection conn ii th peer transport set app)
    opened open peer = atomically (modifyTVar' open (+ 1)) >> settingsOnOpen set peer
    closed open peer = atomically (modifyTVar' open (subtract 1)) >> settingsOnClose set peer
    closeConnection (conn, _) =
      connClose conn `E.finally` (bufFree =<< readIORef (connWriteBuffer conn))
    -- One InternalInfo per capability, each with its own manager, unless
    -- the user gave one.
    withInfos ii act = case settingsManager set of
      Just _ -> act (arrayFromListN 1 [ii])
      Nothing -> do
        caps <- getNumCapabilities
        E.bracket (replicateM caps (T.initialize (settingsTimeout set * 1000000)))
                  (mapM_ T.stopManager) $ \mgrs ->
          act (arrayFromListN caps [ ii { timeoutManager = m } | m <- mgrs ])

-- | The calling thread's capability's 'InternalInfo' (modulo their number,
-- should capabilities have been added since).
infoHere :: Array InternalInfo -> IO InternalInfo
infoHere infos = do
  (cap, _) <- threadCapability =<< myThreadId
  return (indexArray infos (cap `rem` sizeofArray infos))
#elif !MIN_VERSION_time_manager(0,1,0)
runConnections set getConnMaker app = case settingsManager set of
  Just _ -> runSettingsConnectionMakerSecure set getConnMaker app
  Nothing -> do
    caps <- getNumCapabilities
    bracket (replicateM caps (T.initialize (settingsTimeout set * 1000000))) (mapM_ T.stopManager) $ \mgrs ->
      runSettingsConnectionMakerSecure set { settingsManager = Just (perCapability (arrayFromListN caps mgrs)) }
                                       getConnMaker app

-- | One manager that adds each handle to the manager of the calling
-- thread's capability (modulo their number, should capabilities have
-- been added since), and reads, stops and kills them all.
perCapability :: Array T.Manager -> T.Manager
perCapability mgrs = Reaper
  { reaperAdd = \h -> do
      (cap, _) <- threadCapability =<< myThreadId
      reaperAdd (indexArray mgrs (cap `rem` sizeofArray mgrs)) h
  , reaperRead = concat <$> mapM reaperRead (toList mgrs)
  , reaperStop = concat <$> mapM reaperStop (toList mgrs)
  , reaperKill = mapM_ reaperKill (toList mgrs)
  }
#else
runConnections = runSettingsConnectionMakerSecure
#endif
