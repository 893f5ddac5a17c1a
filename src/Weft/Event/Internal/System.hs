-- | The system managers: one per capability, made on first use.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [System managers and capabilities]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- The managers live in an immutable array behind an 'IORef', read without a
-- lock; a missing one is made under 'systemLock' and a new array published.
-- When 'setNumCapabilities' shrinks, the RTS moves the dispatchers of the
-- dropped capabilities onto the remaining ones, where they keep serving the
-- waits registered with them. When it grows again, each dispatcher returns to
-- its own capability after its next blocking poll; weft's 'setNumCapabilities'
-- wakes them so that happens at once.
--
-- Note [Falling back from io_uring]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A kernel without io_uring, one with it disabled
-- (@kernel.io_uring_disabled@), or a seccomp profile that blocks it (as
-- container runtimes' defaults do) refuses to set up a ring. The system
-- managers are chosen by deployment (@WEFT_BACKEND=uring@ or
-- 'setSystemBackend'), and a server should not stop serving because its
-- container forbids a faster path: they fall back to the default backend
-- (epoll), say so once on stderr, and record why
-- ('systemBackendFallback'). A program that must have io_uring checks that,
-- or opens its own manager with 'Weft.Event.newManager', which never falls
-- back.
module Weft.Event.Internal.System
  ( getSystemManager
  , startSystemManagers
  , systemManagers
  , systemBackendKind
  , systemCompletes
  , setSystemBackend
  , shutdownSystemManagers
  , setNumCapabilities
  , systemBackendFallback
  ) where

import Control.Concurrent (rtsSupportsBoundThreads)
import Control.Concurrent.MVar
import Control.Exception (try)
import Control.Monad (forM_, unless)
import Data.IORef
import Data.Maybe (catMaybes, isJust)
import Data.Primitive.Array
import qualified GHC.Conc as Conc
import System.IO (hPutStrLn, stderr)
import System.IO.Unsafe (unsafePerformIO)

import Weft.Event.Internal.Backends (backendKindFromEnv, defaultBackendKind)
import Weft.Event.Internal (BackendKind (..), backendKindName)
import Weft.Event.Internal.Core
import Weft.Internal.Capability (currentCapability)
import Weft.Internal.Error (unsupported)

{-# NOINLINE systemRef #-}
systemRef :: IORef (Array (Maybe Manager))
systemRef = unsafePerformIO (newIORef (arrayFromListN 0 []))

-- | Held while managers are made or shut down; holds the chosen backend
-- ('Nothing': read @WEFT_BACKEND@ when the first manager is made).
{-# NOINLINE systemLock #-}
systemLock :: MVar (Maybe BackendKind)
systemLock = unsafePerformIO (newMVar Nothing)

-- | The manager of the capability the calling thread runs on, started if
-- need be. Requires the threaded RTS (@-threaded@); throws an 'IOError'
-- otherwise, or if @WEFT_BACKEND@ names no backend, or if the backend's fds
-- cannot be had.
getSystemManager :: IO Manager
getSystemManager = do
  cap <- currentCapability
  arr <- readIORef systemRef
  if cap < sizeofArray arr
    then maybe (start cap) return (indexArray arr cap)
    else start cap
{-# INLINE getSystemManager #-}

start :: Int -> IO Manager
start cap = do
  unless rtsSupportsBoundThreads $
    ioError (unsupported "getSystemManager" "needs the threaded RTS; link with -threaded")
  modifyMVar systemLock $ \chosen -> do
    kind <- maybe backendKindFromEnv return chosen
    arr <- readIORef systemRef
    let existing = if cap < sizeofArray arr then indexArray arr cap else Nothing
    case existing of
      Just m -> return (Just kind, m)
      Nothing -> do
        (kind', m) <- newSystemManager kind cap
        let size = max (cap + 1) (sizeofArray arr)
            at i | i == cap = Just m
                 | i < sizeofArray arr = indexArray arr i
                 | otherwise = Nothing
        writeIORef systemRef (arrayFromListN size (map at [0 .. size - 1]))
        return (Just kind', m)

-- | A manager of the given kind, or of the default kind if the kernel
-- refuses io_uring (Note [Falling back from io_uring]).
newSystemManager :: BackendKind -> Int -> IO (BackendKind, Manager)
newSystemManager UringBackend cap = do
  r <- try (newManager UringBackend cap)
  case r of
    Right m -> return (UringBackend, m)
    Left e -> do
      writeIORef fallbackRef (Just e)
      hPutStrLn stderr ("weft: the kernel refused io_uring (" ++ show e ++ "); using "
                        ++ backendKindName defaultBackendKind ++ " instead")
      (,) defaultBackendKind <$> newManager defaultBackendKind cap
newSystemManager kind cap = (,) kind <$> newManager kind cap

{-# NOINLINE fallbackRef #-}
fallbackRef :: IORef (Maybe IOError)
fallbackRef = unsafePerformIO (newIORef Nothing)

-- | Why the system managers fell back from io_uring to the default backend,
-- if they did (Note [Falling back from io_uring]); 'Nothing' once
-- 'setSystemBackend' chooses again.
systemBackendFallback :: IO (Maybe IOError)
systemBackendFallback = readIORef fallbackRef

-- | Start the system manager of every capability now, rather than on
-- first use: a server calls this before it accepts, so that running out of
-- fds later cannot keep a manager from starting. Throws an 'IOError' as
-- 'getSystemManager' does.
startSystemManagers :: IO ()
startSystemManagers = do
  n <- Conc.getNumCapabilities
  mapM_ start [0 .. n - 1]

-- | Every system manager started so far.
systemManagers :: IO [Manager]
systemManagers = catMaybes . foldr (:) [] <$> readIORef systemRef

-- | Whether the system managers' backend performs requests itself, or
-- will once they start (Note [Two ways to wait] in
-- "Weft.Event.Internal.Completions"): what a socket made now should be
-- ready for. All system managers share one backend kind.
systemCompletes :: IO Bool
systemCompletes = do
  running <- systemManagers
  case running of
    m : _ -> return (isJust (managerCompletions m))
    [] -> (== UringBackend) <$> systemBackendKind

-- | The backend the system managers use (or will use, once started).
systemBackendKind :: IO BackendKind
systemBackendKind = withMVar systemLock (maybe backendKindFromEnv return)

-- | Use this backend for the system managers: the running ones are shut down
-- ('shutdownSystemManagers') and new ones start on demand.
setSystemBackend :: BackendKind -> IO ()
setSystemBackend kind = modifyMVar_ systemLock $ \_ -> do
  stopAll
  writeIORef fallbackRef Nothing
  return (Just kind)

-- | Shut every system manager down ('shutdownManager'): pending waits fail
-- with an 'IOError' and every fd and thread they held is released. Waits
-- made afterwards start new managers.
shutdownSystemManagers :: IO ()
shutdownSystemManagers = modifyMVar_ systemLock $ \chosen -> stopAll >> return chosen

stopAll :: IO ()
stopAll = do
  mgrs <- systemManagers
  writeIORef systemRef (arrayFromListN 0 [])
  mapM_ shutdownManager mgrs

-- | 'GHC.Conc.setNumCapabilities', then wake every manager so that each
-- dispatcher settles on its own capability at once (Note [System managers
-- and capabilities]). Plain 'GHC.Conc.setNumCapabilities' is also safe; the
-- dispatchers then settle after their next poll.
setNumCapabilities :: Int -> IO ()
setNumCapabilities n = do
  Conc.setNumCapabilities n
  mgrs <- systemManagers
  forM_ mgrs wakeManager
