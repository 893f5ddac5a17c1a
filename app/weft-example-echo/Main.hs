-- The README's example: a thread-per-connection echo server on 127.0.0.1:PORT
-- whose reads and writes wait through weft.
module Main (main) where

import Control.Concurrent (forkIO)
import Control.Exception (finally)
import Control.Monad (forever, when)
import Foreign (Ptr, Word8, allocaBytes, plusPtr)
import Foreign.C (CInt (..), CSize (..), eAGAIN, getErrno)
import Network.Socket
import System.Environment (getArgs)
import System.Posix.Types (CSsize (..), Fd (..))
import Weft (closeFdWith, threadWaitRead, threadWaitWrite)

main :: IO ()
main = do
  [port] <- getArgs
  listener <- socket AF_INET Stream defaultProtocol
  setSocketOption listener ReuseAddr 1
  bind listener (SockAddrInet (read port) (tupleToHostAddress (127, 0, 0, 1)))
  listen listener 1024
  forever $ do
    (conn, _) <- accept listener
    fd <- Fd <$> unsafeFdSocket conn
    forkIO (echo fd `finally` closeFdWith (\_ -> close conn) fd)

-- | Echo until the peer closes: every would-block waits in weft.
echo :: Fd -> IO ()
echo fd = allocaBytes 4096 loop
  where
    loop buf = do
      n <- c_read fd buf 4096
      if n > 0 then sendAll buf (fromIntegral n) >> loop buf
      else retryIf (n < 0) (threadWaitRead fd >> loop buf)
    sendAll buf len = when (len > 0) $ do
      n <- c_write fd buf (fromIntegral len)
      if n >= 0 then sendAll (buf `plusPtr` fromIntegral n) (len - fromIntegral n :: Int)
      else retryIf True (threadWaitWrite fd >> sendAll buf len)
    -- Wait and retry on EAGAIN; stop on end of stream or any other error.
    retryIf failed again = when failed $ do
      err <- getErrno
      when (err == eAGAIN) again

foreign import ccall unsafe "read" c_read :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "write" c_write :: Fd -> Ptr Word8 -> CSize -> IO CSsize
