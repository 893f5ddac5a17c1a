-- | The low-level event API, mirroring "GHC.Event": per-capability managers,
-- callbacks on fd events, and manager statistics.
--
-- Callbacks run on the manager's dispatcher thread, one at a time; keep them
-- short. A callback that throws is reported on stderr and counted, and the
-- dispatcher carries on.
--
-- For example, a one-shot callback on standard input, then the calling
-- capability's manager's count of delivered events. The callback only
-- fills an 'Control.Concurrent.MVar.MVar', so the dispatcher is not held up:
--
-- > import Control.Concurrent.MVar
-- > import System.Posix.Types (Fd (..))
-- > import qualified Weft.Event as E
-- >
-- > waitStdin :: IO ()
-- > waitStdin = do
-- >   mgr <- E.getSystemManager                -- the calling capability's manager
-- >   ready <- newEmptyMVar
-- >   _ <- E.registerFd mgr (\_ _ -> putMVar ready ()) (Fd 0) E.evtRead E.OneShot
-- >   takeMVar ready
-- >   E.getManagerStats mgr >>= print . E.statEvents
module Weft.Event
  ( -- * Managers
    Manager
  , getSystemManager
  , startSystemManagers
  , systemManagers
  , newManager
  , shutdownManager
  , shutdownSystemManagers
  , managerCapability
  , managerBackendKind
  , isManagerShutDownError
    -- * Backends
  , BackendKind (..)
  , backendKindName
  , parseBackendKind
  , availableBackendKinds
  , setSystemBackend
  , systemBackendKind
  , systemBackendFallback
    -- * Events
  , Event
  , evtRead
  , evtWrite
  , evtClose
  , evtHangup
  , eventIs
  , Lifetime (..)
    -- * Registering callbacks
  , IOCallback
  , FdKey
  , keyFd
  , registerFd
  , unregisterFd
  , unregisterFd_
  , closeFd
    -- * Statistics
  , ManagerStats (..)
  , getManagerStats
  , RingStats (..)
  , getRingStats
  ) where

import System.Posix.Types (Fd)

import Weft.Event.Internal.Backends (availableBackendKinds, parseBackendKind)
import Weft.Event.Internal
import Weft.Event.Internal.Core
import Weft.Event.Internal.System
import Weft.Internal.Error (isManagerShutDownError)

-- | Close an fd watched by one manager: see 'Weft.closeFdWith', which does
-- this for every system manager.
closeFd :: Manager -> (Fd -> IO ()) -> Fd -> IO ()
closeFd mgr = closeFdOn [mgr]
