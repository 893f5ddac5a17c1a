{-# LANGUAGE ScopedTypeVariables #-}
-- | @weft-bench wait@: pipe ping-pong between two threads, each round trip
-- being two fd waits, with weft's 'Weft.threadWaitRead' and with GHC's own,
-- at @-N1@ and @-N2@. Every run is a child process, so the arms are measured
-- alike; the parent interleaves them and repeats.
module Bench.Wait
  ( waitMain
  , waitChild
  ) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad
import Data.IORef
import Data.List (find, intercalate)
import Data.Maybe (fromMaybe)
import qualified Data.Map.Strict as Map
import Data.Word (Word8)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Marshal.Alloc (mallocBytes)
import Foreign.Ptr (Ptr)
import qualified Foreign.Storable
import GHC.Clock (getMonotonicTimeNSec)
import qualified GHC.Conc as GHC
import System.Environment (getEnvironment, getExecutablePath)
import System.Exit (exitFailure)
import System.IO
import System.Posix.Types (CSsize (..), Fd (..))
import System.Process
import System.Timeout (timeout)
import Text.Printf (printf)

import Bench.Headline (note)
import Bench.Options
import System.FilePath ((</>))
import Bench.Report
import qualified Weft
import qualified Weft.Event as E

-- | weft (its adaptive spin policy), weft with the fixed spin window of
-- earlier versions, weft with the plain Mio dispatcher loop (no spinning),
-- weft on the io_uring backend, and GHC's own manager.
data Arm = WeftArm | WeftFixedArm | WeftMioArm | WeftUringArm | GhcArm deriving (Eq, Ord, Show, Enum, Bounded)

armName :: Arm -> String
armName WeftArm = "weft"
armName WeftFixedArm = "weft-fixed"
armName WeftMioArm = "weft-mio"
armName WeftUringArm = "weft-uring"
armName GhcArm = "ghc"

-- | The child's arm and the environment it runs with.
armProcess :: FilePath -> Arm -> [String] -> IO CreateProcess
armProcess exe arm args = do
  env0 <- getEnvironment
  let spin = [ ("WEFT_SPIN_US", "0") | arm == WeftMioArm ] ++ [ ("WEFT_SPIN_POLICY", "fixed") | arm == WeftFixedArm ]
             ++ [ ("WEFT_BACKEND", "uring") | arm == WeftUringArm ]
      env' = spin ++ filter ((`notElem` ["WEFT_SPIN_US", "WEFT_SPIN_POLICY", "WEFT_BACKEND"]) . fst) env0
  return (proc exe (armName arm : args)) { env = Just env' }

data Options = Options { optReps :: Int, optRoundTrips :: Int, optCaps :: [Int] }

parseOptions :: [String] -> IO Options
parseOptions = parseOrExit "wait"
  [ value "--reps" "N" positive (\n o -> o { optReps = n })
  , value "--round-trips" "N" positive (\n o -> o { optRoundTrips = n })
  , value "--caps" "1,2" (listOf positive) (\cs o -> o { optCaps = cs }) ]
  (Options 5 100000 [1, 2])

data Result = Result { resWaitsPerSec :: Double, resCpuPerWait :: Double, resExtra :: String }

-- | The parent: run every (caps, arm) pair in turn, repeat, summarise.
waitMain :: [String] -> IO String
waitMain args = do
  opts <- parseOptions args
  let cells = [ (n, arm) | n <- optCaps opts, arm <- [minBound .. maxBound] ]
  exe <- getExecutablePath
  hSetBuffering stdout LineBuffering
  printf "weft-bench wait: pipe ping-pong, %d round trips (%d waits) per run, %d repetitions, arms interleaved\n"
    (optRoundTrips opts) (2 * optRoundTrips opts) (optReps opts)
  results <- newIORef Map.empty
  forM_ [1 .. optReps opts] $ \rep -> forM_ cells $ \(n, arm) -> do
    cp <- armProcess exe arm [ show (optRoundTrips opts), "+RTS", "-N" ++ show n, "-RTS" ]
    out <- timeout (childLimit (optRoundTrips opts)) (readCreateProcess cp { cmdspec = prependArg "wait-child" (cmdspec cp) } "")
             >>= maybe (hung n arm) return
    r <- either (\e -> hPutStrLn stderr e >> exitFailure) return (parseChild out)
    printf "  [rep %d/%d] -N%d %-4s %10.0f waits/s %7.2f CPU-us/wait %s\n"
      rep (optReps opts) n (armName arm) (resWaitsPerSec r) (resCpuPerWait r) (resExtra r)
    modifyIORef' results (Map.insertWith (flip (++)) (n, arm) [r])
  summary <- readIORef results
  let get n arm f = maybe [] (map f) (Map.lookup (n, arm) summary)
  sequence_ [ note ["wait", "N" ++ show n, armName arm, "rate"] (median (get n arm resWaitsPerSec)) | (n, arm) <- cells ]
  let rows = [ [ "-N" ++ show n, armName arm
               , printf "%.0f" (median wps), spread (printf "%.0f") wps
               , printf "%.2f" (median cpu), spread (printf "%.2f") cpu
               , if arm /= GhcArm then printf "%.2fx" (median wps / median (get n GhcArm resWaitsPerSec)) else ""
               , if arm /= GhcArm then printf "%.2fx" (median (get n GhcArm resCpuPerWait) / median cpu) else "" ]
             | (n, arm) <- cells
             , let wps = get n arm resWaitsPerSec
             , let cpu = get n arm resCpuPerWait ]
      header = [ "caps", "arm", "waits/s (median)", "min–max", "CPU us/wait (median)", "min–max"
               , "waits/s vs ghc", "CPU/wait saving vs ghc" ]
  putStrLn ""
  putStr (renderTable header rows)
  writeCsv (resultsRoot </> "wait.csv") header rows
  putStrLn "\n(waits/s: higher is better; CPU us/wait is the process CPU time of all threads; ratios of medians against ghc;"
  putStrLn " weft-fixed is weft with WEFT_SPIN_POLICY=fixed, the fixed 50 us spin window of earlier versions;"
  putStrLn " weft-mio is weft with WEFT_SPIN_US=0, i.e. the plain Mio dispatcher loop;"
  putStrLn " weft-uring is weft with WEFT_BACKEND=uring; the other weft arms run on epoll)"
  putStrLn ("CSV: " ++ resultsRoot ++ "/wait.csv")
  return (renderTable header rows)

-- | How long a child may run: far beyond what its round trips take (under
-- 10 us each), so only a run that stopped making progress (a wait that is
-- never woken) reaches it. It is then killed and the section fails, rather
-- than stall every section after it.
childLimit :: Int -> Int
childLimit trips = max 120000000 (trips * 100)

hung :: Int -> Arm -> IO a
hung n arm = do
  hPutStrLn stderr (printf "weft-bench wait: the -N%d %s run did not finish within its limit: a wait was never woken" n (armName arm))
  exitFailure

parseChild :: String -> Either String Result
parseChild out = case [ l | l <- lines out, take 7 l == "result " ] of
  [l] -> case words (drop 7 l) of
    (w : c : extra) -> Right (Result (read w) (read c) (unwords extra))
    _ -> Left ("weft-bench: bad child output: " ++ out)
  _ -> Left ("weft-bench: bad child output: " ++ out)

-- | The child: one timed run of one arm at the RTS's @-N@.
waitChild :: [String] -> IO ()
waitChild [armStr, tripsStr] = do
  let arm = fromMaybe GhcArm (find ((== armStr) . armName) [minBound .. maxBound])
      trips = read tripsStr :: Int
      wait = if arm == GhcArm then GHC.threadWaitRead else Weft.threadWaitRead
  caps <- getNumCapabilities
  (r1, w1) <- nonBlockingPipe
  (r2, w2) <- nonBlockingPipe
  let warmup = max 1000 (trips `div` 20)
  -- Warm up (manager start, first ADDs), then measure.
  _ <- pingPong wait caps warmup (r1, w1) (r2, w2)
  stats0 <- managerTotals
  cpu0 <- processCpuMicros
  t0 <- getMonotonicTimeNSec
  _ <- pingPong wait caps trips (r1, w1) (r2, w2)
  t1 <- getMonotonicTimeNSec
  cpu1 <- processCpuMicros
  let waits = fromIntegral (2 * trips) :: Double
      secs = fromIntegral (t1 - t0) / 1e9
  stats1 <- managerTotals
  let per i = fromIntegral (stats1 !! i - stats0 !! i) / waits :: Double
      extra | arm == GhcArm = ""
            | otherwise = printf "(per wait: %.2f blocking polls, %.2f polls, %.2f arms, %.3f wakeups; %d live registrations)"
                            (per 0) (per 1) (per 2) (per 3) (stats1 !! 4)
  putStrLn (intercalate " " ["result", show (waits / secs), show ((cpu1 - cpu0) / waits), extra])
waitChild _ = hPutStrLn stderr "usage: weft-bench wait-child ARM ROUND_TRIPS" >> exitFailure

-- | Blocking polls, non-blocking polls, arms, wakeups and live registrations,
-- summed over weft's managers (all zero for the ghc arm, which starts none).
managerTotals :: IO [Int]
managerTotals = do
  stats <- mapM E.getManagerStats =<< E.systemManagers
  let total f = sum (map f stats)
  return [ total E.statBlockingPolls, total E.statNonBlockingPolls, total E.statArms
         , total E.statWakeups, total E.statLiveRegistrations ]

-- | Thread A on capability 0 writes to pipe 1 and waits on pipe 2; thread B
-- on the last capability waits on pipe 1 and answers on pipe 2.
pingPong :: (Fd -> IO ()) -> Int -> Int -> (Fd, Fd) -> (Fd, Fd) -> IO ()
pingPong wait caps trips (r1, w1) (r2, w2) = do
  done <- newEmptyMVar
  bufA <- mallocBytes 8
  bufB <- mallocBytes 8
  _ <- forkOn (caps - 1) $ do
    replicateM_ trips $ do
      wait r1
      readOne r1 bufB
      writeOne w2 bufB
    putMVar done ()
  _ <- forkOn 0 $ do
    replicateM_ trips $ do
      writeOne w1 bufA
      wait r2
      readOne r2 bufA
    putMVar done ()
  takeMVar done
  takeMVar done

readOne :: Fd -> Ptr Word8 -> IO ()
readOne fd buf = do
  n <- c_read fd buf 1
  when (n /= 1) $ fail ("weft-bench: read returned " ++ show n)

writeOne :: Fd -> Ptr Word8 -> IO ()
writeOne fd buf = do
  n <- c_write fd buf 1
  when (n /= 1) $ fail ("weft-bench: write returned " ++ show n)

nonBlockingPipe :: IO (Fd, Fd)
nonBlockingPipe = do
  fds <- mallocBytes 8
  r <- c_pipe2 fds 0o4000   -- O_NONBLOCK
  when (r /= 0) $ fail "weft-bench: pipe2 failed"
  a <- peekFd fds 0
  b <- peekFd fds 1
  _ <- evaluate (a, b)
  return (a, b)
  where peekFd p i = Fd <$> peekCInt p i

foreign import ccall unsafe "unistd.h read" c_read :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h write" c_write :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h pipe2" c_pipe2 :: Ptr CInt -> CInt -> IO CInt

peekCInt :: Ptr CInt -> Int -> IO CInt
peekCInt = Foreign.Storable.peekElemOff

prependArg :: String -> CmdSpec -> CmdSpec
prependArg a (RawCommand exe args) = RawCommand exe (a : args)
prependArg _ other = other
