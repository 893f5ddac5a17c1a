{-# LANGUAGE CPP #-}
-- | Choosing and opening a backend. epoll is compiled on Linux only
-- (@WEFT_LINUX@, set by weft.cabal); elsewhere, and in the @portable@
-- build, poll is the only backend.
-- Internal and unstable: weft's own modules and tests use it.
module Weft.Event.Internal.Backends
  ( BackendKind (..)
  , newBackend
  , defaultBackendKind
  , backendKindFromEnv
  , parseBackendKind
  , availableBackendKinds
  ) where

import System.Environment (lookupEnv)

#ifdef WEFT_LINUX
import qualified Weft.Event.Internal.Backend.EPoll as EPoll
import Weft.Event.Internal.Backend.Uring (newUringBackend)
#endif
import Weft.Event.Internal.Backend.Poll (newPollBackend)
import Weft.Event.Internal
import Weft.Event.Internal.Wakeup (WakeupKind (..))
import Weft.Internal.Error (invalidArgument)
#ifndef WEFT_LINUX
import Weft.Internal.Error (unsupported)
#endif

-- | Open a backend of the given kind, with an eventfd wakeup channel (a pipe
-- where eventfd is missing). Throws an 'IOError' if its fds cannot be had,
-- or (@UnsupportedOperation@) if this build has no such backend. A uring
-- backend the kernel refuses is an 'IOError' with the set-up's errno
-- (@ENOSYS@, @EPERM@): this call never falls back; the system managers do
-- ("Weft.Event.Internal.System").
newBackend :: BackendKind -> IO Backend
#ifdef WEFT_LINUX
newBackend EPollBackend = EPoll.newEPollBackend EventFdWakeup
newBackend UringBackend = newUringBackend
#else
newBackend EPollBackend =
  ioError (unsupported "newBackend" "this build has no epoll backend (it is Linux's); use poll")
newBackend UringBackend =
  ioError (unsupported "newBackend" "this build has no io_uring backend (it is Linux's); use poll")
#endif
newBackend PollBackend = newPollBackend EventFdWakeup

-- | The backends this build has, the default first. (Whether the kernel
-- lets a process use io_uring is known only when a ring is set up.)
availableBackendKinds :: [BackendKind]
#ifdef WEFT_LINUX
availableBackendKinds = [EPollBackend, PollBackend, UringBackend]
#else
availableBackendKinds = [PollBackend]
#endif

-- | epoll where available, else poll.
defaultBackendKind :: BackendKind
defaultBackendKind = case availableBackendKinds of
  kind : _ -> kind
  [] -> PollBackend

-- | Parse @"epoll"@, @"poll"@ or @"uring"@.
parseBackendKind :: String -> Maybe BackendKind
parseBackendKind s = lookup s [ (backendKindName k, k) | k <- [minBound .. maxBound] ]

-- | The kind named by @WEFT_BACKEND@, or the default if it is unset or empty.
-- An unknown name is an 'IOError' naming the accepted values.
backendKindFromEnv :: IO BackendKind
backendKindFromEnv = do
  v <- lookupEnv "WEFT_BACKEND"
  case v of
    Nothing -> return defaultBackendKind
    Just "" -> return defaultBackendKind
    Just s -> maybe (ioError (invalidArgument "WEFT_BACKEND"
                               (show s ++ " is not a backend; use epoll, poll or uring"))) return
                    (parseBackendKind s)
