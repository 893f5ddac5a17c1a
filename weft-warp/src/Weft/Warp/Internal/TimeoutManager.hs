{-# LANGUAGE CPP #-}
-- | warp's connection timeouts, one timeout manager per capability where
-- @time-manager@ allows it.
--
-- Unstable: an internal module of weft-warp; use "Weft.Warp".
--
-- Note [Per-capability timeout managers]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- warp registers every connection with one timeout manager (a reaper from
-- @time-manager@): registering is an atomic update of one 'IORef' that every
-- connection on every capability touches, so accepting on one core and
-- serving on another contend for one cache line. Here a connection is added
-- to the manager of the capability its thread runs on (weft-warp forks each
-- connection onto a capability and keeps it there), so registering touches
-- only that capability's state. Tickling, pausing and resuming a
-- connection's timer were single writes to its own handle already.
--
-- Each per-capability manager keeps warp's semantics exactly: its reaper
-- wakes every timeout period, marks the connections that were active since
-- its last pass inactive, and kills those that stayed inactive for a whole
-- pass. So an idle connection is closed after between one and two timeout
-- periods (30 to 60 s by default), never before one; a paused timer (the
-- application is running) never fires. The reapers sleep with GHC's
-- 'threadDelay': one wakeup per period per capability with connections, not
-- per request. (Rebuilding the managers on weft's timing wheel would need
-- to read a handle's state, which @time-manager@ does not export.)
--
-- The per-capability manager is a 'Reaper' that dispatches on the calling
-- capability, which works while @time-manager@'s 'T.Manager' is a 'Reaper'
-- (before 0.1, so warp 3.3). From 0.1 on (warp 3.4) 'T.Manager' is
-- abstract: 'withTimeouts' leaves the settings alone and warp makes its one
-- shared manager, with the same semantics; only registering a connection
-- is shared across capabilities again.
module Weft.Warp.Internal.TimeoutManager
  ( withTimeouts
  ) where

import Network.Wai.Handler.Warp.Internal (Settings (..))
#if !MIN_VERSION_time_manager(0,1,0)
import Control.Concurrent (getNumCapabilities, myThreadId, threadCapability)
import Control.Exception (bracket)
import Control.Monad (replicateM)
import Control.Reaper (Reaper (..))
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)
import Data.Foldable (toList)
import qualified System.TimeManager as T
#endif

-- | Run the action with the settings' connection timeouts on one timeout
-- manager per capability, unless the user gave a manager or @time-manager@
-- is 0.1 or later (Note [Per-capability timeout managers]). The managers are stopped afterwards,
-- which fires the timeouts of the connections still registered, as warp
-- does at shutdown.
withTimeouts :: Settings -> (Settings -> IO a) -> IO a
#if MIN_VERSION_time_manager(0,1,0)
withTimeouts set act = act set
#else
withTimeouts set act = case settingsManager set of
  Just _ -> act set
  Nothing -> do
    caps <- getNumCapabilities
    bracket (replicateM caps (T.initialize (settingsTimeout set * 1000000))) (mapM_ T.stopManager) $ \mgrs ->
      act set { settingsManager = Just (perCapability (arrayFromListN caps mgrs)) }

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
#endif
