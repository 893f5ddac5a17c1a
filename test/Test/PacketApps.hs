{-# LANGUAGE ScopedTypeVariables #-}
-- | End to end on veth: weft-pktgen → weft-fwd → weft-pktcheck, each in
-- its own network namespace of @scripts/netns-lab@ (made and removed
-- here), with exact counts. Needs root and the built programs next to the
-- test binary (make test puts them there); otherwise pending, with the
-- reason.
module Test.PacketApps (spec) where

import Control.Concurrent (forkIO, newEmptyMVar, putMVar, takeMVar, threadDelay)
import Control.Exception
import Control.Monad
import Data.List (isPrefixOf)
import qualified Data.Map.Strict as Map
import System.Directory (doesFileExist)
import System.Environment (getExecutablePath)
import System.Exit
import System.IO (hGetContents)
import System.FilePath (takeDirectory, (</>))
import System.Posix.Process (getProcessID)
import System.Posix.User (getEffectiveUserID)
import System.Process
import Test.Hspec

spec :: Spec
spec = describe "Weft.Packet end to end (netns-lab)" $ do
  -- The forwarder's ports are the interfaces themselves (backend A), or
  -- two 82599 models whose wires are those interfaces (backend B). Paced:
  -- 20,000 packets at 20,000 a second. A burst: 3,000 as fast as the
  -- generator sends, more than the forwarder's receive and transmit rings
  -- hold at once, so a transmit ring fills while the burst is forwarded
  -- (on the models, whose engines drain it only while the forwarder
  -- yields) and must drain, not drop.
  forM_ [ ("AF_PACKET", "afpacket:fwd0", "afpacket:fwd1")
        , ("the ixgbe driver on models wired to them", "model:0:wire=fwd0", "model:1:wire=fwd1") ] $
   \(how, port0, port1) ->
   forM_ [ ("paced", 20000, 20000 :: Int), ("a burst", 0, 3000) ] $ \(load, rate, count) ->
   it ("weft-pktgen → weft-fwd → weft-pktcheck, forwarding through " ++ how ++ ", " ++ load
       ++ ": every packet exactly once") $
    withLab $ \run prefix -> do
      checker <- run (prefix ++ "sink") "weft-pktcheck"
        ["afpacket:sink0", "--expect", show count, "--idle-exit", "1000", "--seconds", "20"]
      fwd <- run (prefix ++ "fwd") "weft-fwd" [port0, port1, "--batch", "32", "--seconds", "20"]
      threadDelay 500000
      gen <- run (prefix ++ "gen") "weft-pktgen" ["afpacket:gen0", "--rate", show (rate :: Int), "--count", show count]
      (genCode, genOut) <- finish gen
      expectSummary genOut genCode ExitSuccess [("sent", count)]
      (checkCode, checkOut) <- finish checker
      stop fwd
      (fwdCode, fwdOut) <- finish fwd
      -- the forwarder's output goes with the checker's, to say where a
      -- missing packet went
      expectSummary (checkOut ++ "weft-fwd:\n" ++ fwdOut) checkCode ExitSuccess
        [("received", count), ("duplicates", 0), ("missing", 0), ("other", 0)]
      expectSummary fwdOut fwdCode ExitSuccess [("forwarded", count), ("dropped", 0)]

  it "weft-pktcheck reports a gap and fails" $
    withLab $ \run prefix -> do
      -- no forwarder: bridge the forwarder namespace in the kernel, send
      -- 1000, and ask for 1001
      lab ["peer", "bridge", "--prefix", prefix]
      checker <- run (prefix ++ "sink") "weft-pktcheck"
        ["afpacket:sink0", "--expect", "1001", "--idle-exit", "500", "--seconds", "20"]
      threadDelay 300000
      gen <- run (prefix ++ "gen") "weft-pktgen" ["afpacket:gen0", "--rate", "20000", "--count", "1000"]
      _ <- finish gen
      (code, out) <- finish checker
      -- "other" may count a frame the bridge itself sends
      expectSummary out code (ExitFailure 1) [("distinct", 1000), ("duplicates", 0), ("missing", 1)]

-- | A started program: its handle and where its output goes.
data Started = Started ProcessHandle (IO String)

-- | Makes the lab with a prefix of its own, hands the test a way to start
-- a built program in one of its namespaces, and removes it all after.
withLab :: ((String -> String -> [String] -> IO Started) -> String -> IO ()) -> IO ()
withLab body = do
  uid <- getEffectiveUserID
  bin <- takeDirectory <$> getExecutablePath
  present <- and <$> mapM (doesFileExist . (bin </>)) ["weft-fwd", "weft-pktgen", "weft-pktcheck"]
  script <- doesFileExist "scripts/netns-lab"
  case () of
    _ | uid /= 0 -> pendingWith "needs root (network namespaces, AF_PACKET)"
      | not present -> pendingWith ("weft-fwd, weft-pktgen, weft-pktcheck not found in " ++ bin ++ " (run make test)")
      | not script -> pendingWith "scripts/netns-lab not found (run from the repository's root)"
      | otherwise -> do
          pid <- getProcessID
          let prefix = "wt" ++ show (fromIntegral pid `mod` (100000 :: Int)) ++ "x"
              run ns exe args = do
                (_, Just out, Just err, ph) <- createProcess
                  (proc "ip" (["netns", "exec", ns, bin </> exe] ++ args))
                    { std_out = CreatePipe, std_err = CreatePipe }
                -- read on the side, so that a program that never exits
                -- cannot block the test past finish's limit
                var <- newEmptyMVar
                errVar <- newEmptyMVar
                _ <- forkIO (hGetContents out >>= \o -> length o `seq` putMVar var o)
                _ <- forkIO (hGetContents err >>= \e -> length e `seq` putMVar errVar e)
                pure (Started ph ((++) <$> takeMVar var <*> takeMVar errVar))
          bracket_ (lab ["up", "--prefix", prefix]) (lab ["down", "--prefix", prefix]) (body run prefix)

lab :: [String] -> IO ()
lab args = do
  (code, out, err) <- readProcessWithExitCode "bash" ("scripts/netns-lab" : args) ""
  when (code /= ExitSuccess) $
    expectationFailure ("netns-lab " ++ unwords args ++ ": " ++ out ++ err)

-- | Waits (at most 30 s) for the program and returns its status and output.
finish :: Started -> IO (ExitCode, String)
finish (Started ph output) = do
  let wait n = do
        c <- getProcessExitCode ph
        case c of
          Just code -> pure code
          Nothing | n <= (0 :: Int) -> terminateProcess ph >> waitForProcess ph
                  | otherwise -> threadDelay 20000 >> wait (n - 1)
  code <- wait 1500
  out <- output
  pure (code, out)

-- | Asks the program to stop (SIGTERM); it prints its summary and exits.
stop :: Started -> IO ()
stop (Started ph _) = terminateProcess ph

-- | The exit status and the summary's fields, with the program's whole
-- output in the failure message.
expectSummary :: String -> ExitCode -> ExitCode -> [(String, Int)] -> IO ()
expectSummary out code wantCode fields = do
  let got = [ (k, summaryOf out k) | (k, _) <- fields ]
      want = [ (k, Just (fromIntegral v)) | (k, v) <- fields ]
  when (got /= want || code /= wantCode) $
    expectationFailure ("expected " ++ show (wantCode, want) ++ ", got " ++ show (code, got)
                        ++ "; output:\n" ++ out)

summaryOf :: String -> String -> Maybe Integer
summaryOf out key = case [ l | l <- lines out, "summary " `isPrefixOf` l ] of
  (l : _) -> Map.lookup key (Map.fromList [ (k, read v) | w <- words (drop 8 l)
                                                        , (k, '=' : v) <- [break (== '=') w]
                                                        , [(_ :: Integer, "")] <- [reads v] ])
  [] -> Nothing
