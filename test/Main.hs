{-# LANGUAGE CPP #-}
-- | weft's test suite. The wait, timer, lifecycle, network and colored
-- readiness tests run once per backend; run with @+RTS -N2@ so that two capabilities take part.
module Main (main) where

import Control.Concurrent (getNumCapabilities)
import Control.Exception (IOException, catch)
import Control.Monad (filterM, forM_, when)
import System.Exit (exitFailure)
import System.IO
import Test.Hspec

#ifdef WEFT_LINUX
import qualified Test.AfPacket
import qualified Test.Ixgbe
import qualified Test.PacketApps
import qualified Test.Uring
#endif
import qualified Test.Color
import qualified Test.ColorQueues
import qualified Test.Errors
import qualified Test.FdTable
import qualified Test.Eviction
import qualified Test.Lifecycle
import qualified Test.Http
import qualified Test.Kv
import qualified Test.KvMulti
import qualified Test.KvMembers
import qualified Test.KvPacked
import qualified Test.KvSortedSet
import qualified Test.Mixing
import qualified Test.Net
import qualified Test.Packet
import qualified Test.Servers
import qualified Test.Slot
import qualified Test.Spin
import qualified Test.Sws
import qualified Test.Timers
import qualified Test.Waits
import qualified Test.Wheel
import qualified Weft.Event as E

main :: IO ()
main = do
  caps <- getNumCapabilities
  when (caps < 2) $ do
    hPutStrLn stderr "weft-test: run with +RTS -N2 (or more)"
    exitFailure
  kinds <- filterM usable E.availableBackendKinds
  hspec $ do
    Test.FdTable.spec
    Test.Eviction.spec
    Test.Slot.spec
    Test.Spin.spec
    Test.Wheel.spec
    Test.Http.spec
    Test.Kv.spec
    Test.KvMulti.spec
    Test.KvMembers.spec
    Test.KvPacked.spec
    Test.KvSortedSet.spec
    Test.ColorQueues.spec
    Test.Color.spec
    Test.Packet.spec
    Test.Errors.spec
#ifdef WEFT_LINUX
    Test.AfPacket.spec
    Test.Ixgbe.spec
    Test.PacketApps.spec
    Test.Uring.spec (E.UringBackend `elem` kinds)
#endif
    forM_ kinds $ \kind ->
      describe ("backend " ++ E.backendKindName kind) $
        beforeAll_ (E.setSystemBackend kind) $ do
          Test.Waits.spec kind
          Test.Timers.spec
          Test.Lifecycle.spec kind
          Test.Net.spec kind
          Test.Mixing.spec kind
          Test.Servers.spec kind
          Test.Sws.spec
          Test.Color.ioSpec kind
          Test.Errors.ioSpec kind

-- | Whether the kernel lets this process open a backend of this kind (a
-- container may refuse io_uring); the suite skips one it refuses, saying so.
usable :: E.BackendKind -> IO Bool
usable kind = (True <$ (E.newManager kind 0 >>= E.shutdownManager)) `catch` \e -> do
  hPutStrLn stderr ("weft-test: skipping the " ++ E.backendKindName kind ++ " backend: "
                    ++ show (e :: IOException))
  return False
