-- | One I/O manager: an fd-indexed registration table, a backend, a
-- timer wheel and a dispatcher thread pinned to one capability. This
-- module puts the parts together for weft's own modules; users import
-- "Weft.Event", "Weft.Timer" and "Weft". Internal and unstable.
module Weft.Event.Internal.Core
  ( -- * Managers
    Manager
  , newManager
  , managerCapability
  , managerId
  , nextKey
  , managerBackendKind
  , shutdownManager
  , wakeManager
  , managerBlocked
    -- * Completions
  , managerCompletions
    -- * Waiting and registering
  , IOCallback
  , FdKey (..)
  , waitOn
  , waitSTMOn
  , registerFd
  , unregisterFd
  , unregisterFd_
  , closeFdOn
    -- * Edge-triggered watches
  , Watch
  , watchedFd
  , watchFdWaits
  , watchFdNotify
  , awaitReadable
  , awaitWritable
  , endWatch
    -- * Timers
  , TimeoutKey
  , TimeoutCallback
  , registerTimeout
  , updateTimeout
  , unregisterTimeout
  , unregisterTimeout_
  , delayOn
  , registerDelayOn
    -- * Statistics
  , ManagerStats (..)
  , getManagerStats
  , RingStats (..)
  , getRingStats
  ) where

import Weft.Event.Internal.Dispatcher
import Weft.Event.Internal.Manager
import Weft.Event.Internal.Registry
import Weft.Event.Internal.Stats
import Weft.Timer.Internal.ManagerTimers
