-- | The 'IOError's weft raises, in one place so that each kind has one
-- shape: the right 'IOErrorType', an errno that code can test, and the
-- location (@weft: function@). Internal and unstable; the predicates users
-- need are re-exported by the public modules.
module Weft.Internal.Error
  ( weftError
  , syscallError
  , invalidArgument
  , unsupported
  , managerShutDown
  , isManagerShutDownError
  , idleTimedOut
  , isIdleTimeoutError
  , hasErrno
  ) where

import Foreign.C.Error
import GHC.IO.Exception (IOErrorType (..), IOException (..))

-- | An error of this type and errno, at this location (a function name,
-- prefixed with @weft: @), with this description.
weftError :: IOErrorType -> Errno -> String -> String -> IOError
weftError ty errno loc description =
  (syscallError loc errno) { ioe_type = ty, ioe_description = description }

-- | A failed system call, or a failure reported as one: the errno, with
-- the 'IOErrorType' GHC gives it ('errnoToIOError': @ECONNREFUSED@ is
-- 'NoSuchThing', @EPIPE@ 'ResourceVanished', @EBADF@ 'InvalidArgument',
-- ...) and the errno's text as the description.
syscallError :: String -> Errno -> IOError
syscallError loc errno = errnoToIOError ("weft: " ++ loc) errno Nothing Nothing

-- | A bad argument or configuration ('InvalidArgument', @EINVAL@).
invalidArgument :: String -> String -> IOError
invalidArgument = weftError InvalidArgument eINVAL

-- | Something this build or runtime cannot do ('UnsupportedOperation',
-- @ENOTSUP@).
unsupported :: String -> String -> IOError
unsupported = weftError UnsupportedOperation eNOTSUP

-- | A wait or registration on a manager that was shut down
-- ('IllegalOperation', @ESHUTDOWN@).
managerShutDown :: String -> IOError
managerShutDown loc = weftError IllegalOperation eSHUTDOWN loc "the I/O manager was shut down"

-- | Is this the error of a manager that was shut down?
isManagerShutDownError :: IOError -> Bool
isManagerShutDownError e = ioe_type e == IllegalOperation && hasErrno eSHUTDOWN e

-- | A socket whose idle timeout expired ('TimeExpired', @ETIMEDOUT@).
idleTimedOut :: String -> IOError
idleTimedOut loc = weftError TimeExpired eTIMEDOUT loc "connection idle timeout"

-- | Is this the error of a socket whose idle timeout expired?
isIdleTimeoutError :: IOError -> Bool
isIdleTimeoutError e = ioe_type e == TimeExpired && hasErrno eTIMEDOUT e

-- | Does the error carry this errno?
hasErrno :: Errno -> IOError -> Bool
hasErrno (Errno n) e = ioe_errno e == Just n
