{-# LANGUAGE BangPatterns, RankNTypes, ScopedTypeVariables #-}
-- | A colored event runtime with work stealing: the Mely design (Gaud et
-- al., 2010), on weft's managers.
--
-- An /event/ is a handler plus the work it continues, posted with a
-- /color/. Two events of one color never run at the same time, and they
-- run in the order they were posted; events of different colors may run in
-- parallel. So handlers that share state share a color, and need no locks.
-- One worker per core runs events; an idle worker steals whole colors from
-- busy ones, by the chosen 'Policy'.
--
-- Handlers must not block: a handler that waits (on an 'MVar', a blocking
-- socket call, 'threadDelay') stalls its core. The capability stays free
-- for other Haskell threads, but the core's other events wait, except
-- those a thief steals; under 'NoStealing' a handler that waits for an
-- event of its own core waits forever. Do I/O with non-blocking calls and
-- continue with 'onReadable' or 'onWritable', or an 'FdWatch' (no syscall
-- per wait), when they would block. With
-- 'cfgLongHandlerNanos' set, every handler is timed and the ones that run
-- longer are counted ('csLongHandlers').
--
-- A handler that throws is reported on stderr and counted
-- ('csHandlerErrors'); its worker goes on with the next event.
--
-- For example, 16 counters, one per color: each is touched only by events
-- of its color, so plain 'Data.IORef.IORef's are safe although events run
-- on every core:
--
-- > import Control.Monad (forM_)
-- > import Data.IORef
-- > import Weft.Color
-- >
-- > main :: IO ()
-- > main = do
-- >   rt <- newRuntime defaultConfig            -- Mely stealing, one worker per capability
-- >   counters <- mapM (const (newIORef (0 :: Int))) [0 .. 15 :: Int]
-- >   let bump = (handler "bump") { handlerCost = 200 }  -- ns, a hint for stealing
-- >   forM_ [1 .. 1000 :: Int] $ \i ->
-- >     post rt (i `mod` 16) bump (modifyIORef' (counters !! (i `mod` 16)) (+ i))
-- >   shutdown rt                               -- runs everything accepted, then stops
-- >   mapM readIORef counters >>= print
module Weft.Color
  ( -- * Colors and handlers
    Color
  , defaultColor
  , Handler (..)
  , handler
    -- * Runtimes
  , Runtime
  , Config (..)
  , defaultConfig
  , Policy (..)
  , allPolicies
  , policyName
  , parsePolicy
  , newRuntime
  , runtimeCores
  , post
  , shutdown
  , RuntimeClosed (..)
    -- * I/O
  , onReadable
  , onWritable
  , FdWatch
  , watchFd
  , rearmRead
  , rearmWrite
  , unwatchFd
    -- * Sockets
  , watchSocket
  , lingerClose
    -- * Statistics
  , CoreStats (..)
  , stats
  , stealCostNanos
    -- * Debugging
  , runtimeQueues
    -- * Topology
  , module Weft.Color.Internal.Topology
  ) where

import Weft.Color.Internal.Io
import Weft.Color.Internal.Runtime
import Weft.Color.Internal.Topology
