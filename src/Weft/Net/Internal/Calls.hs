{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | Sockets and their calls: TCP, UDP, the non-blocking calls, closing,
-- idle timeouts and interop with @network@ ("Weft.Net" is the façade and
-- its documentation).
-- Internal and unstable (everything is exported; the façade picks the
-- API): import "Weft.Net".
module Weft.Net.Internal.Calls where

import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Int (Int64)
import Data.Word (Word8)
import Foreign.C.Error
import Foreign.C.Types
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, touchForeignPtr, withForeignPtr)
import Foreign.ForeignPtr.Unsafe (unsafeForeignPtrToPtr)
import Foreign.Marshal.Alloc (allocaBytes, mallocBytes)
import Foreign.Marshal.Utils (copyBytes, with)
import Foreign.Ptr
import Weft.Internal.Error (invalidArgument)
import Foreign.Storable
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import Network.Socket.Address (SocketAddress (..))
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Types (Fd (..))

import qualified Weft
import Weft.Event.Internal.Completions (Outgoing (..), addressRoom, newAcceptAddress, readyAcceptAddress)
import Weft.Internal.Capability (currentCapability)
import Weft.Internal.Counters
import Weft.Net.Internal.Socket
import qualified Weft.Net.Internal.Socket as S
import Weft.Net.Internal.Socket.Ring

------------------------------------------------------------------------------
-- Opening

-- | How 'listenWith' sets up a listening socket.
data ListenOptions = ListenOptions
  { listenBacklog   :: !Int
    -- ^ The kernel's accept queue length (capped by @somaxconn@).
  , listenReusePort :: !Bool
    -- ^ Set @SO_REUSEPORT@, so several sockets can listen on one port and
    -- the kernel spreads connections over them.
  } deriving (Eq, Show)

-- | A backlog of 4096, no @SO_REUSEPORT@.
defaultListenOptions :: ListenOptions
defaultListenOptions = ListenOptions 4096 False

-- | A TCP socket listening on the address (with @SO_REUSEADDR@). Port 0
-- picks a free port ('localAddress' tells which). Throws an 'IOError' if
-- the address cannot be bound.
listen :: SockAddr -> IO Socket
listen = listenWith defaultListenOptions

-- | 'listen' with options.
listenWith :: ListenOptions -> SockAddr -> IO Socket
listenWith opts addr = openBound sockStream (listenReusePort opts) addr $ \fd ->
  void (throwIfNegative "listen" (c_listen fd (fromIntegral (listenBacklog opts))))

-- | A UDP socket bound to the address.
bindUDP :: SockAddr -> IO Socket
bindUDP addr = openBound sockDgram False addr (\_ -> return ())

-- | An unbound UDP socket of the address's family, for 'sendTo'.
openUDP :: SockAddr -> IO Socket
openUDP addr = do
  fd <- throwIfNegative "socket" (c_socket (familyOf addr) sockDgram)
  newSocket (fromIntegral fd)

openBound :: CInt -> Bool -> SockAddr -> (CInt -> IO ()) -> IO Socket
openBound kind reusePort addr finish = do
  raw <- throwIfNegative "socket" (c_socket (familyOf addr) kind)
  let fd = fromIntegral raw
  (`onException` c_close fd) $ do
    withAddress addr $ \p len ->
      void (throwIfNegative ("bind " ++ show addr) (c_bind fd p len (if reusePort then 1 else 0)))
    finish fd
    newSocket fd

sockStream, sockDgram :: CInt
sockStream = 1
sockDgram = 2

familyOf :: SockAddr -> CInt
familyOf SockAddrInet {} = 2
familyOf SockAddrInet6 {} = 10
familyOf SockAddrUnix {} = 1

withAddress :: SockAddr -> (Ptr () -> CInt -> IO a) -> IO a
withAddress addr act = allocaBytes addressRoom $ \p -> do
  pokeSocketAddress (castPtr p) addr
  act p (fromIntegral (sizeOfSocketAddress addr))

-- | Accept a connection: a new socket and the peer's address. Blocks (in
-- weft) until one comes. Throws an 'IOError' on failure, e.g. @EMFILE@ when
-- the process is out of fds ('acceptLoop' rides that out).
--
-- A connection that an accept interrupted by an asynchronous exception
-- had accepted anyway (under the uring backend) is returned first (Note
-- [Accepts on the ring] in "Weft.Event.Internal.Backend.Uring.Requests").
accept :: Socket -> IO (Socket, SockAddr)
accept s = acceptNow s >>= either blocked return
  where
    -- No connection queued: one from the ring, or wait for readiness.
    blocked address = acceptOnRing s address
      >>= maybe (waitReady Reading s >> accept s) (\fd -> adopt (fd, address))

-- | A connection a cancelled accept kept, or one @accept4@ took: the new
-- socket and its peer; or, if none is queued (@EAGAIN@), the address
-- buffer it tried with. Throws as 'accept' does.
acceptNow :: Socket -> IO (Either (ForeignPtr ()) (Socket, SockAddr))
acceptNow s = takeAccepted s >>= maybe loop (fmap Right . adopt)
  where
    loop = do
      address <- newAcceptAddress
      r <- withForeignPtr address $ \p -> do
        (addr, lenp) <- readyAcceptAddress p
        acceptRaw s addr (castPtr lenp)
      if r >= 0 then Right <$> adopt (fromIntegral r, address)
        else if r == negate (errnoLong eAGAIN) then return (Left address)
        else if r == negate (errnoLong eINTR) then loop
        else socketError "accept" s r

-- | The socket for an accepted fd, and the peer's address in its buffer.
-- Closes the fd if that fails.
adopt :: (CInt, ForeignPtr ()) -> IO (Socket, SockAddr)
adopt (fd, address) = (`onException` c_close fd) $ do
  peer <- withForeignPtr address (peekSocketAddress . castPtr)
  conn <- newSocket fd
  return (conn, peer)

-- | Connect a new TCP socket to the address, waiting (in weft) for the
-- handshake. Throws an 'IOError' if it fails (e.g. @ECONNREFUSED@).
--
-- Under a completion backend the ring makes the handshake (Note [Connects
-- on the ring] in "Weft.Event.Internal.Backend.Uring.Requests").
connect :: SockAddr -> IO Socket
connect addr = do
  raw <- throwIfNegative "socket" (c_socket (familyOf addr) sockStream)
  s <- newSocket (fromIntegral raw)
  (`onException` close s) $ do
    onRing <- if not (mayUseRing s) then return Nothing else do
      -- The request holds the address until it completes.
      address <- mallocForeignPtrBytes addressRoom
      withForeignPtr address $ \p -> pokeSocketAddress (castPtr p) addr
      connectOnRing loc s address (sizeOfSocketAddress addr)
    case onRing of
      Just () -> return ()
      Nothing -> do
        r <- withAddress addr (connectRaw s)
        -- EALREADY: a ring's connect, handed back, is under way.
        when (r < 0 && r /= negate (errnoLong eISCONN)) $
          if r == negate (errnoLong eINPROGRESS) || r == negate (errnoLong eALREADY)
            then do
              waitReady Writing s
              err <- c_socket_error (fromIntegral raw)
              when (err < 0) $ socketError loc s err
            else socketError loc s r
    return s
  where
    loc = "connect " ++ show addr

------------------------------------------------------------------------------
-- Stream I/O

-- | Receive at most the given number of bytes (which must be positive),
-- blocking (in weft) until some come. An empty result means the peer shut
-- its side down (end of stream). Throws an 'IOError' on a reset
-- (@ECONNRESET@), on a closed socket (@EBADF@), or after an idle timeout.
--
-- An asynchronous exception (a 'Weft.timeout' firing, 'killThread') that
-- lands just as bytes arrive, between the syscall and the return, loses
-- those bytes to the caller, as with any receive in GHC. To bound how long
-- a connection may stay silent without that hazard, use 'setIdleTimeout':
-- it fails the blocked call synchronously, with nothing consumed. Under
-- the io_uring backend, a receive that has to wait is performed by the
-- ring, and bytes that its cancelled request received are kept for the
-- next receive on the socket; what remains is the moment between the
-- return of the bytes and the caller taking them, which no receive can
-- close.
recv :: Socket -> Int -> IO B.ByteString
recv s n
  | n <= 0 = throwIO (invalid "recv" "the byte count must be positive")
  -- Too large for the scratch buffer: 'recvBuf' (leftovers, ring and all)
  -- into a fresh one.
  | n > scratchBytes = BI.createAndTrim n (\p -> recvBuf s p n)
  | not (mayUseRing s) = loop
  | otherwise = takeLeftover s n >>= maybe (receiveOnRing s n >>= maybe loop (ringBytes s return)) return
  where
    -- Note [Receiving through a scratch buffer]
    loop = do
      r <- withScratch $ \p -> do
        k <- S.recvRaw s p n
        if k > 0 then Right <$> BI.create (fromIntegral k) (\d -> copyBytes d p (fromIntegral k))
          else return (Left k)
      case r of
        Right bs -> return bs
        Left 0 -> B.empty <$ endOfStream s
        Left k -> retryOrThrow "recv" Reading s k loop

-- Note [Receiving through a scratch buffer]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- 'recv' must allocate its buffer before it knows how much will come. A
-- 4 KiB pinned buffer is a large object to GHC's allocator, and trimming it
-- copies anyway. So 'recv' reads into a scratch buffer of its capability
-- (claimed with one compare-and-swap, released before any wait, so a
-- thread blocked in 'recv' holds none) and copies what came into a string
-- of exactly that size. If the scratch buffer is taken (the claiming thread
-- was preempted between the syscall and the copy), a fresh buffer is used.

-- | 'recv' into a buffer: the number of bytes received (0 at end of
-- stream).
recvBuf :: Socket -> Ptr Word8 -> Int -> IO Int
recvBuf s p n
  | not (mayUseRing s) = loop
  | otherwise = takeLeftover s n >>= maybe fresh copyIn
  where
    fresh = receiveOnRing s n >>= maybe loop (ringBytes s copyIn)
    loop = do
      r <- S.recvRaw s p n
      if r > 0 then return (fromIntegral r)
      else if r == 0 then 0 <$ endOfStream s
      else retryOrThrow "recv" Reading s r loop
    copyIn b = BU.unsafeUseAsCStringLen b $ \(src, k) -> k <$ copyBytes p (castPtr src) k

-- | What a receive on the ring brought: the end of the stream (empty:
-- as 'recv' reports it, given an empty string), or bytes, for @got@.
ringBytes :: Socket -> (B.ByteString -> IO a) -> B.ByteString -> IO a
ringBytes s got b
  | B.null b = endOfStream s >> got b
  | otherwise = got b

-- | At end of stream: throw if an idle timeout caused it.
endOfStream :: Socket -> IO ()
endOfStream s = socketError "recv" s 0 `catch` \e ->
  if isIdleTimeoutError e then throwIO e else return ()

-- | The size of each capability's scratch buffer for 'recv'.
scratchBytes :: Int
scratchBytes = 16384

-- | Run an action with this capability's scratch buffer, or a fresh one if
-- it is taken (Note [Receiving through a scratch buffer]). The action must
-- not block.
withScratch :: (Ptr Word8 -> IO a) -> IO a
withScratch act = do
  cap <- currentCapability
  table <- readIORef scratchTable
  if cap >= sizeofArray table then growScratch cap >> withScratch act else do
    let Scratch flags buf = indexArray table cap
    old <- casCounter flags 0 0 1
    if old /= 0 then allocaBytes scratchBytes act else do
      r <- act buf `onException` writeCounter flags 0 0
      writeCounter flags 0 0
      return r
{-# INLINE withScratch #-}

data Scratch = Scratch !Counters !(Ptr Word8)

{-# NOINLINE scratchTable #-}
scratchTable :: IORef (Array Scratch)
scratchTable = unsafePerformIO (newIORef (arrayFromListN 0 []))

-- | Make scratch buffers up to this capability's. They are never freed:
-- one per capability for the life of the process (two threads growing the
-- table at once may leak one buffer).
growScratch :: Int -> IO ()
growScratch cap = do
  have <- sizeofArray <$> readIORef scratchTable
  fresh <- forM [0 .. cap] $ \i ->
    if i < have then return (error "unused") else Scratch <$> newCounters 1 <*> mallocBytes scratchBytes
  atomicModifyIORef' scratchTable $ \old ->
    -- Lazy in the unused entries: only the missing ones are built.
    let keep i = if i < sizeofArray old then indexArray old i else fresh !! i
    in if sizeofArray old > cap then (old, ()) else (arrayFromListN (cap + 1) (map keep [0 .. cap]), ())

-- | Send some of the bytes, blocking (in weft) until the socket takes at
-- least one; returns how many it took. Throws an 'IOError' if the peer is
-- gone (@EPIPE@, @ECONNRESET@), the socket is closed, or timed out.
send :: Socket -> B.ByteString -> IO Int
send s bs = sending "send" s (OutBytes bs)

-- | Send the bytes through the ring if its dispatcher is busy; else run
-- the send call, and if it says @EAGAIN@, hand the bytes to the ring, or
-- wait for readiness and run it again (Note [Ring first] and Note [Sends
-- on the ring] in "Weft.Event.Internal.Backend.Uring.Requests"): how many bytes
-- went.
sending :: String -> Socket -> Outgoing -> IO Int
sending loc s out
  | mayUseRing s && hasBytes out = sendOnRing False loc s out >>= maybe (sendNow loc s out) return
  | otherwise = sendNow loc s out
{-# INLINE sending #-}

-- | The send call once; what follows when it took nothing is out of line,
-- so that a send that goes through builds no retry closure.
sendNow :: String -> Socket -> Outgoing -> IO Int
sendNow loc s out = do
  r <- sendCall s out
  if r >= 0 then return (fromIntegral r) else sendStuck loc s out r
{-# INLINE sendNow #-}

-- | A send call that took nothing (@-errno@): on @EAGAIN@, the ring takes
-- the bytes if it may, or the thread waits for readiness and sends again;
-- @EINTR@ sends again; anything else throws.
sendStuck :: String -> Socket -> Outgoing -> CLong -> IO Int
sendStuck loc s out r
  | r == negate (errnoLong eAGAIN) && mayUseRing s && hasBytes out =
      sendOnRing True loc s out >>= maybe (waitReady Writing s >> sendNow loc s out) return
  | otherwise = retryOrThrow loc Writing s r (sendNow loc s out)
{-# NOINLINE sendStuck #-}

-- | The socket's own send of the bytes: @-errno@ if it failed.
sendCall :: Socket -> Outgoing -> IO CLong
sendCall s (OutBytes (BI.PS fp off n)) = withForeignPtr fp $ \p -> sendBuf s (p `plusPtr` off) n
sendCall s (OutGather more bss) = sendGathered more s bss
{-# INLINE sendCall #-}

hasBytes :: Outgoing -> Bool
hasBytes (OutBytes b) = not (B.null b)
hasBytes (OutGather _ bss) = not (null bss)
{-# INLINE hasBytes #-}

-- | Send all the bytes; as 'send' otherwise.
sendAll :: Socket -> B.ByteString -> IO ()
sendAll s = go
  where
    go !b = unless (B.null b) $ do
      k <- send s b
      go (BU.unsafeDrop k b)

-- | Send all the strings with gather writes (@sendmsg@, no copying into
-- one buffer); as 'sendAll' otherwise.
sendMany :: Socket -> [B.ByteString] -> IO ()
sendMany s chunks = case filter (not . B.null) chunks of
  [] -> return ()
  [one] -> sendAll s one
  many -> sendGatheredAll False s many

-- | 'sendMany', flagged @MSG_MORE@: more data follows at once (a file sent
-- with 'sendFile' after its header, say), so the kernel holds a partial
-- segment back for it instead of sending it alone. The next send without
-- the flag (or a 'sendFile') pushes it out.
sendManyMore :: Socket -> [B.ByteString] -> IO ()
sendManyMore s chunks = case filter (not . B.null) chunks of
  [] -> return ()
  many -> sendGatheredAll True s many

sendGatheredAll :: Bool -> Socket -> [B.ByteString] -> IO ()
sendGatheredAll more s = go
  where
    go [] = return ()
    go bss = do
      sent <- sending "sendMany" s (OutGather more (take maxIov bss))
      go (dropBytes sent bss)

-- | Send at most @count@ bytes (which must be positive) of the file from
-- byte @offset@ with @sendfile(2)@, blocking (in weft) until the socket
-- takes at least one: how many it took, or 0 if the file has no bytes at
-- @offset@ (it is shorter than expected). The file's offset is not moved,
-- so one file may be sent to several sockets at once. Throws an 'IOError'
-- as 'send' does, or with the errno of @sendfile@ (e.g. @EINVAL@ for an
-- fd that is not a regular file).
sendFile :: Socket -> Fd -> Int64 -> Int64 -> IO Int64
sendFile s file offset count
  | count <= 0 = throwIO (invalid "sendFile" "the byte count must be positive")
  | otherwise = loop
  where
    -- Linux sends at most this much per call anyway.
    chunk = min count 0x7ffff000
    loop = do
      r <- sendFileRaw s file offset chunk
      if r >= 0 then return (fromIntegral r) else retryOrThrow "sendfile" Writing s r loop

-- | The strings without their first @k@ bytes: what is left to send after
-- a gather write ('trySendMany', 'sendMany') took @k@. No copying.
dropBytes :: Int -> [B.ByteString] -> [B.ByteString]
dropBytes _ [] = []
dropBytes k (b : bs)
  | k >= B.length b = dropBytes (k - B.length b) bs
  | otherwise = B.drop k b : bs

-- | One @sendmsg@ of the first 'maxIov' strings (flagged @MSG_MORE@ if
-- asked): bytes sent, or -errno.
sendGathered :: Bool -> Socket -> [B.ByteString] -> IO CLong
sendGathered more s bss = do
  let batch = take maxIov bss
      count = length batch
  r <- allocaBytes (count * iovSize) $ \iov -> do
    forM_ (zip [0 ..] batch) $ \(i, BI.PS fp off len) -> do
      let entry = iov `plusPtr` (i * iovSize)
      pokeByteOff entry 0 (unsafeForeignPtrToPtr fp `plusPtr` off)
      pokeByteOff entry 8 (fromIntegral len :: CSize)
    sendVector s iov count more
  mapM_ (\(BI.PS fp _ _) -> touchForeignPtr fp) batch
  return r
  where
    iovSize = 16

-- | The most strings one gather write takes (Linux's @UIO_MAXIOV@).
maxIov :: Int
maxIov = 1024

------------------------------------------------------------------------------
-- Without waiting

-- | Accept a connection if one is pending, without waiting: 'Nothing' if
-- the listener has none (@EAGAIN@). The new socket is non-blocking, like
-- every weft socket. Throws an 'IOError' as 'accept' does, e.g. @EMFILE@
-- when the process is out of fds, @ECONNABORTED@ for a connection reset
-- while queued (the caller may simply try again), @EBADF@ on a closed
-- listener.
tryAccept :: Socket -> IO (Maybe (Socket, SockAddr))
tryAccept s = either (const Nothing) Just <$> acceptNow s

-- | Receive at most the given number of bytes (which must be positive)
-- without waiting: 'Nothing' if none are there (@EAGAIN@), an empty string
-- at end of stream (the peer shut its side down). Throws an 'IOError' as
-- 'recv' does: on a reset (@ECONNRESET@), a closed socket (@EBADF@), or
-- once an idle timeout ('setIdleTimeout') expired.
tryRecv :: Socket -> Int -> IO (Maybe B.ByteString)
tryRecv s n
  | n <= 0 = throwIO (invalid "tryRecv" "the byte count must be positive")
  | n > scratchBytes = do
      -- Too large for the scratch buffer: receive into a fresh one.
      r <- BI.createAndTrim' n $ \p -> do
        k <- S.recvRaw s p n
        return (0, max 0 (fromIntegral k), k)
      finish r
  | otherwise = do
      -- Note [Receiving through a scratch buffer]
      r <- withScratch $ \p -> do
        k <- S.recvRaw s p n
        if k > 0 then (\bs -> (bs, k)) <$> BI.create (fromIntegral k) (\d -> copyBytes d p (fromIntegral k))
          else return (B.empty, k)
      finish r
  where
    finish (bs, k)
      | k > 0 = return (Just bs)
      | k == 0 = Just B.empty <$ endOfStream s
      | k == negate (errnoLong eAGAIN) = return Nothing
      | k == negate (errnoLong eINTR) = tryRecv s n
      | otherwise = socketError "recv" s k

-- | Send as much of the strings, in order, as the socket takes now, with
-- one gather write (@sendmsg@) of at most the first 1024 strings: the
-- number of bytes taken (possibly fewer than offered; 0 for no bytes
-- offered), or 'Nothing' if it would take none (@EAGAIN@). Throws an
-- 'IOError' as 'send' does: the peer is gone (@EPIPE@, @ECONNRESET@), the
-- socket is closed, or timed out.
trySendMany :: Socket -> [B.ByteString] -> IO (Maybe Int)
trySendMany s chunks = case filter (not . B.null) chunks of
  [] -> return (Just 0)
  bss -> do
    r <- case bss of
      [one] -> BU.unsafeUseAsCStringLen one $ \(p, n) -> sendBuf s (castPtr p) n
      _ -> sendGathered False s bss
    if r >= 0 then return (Just (fromIntegral r))
      else if r == negate (errnoLong eAGAIN) then return Nothing
      else if r == negate (errnoLong eINTR) then trySendMany s bss
      else socketError "send" s r

-- | Shut the sending side down (a half-close): the peer sees an end of
-- stream; receiving still works.
shutdownSend :: Socket -> IO ()
shutdownSend s = do
  r <- shutdownRaw s 1 -- SHUT_WR
  when (r < 0) $ socketError "shutdown" s r

-- | Close a connection without losing what was just sent: shut the
-- sending side down, read and discard what the peer still sends until it
-- closes, for at most the given microseconds (and 'lingerBytes'), then
-- 'close'. Closing with unread input would make the kernel send a reset,
-- which can destroy the last response before the peer reads it (an error
-- reply to a request that is still arriving, say). Never throws.
-- "Weft.Color"'s 'Weft.Color.lingerClose' does the same with events.
gracefulClose :: Socket -> Int -> IO ()
gracefulClose s us = linger `finally` close s
  where
    linger = void (try (shutdownSend s >> Weft.timeout us (drain lingerBytes)) :: IO (Either IOException (Maybe ())))
    drain left = do
      r <- discardInput s left
      forM_ r $ \left' -> waitReady Reading s >> drain left'

-- | At most this many bytes of a peer's input are discarded by a
-- lingering close (1 MiB).
lingerBytes :: Int
lingerBytes = 1048576

-- | One non-blocking step of a lingering close: discard what the peer has
-- sent, up to the given number of bytes. @Just left@: the peer has not
-- closed; wait until the socket is readable and call again with @left@,
-- the bytes still allowed. 'Nothing': the peer closed, the socket failed
-- or the allowance ran out; close it now. Never throws.
discardInput :: Socket -> Int -> IO (Maybe Int)
discardInput s allowed = allocaBytes chunk $ \p ->
  let go left
        | left <= 0 = return Nothing
        | otherwise = do
            n <- S.recvRaw s p (min chunk left)
            if n > 0 then go (left - fromIntegral n)
              else if n == negate (errnoLong eAGAIN) then return (Just left)
              else if n == negate (errnoLong eINTR) then go left
              else return Nothing
  in go allowed
  where chunk = 4096

-- | The address the socket is bound to.
localAddress :: Socket -> IO SockAddr
localAddress s = allocaBytes addressRoom $ \p -> with (fromIntegral addressRoom) $ \lenp -> do
  let Fd fd = socketFd s
  _ <- throwIfNegative "getsockname" (c_local_addr fd p lenp)
  peekSocketAddress (castPtr p)

-- | Turn Nagle's algorithm off ('True') or on.
setNoDelay :: Socket -> Bool -> IO ()
setNoDelay s on = do
  let Fd fd = socketFd s
  void (throwIfNegative "setsockopt TCP_NODELAY" (c_set_nodelay fd (if on then 1 else 0)))

invalid :: String -> String -> IOException
invalid = invalidArgument

------------------------------------------------------------------------------
-- UDP

-- | Send one datagram; returns the bytes sent.
sendTo :: Socket -> B.ByteString -> SockAddr -> IO Int
sendTo s bs addr = BU.unsafeUseAsCStringLen bs $ \(p, n) -> withAddress addr $ \addrp alen -> do
  let loop = do
        r <- sendToRaw s (castPtr p) n addrp alen
        if r >= 0 then return (fromIntegral r) else retryOrThrow "sendTo" Writing s r loop
  loop

-- | Receive one datagram of at most the given size (longer ones are
-- truncated), with its source.
recvFrom :: Socket -> Int -> IO (B.ByteString, SockAddr)
recvFrom s n
  | n <= 0 = throwIO (invalid "recvFrom" "the byte count must be positive")
  | otherwise = allocaBytes addressRoom $ \addrp -> with (fromIntegral addressRoom) $ \lenp -> do
      let loop p = do
            r <- recvFromRaw s p n addrp lenp
            if r >= 0 then return (fromIntegral r) else retryOrThrow "recvFrom" Reading s r (loop p)
      bs <- BI.createAndTrim n loop
      addr <- peekSocketAddress (castPtr addrp)
      return (bs, addr)

-- | Receive up to @count@ datagrams (at most 64) of at most @size@ bytes
-- each with one @recvmmsg@, blocking until at least one is there. The
-- strings share one buffer.
recvFromMany :: Socket -> Int -> Int -> IO [(B.ByteString, SockAddr)]
recvFromMany s count0 size
  | count0 <= 0 || size <= 0 = throwIO (invalid "recvFromMany" "the count and size must be positive")
  | otherwise = do
      let count = min 64 count0
      buf <- BI.mallocByteString (count * size)
      allocaBytes (count * 4) $ \lens -> allocaBytes (count * addressRoom) $ \addrs ->
        withForeignPtr buf $ \p -> do
          let loop = do
                r <- recvManyRaw s p size count lens addrs
                if r >= 0 then return (fromIntegral r) else retryOrThrow "recvFromMany" Reading s r loop
          got <- loop
          forM [0 .. got - 1] $ \i -> do
            len <- peekElemOff lens i :: IO CInt
            addr <- peekSocketAddress (castPtr (addrs `plusPtr` (i * addressRoom)))
            return (BI.PS buf (i * size) (min size (fromIntegral len)), addr)

------------------------------------------------------------------------------
-- Interop

-- | Hand the socket to @network@: weft stops using it (its calls on it fail
-- as after 'close') and the returned 'N.Socket' owns the fd. Throws an
-- 'IOError' (@EBADF@, as every call on a closed socket) if the socket was
-- closed.
toNetworkSocket :: Socket -> IO N.Socket
toNetworkSocket s = do
  fd <- detach s
  case fd of
    Nothing -> throwIO (closedSocketError "toNetworkSocket")
    Just raw -> N.mkSocket raw

-- | Take a socket over from @network@, which gives it up (the 'N.Socket'
-- is closed; weft owns a duplicate of its fd, set non-blocking and
-- close-on-exec).
fromNetworkSocket :: N.Socket -> IO Socket
fromNetworkSocket ns = do
  raw <- N.socketToFd ns
  N.setNonBlockIfNeeded raw
  N.setCloseOnExecIfNeeded raw
  newSocket raw
