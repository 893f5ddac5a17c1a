-- | Choosing and opening a backend.
-- Internal and unstable: weft's own modules and tests use it.
module Weft.Event.Internal.Backend
  ( BackendKind (..)
  , newBackend
  , defaultBackendKind
  , backendKindFromEnv
  , parseBackendKind
  ) where

import System.Environment (lookupEnv)

import qualified Weft.Event.Internal.Backend.EPoll as EPoll
import Weft.Event.Internal.Backend.Poll (newPollBackend)
import Weft.Event.Internal
import Weft.Event.Internal.Wakeup (WakeupKind (..))
import Weft.Internal.Error (invalidArgument)

-- | Open a backend of the given kind, with an eventfd wakeup channel (a pipe
-- where eventfd is missing). Throws an 'IOError' if its fds cannot be had.
newBackend :: BackendKind -> IO Backend
newBackend EPollBackend = EPoll.newEPollBackend EventFdWakeup
newBackend PollBackend = newPollBackend EventFdWakeup

-- | epoll where available, else poll.
defaultBackendKind :: BackendKind
defaultBackendKind = if EPoll.available then EPollBackend else PollBackend

-- | Parse @"epoll"@ or @"poll"@.
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
                               (show s ++ " is not a backend; use epoll or poll"))) return
                    (parseBackendKind s)
