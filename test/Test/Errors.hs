{-# LANGUAGE CPP, ScopedTypeVariables #-}
-- | The failure modes the public modules document, each checked for the
-- shape every weft error has: an 'IOError' of the documented
-- 'IOErrorType', with the documented errno, located @weft: function@.
-- Code that handles weft's errors tests the type and the errno, never the
-- text, so a failure that changes either breaks callers as surely as a
-- wrong result does.
--
-- 'spec' needs no manager; 'ioSpec' runs once per backend, over loopback.
module Test.Errors (spec, ioSpec) where

import Control.Concurrent
import Control.Concurrent.STM (atomically)
import Control.Exception hiding (Handler)
import Control.Monad
import qualified Data.ByteString.Char8 as BC
import Data.List (isPrefixOf)
import Foreign.C.Error
import Foreign.Marshal.Alloc (allocaBytes)
import GHC.IO.Exception (IOErrorType (..), IOException (..))
import System.Directory (getTemporaryDirectory, removeFile)
import System.Environment (setEnv, unsetEnv)
import System.FilePath ((</>))
import System.Posix.IO (closeFd)
import System.Posix.Types (Fd)
import Test.Hspec

import Support
import Test.Net (loopback, withPair, withResetPeer)
import qualified Weft
import qualified Weft.Color as C
import qualified Weft.Event as E
import Weft.Event.Internal.Backends (backendKindFromEnv)
#ifdef WEFT_LINUX
import Weft.Event.Internal.Backend.Uring (setUringSetupFailure)
#endif
import qualified Weft.Net as W
import qualified Weft.Packet as P

-- | The action fails with an 'IOError' of this type, with one of these
-- errnos (one, unless the kernel may report a failure either way), and
-- located in weft. The message lists what was found, so a failure says
-- which of the three is wrong.
failsWith :: IOErrorType -> [Errno] -> IO a -> Expectation
failsWith ty errnos act = do
  r <- try act
  case r of
    Right _ -> expectationFailure ("no error; expected " ++ expected)
    Left (e :: IOException) -> do
      let located = "weft: " `isPrefixOf` ioe_location e
          ok = ioe_type e == ty && ioe_errno e `elem` map (\(Errno n) -> Just n) errnos && located
      unless ok $ expectationFailure $
        "expected " ++ expected ++ "; got type " ++ show (ioe_type e) ++ ", errno "
        ++ maybe "none" show (ioe_errno e) ++ ", location " ++ show (ioe_location e)
        ++ " (" ++ show e ++ ")"
  where
    expected = show ty ++ " with errno " ++ show [ n | Errno n <- errnos ] ++ ", located \"weft: ...\""


-- | An fd number that is not open: a pipe's, just closed. The managers
-- are started first, or one starting on the wait would take the number.
closedFd :: IO Fd
closedFd = do
  startManagers
  (r, w) <- newPipe
  closePipe (r, w)
  return r

-- | A regular file, open for reading, for the body's duration.
withRegularFile :: (Fd -> IO a) -> IO a
withRegularFile body = do
  tmp <- getTemporaryDirectory
  let path = tmp </> "weft-test-errors-file"
  writeFile path "weft"
  bracket (openReadOnly path) (\fd -> closeFd fd >> removeFile path) body

-- | Run on capability 0 (where a packet device's pools are owned), within
-- the given seconds.
onCap0 :: Double -> String -> IO a -> IO a
onCap0 secs what act = do
  (_, out) <- forkResult 0 act
  within secs what (takeMVar out) >>= either throwIO return

-- | Set an environment variable for the action's duration.
withEnv :: String -> String -> IO a -> IO a
withEnv name value act = (setEnv name value >> act) `finally` unsetEnv name

-- | The failures that need no I/O manager: bad configuration and bad
-- arguments.
spec :: Spec
spec = describe "weft's errors (documented failures, shape)" $ do
  describe "Weft.Event" $ do
    it "WEFT_BACKEND naming no backend: InvalidArgument, EINVAL" $
      withEnv "WEFT_BACKEND" "kqueue" $ failsWith InvalidArgument [eINVAL] backendKindFromEnv

    it "newManager of a backend this build lacks: UnsupportedOperation, ENOTSUP" $
      -- Only the portable build (no epoll, no io_uring) lacks one.
      forM_ [ k | k <- [minBound .. maxBound], k `notElem` E.availableBackendKinds ] $ \k ->
        failsWith UnsupportedOperation [eNOTSUP] (E.newManager k 0)

#ifdef WEFT_LINUX
    it "newManager on a kernel that refuses io_uring: the set-up's errno (EPERM: PermissionDenied)" $
      (setUringSetupFailure ePERM >> failsWith PermissionDenied [ePERM] (E.newManager E.UringBackend 0))
        `finally` setUringSetupFailure eOK
#endif

  describe "Weft.Net" $
    it "WEFT_EVICTION naming no policy (evictionSetting): InvalidArgument, EINVAL" $
      withEnv "WEFT_EVICTION" "oldest" $
        failsWith InvalidArgument [eINVAL] (W.evictionSetting W.EvictStalledThenIdle)

  describe "Weft.Packet" $ do
    it "newMemPool with poolSize 0: InvalidArgument, EINVAL" $
      failsWith InvalidArgument [eINVAL] (P.newMemPool P.defaultPoolConfig { P.poolSize = 0 })

    it "openIxgbe with a ring size that is no multiple of 32, or a pool no larger than the ring: InvalidArgument, EINVAL" $ do
      wire <- P.loopWire 64
      m <- P.newModel P.defaultModelConfig wire
      let open cfg = P.openIxgbe cfg "model:errors" (P.modelWindow m)
      failsWith InvalidArgument [eINVAL] (open P.defaultIxgbeConfig { P.ixRingSize = 33 })
      failsWith InvalidArgument [eINVAL]
        (open P.defaultIxgbeConfig { P.ixRingSize = 512, P.ixPoolSize = 512 })

    it "rxBatch and txBatch on a queue the ixgbe device does not have: InvalidArgument, EINVAL" $
      onCap0 10 "a model device" $ bracket (P.openDevice "model:7") P.closeDevice $ \dev -> do
        arr <- P.newBufferArray 4
        failsWith InvalidArgument [eINVAL] (P.rxBatch dev 1 arr 4)
        failsWith InvalidArgument [eINVAL] (P.txBatch dev 1 arr 0)

-- | The failures of waits, sockets and colored I/O, on the system managers
-- of the given backend.
ioSpec :: E.BackendKind -> Spec
ioSpec kind = describe "weft's errors (documented failures, shape)" $ do
  describe "Weft" $ do
    it "threadWaitRead on an fd that is not open: InvalidArgument, EBADF" $ do
      fd <- closedFd
      within 5 "the wait" $ failsWith InvalidArgument [eBADF] (Weft.threadWaitRead fd)

    it "threadWaitRead on a negative fd: InvalidArgument, EBADF" $
      within 5 "the wait" $ failsWith InvalidArgument [eBADF] (Weft.threadWaitRead (-1))

    it "threadWaitRead when closeFdWith closes the fd: InvalidArgument, EBADF" $ do
      (r, w) <- newPipe
      live0 <- liveRegistrations
      (_, out) <- forkResult 0 (Weft.threadWaitRead r)
      eventually "the wait registered" ((> live0) <$> liveRegistrations)
      Weft.closeFdWith closeFd r
      closeFd w
      within 5 "the woken wait" $ failsWith InvalidArgument [eBADF] (takeMVar out >>= either throwIO return)

    it "threadWaitReadSTM's action when closeFdWith closes the fd: InvalidArgument, EBADF" $ do
      (r, w) <- newPipe
      (wait, _) <- Weft.threadWaitReadSTM r
      Weft.closeFdWith closeFd r
      closeFd w
      within 5 "the STM wait" $ failsWith InvalidArgument [eBADF] (atomically wait)

    it "threadDelay when the managers are shut down meanwhile: IllegalOperation, ESHUTDOWN" $ do
      startManagers
      timers0 <- pendingTimers
      (_, out) <- forkResult 0 (Weft.threadDelay 10000000)
      -- Shut down only once the sleep's timer is on the wheel: a sleep
      -- that registers afterwards starts a fresh manager.
      eventually "the sleep's timer registered" ((> timers0) <$> pendingTimers)
      E.shutdownSystemManagers
      within 5 "the sleep after shutdown" $
        failsWith IllegalOperation [eSHUTDOWN] (takeMVar out >>= either throwIO return)

  describe "Weft.Event" $ do
    it "registerFd on an fd that is not open: InvalidArgument, EBADF" $ do
      mgr <- E.getSystemManager
      fd <- closedFd
      failsWith InvalidArgument [eBADF] (E.registerFd mgr (\_ _ -> return ()) fd E.evtRead E.OneShot)

    when (kind == E.EPollBackend) $
      it "registerFd on a regular file under epoll: PermissionDenied, EPERM" $ withRegularFile $ \fd -> do
        mgr <- E.getSystemManager
        failsWith PermissionDenied [ePERM] (E.registerFd mgr (\_ _ -> return ()) fd E.evtRead E.OneShot)

    it "registerFd on a manager that was shut down: IllegalOperation, ESHUTDOWN (isManagerShutDownError)" $ do
      mgr <- E.newManager kind 0
      E.shutdownManager mgr
      withPipe $ \(r, _) -> do
        let register = E.registerFd mgr (\_ _ -> return ()) r E.evtRead E.OneShot
        failsWith IllegalOperation [eSHUTDOWN] register
        register `shouldThrow` E.isManagerShutDownError

  describe "Weft.Net" $ do
    it "connect to a port nobody listens on: NoSuchThing, ECONNREFUSED" $ do
      l <- W.listen loopback
      addr <- W.localAddress l
      W.close l
      within 5 "the connect" $ failsWith NoSuchThing [eCONNREFUSED] (W.connect addr)

    it "listen on an address in use: ResourceBusy, EADDRINUSE" $ do
      l <- W.listen loopback
      addr <- W.localAddress l
      failsWith ResourceBusy [eADDRINUSE] (W.listen addr >>= W.close) `finally` W.close l

    it "serve on an address in use: ResourceBusy, EADDRINUSE" $ do
      l <- W.listen loopback
      addr <- W.localAddress l
      (`finally` W.close l) $ within 5 "serve" $
        failsWith ResourceBusy [eADDRINUSE] (W.serve W.defaultServerConfig addr (\_ _ -> return ()))

    it "recv, send and the other calls on a TCP or UDP socket closed with close: InvalidArgument, EBADF" $
      withPair $ \(c, _) -> do
        W.close c
        let closedCall = within 5 "a call on a closed socket" . failsWith InvalidArgument [eBADF]
        closedCall (W.recv c 10)
        closedCall (allocaBytes 16 $ \p -> W.recvBuf c p 16)
        closedCall (W.send c (BC.pack "x"))
        closedCall (W.sendAll c (BC.pack "x"))
        closedCall (W.sendMany c [BC.pack "x", BC.pack "y"])
        closedCall (W.tryRecv c 10)
        closedCall (W.trySendMany c [BC.pack "x"])
        closedCall (W.shutdownSend c)
        closedCall (bracket (openReadOnly "/dev/zero") closeFd $ \file -> W.sendFile c file 0 1)
        closedCall (W.toNetworkSocket c)
        u <- W.bindUDP loopback
        to <- W.localAddress u
        W.close u
        closedCall (W.sendTo u (BC.pack "x") to)
        closedCall (W.recvFrom u 64)
        closedCall (W.recvFromMany u 4 64)

    it "accept and tryAccept on a closed listener: InvalidArgument, EBADF" $ do
      l <- W.listen loopback
      W.close l
      within 5 "accept" $ failsWith InvalidArgument [eBADF] (W.accept l)
      failsWith InvalidArgument [eBADF] (W.tryAccept l)

    it "recv blocked when its socket is closed: InvalidArgument, EBADF" $
      withPair $ \(c, _) -> do
        (_, out) <- forkResult 0 (W.recv c 10)
        threadDelay 50000
        W.close c
        within 5 "the woken recv" $ failsWith InvalidArgument [eBADF] (takeMVar out >>= either throwIO return)

    it "byte counts that are not positive: InvalidArgument, EINVAL" $
      withPair $ \(c, srv) -> withRegularFile $ \file -> do
        failsWith InvalidArgument [eINVAL] (W.recv c 0)
        failsWith InvalidArgument [eINVAL] (W.tryRecv c (-1))
        failsWith InvalidArgument [eINVAL] (W.sendFile srv file 0 0)
        u <- W.bindUDP loopback
        (`finally` W.close u) $ do
          failsWith InvalidArgument [eINVAL] (W.recvFrom u 0)
          failsWith InvalidArgument [eINVAL] (W.recvFromMany u 0 64)
          failsWith InvalidArgument [eINVAL] (W.recvFromMany u 4 0)

    it "sendFile from an fd that is not a regular file: sendfile's errno (a device: EINVAL, InvalidArgument; a pipe: ESPIPE, UnsupportedOperation)" $
      withPair $ \(c, _) -> do
#ifdef WEFT_LINUX
        -- Without sendfile(2) (the portable build), weft reads the file
        -- with pread(2), which finds /dev/null empty rather than refusing it.
        bracket (openReadOnly "/dev/null") closeFd $ \dev ->
          within 5 "sendFile from /dev/null" $ failsWith InvalidArgument [eINVAL] (W.sendFile c dev 0 1)
#endif
        withPipe $ \(r, w) -> do
          writeByte w
          within 5 "sendFile from a pipe" $ failsWith UnsupportedOperation [eSPIPE] (W.sendFile c r 0 1)

    it "a peer's reset: ResourceVanished, ECONNRESET" $ withResetPeer $ \s ->
      within 5 "the recv" $ failsWith ResourceVanished [eCONNRESET] (W.recv s 10)

    it "sending to a closed peer: ResourceVanished, EPIPE or ECONNRESET" $
      withPair $ \(c, srv) -> do
        W.close srv
        -- The first sends may be taken before the peer's reset arrives.
        within 5 "the sends" $
          failsWith ResourceVanished [ePIPE, eCONNRESET] (forever (W.send c (BC.replicate 4096 'x') >> threadDelay 1000))

    it "sending after shutdownSend: ResourceVanished, EPIPE" $
      withPair $ \(c, _) -> do
        W.shutdownSend c
        within 5 "the send" $ failsWith ResourceVanished [ePIPE] (W.send c (BC.pack "late"))

    it "an idle timeout: TimeExpired, ETIMEDOUT (isIdleTimeoutError), for recv and for later calls" $
      withPair $ \(c, _) -> do
        W.setIdleTimeout c 50000
        within 5 "the recv" $ failsWith TimeExpired [eTIMEDOUT] (W.recv c 10)
        W.recv c 10 `shouldThrow` W.isIdleTimeoutError
        within 5 "a later send" $ failsWith TimeExpired [eTIMEDOUT] (W.send c (BC.pack "late"))

  describe "Weft.Color" $ do
    it "onReadable and onWritable on an fd that is not open: InvalidArgument, EBADF" $
      withRuntime $ \rt -> do
        fd <- closedFd
        failsWith InvalidArgument [eBADF] (C.onReadable rt fd C.defaultColor (C.handler "never") (return ()))
        failsWith InvalidArgument [eBADF] (C.onWritable rt fd C.defaultColor (C.handler "never") (return ()))

    when (kind == E.EPollBackend) $
      it "onReadable and watchFd on a regular file under epoll: PermissionDenied, EPERM" $
        withRuntime $ \rt -> withRegularFile $ \fd -> do
          failsWith PermissionDenied [ePERM] (C.onReadable rt fd C.defaultColor (C.handler "never") (return ()))
          failsWith PermissionDenied [ePERM] (C.watchFd rt fd C.defaultColor noBody noBody >>= C.unwatchFd)

    if kind == E.PollBackend
      then
        -- The poll backend has no edge-triggered watches: its watchFd
        -- registers nothing, and a rearm registers the fd one-shot.
        it "rearmRead of a watch of an fd that is not open (poll backend): InvalidArgument, EBADF" $
          withRuntime $ \rt -> do
            fd <- closedFd
            bracket (C.watchFd rt fd C.defaultColor noBody noBody) C.unwatchFd $ \fw ->
              failsWith InvalidArgument [eBADF] (C.rearmRead fw)
      else
        it "watchFd and watchSocket on a closed fd or socket: InvalidArgument, EBADF" $
          withRuntime $ \rt -> do
            fd <- closedFd
            failsWith InvalidArgument [eBADF] (C.watchFd rt fd C.defaultColor noBody noBody >>= C.unwatchFd)
            withPair $ \(c, _) -> do
              W.close c
              failsWith InvalidArgument [eBADF] (C.watchSocket rt c C.defaultColor noBody noBody >>= C.unwatchFd)
  where
    noBody = (C.handler "never", return ())
    withRuntime = bracket (C.newRuntime C.defaultConfig { C.cfgCores = 1 }) (within 10 "shutdown" . C.shutdown)
