{-# LANGUAGE BangPatterns, RankNTypes, ScopedTypeVariables #-}
-- | The colored runtime: colors, handlers, configuration, the workers and
-- their stealing, posting, shutdown and statistics ("Weft.Color" is the
-- façade and its documentation). About 600 lines: the worker's loop,
-- stealing and parking share one closure of per-worker state, and
-- splitting them would pass that state around instead.
-- Internal and unstable (everything is exported; the façade picks the
-- API): import "Weft.Color".
module Weft.Color.Internal.Runtime where

import Control.Concurrent
import Control.Exception hiding (Handler)
import Control.Monad
import Data.Bits ((.&.))
import Data.Char (toLower)
import Data.IORef
import Data.Word (Word64)
import Data.List (sortOn)
import Data.Primitive.Array
import GHC.Clock (getMonotonicTimeNSec)
import System.IO (hPutStrLn, stderr)
import Weft.Color.Internal.Queues
import Weft.Color.Internal.Topology
import Weft.Internal.Counters

------------------------------------------------------------------------------
-- Colors and handlers

-- | A color: events of one color run one at a time, in posting order.
-- Colors are folded into the runtime's color space ('cfgColors', 65536 by
-- default): colors that fold together are serialised together, which is
-- always safe. A color's home core is @color `mod` cores@; new events of an
-- idle color go there, so a program can aim work at a core.
type Color = Int

-- | The color of events that need no parallelism: all of them run one at a
-- time, as in a single-threaded event loop.
defaultColor :: Color
defaultColor = 0

-- | What the runtime knows of a handler.
data Handler = Handler
  { handlerName     :: !String
    -- ^ Shown in error reports and long-handler reports.
  , handlerCost     :: {-# UNPACK #-} !Int
    -- ^ Expected run time in nanoseconds (0 if unknown or tiny). Time-left
    --   stealing moves a color only when its queued cost exceeds the
    --   measured cost of a steal.
  , handlerPenalty  :: {-# UNPACK #-} !Int
    -- ^ At least 1. Penalty-aware stealing counts @cost / penalty@: a high
    --   penalty keeps events that work on large, long-lived data near it.
  , handlerPriority :: {-# UNPACK #-} !Int
    -- ^ Colors whose queued events have a higher priority run first; this
    --   is loose, as each core decides alone and runs batches.
  } deriving (Eq, Show)

-- | A handler with the given name, cost 0, penalty 1 and priority 0.
handler :: String -> Handler
handler name = Handler name 0 1 0

------------------------------------------------------------------------------
-- Configuration

-- | How idle workers find work.
data Policy
  = NoStealing     -- ^ Colors stay on their home cores.
  | LibasyncSmp    -- ^ Libasync-smp (Mely §2.2) on its own data structure,
                   --   one event list per core: steal the first color that
                   --   is not running and holds under half the victim's
                   --   events, found and extracted by scanning the list.
  | MelyBase       -- ^ The same decisions on Mely's per-color queues.
  | TimeLeft       -- ^ Steal only colors whose queued cost exceeds the
                   --   measured steal cost, the costliest first (§3.2).
  | PenaltyAware   -- ^ 'TimeLeft', counting @cost / penalty@ (§3.3).
  | LocalityAware  -- ^ 'MelyBase', visiting victims nearest in cache first
                   --   (§3.1).
  | Mely           -- ^ All three heuristics.
  deriving (Eq, Show, Read, Enum, Bounded)

-- | Every policy, in the order above.
allPolicies :: [Policy]
allPolicies = [minBound .. maxBound]

-- | The policy's name, as 'parsePolicy' reads it.
policyName :: Policy -> String
policyName = show

-- | Read a policy name, ignoring case.
parsePolicy :: String -> Maybe Policy
parsePolicy s = lookup (map toLower s) [ (map toLower (show p), p) | p <- allPolicies ]

data Config = Config
  { cfgPolicy           :: !Policy
  , cfgBatch            :: !Int
    -- ^ At most this many events of one color run in a row (default 10).
  , cfgCores            :: !Int
    -- ^ Workers; 0 (the default) means one per capability. Worker @i@ is
    --   pinned to capability @i mod numCapabilities@, so more workers than
    --   capabilities simulate a bigger machine.
  , cfgColors           :: !Int
    -- ^ Size of the color space, rounded up to a power of two (default
    --   65536; each color costs about 60 bytes).
  , cfgTopology         :: !(Maybe Topology)
    -- ^ Cache topology for locality-aware stealing; 'Nothing' reads this
    --   machine's ('systemTopology').
  , cfgLongHandlerNanos :: !Int
    -- ^ If positive, time every handler and count those that run longer
    --   (a debugging aid; it costs two clock reads per event).
  , cfgStealMargin      :: !Int
    -- ^ The weft policies ('TimeLeft', 'PenaltyAware', 'LocalityAware',
    --   'Mely') steal from a core only while the handler costs of the
    --   events queued on it add up to at least this, in ns (default
    --   50,000; 0 for no margin);
    --   Note [When to steal]. The paper's baselines ignore it.
  } deriving (Show)

-- | Mely's policy, batches of 10, one worker per capability, 65536 colors,
-- this machine's topology, no handler timing, a steal margin of 50 us.
defaultConfig :: Config
defaultConfig = Config Mely 10 0 65536 Nothing 0 defaultStealMargin

-- | The default 'cfgStealMargin', in ns.
defaultStealMargin :: Int
defaultStealMargin = 50000

-- | The policies weft adds to the paper's baselines, which take
-- 'cfgStealMargin' into account.
weftPolicy :: Policy -> Bool
weftPolicy p = p `elem` [TimeLeft, PenaltyAware, LocalityAware, Mely]

------------------------------------------------------------------------------
-- The runtime

data Runtime = Runtime
  { rtQueues    :: !Queues
  , rtPolicy    :: !Policy
  , rtCores     :: !Int
  , rtTopology  :: !Topology
  , rtVictims   :: !(Array [Int])        -- ^ locality order, per thief
  , rtWake      :: !(Array (MVar ()))
  , rtDone      :: !(Array (MVar ()))
  , rtStats     :: !Counters             -- ^ per core, 'statStride' apart
  , rtState     :: !Counters             -- ^ 'sState', 'sParked'
  , rtWorkers   :: !(IORef [ThreadId])
  , rtLongNanos :: !Int
  , rtColorMask :: !Int
  , rtUsePenalty :: !Bool
  }

-- | Thrown by 'post' once 'shutdown' has begun (except to handlers posting
-- while the runtime drains).
data RuntimeClosed = RuntimeClosed
  deriving (Show)

instance Exception RuntimeClosed

-- Runtime state words.
sState, sParked :: Int
sState = 0
sParked = 1

stOpen, stDraining, stClosed :: Int
stOpen = 0
stDraining = 1
stClosed = 2

-- Per-core statistics words.
statStride, stEvents, stAttempts, stSteals, stEventsStolen, stWorkStolen,
  stStealNanos, stErrors, stLong, stParks, stNeighbour, stUnpaid :: Int
statStride = 16
stEvents = 0
stAttempts = 1
stSteals = 2
stEventsStolen = 3
stWorkStolen = 4
stStealNanos = 5
stErrors = 6
stLong = 7
stParks = 8
stNeighbour = 9
stUnpaid = 10

-- | The number of workers.
runtimeCores :: Runtime -> Int
runtimeCores = rtCores

-- | Start a runtime: one worker per core, each pinned with 'forkOn'. The
-- cost of a steal is measured before the workers start, and kept up to
-- date as they steal.
newRuntime :: Config -> IO Runtime
newRuntime cfg = do
  caps <- getNumCapabilities
  let cores = if cfgCores cfg > 0 then cfgCores cfg else caps
      policy = cfgPolicy cfg
      layout = if policy == LibasyncSmp then SingleList else ColorQueues
      timeLeft = policy `elem` [TimeLeft, PenaltyAware, Mely]
  topo <- maybe (systemTopology cores) return (cfgTopology cfg)
  q <- (if policy == NoStealing then withoutHints else id)
         . withStealMargin (if weftPolicy policy then cfgStealMargin cfg else 0)
         <$> newQueues layout timeLeft cores (cfgColors cfg) (cfgBatch cfg)
  cost <- calibrateSteal layout
  setStealCost q cost
  wakes <- replicateM cores newEmptyMVar
  dones <- replicateM cores newEmptyMVar
  st <- newCounters (cores * statStride)
  state <- newCounters 2
  workers <- newIORef []
  let rt = Runtime
        { rtQueues = q, rtPolicy = policy, rtCores = cores, rtTopology = topo
        , rtVictims = arrayFromList [ victimOrder topo cores i | i <- [0 .. cores - 1] ]
        , rtWake = arrayFromList wakes, rtDone = arrayFromList dones
        , rtStats = st, rtState = state, rtWorkers = workers
        , rtLongNanos = cfgLongHandlerNanos cfg
        , rtColorMask = queueColors q - 1
        , rtUsePenalty = policy `elem` [PenaltyAware, Mely] }
  tids <- forM [0 .. cores - 1] $ \i ->
    mask_ $ forkOnWithUnmask (i `mod` caps) $ \unmask ->
      worker rt unmask i `finally` putMVar (indexArray (rtDone rt) i) ()
  writeIORef workers tids
  return rt

-- | Post an event: run @body@ as a @h@ event of color @c@. Safe from any
-- thread, handlers included; it never blocks (beyond a short spin on the
-- owning core's lock) and allocates one event.
--
-- Throws 'RuntimeClosed' once 'shutdown' has begun, unless called from a
-- handler while the runtime drains; an event that 'post' accepted always
-- runs.
post :: Runtime -> Color -> Handler -> IO () -> IO ()
post rt color h body = mask_ $ do
  let q = rtQueues rt
      c = color .&. rtColorMask rt
      w | rtUsePenalty rt = handlerCost h `quot` max 1 (handlerPenalty h)
        | otherwise = handlerCost h
      !ev = Ev w (handlerCost h) (handlerPriority h) (handlerName h) body
      attempt = do
        o <- ownerOf q c
        lockCore q o
        o' <- ownerOf q c
        if o' /= o then unlockCore q o >> attempt else do
          st <- readCounter (rtState rt) sState
          ok <- if st == stOpen then return True else acceptWhileClosing rt st
          if not ok then unlockCore q o >> throwIO RuntimeClosed else do
            -- Whether this push raises the hint ('wakeThief'); no thief
            -- reads hints under NoStealing.
            raised <- if rtPolicy rt == NoStealing then return False
                        else not <$> hasStealable q o
            push q o c ev
            -- Read under the lock: a worker parks only after checking its
            -- queue under this lock (Note [Parking]).
            sleeping <- parkedFlag q o
            -- An owner in the middle of a batch wakes no thief until the
            -- batch ends, which may be never (Note [Parking]).
            busy <- if sleeping || rtPolicy rt == NoStealing
                      then return False else (>= 0) <$> runningColor q o
            unlockCore q o
            when sleeping (wake rt o)
            when busy (wakeThief rt o raised)
  attempt

-- While draining, only handlers may post.
acceptWhileClosing :: Runtime -> Int -> IO Bool
acceptWhileClosing rt st
  | st == stClosed = return False
  | otherwise = do
      me <- myThreadId
      elem me <$> readIORef (rtWorkers rt)

wake :: Runtime -> Int -> IO ()
wake rt core = void (tryPutMVar (indexArray (rtWake rt) core) ())
{-# INLINE wake #-}

-- | Stop the runtime. New posts from outside handlers are refused at once
-- ('RuntimeClosed'); every event already accepted runs, as do events that
-- handlers post meanwhile; then the workers stop and 'shutdown' returns.
-- Watches made with 'onReadable' and 'onWritable' that fire after this
-- point post nothing. Calling it again waits for the first call to finish.
shutdown :: Runtime -> IO ()
shutdown rt = do
  first <- casCounter (rtState rt) sState stOpen stDraining
  when (first == stOpen) drain
  forM_ [0 .. rtCores rt - 1] $ \i -> readMVar (indexArray (rtDone rt) i)
  where
    q = rtQueues rt
    cores = [0 .. rtCores rt - 1]
    drain = do
      quiet <- mask_ $ do
        mapM_ (lockCore q) cores
        idle <- and <$> forM cores (\i -> do
          n <- coreEvents q i
          r <- runningColor q i
          return (n == 0 && r < 0))
        when idle $ writeCounter (rtState rt) sState stClosed
        mapM_ (unlockCore q) cores
        return idle
      if quiet
        then mapM_ (wake rt) cores
        else threadDelay 200 >> drain

------------------------------------------------------------------------------
-- Workers

-- Note [Parking]
-- ~~~~~~~~~~~~~~
-- A worker with nothing to run or steal parks on its wake-up 'MVar'. It
-- first raises its parked flag, then checks its queue under its own lock,
-- and only then blocks. 'post' pushes and reads the flag under the same
-- lock. So either the poster's critical section came first, and the
-- worker's check sees the event, or the worker's came first, and the
-- poster sees the flag and wakes it: no event is left behind by a sleeping
-- owner. Thieves are woken by busy workers: as it starts each batch, a
-- worker whose queue still holds something stealable wakes the nearest
-- parked core, so a burst of posts to one core spreads. Waking after the
-- batch instead would leave the events queued behind a long handler (or
-- one that waits, say for an event queued behind it) unstolen while every
-- other core sleeps, until the handler ends. For the same reason 'post'
-- wakes a thief when it queues on an owner that is running a batch. On
-- the common path this costs 'post' one read of a word next to the
-- owner's lock; the parked count and the victim's queue are read only
-- when the owner is busy.
--
-- A thief that parks raises the parked count (a locked add) and then
-- reads its victims' steal hints for a last pass; a waker stores a hint
-- (under the victim's lock) and then reads the parked count. Each is a
-- store followed by a load of the other's location, which the processor
-- may reorder unless a full barrier stands between them; without one both
-- could read the old values, and the thief would sleep beside work that
-- a long batch keeps queued. The locked add is the thief's barrier. The
-- waker's is the lock's acquisition for a hint stored in an earlier
-- critical section (a hint that was already up when 'post' took the lock,
-- or one a 'finishBatch' raised before the next batch's lock); only a
-- hint raised in the waker's own critical section can still be waiting
-- to be seen, and for that one 'wakeThief' calls 'fullBarrier'. 'post'
-- is the only operation that raises a hint and then wakes: taking a
-- batch only lowers one.

-- Note [Preempted lock holders]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A core's lock is a spin lock, and its holder is a Haskell thread: one
-- that allocates inside the critical section (a push conses) can be
-- descheduled there at a context switch, and then waits until its
-- capability runs it again. If that capability's worker is busy running
-- handlers, that could be a whole time slice (20 ms), with every other
-- core spinning on the lock. So a worker yields every 8 batches, which
-- bounds the wait by a few batches; waiters yield too as they spin, for a
-- holder preempted on their own capability. In weft-sws this cut the time
-- spent waiting for locks about threefold.
--
-- With a single capability there is no other core to wait: every waiter
-- runs on the holder's capability, and yields as it spins. The periodic
-- yield then only lets the capability's other threads in, the I/O
-- manager's dispatcher first, whose poll in the middle of a round of
-- events splits the round: the replies of a server's connections leave
-- in bursts with gaps, and its clients run dry and sleep in between, so
-- more of its sends pay for a wake-up. So a worker of a program that
-- has one capability when the worker starts yields every 64 batches
-- ('workerJudging'); one started at two or more, every 8.

-- Note [When to steal]
-- ~~~~~~~~~~~~~~~~~~~~
-- A worker with nothing of its own to run steals at once, on every idle
-- pass, as its policy says; the decision is made before the steal, from
-- what the policy knows, and nothing silences a policy afterwards.
--
-- * The paper's baselines decide as the paper describes: LibasyncSmp and
--   MelyBase take the first color that is not running and holds under
--   half the victim's events, from any victim with two colors queued.
-- * Time-left stealing (TimeLeft, PenaltyAware, Mely) takes only a color
--   whose queued work (its events' annotated costs, divided by their
--   penalties for the penalty-aware ones) exceeds the measured cost of a
--   steal, the costliest first (Note [The stealing queue] in
--   "Weft.Color.Internal.Queues"). LocalityAware takes MelyBase's choice
--   from the nearest victim.
-- * The weft policies (all four above) also leave a victim alone while
--   its backlog, the summed handler costs of the events queued on it, is
--   below 'cfgStealMargin' (50 us by default).
--   A steal costs more than its pass: the thief is often woken for it,
--   the color's data moves between caches, and the thief's core may be
--   one that other processes wanted; a victim with less queued than that
--   would have run the color itself about as soon. A victim with more
--   (a burst posted on one core, a core stuck in a long handler) is
--   robbed at once, one steal per idle pass, for as long as it stays
--   above the margin. So a balanced server's short queues are not
--   stolen from, and an imbalanced load is spread as the policy says.
--
-- An idle worker looks at each victim's steal hint only (Note [Steal
-- hints] in "Weft.Color.Internal.Queues"), which already says whether
-- the victim holds a color the policy could take and, for the weft
-- policies, whether it is above the margin; so idle passes do not slow
-- the owners down. A parked worker is woken by a busy one as it starts a
-- batch with its hint up (Note [Parking]). Whether a steal paid (its work
-- ran for at least twice the pass that took it) is counted, as a
-- statistic only.

-- | A worker's record of its last steal, for the statistics: the ns its
-- pass took (-1 for none); the color it took; the ns its events have run
-- since.
data Judge = Judge !(IORef Int) !(IORef Int) !(IORef Int)

worker :: Runtime -> (forall a. IO a -> IO a) -> Int -> IO ()
worker rt unmask me = do
  judge <- Judge <$> newIORef (-1) <*> newIORef (-1) <*> newIORef 0
  caps <- getNumCapabilities
  workerJudging rt unmask me judge (if caps == 1 then 63 else 7)

-- | A worker's loop; it yields after every batch whose count, masked
-- with the last argument, equals the mask (Note [Preempted lock holders]).
workerJudging :: Runtime -> (forall a. IO a -> IO a) -> Int -> Judge -> Int -> IO ()
workerJudging rt unmask me (Judge judged stolen ranSince) yieldMask = loop 0 0
  where
    q = rtQueues rt
    stealing = rtPolicy rt /= NoStealing
    statAdd k d = bumpCounter (rtStats rt) (me * statStride + k) d

    loop :: Int -> Int -> IO ()
    loop !batches !idleRounds = do
      lockCore q me
      (c, evs) <- takeBatch q me
      unlockCore q me
      if c >= 0
        then do
          -- Before the batch, which may be long (Note [Parking]).
          when stealing (wakeThief rt me False)
          took <- readIORef judged
          judging <- if took < 0 then return False else (== c) <$> readIORef stolen
          n <- if not judging then runAll evs 0 else do
            t0 <- getMonotonicTimeNSec
            n <- runAll evs 0
            t1 <- getMonotonicTimeNSec
            modifyIORef' ranSince (+ fromIntegral (t1 - t0))
            return n
          statAdd stEvents n
          lockCore q me
          finishBatch q me c
          unlockCore q me
          -- Let the capability's other threads in now and then (Note
          -- [Preempted lock holders]).
          when (batches .&. yieldMask == yieldMask) yield
          loop (batches + 1) 0
        else idle batches idleRounds

    runAll [] !n = return n
    runAll (Ev _ _ _ name body : rest) !n = do
      runOne name body
      runAll rest (n + 1)

    runOne name body
      | rtLongNanos rt > 0 = do
          t0 <- getMonotonicTimeNSec
          guarded name body
          t1 <- getMonotonicTimeNSec
          when (fromIntegral (t1 - t0) > rtLongNanos rt) $ statAdd stLong 1
      | otherwise = guarded name body

    guarded name body = do
      r <- try (unmask body)
      case r of
        Right () -> return ()
        Left (e :: SomeException) -> do
          statAdd stErrors 1
          reportFailure name e

    idle :: Int -> Int -> IO ()
    idle !batches !rounds = do
      st <- readCounter (rtState rt) sState
      if st == stClosed then return () else do
        judgeSteal
        stole <- if stealing then stealRound else return False
        if stole then loop batches 0
          else if rounds < spinRounds then yield >> loop batches (rounds + 1)
          else park

    -- Idle again after a steal: did it pay? (a statistic: Note [When to
    -- steal])
    judgeSteal = do
      took <- readIORef judged
      when (took >= 0) $ do
        ran <- readIORef ranSince
        writeIORef judged (-1)
        unless (stealPaid took ran) $ statAdd stUnpaid 1

    -- Note [Parking]. The last steal pass runs with the flag raised, so a
    -- victim that gains stealable work after it sees the flag and wakes us.
    park = do
      setParked q me True
      _ <- addCounter (rtState rt) sParked 1
      lockCore q me
      n <- coreEvents q me
      unlockCore q me
      st <- readCounter (rtState rt) sState
      stole <- if n == 0 && stealing then stealRound else return False
      when (n == 0 && st /= stClosed && not stole) $ do
        statAdd stParks 1
        takeMVar (indexArray (rtWake rt) me)
      setParked q me False
      _ <- addCounter (rtState rt) sParked (-1)
      loop 0 0

    -- One pass over the victims; True if a color was stolen, whose events
    -- are then timed for the statistics.
    --
    -- The pass is timed from the first victim it locks: an idle worker
    -- whose victims' hints are all down reads no clock, as it may make
    -- many such passes in a row.
    stealRound = do
      victims <- victimsFor
      (c, t0) <- tryVictims 0 victims
      if t0 == 0 then return False else do
        t1 <- getMonotonicTimeNSec
        let took = fromIntegral (t1 - t0)
        statAdd stStealNanos took
        when (c >= 0) $ writeIORef judged took >> writeIORef stolen c >> writeIORef ranSince 0
        return (c >= 0)

    victimsFor
      | rtPolicy rt `elem` [LocalityAware, Mely] = return (indexArray (rtVictims rt) me)
      -- One other core: no loads to compare (and none read from its lines).
      | rtCores rt == 2 = return [1 - me]
      | otherwise = do
          -- Libasync-smp's construct_core_set: the most loaded core first,
          -- then the following core numbers.
          loads <- mapM (coreEvents q) [0 .. rtCores rt - 1]
          let n = rtCores rt
              top = fst (last (sortOn snd (zip [0 ..] loads)))
          return [ v | k <- [0 .. n - 1], let v = (top + k) `mod` n, v /= me ]

    -- The color stolen, or -1; and when the first victim was locked (0
    -- for never).
    tryVictims :: Word64 -> [Int] -> IO (Int, Word64)
    tryVictims start [] = return (-1, start)
    tryVictims start (v : vs) = do
      -- Libasync-smp locks each victim to look; the others look first.
      worth <- if rtPolicy rt == LibasyncSmp then return True else hasStealable q v
      if not worth then tryVictims start vs else do
        statAdd stAttempts 1
        t0 <- getMonotonicTimeNSec
        let start' = if start == 0 then t0 else start
        lockPair q me v
        c <- choose v
        moved <- if c >= 0 then Just <$> migrate q v me c else return Nothing
        unlockPair q me v
        t1 <- getMonotonicTimeNSec
        case moved of
          Nothing -> tryVictims start' vs
          Just (n, w) -> do
            statAdd stSteals 1
            statAdd stEventsStolen n
            statAdd stWorkStolen w
            when (isNeighbour (rtTopology rt) (rtCores rt) me v) $ statAdd stNeighbour 1
            -- A moving average; one sample can at most double it (plus a
            -- microsecond), so a steal that was preempted midway does not
            -- make every color look unworthy for a long while.
            old <- stealCost q
            let sample = min (fromIntegral (t1 - t0)) (2 * old + 1000)
            setStealCost q (max 1 ((7 * old + sample) `quot` 8))
            return (c, start')

    choose v = case rtPolicy rt of
      NoStealing -> return (-1)
      LibasyncSmp -> chooseLibasync q v
      MelyBase -> chooseFirst q v
      LocalityAware -> chooseFirst q v
      TimeLeft -> chooseWorthy q v
      PenaltyAware -> chooseWorthy q v
      Mely -> chooseWorthy q v

-- | Did a steal pay? @stealPaid took ran@: the steal pass took @took@ ns,
-- and the stolen work then ran for @ran@ ns before the thief was idle.
stealPaid :: Int -> Int -> Bool
stealPaid took ran = ran >= 2 * took

-- | Report a handler's exception on stderr. Showing the exception runs
-- the handler's code too (a lazy 'error' message, a 'Show' instance), and
-- stderr may be closed: the report renders the text in full first, falls
-- back to a plain line if that throws, and drops the line if it cannot be
-- written, so that no exception escapes into the worker and stops its
-- core.
reportFailure :: String -> SomeException -> IO ()
reportFailure name e = do
  let full = "weft: color handler " ++ show name ++ " threw: " ++ show e
  rendered <- try (evaluate (foldr seq () full))
  let line = case rendered of
        Right () -> full
        Left (_ :: SomeException) -> "weft: a color handler threw an exception that cannot be shown"
  r <- try (hPutStrLn stderr line)
  case r of
    Right () -> return ()
    Left (_ :: SomeException) -> return ()

-- | If some worker is parked and core @victim@ holds something stealable,
-- wake the parked worker nearest to it (Note [Parking]).
-- @raised@: the caller itself raised the victim's hint, under the lock it
-- has just given back, whose release lets the loads below pass that store
-- (Note [Parking]).
wakeThief :: Runtime -> Int -> Bool -> IO ()
wakeThief rt victim raised = do
  let q = rtQueues rt
  more <- hasStealable q victim
  when more $ do
    when raised fullBarrier
    parked <- readCounter (rtState rt) sParked
    when (parked > 0) $ do
      sleepers <- filterM (parkedFlag q) (indexArray (rtVictims rt) victim)
      case sleepers of
        t : _ -> wake rt t
        [] -> return ()

-- | Idle passes a worker makes, yielding between them, before it parks.
spinRounds :: Int
spinRounds = 64

-- | The cost of a steal, measured on a private pair of queues: the median
-- of 101 steals of a one-event color, in ns. Real steals cross caches and
-- cost more; their measurements replace this one as workers steal.
calibrateSteal :: Layout -> IO Int
calibrateSteal layout = do
  q <- newQueues layout False 2 2 1
  ts <- forM [1 .. 101 :: Int] $ \_ -> do
    lockCore q 0
    push q 0 0 (Ev 0 0 0 "calibrate" (return ()))
    unlockCore q 0
    t0 <- getMonotonicTimeNSec
    lockPair q 1 0
    _ <- migrate q 0 1 0
    unlockPair q 1 0
    t1 <- getMonotonicTimeNSec
    lockCore q 1
    (c, _) <- takeBatch q 1
    finishBatch q 1 c
    unlockCore q 1
    return (fromIntegral (t1 - t0))
  return (max 1 (sortOn id ts !! 50))

------------------------------------------------------------------------------
-- Statistics

-- | One worker's counts since the runtime started.
data CoreStats = CoreStats
  { csEventsRun       :: !Int  -- ^ events run on this core
  , csStealAttempts   :: !Int  -- ^ victims locked to look for a color
  , csSteals          :: !Int  -- ^ colors stolen
  , csEventsStolen    :: !Int  -- ^ events in the stolen colors
  , csWorkStolen      :: !Int  -- ^ their annotated cost, ns (after penalties)
  , csStealNanos      :: !Int  -- ^ time spent in steal passes, ns
  , csLockWaitNanos   :: !Int  -- ^ time anyone waited for this core's lock, ns
  , csHandlerErrors   :: !Int  -- ^ handlers that threw
  , csLongHandlers    :: !Int  -- ^ handlers longer than 'cfgLongHandlerNanos'
  , csParks           :: !Int  -- ^ times the worker slept
  , csNeighbourSteals :: !Int  -- ^ steals from a nearest core in the topology
  , csUnpaidSteals    :: !Int  -- ^ steals whose work ran for less than
                               --   twice the pass that took it (Note [When
                               --   to steal])
  } deriving (Eq, Show)

-- | Per-core statistics, core 0 first. Counts are read without stopping the
-- workers, so they may be a moment old.
stats :: Runtime -> IO [CoreStats]
stats rt = forM [0 .. rtCores rt - 1] $ \i -> do
  let r k = readCounter (rtStats rt) (i * statStride + k)
  CoreStats <$> r stEvents <*> r stAttempts <*> r stSteals <*> r stEventsStolen
            <*> r stWorkStolen <*> r stStealNanos <*> lockWaitNanos (rtQueues rt) i
            <*> r stErrors <*> r stLong <*> r stParks <*> r stNeighbour <*> r stUnpaid

-- | The current estimate of one steal's cost, in ns (the threshold of
-- time-left stealing).
stealCostNanos :: Runtime -> IO Int
stealCostNanos = stealCost . rtQueues

-- | The runtime's queues, for tests and debugging tools (say, to check
-- that after a run no event is left queued and every color is back home).
-- Read them as "Weft.Color.Internal.Queues" requires: with the owning core's lock
-- held, or once 'shutdown' has returned and no worker touches them.
runtimeQueues :: Runtime -> Queues
runtimeQueues = rtQueues
