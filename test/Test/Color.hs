{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | The colored runtime ("Weft.Color") with its workers running: the
-- guarantees of colors (no two events of a color at once, none lost or run
-- twice, posting order per color), stealing under each policy, priorities,
-- batching, failing handlers, shutdown, and readiness events.
--
-- Most tests run under every policy on two machines: the two real
-- capabilities with one worker each, and a simulated eight-core Xeon (four
-- workers per capability, which interleave at the handlers' yields).
-- Handlers are instrumented with atomic counters: an in-flight count per
-- color (an overlap is a handler that finds its color already running), a
-- run count per event, and a global run sequence that orders the events of
-- a color.
module Test.Color (spec, ioSpec) where

import Control.Concurrent hiding (threadDelay)
import qualified Control.Concurrent as C
import Control.Exception hiding (Handler, assert)
import Control.Monad
import Data.Bits ((.&.))
import Data.IORef
import Data.List (sortOn)
import qualified Data.Map.Strict as Map
import GHC.Clock (getMonotonicTimeNSec)
import System.Directory (removeFile)
import System.IO
import GHC.IO.Handle (hDuplicate, hDuplicateTo)
import Foreign.Marshal.Alloc (allocaBytes)
import System.Posix.IO (closeFd, fdReadBuf)
import System.Posix.Types (Fd)
import Test.Hspec
import Test.QuickCheck hiding ((.&.), total, again, within)
import Test.QuickCheck.Gen (unGen)
import Test.QuickCheck.Monadic (assert, monadicIO, monitor, run)
import Test.QuickCheck.Random (mkQCGen)

import Support
import qualified Weft
import Weft.Color
import qualified Weft.Color.Internal.Queues as Q
import qualified Weft.Event as E
import Weft.Internal.Counters

spec :: Spec
spec = describe "Weft.Color" $ do
  forM_ machines $ \m -> describe (machineName m) $
    forM_ allPolicies $ \p -> describe (policyName p) $ do
      stressSpec m p
      forkJoinSpec m p
      throwingSpec m p
      shutdownSpec m p
  stealingSpec
  prioritySpec
  batchingSpec
  foldingSpec
  scheduleSpec

------------------------------------------------------------------------------
-- Machines and instruments

data Machine = RealCores | SimulatedXeon
  deriving (Eq, Show)

machines :: [Machine]
machines = [RealCores, SimulatedXeon]

machineName :: Machine -> String
machineName RealCores = "2 real cores"
machineName SimulatedXeon = "simulated 8-core Xeon on 2 capabilities"

machineCores :: Machine -> Int
machineCores RealCores = 2
machineCores SimulatedXeon = 8

config :: Machine -> Policy -> Config
config m p = defaultConfig
  { cfgPolicy = p, cfgCores = machineCores m, cfgColors = 4096
  , cfgTopology = if m == SimulatedXeon then Just simulatedXeon else Nothing }

-- | Counters shared by instrumented handlers.
data Probe = Probe
  { prInFlight :: Counters  -- ^ per color: handlers of that color running now
  , prOverlaps :: Counters  -- ^ word 0: handlers that found their color running
  , prRuns     :: Counters  -- ^ per event: times it ran
  , prRunSeq   :: Counters  -- ^ per event: the run sequence number at its start
  , prClock    :: Counters  -- ^ word 0: the run sequence
  }

newProbe :: Int -> Int -> IO Probe
newProbe colors events =
  Probe <$> newCounters colors <*> newCounters 1 <*> newCounters events
        <*> newCounters events <*> newCounters 1

-- | Run @work@ as event @ev@ of color @color@, recording it.
probed :: Probe -> Int -> Int -> IO () -> IO ()
probed p color ev work = do
  old <- addCounter (prInFlight p) color 1
  when (old /= 0) $ void (addCounter (prOverlaps p) 0 1)
  s <- addCounter (prClock p) 0 1
  writeCounter (prRunSeq p) ev s
  work
  void (addCounter (prRuns p) ev 1)
  void (addCounter (prInFlight p) color (-1))

overlaps :: Probe -> IO Int
overlaps p = readCounter (prOverlaps p) 0

runCount :: Probe -> Int -> IO Int
runCount p = readCounter (prRuns p)

-- | Events (of the given ones) that did not run exactly once, with their
-- run counts.
notOnce :: Probe -> [Int] -> IO [(Int, Int)]
notOnce p evs = filter ((/= 1) . snd) <$> mapM (\e -> (,) e <$> runCount p e) evs

-- | The given events, in posting order, that ran before their
-- predecessor: the order is broken at each one listed.
orderBreaks :: Probe -> [Int] -> IO [Int]
orderBreaks p evs = do
  seqs <- mapM (readCounter (prRunSeq p)) evs
  return [ e | (e, (a, b)) <- zip (drop 1 evs) (zip seqs (drop 1 seqs)), b <= a ]

-- | Busy work, about a microsecond per unit, yielding every 16 units so
-- that workers sharing a capability interleave inside handlers.
burn :: Int -> IO ()
burn = go
  where
    go k
      | k <= 0 = return ()
      | otherwise = do
          _ <- evaluate (spin 200 k)
          when (k .&. 15 == 0) yield
          go (k - 1)

spin :: Int -> Int -> Int
spin 0 acc = acc
spin n acc = spin (n - 1) (acc * 6364136223846793005 + n)
{-# NOINLINE spin #-}

-- | Shut a runtime down, failing the test if that takes over 10 s.
finish :: Runtime -> IO ()
finish rt = within 10 "shutdown" (shutdown rt)

-- | What is left in a stopped runtime's queues: queued events per core,
-- running colors, and colors away from home.
leftovers :: Runtime -> IO ([Int], [Int], [Int])
leftovers rt = do
  let q = runtimeQueues rt
      cores = [0 .. runtimeCores rt - 1]
  queued <- mapM (Q.coreEvents q) cores
  running <- mapM (Q.runningColor q) cores
  away <- filterM (\c -> (/= Q.homeOf q c) <$> Q.ownerOf q c) [0 .. Q.queueColors q - 1]
  return (queued, running, away)

-- | Wait this many microseconds without sleeping (a sleep, and the wake-up
-- after it, is far coarser). Yields as it spins, so that a garbage
-- collection need not wait for it.
spinFor :: Int -> IO ()
spinFor us = void (spinUntil us (return False))

-- | Spin (yielding) until the condition holds, for at most the given
-- microseconds; whether it held.
spinUntil :: Int -> IO Bool -> IO Bool
spinUntil us cond = do
  t0 <- getMonotonicTimeNSec
  let go = do
        ok <- cond
        t <- getMonotonicTimeNSec
        if ok then return True
          else if t - t0 >= fromIntegral us * 1000 then return False
          else yield >> go
  go

capability :: IO Int
capability = fst <$> (threadCapability =<< myThreadId)

threadDelayGHC :: Int -> IO ()
threadDelayGHC = C.threadDelay

-- | Append to a log shared by handlers.
note :: IORef [a] -> a -> IO ()
note ref x = atomicModifyIORef' ref (\xs -> (x : xs, ()))

-- | A handler's body, run while a handler of color 0 blocks: the
-- runtime's queues fill up behind it, then it is released and the
-- runtime is shut down. Returns the tags in the order their handlers ran.
afterBlocker :: Config -> ((String -> IO ()) -> Runtime -> IO ()) -> IO [String]
afterBlocker cfg postAll = do
  rt <- newRuntime cfg
  started <- newEmptyMVar
  gate <- newEmptyMVar
  logRef <- newIORef []
  post rt 0 (handler "blocker") (putMVar started () >> takeMVar gate)
  within 5 "the blocker starts" (takeMVar started)
  postAll (note logRef) rt
  putMVar gate ()
  finish rt
  reverse <$> readIORef logRef

------------------------------------------------------------------------------
-- The colors' guarantees under load

-- | One posted event of the stress test.
data Job = Job
  { jobId     :: !Int
  , jobPoster :: !Int
  , jobColor  :: !Int
  , jobUnits  :: !Int
  } deriving Show

-- | Mostly short handlers, some medium, a few long.
genUnits :: Gen Int
genUnits = frequency [(90, choose (0, 5)), (9, choose (5, 50)), (1, choose (150, 400))]

stressPosters :: Int
stressPosters = 4

-- | A load: its name, events per posting thread, how their colors are
-- drawn on a machine, and their work.
data Load = Load String Int (Machine -> Gen Int) (Gen Int)

-- | Thousands of colors: most events find their color idle.
spread :: Load
spread = Load "10,000 events of 3,000 colors from 4 threads at once" 2500
  (const (choose (0, 2999))) genUnits

-- | Eight colors, all homed on core 0: threads keep posting to colors that
-- thieves are taking and that go home as they run dry, so posts race with
-- ownership changes (Note [Who may touch a color]).
hot :: Load
hot = Load "10,000 short events of 8 colors homed on core 0, from 4 threads at once" 2500
  (\m -> (* machineCores m) <$> choose (1, 8))
  (frequency [(95, choose (0, 3)), (5, choose (10, 30))])

stressJobs :: Machine -> Load -> [[Job]]
stressJobs m (Load _ perPoster color units) =
  [ [ Job (p * perPoster + i) p c u | (i, (c, u)) <- zip [0 ..] draws ]
  | p <- [0 .. stressPosters - 1]
  , let draws = unGen (vectorOf perPoster ((,) <$> color m <*> units))
                      (mkQCGen (1000 + p)) 30 ]

data Stress = Stress
  { sOverlaps  :: Int
  , sNotOnce   :: [(Int, Int)]
  , sBreaks    :: [Int]
  , sEventsRun :: Int
  , sLeft      :: ([Int], [Int], [Int])
  }

-- | Four threads post a load at once; then the runtime is shut down,
-- which runs it all.
runStress :: Machine -> Policy -> Load -> IO Stress
runStress m p load = do
  rt <- newRuntime (config m p)
  let jobs' = stressJobs m load
      events = length (concat jobs')
  probe <- newProbe 4096 events
  dones <- forM jobs' $ \jobs -> do
    (_, done) <- forkResult (sum (map jobPoster (take 1 jobs)) `mod` 2) $
      forM_ jobs $ \j -> post rt (jobColor j) (handler "stress") $
        probed probe (jobColor j) (jobId j) (burn (jobUnits j))
    return done
  within 10 "posters" (mapM takeMVar dones) >>= mapM_ (either throwIO return)
  finish rt
  let groups = Map.elems (Map.fromListWith (flip (++))
                 [ ((jobColor j, jobPoster j), [jobId j]) | j <- concat jobs' ])
  Stress <$> overlaps probe
         <*> notOnce probe [0 .. events - 1]
         <*> (concat <$> mapM (orderBreaks probe) groups)
         <*> (sum . map csEventsRun <$> stats rt)
         <*> leftovers rt

stressSpec :: Machine -> Policy -> Spec
stressSpec m p = forM_ [spread, hot] $ \load@(Load name perPoster _ _) -> describe name $
  beforeAll (runStress m p load) $ do
    it "never run two events of one color at once" $ \s ->
      sOverlaps s `shouldBe` 0
    it "run every event exactly once" $ \s -> do
      sNotOnce s `shouldBe` []
      sEventsRun s `shouldBe` stressPosters * perPoster
    it "run each thread's events of a color in posting order" $ \s ->
      sBreaks s `shouldBe` []
    it "leave nothing queued or running, and every color at home" $ \s ->
      sLeft s `shouldBe` (replicate (machineCores m) 0, replicate (machineCores m) (-1), [])

------------------------------------------------------------------------------
-- Handlers posting

-- | Fork/join from inside handlers: each chain's root posts a round of
-- children of scattered colors; the last child to finish posts the join,
-- of the chain's color, which starts the next round.
forkJoinSpec :: Machine -> Policy -> Spec
forkJoinSpec m p =
  it "handlers post fork/join chains: 8 chains x 30 rounds x 12 children all complete" $ do
    rt <- newRuntime (config m p)
    let chains = 8
        rounds = 30
        width = 12
        childColor ch r i = (ch * 7 + r * 13 + i * 31) `mod` 512
        childEvent ch r i = ((ch * rounds) + r) * width + i
        totalChildren = chains * rounds * width
    probe <- newProbe 4096 totalChildren
    joins <- newCounters chains
    outstanding <- newCounters chains
    dones <- replicateM chains newEmptyMVar
    let root ch r
          | r == rounds = putMVar (dones !! ch) ()
          | otherwise = do
              writeCounter outstanding ch width
              forM_ [0 .. width - 1] $ \i ->
                post rt (childColor ch r i) (handler "child") $ do
                  probed probe (childColor ch r i) (childEvent ch r i) (burn (i `mod` 4))
                  left <- addCounter outstanding ch (-1)
                  when (left == 1) $
                    post rt (1000 + ch) (handler "join") $ do
                      void (addCounter joins ch 1)
                      root ch (r + 1)
    forM_ [0 .. chains - 1] $ \ch -> post rt (1000 + ch) (handler "root") (root ch 0)
    within 10 "every chain" (mapM_ takeMVar dones)
    finish rt
    mapM (readCounter joins) [0 .. chains - 1] `shouldReturn` replicate chains rounds
    notOnce probe [0 .. totalChildren - 1] `shouldReturn` []
    overlaps probe `shouldReturn` 0

------------------------------------------------------------------------------
-- Failing handlers

-- | An exception of a handler.
data Refused = Refused Int
  deriving Show

instance Exception Refused

-- | An exception that cannot even be shown: reporting it must not kill
-- the worker either.
data Unshowable = Unshowable

instance Show Unshowable where
  show Unshowable = error "Unshowable has no text"

instance Exception Unshowable

-- | Run an action with stderr sent to a file.
withStderrTo :: FilePath -> IO a -> IO a
withStderrTo path act = do
  hFlush stderr
  bracket (hDuplicate stderr) (\saved -> hDuplicateTo saved stderr >> hClose saved) $ \_ ->
    withFile path WriteMode $ \h -> hDuplicateTo h stderr >> act <* hFlush stderr

-- | Run an action with stderr sent to /dev/null (failing handlers are
-- reported there).
quietly :: IO a -> IO a
quietly = withStderrTo "/dev/null"

-- | Run an action and return what it wrote to stderr.
capturingStderr :: IO a -> IO (a, String)
capturingStderr act = do
  (path, h) <- openTempFile "/tmp" "weft-test-stderr"
  hClose h
  r <- withStderrTo path act
  text <- readFile path
  length text `seq` removeFile path
  return (r, text)

throwingSpec :: Machine -> Policy -> Spec
throwingSpec m p =
  it "count handlers that throw (error, custom, unshowable); later events still run in order" $ do
    rt <- newRuntime (config m p)
    let events = 400
        colors = 7
        kind i = i `mod` 5
    probe <- newProbe 4096 events
    quietly $ do
      forM_ [0 .. events - 1] $ \i -> post rt (i `mod` colors) (handler "maybe throws") $
        probed probe (i `mod` colors) i $ case kind i of
          0 -> void (evaluate (length (error ("handler " ++ show i ++ " fails") :: String)))
          1 -> throwIO (Refused i)
          2 -> throwIO Unshowable
          _ -> burn 2
      finish rt
    let thrown = length (filter ((< 3) . kind) [0 .. events - 1])
        fine = [ i | i <- [0 .. events - 1], kind i >= 3 ]
    sum . map csHandlerErrors <$> stats rt `shouldReturn` thrown
    sum . map csEventsRun <$> stats rt `shouldReturn` events
    -- A handler that throws never reaches the run count, the others do.
    filter ((/= 1) . snd) <$> mapM (\e -> (,) e <$> runCount probe e) fine `shouldReturn` []
    concat <$> mapM (\c -> orderBreaks probe [c, c + colors .. events - 1]) [0 .. colors - 1]
      `shouldReturn` []

------------------------------------------------------------------------------
-- Shutdown

shutdownSpec :: Machine -> Policy -> Spec
shutdownSpec m p = describe "shutdown" $ do
  it "runs every accepted event, and the events handlers post while it drains" $ do
    rt <- newRuntime (config m p)
    let roots = 2000
        depth = 3
    probe <- newProbe 4096 (roots * (depth + 1))
    let chain r d = post rt ((r * 5 + d) `mod` 300) (handler "chain") $
          probed probe ((r * 5 + d) `mod` 300) (r * (depth + 1) + d) $
            when (d < depth) (chain r (d + 1))
    forM_ [0 .. roots - 1] $ \r -> chain r 0
    finish rt
    notOnce probe [0 .. roots * (depth + 1) - 1] `shouldReturn` []
    post rt 1 (handler "late") (return ()) `shouldThrow` isClosed

  it "refuses outside posts once begun, accepts handlers' posts, and returns to every caller" $ do
    rt <- newRuntime (config m p)
    started <- newEmptyMVar
    gate <- newEmptyMVar
    ran <- newCounters 3  -- accepted outside posts, the blocker's child, the blocker
    post rt 0 (handler "blocker") $ do
      putMVar started ()
      takeMVar gate
      post rt 1 (handler "child") (void (addCounter ran 1 1))
      void (addCounter ran 2 1)
    within 5 "blocker starts" (takeMVar started)
    (_, first) <- forkResult 0 (shutdown rt)
    (_, second) <- forkResult 1 (shutdown rt)
    -- The blocker keeps the runtime draining; post until refused.
    let postUntilRefused n = do
          r <- try (post rt 3 (handler "outside") (void (addCounter ran 0 1)))
          case r of
            Left RuntimeClosed -> return n
            Right () -> threadDelayGHC 100 >> postUntilRefused (n + 1)
    accepted <- within 5 "a refused post" (postUntilRefused (0 :: Int))
    -- Both calls wait for the blocker.
    (,) <$> isEmptyMVar first <*> isEmptyMVar second `shouldReturn` (True, True)
    putMVar gate ()
    within 5 "both shutdown calls" (mapM takeMVar [first, second]) >>= mapM_ (either throwIO return)
    mapM (readCounter ran) [0, 1, 2] `shouldReturn` [accepted, 1, 1]
    post rt 1 (handler "late") (return ()) `shouldThrow` isClosed
    within 5 "a third shutdown" (shutdown rt)

  it "racing posters: each post either runs or throws RuntimeClosed" $ do
    rt <- newRuntime (config m p)
    ran <- newCounters 1
    posters <- forM [0 .. 3 :: Int] $ \t -> fmap snd $ forkResult (t `mod` 2) $ do
      let loop !accepted i = do
            r <- try (post rt ((t * 1000 + i) `mod` 4096) (handler "racer") (burn 1 >> void (addCounter ran 0 1)))
            case r of
              Left RuntimeClosed -> return accepted
              Right () -> do
                when (i .&. 63 == 0) yield
                loop (accepted + 1) (i + 1)
      loop (0 :: Int) (0 :: Int)
    threadDelayGHC 5000
    finish rt
    accepted <- sum <$> within 5 "posters stop" (mapM takeMVar posters >>= mapM (either throwIO return))
    readCounter ran 0 `shouldReturn` accepted
    accepted `shouldSatisfy` (> 0)
  where
    isClosed RuntimeClosed = True

------------------------------------------------------------------------------
-- Stealing

-- | Post @n@ events of distinct colors homed on core 0, each ~100 us of
-- work annotated as @cost@ ns with the given penalty; run them all and
-- return the per-core statistics.
burst :: Config -> Int -> Int -> IO [CoreStats]
burst cfg cost penalty = do
  rt <- newRuntime cfg
  let cores = runtimeCores rt
      h = (handler "burst") { handlerCost = cost, handlerPenalty = penalty }
  forM_ [1 .. burstEvents] $ \k -> post rt (k * cores) h (burn 100)
  finish rt
  stats rt

burstEvents :: Int
burstEvents = 200

-- | A burst that should be stolen from: up to three tries, as a thief
-- needs CPU time while core 0 works, which an overloaded machine may not
-- give it once. Returns the first statistics with a steal, or the last.
stolenBurst :: Config -> Int -> Int -> IO [CoreStats]
stolenBurst cfg cost penalty = go (3 :: Int)
  where
    go n = do
      st <- burst cfg cost penalty
      if steals st > 0 || n <= 1 then return st else go (n - 1)

-- | An annotated cost far above the steal cost.
worthIt :: Int
worthIt = 100000000

steals :: [CoreStats] -> Int
steals = sum . map csSteals

stealingSpec :: Spec
stealingSpec = describe "stealing" $ do
  it "an annotated cost of 100 ms is far above the measured steal cost" $ do
    rt <- newRuntime defaultConfig
    cost <- stealCostNanos rt
    finish rt
    cost `shouldSatisfy` (\c -> c >= 1 && 1000 * c < worthIt)

  forM_ machines $ \m -> describe (machineName m) $ do
    forM_ [ p | p <- allPolicies, p /= NoStealing ] $ \p ->
      it ("happens under " ++ policyName p ++ " for a burst on one core") $ do
        st <- stolenBurst (config m p) worthIt 1
        steals st `shouldSatisfy` (> 0)
        sum (map csEventsStolen st) `shouldSatisfy` (>= steals st)

    it "never happens under NoStealing: core 0 runs the whole burst" $ do
      st <- burst (config m NoStealing) worthIt 1
      (steals st, map csEventsRun st) `shouldBe`
        (0, burstEvents : replicate (machineCores m - 1) 0)

    forM_ [TimeLeft, PenaltyAware, Mely] $ \p ->
      it ("under " ++ policyName p ++ " takes no color whose cost is 0") $ do
        st <- burst (config m p) 0 1
        steals st `shouldBe` 0

  forM_ [PenaltyAware, Mely] $ \p -> describe (policyName p) $ do
    it "does not steal events whose penalty leaves them below the steal cost" $ do
      st <- burst (config RealCores p) worthIt worthIt
      steals st `shouldBe` 0
    it "counts cost / penalty as the work it steals" $ do
      st <- stolenBurst (config RealCores p) worthIt 10
      steals st `shouldSatisfy` (> 0)
      sum (map csWorkStolen st) `shouldBe` sum (map csEventsStolen st) * (worthIt `quot` 10)

  it "TimeLeft ignores penalties" $ do
    st <- stolenBurst (config RealCores TimeLeft) worthIt worthIt
    steals st `shouldSatisfy` (> 0)
    sum (map csWorkStolen st) `shouldBe` sum (map csEventsStolen st) * worthIt

  describe "a sleeping core wakes to steal from a core stuck in a long handler" $
    forM_ [ p | p <- allPolicies, p /= NoStealing ] $ \p -> it (policyName p) $ do
      -- Core 0 runs a handler that waits for events queued behind it on
      -- core 0 (three colors, so that each policy finds one worth
      -- stealing); core 1 went to sleep before any of it. Only a thief
      -- can run those events, and core 0 ends no batch that would wake
      -- one.
      rt <- newRuntime (config RealCores p)
      threadDelayGHC 20000
      started <- newEmptyMVar
      released <- newEmptyMVar
      done <- newEmptyMVar
      post rt 0 (handler "waits") (putMVar started () >> takeMVar released >> putMVar done ())
      within 5 "the waiting handler starts" (takeMVar started)
      forM_ [2, 4, 6] $ \c ->
        post rt c (handler "releases") { handlerCost = worthIt } (void (tryPutMVar released ()))
      within 2 "a stolen event" (takeMVar done)
      finish rt
      steals <$> stats rt >>= (`shouldSatisfy` (>= 1))

  describe "a sleeping core wakes to steal what was queued before a long handler began" $
    forM_ [ p | p <- allPolicies, p /= NoStealing ] $ \p -> it (policyName p) $ do
      -- As above, but the events are queued at once, before core 0 (woken
      -- by the first post) starts the waiting handler: no post finds it
      -- busy.
      rt <- newRuntime (config RealCores p)
      threadDelayGHC 20000
      released <- newEmptyMVar
      done <- newEmptyMVar
      post rt 0 (handler "waits") (takeMVar released >> putMVar done ())
      forM_ [2, 4, 6] $ \c ->
        post rt c (handler "releases") { handlerCost = worthIt } (void (tryPutMVar released ()))
      within 2 "a stolen event" (takeMVar done)
      finish rt
      steals <$> stats rt >>= (`shouldSatisfy` (>= 1))

  whenToStealSpec

  it "an event posted just as its core goes to sleep still runs (1,000 posts at random moments)" $ do
    -- Each post lands somewhere in the worker's spin-then-park after the
    -- previous event: a post between its last look at its queue and its
    -- sleep must wake it (Note [Parking]).
    -- The poster spins rather than sleeps while it waits for each ping,
    -- so that its pauses, not its wake-ups, decide where the next post
    -- lands: mostly within the spin (some tens of microseconds).
    -- (The window it probes is a few hundred nanoseconds wide, so this
    -- catches a worker that sleeps without looking only now and then.)
    forM_ [Mely, NoStealing] $ \p -> do
      rt <- newRuntime (oneCore p)
      ran <- newCounters 1
      let pauses = unGen (vectorOf 500 (frequency [(9, choose (0, 60)), (1, choose (60, 300))]))
                         (mkQCGen 7) 30 :: [Int]
      (_, out) <- forkResult 1 $ forM_ (zip [1 ..] pauses) $ \(i, us) -> do
        post rt 0 (handler "ping") (void (addCounter ran 0 1))
        ok <- spinUntil 1000000 ((>= i) <$> readCounter ran 0)
        unless ok $ expectationFailure ("ping " ++ show i ++ " did not run within 1 s")
        spinFor us
      within 10 "500 pings" (takeMVar out) >>= either throwIO return
      finish rt

  describe "a running color is never stolen" $
    forM_ allPolicies $ \p -> it (policyName p) $ do
      -- Color 0 blocks core 0; five more events of color 0 and twenty
      -- other colors queue behind it. Core 1 is woken and steals what it
      -- may: the others, never color 0, which waits for core 0. Color 0
      -- is queued between the others, so that whichever way a policy
      -- scans (the list from its head, the stealing buckets newest first)
      -- it meets color 0 while other colors are still there to steal.
      rt <- newRuntime (config RealCores p)
      started <- newEmptyMVar
      gate <- newEmptyMVar
      logRef <- newIORef []
      let h = (handler "queued") { handlerCost = worthIt }
          record tag = capability >>= \cap -> note logRef (tag, cap)
      -- Of cost 0 and alone on core 0: no policy lets core 1 take it
      -- before it starts.
      post rt 0 (handler "long") (record "long" >> putMVar started () >> takeMVar gate)
      within 5 "the long handler starts" (takeMVar started)
      forM_ [1 .. 10 :: Int] $ \i -> post rt (2 * i) h (record "other")
      forM_ [1 .. 5 :: Int] $ \i -> post rt 0 h (record ("c" ++ show i))
      forM_ [11 .. 20 :: Int] $ \i -> post rt (2 * i) h (record "other")
      post rt 1 (handler "wake core 1") (return ())
      let others = length . filter ((== "other") . fst) <$> readIORef logRef
      if p == NoStealing
        then threadDelayGHC 50000
        else eventually "the others are stolen" ((== 20) <$> others)
      -- Time for a thief to take color 0 too, if it would.
      threadDelayGHC 20000
      during <- reverse <$> readIORef logRef
      putMVar gate ()
      finish rt
      whole <- reverse <$> readIORef logRef
      during `shouldBe` (("long", 0) : replicate (if p == NoStealing then 0 else 20) ("other", 1))
      [ tag | (tag, _) <- whole, take 1 tag == "c" ] `shouldBe` ["c1", "c2", "c3", "c4", "c5"]

-- | Note [When to steal]: a stuck core is relieved of worthy work at
-- once, however little each event brings.
whenToStealSpec :: Spec
whenToStealSpec = describe "when to steal" $ do
  it "moves at least a third of the long events' work to the idle core when every event is posted on one (2% long)" $
    forM_ [TimeLeft, Mely] $ \p -> do
      -- An attempt: two rounds of 30,000 events, each its own color homed
      -- on core 0, posted by a handler on core 0: 2% long (10 us,
      -- annotated so), the rest tiny (annotated below any steal's cost).
      -- Core 1 has nothing of its own: what it runs, it stole. Returns
      -- the long work run on each core, and what to say if it fails.
      let attempt = do
            rt <- newRuntime (config RealCores p) { cfgColors = 65536 }
            longNs <- newCounters 2
            left <- newCounters 1
            done <- newEmptyMVar
            let n = 30000 :: Int
                isLong i = i `mod` 50 == 0
                longH = (handler "long") { handlerCost = 10000 }
                shortH = (handler "short") { handlerCost = 50 }
                event i = do
                  when (isLong i) $ do
                    t0 <- getMonotonicTimeNSec
                    spinFor 10
                    t1 <- getMonotonicTimeNSec
                    cap <- capability
                    void (addCounter longNs (min 1 cap) (fromIntegral (t1 - t0)))
                  k <- addCounter left 0 (-1)
                  when (k == 1) (putMVar done ())
            -- A round is long (6 ms of long events) next to the time an
            -- idle virtual CPU may take to run a thief that was woken (up
            -- to a few milliseconds on a busy host).
            forM_ [1 .. 2 :: Int] $ \_ -> do
              writeCounter left 0 n
              post rt 0 (handler "start") $ forM_ [1 .. n] $ \i ->
                post rt (2 * i) (if isLong i then longH else shortH) (event i)
              within 20 "a round" (takeMVar done)
            cost <- stealCostNanos rt
            finish rt
            st <- stats rt
            [home, away] <- mapM (readCounter longNs) [0, 1]
            return (home, away, show away ++ " of " ++ show (home + away) ++ " ns of long work on core 1; steal cost "
              ++ show cost ++ " ns; " ++ show [ (csSteals c, csEventsStolen c, csWorkStolen c, csStealAttempts c, csParks c) | c <- st ])
          -- Core 1 is a virtual CPU that other processes (a parallel
          -- build, the host) may hold for milliseconds at a time, during
          -- which its thief cannot run: up to three attempts, so that one
          -- attempt spoilt that way does not fail the test. A policy that
          -- does not steal the long work fails all three.
          attempts k says = do
            (home, away, say) <- attempt
            if 3 * away >= home + away then return ()
              else if k > 1 then attempts (k - 1 :: Int) (say : says)
              else expectationFailure (policyName p ++ ", three attempts: " ++ unwords (reverse (say : says)))
      attempts 3 []

  it "relieves a stuck core of every worthy event queued behind it, without pausing between steals" $ do
    -- Core 0 is stuck in a handler until 30 tiny events queued behind it
    -- (each its own color, each annotated worth a steal) have run; only
    -- core 1 can run them, one steal each, and none of them pays for its
    -- steal. They must all go, one steal pass after another.
    rt <- newRuntime (config RealCores Mely)
    started <- newEmptyMVar
    ran <- newCounters 1
    done <- newEmptyMVar
    post rt 0 (handler "stuck") (putMVar started () >> takeMVar done)
    within 5 "the stuck handler starts" (takeMVar started)
    t0 <- getMonotonicTimeNSec
    forM_ [1 .. 30 :: Int] $ \i -> post rt (2 * i) (handler "tiny") { handlerCost = worthIt } $ do
      n <- addCounter ran 0 1
      when (n == 29) $ putMVar done ()
    within 5 "the tiny events" (readMVar done)
    t1 <- getMonotonicTimeNSec
    finish rt
    st <- stats rt
    map csEventsRun st `shouldBe` [1, 30]
    map csSteals st `shouldBe` [0, 30]
    -- 30 steals and runs take well under a millisecond each; a thief
    -- that paused after steals that did not pay would take far longer.
    fromIntegral (t1 - t0) `shouldSatisfy` (< (40000000 :: Int))

------------------------------------------------------------------------------
-- Priority and batching: one core, its queue filled behind a blocker

-- | The policies that keep per-color queues (all but LibasyncSmp, whose
-- single event list runs events in posting order).
colorQueuePolicies :: [Policy]
colorQueuePolicies = filter (/= LibasyncSmp) allPolicies

oneCore :: Policy -> Config
oneCore p = defaultConfig { cfgPolicy = p, cfgCores = 1, cfgColors = 64 }

prioritySpec :: Spec
prioritySpec = describe "priority" $ do
  let urgent = (handler "urgent") { handlerPriority = 5 }
      lowThenHigh note' rt = do
        forM_ [1 .. 10 :: Int] $ \c -> post rt c (handler "low") (note' (show c))
        post rt 11 urgent (note' "11")
      raised note' rt = do
        post rt 1 (handler "low") (note' "1")
        post rt 2 (handler "low") (note' "2a")
        post rt 2 urgent (note' "2b")
  forM_ colorQueuePolicies $ \p -> describe (policyName p) $ do
    it "a high-priority color runs before the low ones queued earlier" $
      afterBlocker (oneCore p) lowThenHigh `shouldReturn` ("11" : map show [1 .. 10 :: Int])
    it "a queued color whose priority rises moves ahead" $
      afterBlocker (oneCore p) raised `shouldReturn` ["2a", "2b", "1"]
  it "LibasyncSmp runs its single list in posting order" $
    afterBlocker (oneCore LibasyncSmp) lowThenHigh `shouldReturn` map show [1 .. 11 :: Int]

batchingSpec :: Spec
batchingSpec = describe "batching (batch 3, one core)" $ do
  let cfg p = (oneCore p) { cfgBatch = 3 }
      grouped note' rt = forM_ ["A", "B"] $ \tag ->
        replicateM_ 9 (post rt (if tag == "A" then 1 else 2) (handler tag) (note' tag))
      interleaved note' rt = forM_ [1 .. 9 :: Int] $ \_ ->
        forM_ ["A", "B"] $ \tag -> post rt (if tag == "A" then 1 else 2) (handler tag) (note' tag)
      alternating = concat (replicate 3 ["A", "A", "A", "B", "B", "B"])
  forM_ colorQueuePolicies $ \p -> describe (policyName p) $ do
    it "colors take turns in runs of 3 (posted A*9 then B*9)" $
      afterBlocker (cfg p) grouped `shouldReturn` alternating
    it "colors take turns in runs of 3 (posted ABAB...)" $
      afterBlocker (cfg p) interleaved `shouldReturn` alternating
  it "a color with 100,000 queued events drains in well under a second (O(batch) per batch)" $ do
    rt <- newRuntime (oneCore NoStealing)
    started <- newEmptyMVar
    gate <- newEmptyMVar
    ran <- newCounters 1
    post rt 0 (handler "blocker") (putMVar started () >> takeMVar gate)
    within 5 "the blocker starts" (takeMVar started)
    replicateM_ 100000 (post rt 1 (handler "tiny") (void (addCounter ran 0 1)))
    t0 <- getMonotonicTimeNSec
    putMVar gate ()
    finish rt
    t1 <- getMonotonicTimeNSec
    readCounter ran 0 `shouldReturn` 100000
    -- About 30 ms; a batch that walked the whole queue took seconds.
    (fromIntegral (t1 - t0) `div` 1000000 :: Int) `shouldSatisfy` (< 1000)

  it "LibasyncSmp runs one event at a time, in posting order" $ do
    afterBlocker (cfg LibasyncSmp) grouped `shouldReturn` (replicate 9 "A" ++ replicate 9 "B")
    afterBlocker (cfg LibasyncSmp) interleaved `shouldReturn` concat (replicate 9 ["A", "B"])

------------------------------------------------------------------------------
-- Folding

foldingSpec :: Spec
foldingSpec = describe "colors that fold together (16-color space)" $
  forM_ allPolicies $ \p -> it ("are serialised and ordered together: " ++ policyName p) $ do
    rt <- newRuntime (config SimulatedXeon p) { cfgColors = 16 }
    let events = 600
        colorOf i = [3, 19, 3 + 65536, -13] !! (i `mod` 4)
    probe <- newProbe 16 events
    forM_ [0 .. events - 1] $ \i ->
      post rt (colorOf i) (handler "folded") (probed probe (colorOf i .&. 15) i (burn (i `mod` 3)))
    finish rt
    overlaps probe `shouldReturn` 0
    notOnce probe [0 .. events - 1] `shouldReturn` []
    orderBreaks probe [0 .. events - 1] `shouldReturn` []

------------------------------------------------------------------------------
-- Random schedules

-- | A random run: a policy, a core count (above 2, on the simulated Xeon)
-- and the events three threads post.
data Schedule = Schedule Policy Int [Step]
  deriving Show

-- | One event: the thread that posts it, its color, its work, and whether
-- it posts a child (of the next color) when it runs.
data Step = Step
  { stPoster :: Int
  , stColor  :: Int
  , stUnits  :: Int
  , stChild  :: Bool
  } deriving Show

scheduleColors :: Int
scheduleColors = 6

instance Arbitrary Schedule where
  arbitrary = do
    p <- elements allPolicies
    cores <- choose (1, 8)
    n <- choose (0, 60)
    steps <- vectorOf n $ Step <$> choose (0, 2) <*> choose (0, scheduleColors - 1)
                               <*> frequency [(8, choose (0, 5)), (2, choose (20, 80))]
                               <*> arbitrary
    return (Schedule p cores steps)
  shrink (Schedule p cores steps) =
    [ Schedule p cores s | s <- shrinkList (const []) steps ] ++
    [ Schedule p c steps | c <- shrink cores, c >= 1 ]

-- | Run a schedule; 'Nothing' if it kept the model: every event and child
-- ran once, no color overlapped, each thread's events of a color ran in
-- its posting order, and the children of one color ran in the order of
-- their parents.
runSchedule :: Schedule -> IO (Maybe String)
runSchedule (Schedule p cores steps) = do
  rt <- newRuntime defaultConfig
    { cfgPolicy = p, cfgCores = cores, cfgColors = 8
    , cfgTopology = if cores > 2 then Just simulatedXeon else Nothing }
  let n = length steps
      indexed = zip [0 ..] steps
      childOf i = n + i
      childColor c = (c + 1) `mod` scheduleColors
  probe <- newProbe 8 (2 * n)
  posters <- forM [0 .. 2] $ \t -> fmap snd $ forkResult (t `mod` 2) $
    forM_ [ (i, s) | (i, s) <- indexed, stPoster s == t ] $ \(i, s) ->
      post rt (stColor s) (handler "step") $ probed probe (stColor s) i $ do
        burn (stUnits s)
        when (stChild s) $
          post rt (childColor (stColor s)) (handler "child") $
            probed probe (childColor (stColor s)) (childOf i) (burn 1)
  within 10 "posters" (mapM takeMVar posters) >>= mapM_ (either throwIO return)
  finish rt
  ov <- overlaps probe
  runs <- mapM (runCount probe) [0 .. 2 * n - 1]
  let expectedRuns = replicate n 1 ++ [ if stChild s then 1 else 0 | s <- steps ]
  breaks <- forM [ (c, t) | c <- [0 .. scheduleColors - 1], t <- [0 .. 2] ] $ \(c, t) ->
    orderBreaks probe [ i | (i, s) <- indexed, stColor s == c, stPoster s == t ]
  childBreaks <- forM [0 .. scheduleColors - 1] $ \c -> do
    let parents = [ i | (i, s) <- indexed, stColor s == c, stChild s ]
    seqs <- mapM (readCounter (prRunSeq probe)) parents
    orderBreaks probe (map (childOf . snd) (sortOn fst (zip seqs parents)))
  return $ case () of
    _ | ov /= 0 -> Just (show ov ++ " overlaps")
      | runs /= expectedRuns -> Just ("run counts " ++ show runs ++ ", expected " ++ show expectedRuns)
      | any (not . null) breaks -> Just ("order broken at " ++ show (concat breaks))
      | any (not . null) childBreaks -> Just ("children out of order at " ++ show (concat childBreaks))
      | otherwise -> Nothing

scheduleSpec :: Spec
scheduleSpec = it "random schedules on 1-8 cores under random policies keep the model" $
  property $ withMaxSuccess 50 $ \sched -> monadicIO $ do
    r <- run (runSchedule sched)
    case r of
      Nothing -> return ()
      Just why -> monitor (counterexample why) >> assert False

------------------------------------------------------------------------------
-- Readiness (run once per backend)

-- | A pipe closed with 'Weft.closeFdWith', so that no watch a test leaves
-- behind outlives its fds (and lands on the next fds with those numbers).
withWatchedPipe :: ((Fd, Fd) -> IO a) -> IO a
withWatchedPipe = bracket newPipe (\(r, w) -> Weft.closeFdWith closeFd r >> Weft.closeFdWith closeFd w)

-- | Every system manager's statistics, summed by the selector.
managerTotal :: (E.ManagerStats -> Int) -> IO Int
managerTotal field = sum . map field <$> (mapM E.getManagerStats =<< E.systemManagers)

-- | Read a pipe until it says EAGAIN; the number of bytes read.
drainPipe :: Fd -> IO Int
drainPipe fd = go 0
  where go !n = readByte fd >>= maybe (return n) (const (go (n + 1)))

watchSpec :: E.BackendKind -> Config -> Spec
watchSpec kind cfg = describe "FdWatch" $ do
  it "posts once per rearm, 200 times, with no arm per wait on epoll" $ withWatchedPipe $ \(r, w) -> do
    rt <- newRuntime cfg
    got <- newChan
    runs <- newCounters 1
    fwRef <- newIORef (error "no watch yet")
    let body = do
          _ <- addCounter runs 0 1
          n <- drainPipe r
          writeChan got n
          readIORef fwRef >>= rearmRead
    -- Made on capability 0, so that its edges come from one manager.
    (_, made) <- forkResult 0 (watchFd rt r 5 (handler "read", body) (handler "write", return ()))
    fw <- within 5 "watchFd" (takeMVar made) >>= either throwIO return
    writeIORef fwRef fw
    watches0 <- managerTotal E.statWatches
    arms0 <- managerTotal E.statKernelCalls
    rearmRead fw
    forM_ [1 .. 200 :: Int] $ \_ -> do
      writeByte w
      within 2 "a message" (readChan got) `shouldReturn` 1
    arms1 <- managerTotal E.statKernelCalls
    C.threadDelay 20000
    -- One post per rearm: a run per byte, none spurious.
    readCounter runs 0 `shouldReturn` 200
    when (kind == E.EPollBackend) $ (arms1 - arms0) `shouldSatisfy` (< 10)
    unwatchFd fw
    unwatchFd fw
    when (kind == E.EPollBackend) $ managerTotal E.statWatches `shouldReturn` (watches0 - 1)
    finish rt

  it "loses no edge to a writer racing the rearm (20,000 bytes in bursts)" $ withWatchedPipe $ \(r, w) -> do
    rt <- newRuntime cfg
    total <- newCounters 1
    fwRef <- newIORef (error "no watch yet")
    let body = do
          n <- drainPipe r
          _ <- addCounter total 0 n
          readIORef fwRef >>= rearmRead
    fw <- watchFd rt r 9 (handler "read", body) (handler "write", return ())
    writeIORef fwRef fw
    rearmRead fw
    -- Bursts of 1-7 bytes from the other capability, with no pacing but a
    -- yield: many land between a body's last read and its rearm.
    (_, wrote) <- forkResult 1 $ forM_ [1 .. 5000 :: Int] $ \i -> do
      replicateM_ (1 + i `mod` 7) (writeByte w)
      when (i `mod` 3 == 0) yield
    within 10 "the writer" (takeMVar wrote) >>= either throwIO return
    let expected = sum [ 1 + i `mod` 7 | i <- [1 .. 5000 :: Int] ]
    eventually ("all " ++ show expected ++ " bytes") ((== expected) <$> readCounter total 0)
    unwatchFd fw
    finish rt

  it "loses no edge that lands between a body's last read and its rearm" $ withWatchedPipe $ \(r, w) -> do
    rt <- newRuntime cfg
    total <- newCounters 1
    fwRef <- newIORef (error "no watch yet")
    let body = do
          n <- drainPipe r
          _ <- addCounter total 0 n
          -- The writer sees the count and writes the next byte while this
          -- body still holds off its rearm: that byte's edge must not be
          -- lost.
          t0 <- getMonotonicTimeNSec
          let holdOff = getMonotonicTimeNSec >>= \t -> when (t - t0 < 5000000) holdOff
          holdOff
          readIORef fwRef >>= rearmRead
    -- The edges come from capability 0's manager, the body (color 9) runs
    -- on core 1, so an edge can arrive while the body spins.
    (_, made) <- forkResult 0 (watchFd rt r 9 (handler "read", body) (handler "write", return ()))
    fw <- within 5 "watchFd" (takeMVar made) >>= either throwIO return
    writeIORef fwRef fw
    rearmRead fw
    forM_ [1 .. 100 :: Int] $ \i -> do
      writeByte w
      eventually ("byte " ++ show i) ((== i) <$> readCounter total 0)
    unwatchFd fw
    finish rt

  it "sees the end of a stream that came with the last data, after a short read" $ do
    -- The data and the end are there before the watch starts, so they come
    -- as one edge: the body's first read returns the data, and no later
    -- edge announces the end (Note [Persistent watches], state Over).
    (r, w) <- newPipe
    writeByte w >> writeByte w >> writeByte w
    closeFd w
    rt <- newRuntime cfg
    got <- newChan
    fwRef <- newIORef (error "no watch yet")
    let body = do
          n <- try (allocaBytes 16 (\p -> fdReadBuf r p 16))
          case n of
            Right 0 -> writeChan got "end"
            -- A short read: rearm, as a server does.
            Right k -> writeChan got (show k) >> readIORef fwRef >>= rearmRead
            Left (_ :: IOException) -> writeChan got "EAGAIN" >> readIORef fwRef >>= rearmRead
    (_, made) <- forkResult 0 (watchFd rt r 4 (handler "read", body) (handler "write", return ()))
    fw <- within 5 "watchFd" (takeMVar made) >>= either throwIO return
    writeIORef fwRef fw
    rearmRead fw
    within 2 "the data" (readChan got) `shouldReturn` "3"
    within 2 "the end of the stream" (readChan got) `shouldReturn` "end"
    unwatchFd fw
    Weft.closeFdWith closeFd r
    finish rt

  it "posts the write body only when asked, once" $ withWatchedPipe $ \(_, w) -> do
    rt <- newRuntime cfg
    runs <- newCounters 2
    fw <- watchFd rt w 2 (handler "read", void (addCounter runs 0 1))
                         (handler "write", void (addCounter runs 1 1))
    -- Writable from the start, yet nobody asked.
    C.threadDelay 30000
    readCounter runs 1 `shouldReturn` 0
    rearmWrite fw
    eventually "the write body" ((== 1) <$> readCounter runs 1)
    writeByte w
    C.threadDelay 30000
    mapM (readCounter runs) [0, 1] `shouldReturn` [0, 1]
    unwatchFd fw
    finish rt

  it "posts nothing once unwatched and closed" $ do
    (r, w) <- newPipe
    rt <- newRuntime cfg
    runs <- newCounters 1
    fw <- watchFd rt r 2 (handler "never", void (addCounter runs 0 1)) (handler "write", return ())
    rearmRead fw
    unwatchFd fw
    Weft.closeFdWith closeFd r
    writeByte w `catch` \(_ :: SomeException) -> return ()
    C.threadDelay 30000
    closeFd w
    readCounter runs 0 `shouldReturn` 0
    finish rt

  it "throws an IOError for a closed fd" $ do
    rt <- newRuntime cfg
    (r, w) <- newPipe
    closeFd r >> closeFd w
    let make = watchFd rt r 2 (handler "bad", return ()) (handler "bad", return ()) >>= rearmRead
    make `shouldThrow` anyIOException
    finish rt

ioSpec :: E.BackendKind -> Spec
ioSpec kind = describe "Weft.Color onReadable and onWritable" $ do
  let cfg = config RealCores Mely
  watchSpec kind cfg

  it "post the event once, with the watched color, when data arrives" $ withWatchedPipe $ \(r, w) -> do
    rt <- newRuntime cfg
    started <- newEmptyMVar
    gate <- newEmptyMVar
    runs <- newIORef []
    -- Color 3 lives on core 1; a blocker of color 3 holds it there.
    post rt 3 (handler "blocker") (putMVar started () >> takeMVar gate)
    within 5 "blocker" (takeMVar started)
    onReadable rt r 3 (handler "readable") (capability >>= note runs)
    writeByte w
    threadDelayGHC 30000
    -- Of color 3, it waits for the blocker.
    readIORef runs `shouldReturn` []
    putMVar gate ()
    eventually "the readable event" (not . null <$> readIORef runs)
    -- One-shot: the byte is still unread, yet nothing more is posted.
    threadDelayGHC 30000
    readIORef runs `shouldReturn` [1]
    finish rt

  it "re-armed from its handler, delivers 100 messages one by one" $ withWatchedPipe $ \(r, w) -> do
    rt <- newRuntime cfg
    got <- newChan
    let watch = onReadable rt r 5 (handler "reader") $ do
          b <- readByte r
          writeChan got b
          watch
    watch
    forM_ [1 .. 100 :: Int] $ \_ -> do
      writeByte w
      within 2 "a message" (readChan got) `shouldReturn` Just 7
    finish rt

  it "onWritable posts once for a writable fd" $ withWatchedPipe $ \(_, w) -> do
    rt <- newRuntime cfg
    runs <- newCounters 1
    onWritable rt w 2 (handler "writable") (void (addCounter runs 0 1))
    eventually "the writable event" ((== 1) <$> readCounter runs 0)
    threadDelayGHC 20000
    readCounter runs 0 `shouldReturn` 1
    finish rt

  it "posts nothing for an fd closed with closeFdWith before it is ready" $ do
    (r, w) <- newPipe
    rt <- newRuntime cfg
    runs <- newCounters 1
    onReadable rt r 2 (handler "never") (void (addCounter runs 0 1))
    Weft.closeFdWith closeFd r
    threadDelayGHC 30000
    closeFd w
    readCounter runs 0 `shouldReturn` 0
    finish rt

  it "throws an IOError for a closed fd" $ do
    rt <- newRuntime cfg
    -- Closed just before, so that no other thread reuses its number.
    (r, w) <- newPipe
    closeFd r >> closeFd w
    onReadable rt r 2 (handler "bad") (return ()) `shouldThrow` anyIOException
    finish rt

  it "after shutdown, readiness posts nothing and throws nothing" $ withWatchedPipe $ \(r, w) -> do
    rt <- newRuntime cfg
    runs <- newCounters 1
    -- On capability 0, so that the firing callback runs on that
    -- capability's manager, which must survive it. A callback that threw
    -- would be reported on stderr by the manager.
    (_, report) <- capturingStderr $ do
      (_, registered) <- forkResult 0 (onReadable rt r 2 (handler "late") (void (addCounter runs 0 1)))
      within 5 "register" (takeMVar registered) >>= either throwIO return
      finish rt
      writeByte w
      (_, registered') <- forkResult 0 (onWritable rt w 2 (handler "later") (void (addCounter runs 0 1)))
      within 5 "register after shutdown" (takeMVar registered') >>= either throwIO return
      threadDelayGHC 30000
    readCounter runs 0 `shouldReturn` 0
    report `shouldBe` ""
    -- The manager that ran both callbacks still serves waits.
    withWatchedPipe $ \(r2, w2) -> do
      writeByte w2
      (_, waited) <- forkResult 0 (Weft.threadWaitRead r2)
      within 5 "a wait on the same manager" (takeMVar waited) >>= either throwIO return
