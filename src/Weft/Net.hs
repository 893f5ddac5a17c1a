{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | Sockets served by weft's managers: TCP and UDP with blocking-looking
-- calls for thread-per-connection code, and a server loop.
--
-- A socket is registered with a manager once, edge-triggered, the first
-- time one of its calls would block; after that a wait costs no
-- @epoll_ctl@ (Note [Socket waits] in "Weft.Net.Internal.Socket"). Addresses are
-- @network@'s 'SockAddr', and sockets convert to and from @network@'s
-- 'N.Socket'.
--
-- Errors are 'IOError's with the errno: a peer that resets gives
-- @ECONNRESET@ (type 'ResourceVanished'), writing to a closed peer gives
-- @EPIPE@ (also 'ResourceVanished'); a peer's half-close is an end of
-- stream ('recv' returns an empty string). Calls on a socket closed with
-- 'close' fail with @EBADF@.
--
-- For example, an echo server, one thread per connection:
--
-- > import qualified Data.ByteString as B
-- > import Network.Socket (SockAddr (..))
-- > import qualified Weft.Net as W
-- >
-- > main :: IO ()
-- > main = W.serve W.defaultServerConfig (SockAddrInet 8080 0) $ \conn _peer ->
-- >   let loop = do
-- >         chunk <- W.recv conn 4096          -- waits in weft; empty at end of stream
-- >         if B.null chunk then return () else W.sendAll conn chunk >> loop
-- >   in loop
module Weft.Net
  ( -- * Sockets
    Socket
  , socketFd
    -- * TCP
  , ListenOptions (..)
  , defaultListenOptions
  , listen
  , listenWith
  , accept
  , connect
  , recv
  , recvBuf
  , send
  , sendAll
  , sendMany
  , sendManyMore
  , sendFile
  , shutdownSend
    -- * Without waiting
    -- | For event-driven code that waits for readiness itself (e.g. with
    -- @Weft.Color.onReadable@): these never wait and never register the
    -- socket with a manager; 'Nothing' means the call would block.
  , tryAccept
  , tryRecv
  , trySendMany
  , dropBytes
  , close
  , gracefulClose
  , discardInput
  , lingerBytes
  , localAddress
  , setNoDelay
    -- * Idle timeouts
  , setIdleTimeout
  , setMinimumReceive
  , isIdleTimeoutError
    -- * UDP
  , bindUDP
  , openUDP
  , sendTo
  , recvFrom
  , recvFromMany
    -- * Interop with network
  , toNetworkSocket
  , fromNetworkSocket
    -- * Servers
  , ServerConfig (..)
  , defaultServerConfig
  , serve
  , forkRoundRobin
  , acceptLoop
  , acceptPatiently
    -- * Admitting clients under fd pressure
  , Eviction (..)
  , evictionName
  , parseEviction
  , Admission
  , newAdmission
  , Clients
  , newClients
  , addClient
  , removeClient
  , admitClients
  , closeAdmission
  , acceptAdmitting
  , refuseClient
  , Reserved (..)
  , acceptOnReserve
  , refillReserve
  , outOfFds
  , admissionPatience
  , admissionStep
  , admissionWait
  , clientLimit
  , evictionSetting
  , reservedFds
  , chooseVictim
  , Choice (..)
  , Standing (..)
  , connectionStanding
  , awaitingPeer
  , trackProgress
    -- * Parsing received bytes
  , byteAt
  ) where

import Weft.Internal.Bytes (byteAt)
import Weft.Net.Internal.Calls
import Weft.Net.Internal.Eviction (Choice (..), Eviction (..), Standing (..), evictionName, parseEviction)
import Weft.Net.Internal.Serve
import Weft.Net.Internal.Socket (Socket, awaitingPeer, close, connectionStanding, isIdleTimeoutError, setIdleTimeout,
                                 setMinimumReceive, socketFd, trackProgress)
