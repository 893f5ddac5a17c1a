{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | weft-bench packet: Weft.Packet's forwarder against its C twin and the
-- kernel's own forwarding, on veth pairs, and the ixgbe driver loop
-- against its C port on the device model.
--
-- The veth part runs on the topology of @scripts/netns-lab@: a generator
-- namespace, a forwarder namespace and a sink namespace, joined by two
-- veth pairs. weft-pktgen sends from the generator as fast as it can,
-- pinned to core 1; the forwarder under test runs pinned to core 0. The
-- arms of each batch size run one after the other within a repetition, so
-- they see the same machine. Reported per arm: forwarded Mpps (the
-- forwarder's own count), the generator's rate beside it (a forwarder
-- below it is saturated), core 0's busy time per forwarded packet (user,
-- system and softirq time from @/proc/stat@: the forwarder and the kernel
-- work it causes), and for weft-fwd the GC share and bytes allocated per
-- packet (from @+RTS -t --machine-readable@).
--
-- On veth the kernel's work dominates (each packet is an skb on both
-- sides), so the absolute rates are far below a real NIC's; the ratio to
-- the C forwarder over the same rings is the number that says how much
-- the language and runtime cost.
--
-- The kernel peers (a bridge, tc mirred) forward inside the generator's
-- softirq, on core 1: their rate is measured at the sink and their cost
-- is not on core 0.
--
-- A zero-loss check follows: weft-pktgen at a fixed rate below what both
-- forwarders sustain, through each forwarder, into weft-pktcheck, which
-- must see every sequence number exactly once.
module Bench.Packet (packetMain, packetModelChild) where

import Control.Concurrent (threadDelay)
import Data.Bits ((.&.))
import qualified Data.ByteString.Internal as BI
import Data.Word (Word64, Word8)
import Foreign.Storable (peekByteOff, pokeByteOff)
import GHC.Clock (getMonotonicTimeNSec)
import Control.Exception
import Control.Monad
import Data.List (isPrefixOf)
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe)
import System.Directory (doesFileExist)
import System.Exit
import System.FilePath ((</>))
import System.IO
import System.Posix.User (getEffectiveUserID)
import System.Process
import Text.Printf (printf)

import Bench.Net (binDir, resultsDir)
import Bench.Options
import Bench.Report
import Weft.Packet

data Options = Options
  { optQuick    :: !Bool
  , optReps     :: !Int
  , optDuration :: !Double   -- ^ seconds per forwarding run
  , optBatches  :: ![Int]
  , optOnly     :: ![String] -- ^ sections: veth, peers, loss, model
  }

parseOptions :: [String] -> IO Options
parseOptions = parseOrExit "packet"
  [ flag "--quick" (\o -> o { optQuick = True, optReps = 1, optDuration = 1.5, optBatches = [1, 4, 32, 256] })
  , value "--reps" "N" positive (\k o -> o { optReps = k })
  , value "--duration" "S" positive (\k o -> o { optDuration = k })
  , value "--batches" "1,8,..." (listOf batch) (\ks o -> o { optBatches = ks })
  , value "--only" "veth,peers,loss,model" (listOf Just) (\xs o -> o { optOnly = xs }) ]
  (Options False 3 3 [1, 2, 4, 8, 16, 32, 64, 128, 256] ["veth", "peers", "loss", "model"])
 where
  batch s = case positive s of
    Just k | k <= 256 -> Just (k :: Int)
    _ -> Nothing

-- | The benchmark's entry; returns the rendered tables.
packetMain :: [String] -> IO String
packetMain args = parseOptions args >>= \opts -> do
    model <- if "model" `elem` optOnly opts
      then modelPart opts
      else pure ""
    veth <- if any (`elem` optOnly opts) ["veth", "peers", "loss"]
      then vethPart opts
      else pure ""
    pure (veth ++ model)

-- | A child of the model benchmark: the model forwarding loop in Haskell
-- (@--batch B --seconds S@), printing its summary line.
packetModelChild :: [String] -> IO ()
packetModelChild args = case childOptions args (32, 2) of
  Nothing -> hPutStrLn stderr "weft-bench packet-model-child: expected --batch B (1-256) --seconds S" >> exitFailure
  Just (batch, secs) -> do
    (forwarded, elapsed) <- modelForwardLoop batch secs
    printf "summary forwarded=%d seconds=%.3f\n" forwarded elapsed
 where
  childOptions [] acc = Just acc
  childOptions ("--batch" : n : rest) (_, t) | [(k, "")] <- reads n, k >= 1, k <= 256 = childOptions rest (k, t)
  childOptions ("--seconds" : n : rest) (b, _) | [(k, "")] <- reads n, k > 0 = childOptions rest (b, k)
  childOptions _ _ = Nothing

------------------------------------------------------------------------------
-- The veth topology

prefix :: String
prefix = "wb"

ns :: String -> String
ns role = prefix ++ role

labScript :: FilePath
labScript = "scripts/netns-lab"

-- | Why the veth part cannot run here, if it cannot.
vethUnavailable :: IO (Maybe String)
vethUnavailable = do
  uid <- getEffectiveUserID
  script <- doesFileExist labScript
  ipTool <- doesFileExist "/usr/sbin/ip" >>= \a -> if a then pure True else doesFileExist "/sbin/ip"
  pure $ case () of
    _ | uid /= 0 -> Just "not root: network namespaces and AF_PACKET need root"
      | not script -> Just ("no " ++ labScript ++ " (run from the repository's root)")
      | not ipTool -> Just "no ip(8) (iproute2)"
      | otherwise -> Nothing

lab :: [String] -> IO (Either String ())
lab args = do
  (code, out, err) <- readProcessWithExitCode "bash" (labScript : args ++ ["--prefix", prefix]) ""
  pure $ case code of
    ExitSuccess -> Right ()
    ExitFailure c -> Left ("netns-lab " ++ unwords args ++ " failed (" ++ show c ++ "): " ++ out ++ err)

vethPart :: Options -> IO String
vethPart opts = do
  why <- vethUnavailable
  case why of
    Just reason -> do
      let msg = "weft-bench packet: skipping the veth benchmarks: " ++ reason ++ "\n"
      putStr msg
      pure msg
    Nothing -> do
      up <- lab ["up"]
      case up of
        Left e -> do
          let msg = "weft-bench packet: skipping the veth benchmarks: " ++ e ++ "\n"
          putStr msg
          pure msg
        Right () -> (do
          a <- if "veth" `elem` optOnly opts then sweep opts else pure ("", Map.empty)
          b <- if "peers" `elem` optOnly opts then peers opts else pure ""
          c <- if "loss" `elem` optOnly opts then lossCheck opts (snd a) else pure ""
          pure (fst a ++ b ++ c)) `finally` lab ["down"]

bin :: String -> IO FilePath
bin name = (</> name) <$> binDir

-- | @inNs role cpu exe args@: the command line running @exe@ in a
-- namespace, pinned.
inNs :: String -> Int -> FilePath -> [String] -> (FilePath, [String])
inNs role cpu exe args = ("ip", ["netns", "exec", ns role, "taskset", "-c", show cpu, exe] ++ args)

-- | Busy and total jiffies of one CPU, from /proc/stat.
cpuJiffies :: Int -> IO (Integer, Integer)
cpuJiffies cpu = do
  s <- readFile "/proc/stat"
  let name = "cpu" ++ show cpu
  case [ map read (drop 1 ws) | l <- lines s, let ws = words l, take 1 ws == [name] ] of
    ((user : nice : sys : idle : iowait : irq : softirq : rest) : _) ->
      length s `seq` pure ( user + nice + sys + irq + softirq + take1 rest
                          , user + nice + sys + idle + iowait + irq + softirq + take1 rest )
    _ -> length s `seq` pure (0, 1)
 where
  take1 (steal : _) = steal
  take1 [] = 0

-- | One forwarding run: generator at full speed, the forwarder for the
-- run's duration. Returns the forwarder's summary, the generator's rate
-- (Mpps), core 0's busy seconds and the RTS statistics (weft-fwd only).
data Run = Run
  { runMpps    :: !Double
  , runGenMpps :: !Double
  , runCoreNs  :: !Double   -- ^ core 0 busy ns per forwarded packet
  , runGc      :: !(Maybe Double)  -- ^ GC share of CPU, percent
  , runAlloc   :: !(Maybe Double)  -- ^ bytes allocated per packet
  }

data Arm = WeftFwd | CFwd
  deriving (Eq, Ord, Show)

armName :: Arm -> String
armName WeftFwd = "weft-fwd"
armName CFwd = "C afp_fwd"

forwarderCommand :: Arm -> Int -> Double -> IO (FilePath, [String])
forwarderCommand arm batch secs = case arm of
  WeftFwd -> do
    exe <- bin "weft-fwd"
    pure (inNs "fwd" 0 exe (["afpacket:fwd0", "afpacket:fwd1"] ++ common
                            ++ ["+RTS", "-N1", "-t", "--machine-readable", "-RTS"]))
  CFwd -> do
    exe <- bin "weft-afp-fwd"
    pure (inNs "fwd" 0 exe (["fwd0", "fwd1"] ++ common))
 where
  common = ["--batch", show batch, "--seconds", show secs]

-- | Starts weft-pktgen in the generator namespace on core 1.
startGenerator :: [String] -> IO ProcessHandle
startGenerator extra = do
  exe <- bin "weft-pktgen"
  let (cmd, args) = inNs "gen" 1 exe ("afpacket:gen0" : extra ++ ["+RTS", "-N1", "-RTS"])
  -- /dev/null, never a closed fd: the child's next file would take the
  -- number, and its prints would land there.
  devNull <- openFile "/dev/null" WriteMode
  (_, _, _, ph) <- createProcess (proc cmd args) { std_out = UseHandle devNull, std_err = Inherit }
  hClose devNull
  pure ph

stopProcess :: ProcessHandle -> IO ()
stopProcess ph = do
  terminateProcess ph
  void (waitForProcess ph)

forwardRun :: Double -> Arm -> Int -> IO (Either String Run)
forwardRun secs arm batch = do
  gen <- startGenerator ["--seconds", show (secs + 3)]
  threadDelay 300000
  (b0, t0) <- cpuJiffies 0
  genBefore <- sinkOrGenCount "gen" "gen0" "tx_packets"
  (cmd, args) <- forwarderCommand arm batch secs
  (code, out, err) <- readProcessWithExitCode cmd args ""
  (b1, t1) <- cpuJiffies 0
  genAfter <- sinkOrGenCount "gen" "gen0" "tx_packets"
  stopProcess gen
  pure $ case code of
    ExitFailure c -> Left (armName arm ++ " exited with " ++ show c ++ ": " ++ take 400 err)
    ExitSuccess -> case summary out of
      Nothing -> Left (armName arm ++ " printed no summary: " ++ take 400 out)
      Just kv -> do
        let fwd = fromMaybe 0 (Map.lookup "forwarded" kv)
            s = fromMaybe secs (Map.lookup "seconds" kv)
            -- jiffies are 10 ms; the share of core 0 busy over the run
            busySecs = fromIntegral (b1 - b0) / fromIntegral (max 1 (t1 - t0)) * s
            (gcShare, alloc) = gcAndAlloc (rtsStats err) fwd
        pure Run { runMpps = fwd / s / 1e6
                 , runGenMpps = fromIntegral (genAfter - genBefore) / s / 1e6
                 , runCoreNs = busySecs * 1e9 / max 1 fwd
                 , runGc = if arm == WeftFwd then gcShare else Nothing
                 , runAlloc = if arm == WeftFwd then alloc else Nothing }

-- | An interface counter inside a namespace.
sinkOrGenCount :: String -> String -> String -> IO Integer
sinkOrGenCount role iface counter = do
  r <- try (readProcess "ip" ["netns", "exec", ns role, "cat", "/sys/class/net/" ++ iface ++ "/statistics/" ++ counter] "")
  pure $ case r of
    Right s | [(n, _)] <- reads s -> n
    Left (_ :: IOException) -> 0
    _ -> 0

-- | The @summary k=v ...@ line of a tool's output.
summary :: String -> Maybe (Map.Map String Double)
summary out = case [ l | l <- lines out, "summary " `isPrefixOf` l ] of
  (l : _) -> Just (Map.fromList [ (k, v) | w <- words (drop 8 l), (k, '=' : s) <- [break (== '=') w]
                                         , [(v, "")] <- [reads s] ])
  [] -> Nothing

-- | From a run's @+RTS -t --machine-readable@ statistics and the packets
-- it forwarded: the GC's share of its CPU time (%) and the bytes it
-- allocated per packet.
gcAndAlloc :: Map.Map String Double -> Double -> (Maybe Double, Maybe Double)
gcAndAlloc st packets =
  ( do g <- Map.lookup "GC_cpu_seconds" st
       m <- Map.lookup "mut_cpu_seconds" st
       pure (100 * g / max 1e-9 (g + m))
  , (/ max 1 packets) <$> Map.lookup "bytes allocated" st )

-- | GHC's @-t --machine-readable@ statistics: lines @ [("name", "value")@,
-- then @ ,("name", "value")@.
rtsStats :: String -> Map.Map String Double
rtsStats err = Map.fromList
  [ (k, v) | l <- lines err
           , [(pair, _)] <- [reads (dropWhile (`elem` " [,") l) :: [((String, String), String)]]
           , let (k, s) = pair, [(v, "")] <- [reads s] ]

sweep :: Options -> IO (String, Map.Map (Arm, Int) [Run])
sweep opts = do
  printf "weft-bench packet: forwarding on veth, generator (weft-pktgen) on core 1, forwarder on core 0; %d rep(s) of %.1f s\n"
         (optReps opts) (optDuration opts)
  results <- fmap concat $ forM [1 .. optReps opts] $ \rep ->
    fmap concat $ forM (optBatches opts) $ \batch ->
      forM [WeftFwd, CFwd] $ \arm -> do
        r <- forwardRun (optDuration opts) arm batch
        case r of
          Left e -> printf "  rep %d batch %d %s: FAILED: %s\n" rep batch (armName arm) e >> pure Nothing
          Right run -> do
            printf "  rep %d batch %3d %-9s %.3f Mpps (generator %.3f), core 0 %.0f ns/packet%s\n"
                   rep batch (armName arm) (runMpps run) (runGenMpps run) (runCoreNs run)
                   (maybe "" (\g -> printf ", GC %.2f%%" g) (runGc run) :: String)
            pure (Just ((arm, batch), run))
  let byCell = Map.fromListWith (++) [ (k, [v]) | Just (k, v) <- results ]
      med f arm batch = median . map f <$> Map.lookup (arm, batch) byCell
      fmt = maybe "-" (printf "%.3f")
      fmt0 = maybe "-" (printf "%.0f")
      fmt2 = maybe "-" (printf "%.2f")
      ratio a b = do
        x <- a
        y <- b
        pure (x / max 1e-9 y)
      rows = [ [ show b
               , fmt (med runMpps WeftFwd b), fmt (med runMpps CFwd b)
               , fmt2 (ratio (med runMpps WeftFwd b) (med runMpps CFwd b))
               , fmt (med runGenMpps WeftFwd b)
               , fmt0 (med runCoreNs WeftFwd b), fmt0 (med runCoreNs CFwd b)
               , fmt2 (join (fmap (fmap median . mapM runGc) (Map.lookup (WeftFwd, b) byCell)))
               , fmt0 (join (fmap (fmap median . mapM runAlloc) (Map.lookup (WeftFwd, b) byCell))) ]
             | b <- optBatches opts ]
      header = [ "batch", "weft Mpps", "C Mpps", "weft÷C", "gen Mpps", "weft ns/pkt", "C ns/pkt"
               , "weft GC %", "weft B/pkt" ]
      table = renderTable header rows
  dir <- resultsDir
  writeCsv (dir </> "packet-veth.csv") header rows
  putStr table
  pure ("Forwarding on veth (medians; ns/pkt is core 0's busy time per forwarded packet):\n\n" ++ table ++ "\n", byCell)

peers :: Options -> IO String
peers opts = do
  rows <- forM ["bridge", "mirred"] $ \peer -> do
    ok <- lab ["peer", peer]
    case ok of
      Left e -> pure [peer, "failed: " ++ take 60 e, "-"]
      Right () -> do
        rates <- forM [1 .. optReps opts] $ \_ -> do
          gen <- startGenerator ["--seconds", show (optDuration opts + 2)]
          threadDelay 300000
          before <- sinkOrGenCount "sink" "sink0" "rx_packets"
          genBefore <- sinkOrGenCount "gen" "gen0" "tx_packets"
          threadDelay (round (optDuration opts * 1e6))
          after <- sinkOrGenCount "sink" "sink0" "rx_packets"
          genAfter <- sinkOrGenCount "gen" "gen0" "tx_packets"
          stopProcess gen
          let d = optDuration opts
          pure (fromIntegral (after - before) / d / 1e6, fromIntegral (genAfter - genBefore) / d / 1e6)
        printf "  peer %-6s %s\n" peer (unwords [ printf "%.3f Mpps (gen %.3f)" a g | (a, g) <- rates ] :: String)
        pure [peer, printf "%.3f" (median (map fst rates)), printf "%.3f" (median (map snd rates))]
  _ <- lab ["peer", "none"]
  let header = ["kernel peer", "Mpps at the sink", "gen Mpps"]
      table = renderTable header rows
  dir <- resultsDir
  writeCsv (dir </> "packet-peers.csv") header rows
  putStr table
  pure ("Kernel forwarding on the same topology (runs in the generator's softirq, on core 1):\n\n"
        ++ table ++ "\n")

-- | pktgen at a fixed rate → forwarder → pktcheck, for both forwarders.
lossCheck :: Options -> Map.Map (Arm, Int) [Run] -> IO String
lossCheck opts swept = do
  let measured = [ median (map runMpps rs) | ((_, b), rs) <- Map.toList swept, b == 32 ]
      -- half the slower forwarder's rate at batch 32, at most 200 kpps
      rate = if null measured then 100000 else min 200000 (max 20000 (minimum measured * 1e6 / 2))
      count = round (rate * (if optQuick opts then 1.5 else 4)) :: Int
  rows <- forM [WeftFwd, CFwd] $ \arm -> do
    check <- bin "weft-pktcheck"
    let (ccmd, cargs) = inNs "sink" 1 check ["afpacket:sink0", "--expect", show count, "--idle-exit", "1000"
                                            , "--seconds", "60", "+RTS", "-N1", "-RTS"]
    (_, Just cout, _, cph) <- createProcess (proc ccmd cargs) { std_out = CreatePipe }
    (fcmd, fargs) <- forwarderCommand arm 32 120
    devNull <- openFile "/dev/null" WriteMode
    (_, _, _, fph) <- createProcess (proc fcmd fargs) { std_out = UseHandle devNull, std_err = UseHandle devNull }
    hClose devNull
    threadDelay 500000
    genExe <- bin "weft-pktgen"
    let (gcmd, gargs) = inNs "gen" 1 genExe ["afpacket:gen0", "--rate", show (round rate :: Int)
                                            , "--count", show count, "+RTS", "-N1", "-RTS"]
    (gcode, gout, _) <- readProcessWithExitCode gcmd gargs ""
    ccode <- waitForProcess cph
    cres <- hGetContents cout
    stopProcess fph
    let s = fromMaybe Map.empty (summary cres)
        get k = maybe "-" (printf "%.0f") (Map.lookup k s) :: String
        sent = maybe "-" (printf "%.0f") (Map.lookup "sent" =<< summary gout) :: String
        verdict = case (gcode, ccode) of
          (ExitSuccess, ExitSuccess) -> "exact"
          (ExitSuccess, ExitFailure _) -> "LOSS OR DUPLICATES"
          _ -> "generator failed"
    printf "  loss check %-9s sent %s received %s duplicates %s missing %s: %s\n"
           (armName arm) sent (get "received") (get "duplicates") (get "missing") verdict
    pure [armName arm, printf "%.0f" rate, sent, get "received", get "duplicates", get "missing", verdict]
  let header = ["forwarder", "rate pps", "sent", "received", "duplicates", "missing", "verdict"]
      table = renderTable header rows
  dir <- resultsDir
  writeCsv (dir </> "packet-loss.csv") header rows
  putStr table
  pure ("Zero loss below saturation (weft-pktgen → forwarder at batch 32 → weft-pktcheck):\n\n"
        ++ table ++ "\n")

------------------------------------------------------------------------------
-- The driver loop on the device model

-- | The arms of the model benchmark.
data ModelArm = HaskellLoop | CLoop
  deriving (Eq, Ord, Show)

modelArmName :: ModelArm -> String
modelArmName HaskellLoop = "Haskell"
modelArmName CLoop = "C"

-- | One run of the model forwarding loop, pinned to core 0: Mpps, and for
-- the Haskell arm the GC share (percent) and bytes allocated per packet.
modelRun :: Double -> ModelArm -> Int -> IO (Either String (Double, Maybe Double, Maybe Double))
modelRun secs arm batch = do
  (exe, extra) <- case arm of
    HaskellLoop -> do
      e <- bin "weft-bench"
      pure (e, ["packet-model-child"])
    CLoop -> do
      e <- bin "weft-ixgbe-loop"
      pure (e, [])
  let rts = if arm == HaskellLoop then ["+RTS", "-N1", "-t", "--machine-readable", "-RTS"] else []
      args = ["-c", "0", exe] ++ extra ++ ["--batch", show batch, "--seconds", show secs] ++ rts
  (code, out, err) <- readProcessWithExitCode "taskset" args ""
  pure $ case (code, summary out) of
    (ExitFailure c, _) -> Left (modelArmName arm ++ " exited with " ++ show c ++ ": " ++ take 400 err)
    (_, Nothing) -> Left (modelArmName arm ++ " printed no summary: " ++ take 400 out)
    (_, Just kv) ->
      let fwd = fromMaybe 0 (Map.lookup "forwarded" kv)
          s = fromMaybe secs (Map.lookup "seconds" kv)
          (gc, alloc) = gcAndAlloc (rtsStats err) fwd
      in Right (fwd / s / 1e6, if arm == HaskellLoop then gc else Nothing
               , if arm == HaskellLoop then alloc else Nothing)

modelPart :: Options -> IO String
modelPart opts = do
  printf "weft-bench packet: the ixgbe driver loop on the 82599 model, Haskell against its C port, core 0; %d rep(s) of %.1f s\n"
         (optReps opts) (optDuration opts)
  results <- fmap concat $ forM [1 .. optReps opts] $ \rep ->
    fmap concat $ forM (optBatches opts) $ \batch ->
      forM [HaskellLoop, CLoop] $ \arm -> do
        r <- modelRun (optDuration opts) arm batch
        case r of
          Left e -> printf "  rep %d batch %d %s: FAILED: %s\n" rep batch (modelArmName arm) e >> pure Nothing
          Right run@(mpps, gc, _) -> do
            printf "  rep %d batch %3d %-7s %.3f Mpps, %.1f ns/packet%s\n" rep batch (modelArmName arm)
                   mpps (1e3 / max 1e-9 mpps) (maybe "" (printf ", GC %.2f%%") gc :: String)
            pure (Just ((arm, batch), run))
  let byCell = Map.fromListWith (++) [ (k, [v]) | Just (k, v) <- results ]
      mppsOf arm b = median . map (\(m, _, _) -> m) <$> Map.lookup (arm, b) byCell
      gcOf b = Map.lookup (HaskellLoop, b) byCell >>= fmap median . mapM (\(_, g, _) -> g)
      allocOf b = Map.lookup (HaskellLoop, b) byCell >>= fmap median . mapM (\(_, _, a) -> a)
      fmt = maybe "-" (printf "%.3f")
      fmt1 = maybe "-" (printf "%.1f")
      fmt2 = maybe "-" (printf "%.2f")
      perPacketNs = fmap (\m -> 1e3 / max 1e-9 m)
      ratio b = (/) <$> mppsOf HaskellLoop b <*> (max 1e-9 <$> mppsOf CLoop b)
      rows = [ [ show b, fmt (mppsOf HaskellLoop b), fmt (mppsOf CLoop b), fmt2 (ratio b)
               , fmt1 (perPacketNs (mppsOf HaskellLoop b)), fmt1 (perPacketNs (mppsOf CLoop b))
               , fmt2 (gcOf b), fmt1 (allocOf b) ]
             | b <- optBatches opts ]
      header = [ "batch", "Haskell Mpps", "C Mpps", "Haskell÷C", "Haskell ns/pkt", "C ns/pkt"
               , "Haskell GC %", "Haskell B/pkt" ]
      table = renderTable header rows
      targets = [ printf "%s batch %d: Haskell÷C %.2f (target ≥ 0.37), GC %s (target < 2%%)\n"
                    (if r >= 0.37 && maybe False (< 2) (gcOf b) then "PASS" else "MISS" :: String)
                    b r (maybe "-" (printf "%.2f%%") (gcOf b) :: String)
                | b <- optBatches opts, b == 32 || b == maximum (optBatches opts), Just r <- [ratio b] ]
  dir <- resultsDir
  writeCsv (dir </> "packet-model.csv") header rows
  putStr table
  mapM_ putStr targets
  pure ("The ixgbe driver loop on the 82599 model (one thread on core 0: model DMA step, rxBatch, "
        ++ "touch, txBatch; medians):\n\n" ++ table ++ concat targets ++ "\n")

-- | The model forwarding loop, in Haskell (its C twin is
-- @bench/c/ixgbe_loop.c@, which does the same work per packet): port 0's
-- wire is a source of 60-byte test packets, port 1's a sink; one thread
-- steps both models, receives a batch on port 0, touches each packet's
-- second byte, sends the batch on port 1 and frees what did not fit.
-- Returns the packets forwarded and the seconds it ran.
modelForwardLoop :: Int -> Double -> IO (Int, Double)
modelForwardLoop batch secs = do
  frame <- BI.create 60 (\p -> writeTestPacket p 60)
  (sink, _) <- sinkWire
  m0 <- newModel defaultModelConfig { mcPort = 0 } (sourceWire frame)
  m1 <- newModel defaultModelConfig { mcPort = 1 } sink
  d0 <- openIxgbe defaultIxgbeConfig "model:0" (modelWindow m0)
  d1 <- openIxgbe defaultIxgbeConfig "model:1" (modelWindow m1)
  arr <- newBufferArray batch
  let pool = rxPool d0 0
  start <- getMonotonicTimeNSec
  let deadline = start + round (secs * 1e9)
      touch !i !n
        | i >= n = pure ()
        | otherwise = do
            b <- readBuffer arr i
            v <- peekByteOff (bufferData b) 1 :: IO Word8
            pokeByteOff (bufferData b) 1 (v + 1)
            touch (i + 1) n
      loop :: Int -> Int -> IO (Int, Word64)
      loop !iter !forwarded = do
        _ <- modelStep m0
        _ <- modelStep m1
        n <- rxBatch d0 0 arr batch
        touch 0 n
        k <- txBatch d1 0 arr n
        when (k < n) $ freeBatch pool arr k (n - k)
        let forwarded' = forwarded + k
        if iter .&. 63 /= 0 then loop (iter + 1) forwarded' else do
          now <- getMonotonicTimeNSec
          if now >= deadline then pure (forwarded', now) else loop (iter + 1) forwarded'
  (forwarded, end) <- loop 1 0
  closeDevice d1
  closeDevice d0
  pure (forwarded, fromIntegral (end - start) / 1e9)
