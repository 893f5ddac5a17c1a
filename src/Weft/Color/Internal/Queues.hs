{-# LANGUAGE BangPatterns #-}
-- | The per-core event queues of a colored runtime (Mely §4.1), and the
-- single per-core event list of the Libasync-smp baseline (§2.1).
-- Internal and unstable: weft's own modules and tests use it. Over 600
-- lines because the arrays, the lists threaded through them and the locks
-- share the invariants of the Notes below, which are read together.
--
-- Everything about a color lives in unboxed arrays indexed by the color:
-- which core owns it, its queued events, their summed cost, and its links
-- in its core's lists. A core's lists are intrusive, doubly linked lists of
-- colors threaded through those arrays, so linking or unlinking a color
-- allocates nothing and a steal moves a whole color by relinking it.
--
-- Note [Who may touch a color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A color's fields belong to the core that owns it ('ownerOf'), and are
-- read and written only with that core's lock held. The owner itself
-- changes only with the old owner's lock held (a steal holds both cores'
-- locks; a color going home holds the old owner's). So a poster reads the
-- owner without a lock, locks that core, and reads the owner again: if it
-- moved meanwhile, it unlocks and tries the new owner.
--
-- Note [Colors go home]
-- ~~~~~~~~~~~~~~~~~~~~~
-- Each color has a home core, @color mod cores@, as in Libasync-smp. A
-- stolen color stays with its thief while it has queued or running events,
-- so that it never runs on two cores at once and its events keep their
-- order. When it runs dry it goes home. So an idle color is always at
-- home, a program can aim work at a core by its choice of color, and the
-- color map needs no cleaning.
--
-- Note [The stealing queue]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- For time-left stealing (Mely §4.2) each core keeps the colors worth
-- stealing, those whose queued work exceeds the cost of a steal, in three
-- unordered buckets by work: more than 1, 4 and 16 steal costs. Every push,
-- pop and migration updates the color's work and moves it between buckets,
-- which is O(1); a thief takes from the fullest bucket. The steal cost
-- moves as it is measured, so a color's bucket may be slightly stale: the
-- thief checks the work against the current cost before it steals.
module Weft.Color.Internal.Queues
  ( Queues
  , Layout (..)
  , Ev (..)
  , newQueues
  , queueCores
  , queueColors
  , queueLayout
  , homeOf
  , ownerOf
    -- * Locks
  , lockCore
  , unlockCore
  , lockPair
  , unlockPair
  , lockWaitNanos
    -- * With the owner's lock held
  , push
  , takeBatch
  , finishBatch
  , coreEvents
  , coreColors
  , runningColor
  , colorCount
  , colorWork
  , colorIsWorthy
  , coreBacklog
    -- * Stealing (both locks held)
  , chooseLibasync
  , chooseFirst
  , chooseWorthy
  , migrate
  , hasStealable
  , withoutHints
    -- * Steal cost
  , stealCost
  , setStealCost
  , withStealMargin
    -- * Parking
  , parkedFlag
  , setParked
  ) where

import Control.Concurrent (yield)
import Control.Monad
import Data.Bits ((.&.))
import Data.IORef
import Data.Int (Int32)
import Data.Primitive.Array
import Data.Primitive.PrimArray
import Control.Monad.Primitive (RealWorld)
import GHC.Clock (getMonotonicTimeNSec)

import Weft.Internal.Counters

-- | One queued event: its weight (the cost it adds to its color's work, in
-- ns: its handler's cost, divided by its penalty under penalty-aware
-- stealing), its handler's cost (what it adds to its core's backlog), its
-- handler's priority and name, and its body.
data Ev = Ev
  { evWeight   :: {-# UNPACK #-} !Int
  , evCost     :: {-# UNPACK #-} !Int
  , evPriority :: {-# UNPACK #-} !Int
  , evName     :: String
  , evBody     :: IO ()
  }

-- | How a core keeps its events.
data Layout
  = ColorQueues   -- ^ Mely: a list of per-color queues, by priority.
  | SingleList    -- ^ Libasync-smp: one list of events in posting order.
  deriving (Eq, Show)

-- | A colored FIFO: front, and back reversed.
data EvQ = EvQ ![Ev] ![Ev]

emptyQ :: EvQ
emptyQ = EvQ [] []

-- | Libasync-smp's per-core event list, a growable ring.
data Ring = Ring
  !(MutableArray RealWorld Ev)        -- events
  !(MutablePrimArray RealWorld Int32) -- their colors
  !Int                                -- index of the first
  !Int                                -- how many

data Queues = Queues
  { queueCores  :: !Int
  , queueColors :: !Int    -- ^ a power of two
  , queueLayout :: !Layout
  , qTimeLeft   :: !Bool   -- ^ keep the stealing queues
  , qHinted     :: !Bool   -- ^ keep the steal hints (Note [Steal hints])
  , qMargin     :: !Int    -- ^ the steal margin, ns ('withStealMargin')
  , qBatch      :: !Int
    -- per color
  , cOwner  :: !(MutablePrimArray RealWorld Int32)
  , cCount  :: !(MutablePrimArray RealWorld Int32)
  , cLinked :: !(MutablePrimArray RealWorld Int32)
  , cPrev   :: !(MutablePrimArray RealWorld Int32)
  , cNext   :: !(MutablePrimArray RealWorld Int32)
  , cBucket :: !(MutablePrimArray RealWorld Int32)  -- ^ -1: not worthy
  , cSPrev  :: !(MutablePrimArray RealWorld Int32)
  , cSNext  :: !(MutablePrimArray RealWorld Int32)
  , cWork   :: !(MutablePrimArray RealWorld Int)
  , cPrio   :: !(MutablePrimArray RealWorld Int)
  , cEvents :: !(MutableArray RealWorld EvQ)
    -- per core, 'coreStride' words apart so cores do not share cache lines
  , qCoreWords :: !Counters
  , qRings     :: !(Array (IORef Ring))
    -- per core, 'coreStride' words apart, away from the words above
    -- (Note [Steal hints])
  , qHints     :: !Counters
    -- global
  , qGlobal    :: !Counters
  }

-- Per-core words.
coreStride, wLock, wHead, wTail, wEvents, wColors, wRunning, wParked,
  wBucket0, wLockWait, wBacklog :: Int
coreStride = 16
wLock = 0
wHead = 1
wTail = 2
wEvents = 3
wColors = 4
wRunning = 5
wParked = 6
wBucket0 = 7      -- 7, 8, 9: the stealing buckets' heads
wLockWait = 10
wBacklog = 11     -- queued handler cost (ns), color queues only

gStealCost :: Int
gStealCost = 0

-- | @newQueues layout timeLeft cores colors batch@: empty queues. @colors@
-- is rounded up to a power of two.
newQueues :: Layout -> Bool -> Int -> Int -> Int -> IO Queues
newQueues layout timeLeft cores colors0 batch = do
  let colors = until (>= colors0) (* 2) 1
      int32s v = do
        a <- newPrimArray colors
        setPrimArray a 0 colors v
        return a
  owner <- newPrimArray colors
  forM_ [0 .. colors - 1] $ \c -> writePrimArray owner c (fromIntegral (c `mod` cores))
  count <- int32s 0
  linked <- int32s 0
  prev <- int32s (-1)
  next <- int32s (-1)
  bucket <- int32s (-1)
  sprev <- int32s (-1)
  snext <- int32s (-1)
  work <- newPrimArray colors
  setPrimArray work 0 colors 0
  prio <- newPrimArray colors
  setPrimArray prio 0 colors 0
  evs <- newArray colors emptyQ
  coreWords <- newCounters (cores * coreStride)
  forM_ [0 .. cores - 1] $ \k -> do
    forM_ [wHead, wTail, wRunning, wBucket0, wBucket0 + 1, wBucket0 + 2] $ \w ->
      storeCounter coreWords (k * coreStride + w) (-1)
  rings <- if layout == SingleList
    then forM [1 .. cores] (\_ -> newRing 64 >>= newIORef)
    else return []
  hints <- newCounters (cores * coreStride)
  g <- newCounters 8
  return Queues
    { queueCores = cores, queueColors = colors, queueLayout = layout
    , qTimeLeft = timeLeft, qHinted = cores > 1, qMargin = 0, qBatch = max 1 batch
    , cOwner = owner, cCount = count, cLinked = linked, cPrev = prev, cNext = next
    , cBucket = bucket, cSPrev = sprev, cSNext = snext, cWork = work, cPrio = prio
    , cEvents = evs, qCoreWords = coreWords, qRings = arrayFromList rings
    , qHints = hints, qGlobal = g }

-- | What a ring slot holds when it holds nothing (so the GC can free the
-- event that was there).
noEv :: Ev
noEv = Ev 0 0 0 "" (return ())

newRing :: Int -> IO Ring
newRing n = do
  evs <- newArray n noEv
  cols <- newPrimArray n
  return (Ring evs cols 0 0)

-- | A color's home core.
homeOf :: Queues -> Int -> Int
homeOf q c = c `mod` queueCores q
{-# INLINE homeOf #-}

-- | The core that owns a color now (Note [Who may touch a color]).
ownerOf :: Queues -> Int -> IO Int
ownerOf q c = fromIntegral <$> readPrimArray (cOwner q) c
{-# INLINE ownerOf #-}

cw :: Queues -> Int -> Int -> Int
cw _ core w = core * coreStride + w
{-# INLINE cw #-}

rd :: Queues -> Int -> Int -> IO Int
rd q core w = readCounter (qCoreWords q) (cw q core w)
{-# INLINE rd #-}

wr :: Queues -> Int -> Int -> Int -> IO ()
wr q core w v = storeCounter (qCoreWords q) (cw q core w) v
{-# INLINE wr #-}

------------------------------------------------------------------------------
-- Locks

-- | Take a core's lock. The caller masks asynchronous exceptions and keeps
-- the critical section short and non-blocking. A waiter spins, yielding now
-- and then: the holder may be a preempted thread of the waiter's own
-- capability. Time spent waiting is added to the core's lock-wait count.
lockCore :: Queues -> Int -> IO ()
lockCore q core = do
  old <- casCounter (qCoreWords q) (cw q core wLock) 0 1
  when (old /= 0) $ do
    t0 <- getMonotonicTimeNSec
    let spin :: Int -> IO ()
        spin !n = do
          o <- casCounter (qCoreWords q) (cw q core wLock) 0 1
          when (o /= 0) $ do
            when (n .&. 15 == 15) yield
            spin (n + 1)
    spin 0
    t1 <- getMonotonicTimeNSec
    void (addCounter (qCoreWords q) (cw q core wLockWait) (fromIntegral (t1 - t0)))
{-# INLINE lockCore #-}

unlockCore :: Queues -> Int -> IO ()
unlockCore q core = releaseCounter (qCoreWords q) (cw q core wLock) 0
{-# INLINE unlockCore #-}

-- | Lock two distinct cores, lower index first, so two thieves robbing
-- each other cannot deadlock.
lockPair :: Queues -> Int -> Int -> IO ()
lockPair q a b = lockCore q (min a b) >> lockCore q (max a b)

unlockPair :: Queues -> Int -> Int -> IO ()
unlockPair q a b = unlockCore q a >> unlockCore q b

-- | Nanoseconds spent waiting for a core's lock, by anyone, so far.
lockWaitNanos :: Queues -> Int -> IO Int
lockWaitNanos q core = rd q core wLockWait

------------------------------------------------------------------------------
-- Core-queue links (ColorQueues layout)

-- | Link a color into its core's list after the last color of at least its
-- priority: equal priorities keep arrival order.
linkColor :: Queues -> Int -> Int -> IO ()
linkColor q core c = do
  p <- readPrimArray (cPrio q) c
  let findAfter :: Int -> IO Int
      findAfter t
        | t < 0 = return t
        | otherwise = do
            pt <- readPrimArray (cPrio q) t
            if pt >= p then return t else readPrimArray (cPrev q) t >>= findAfter . fromIntegral
  tl <- rd q core wTail
  after <- findAfter tl
  nxt <- if after < 0 then rd q core wHead else fromIntegral <$> readPrimArray (cNext q) after
  writePrimArray (cPrev q) c (fromIntegral after)
  writePrimArray (cNext q) c (fromIntegral nxt)
  if after < 0 then wr q core wHead c else writePrimArray (cNext q) after (fromIntegral c)
  if nxt < 0 then wr q core wTail c else writePrimArray (cPrev q) nxt (fromIntegral c)
  writePrimArray (cLinked q) c 1
  n <- rd q core wColors
  wr q core wColors (n + 1)

unlinkColor :: Queues -> Int -> Int -> IO ()
unlinkColor q core c = do
  p <- fromIntegral <$> readPrimArray (cPrev q) c
  n <- fromIntegral <$> readPrimArray (cNext q) c
  if p < 0 then wr q core wHead n else writePrimArray (cNext q) p (fromIntegral n)
  if n < 0 then wr q core wTail p else writePrimArray (cPrev q) n (fromIntegral p)
  writePrimArray (cPrev q) c (-1)
  writePrimArray (cNext q) c (-1)
  writePrimArray (cLinked q) c 0
  k <- rd q core wColors
  wr q core wColors (k - 1)

------------------------------------------------------------------------------
-- Stealing queue (Note [The stealing queue])

bucketFor :: Int -> Int -> Int
bucketFor cost w
  | w <= cost = -1
  | w <= 4 * cost = 0
  | w <= 16 * cost = 1
  | otherwise = 2
{-# INLINE bucketFor #-}

rebucket :: Queues -> Int -> Int -> IO ()
rebucket q core c = when (qTimeLeft q) $ do
  cost <- stealCost q
  w <- readPrimArray (cWork q) c
  n <- readPrimArray (cCount q) c
  old <- fromIntegral <$> readPrimArray (cBucket q) c
  let new = if n == 0 then -1 else bucketFor cost w
  when (new /= old) $ do
    when (old >= 0) (sunlink q core c old)
    when (new >= 0) (slink q core c new)

slink :: Queues -> Int -> Int -> Int -> IO ()
slink q core c b = do
  h <- rd q core (wBucket0 + b)
  writePrimArray (cSPrev q) c (-1)
  writePrimArray (cSNext q) c (fromIntegral h)
  when (h >= 0) $ writePrimArray (cSPrev q) h (fromIntegral c)
  wr q core (wBucket0 + b) c
  writePrimArray (cBucket q) c (fromIntegral b)

sunlink :: Queues -> Int -> Int -> Int -> IO ()
sunlink q core c b = do
  p <- fromIntegral <$> readPrimArray (cSPrev q) c
  n <- fromIntegral <$> readPrimArray (cSNext q) c
  if p < 0 then wr q core (wBucket0 + b) n else writePrimArray (cSNext q) p (fromIntegral n)
  when (n >= 0) $ writePrimArray (cSPrev q) n (fromIntegral p)
  writePrimArray (cBucket q) c (-1)

------------------------------------------------------------------------------
-- Operations under the owner's lock

-- | Add to a core's backlog: the summed handler costs of the events
-- queued on it (not counting its running batch), in ns.
addBacklog :: Queues -> Int -> Int -> IO ()
addBacklog q core d = do
  b <- rd q core wBacklog
  wr q core wBacklog (b + d)
{-# INLINE addBacklog #-}

-- | A core's backlog, in ns; color queues only.
coreBacklog :: Queues -> Int -> IO Int
coreBacklog q core = rd q core wBacklog

-- | Queue an event of color @c@ on core @core@, its owner.
push :: Queues -> Int -> Int -> Ev -> IO ()
push q core c ev = do
  n <- readPrimArray (cCount q) c
  writePrimArray (cCount q) c (n + 1)
  e <- rd q core wEvents
  wr q core wEvents (e + 1)
  case queueLayout q of
    SingleList -> ringPush q core c ev
    ColorQueues -> do
      EvQ f b <- readArray (cEvents q) c
      writeArray (cEvents q) c (EvQ f (ev : b))
      w <- readPrimArray (cWork q) c
      writePrimArray (cWork q) c (w + evWeight ev)
      addBacklog q core (evCost ev)
      p <- readPrimArray (cPrio q) c
      linked <- readPrimArray (cLinked q) c
      if linked == 0
        then do
          writePrimArray (cPrio q) c (evPriority ev)
          linkColor q core c
        else when (evPriority ev > p) $ do
          -- Its priority rose: move it up.
          unlinkColor q core c
          writePrimArray (cPrio q) c (evPriority ev)
          linkColor q core c
      rebucket q core c
  refreshHint q core

-- | Take the next events to run on a core: up to the batch size of the
-- first color of its list (one event, for the single list), and mark that
-- color running. Returns the color and the events in order, or @-1@.
takeBatch :: Queues -> Int -> IO (Int, [Ev])
takeBatch q core = case queueLayout q of
  SingleList -> do
    r <- ringPop q core
    case r of
      Nothing -> return (-1, [])
      Just (c, ev) -> do
        n <- readPrimArray (cCount q) c
        writePrimArray (cCount q) c (n - 1)
        e <- rd q core wEvents
        wr q core wEvents (e - 1)
        wr q core wRunning c
        refreshHint q core
        return (c, [ev])
  ColorQueues -> do
    c <- rd q core wHead
    if c < 0 then return (-1, []) else do
      n <- fromIntegral <$> readPrimArray (cCount q) c
      EvQ f b <- readArray (cEvents q) c
      let k = min n (qBatch q)
          (taken, f', b') = splitFront k f b
      writeArray (cEvents q) c (EvQ f' b')
      writePrimArray (cCount q) c (fromIntegral (n - k))
      w <- readPrimArray (cWork q) c
      writePrimArray (cWork q) c (if n == k then 0 else max 0 (w - foldr ((+) . evWeight) 0 taken))
      addBacklog q core (negate (foldr ((+) . evCost) 0 taken))
      e <- rd q core wEvents
      wr q core wEvents (e - k)
      when (n == k) $ unlinkColor q core c
      rebucket q core c
      wr q core wRunning c
      refreshHint q core
      return (c, taken)

-- | Take @k@ events (there are at least that many) from the queue's front,
-- and what is left, touching only the events taken.
splitFront :: Int -> [Ev] -> [Ev] -> ([Ev], [Ev], [Ev])
splitFront k f0 b0 = go k f0 b0 []
  where
    go 0 f b acc = (reverse acc, f, b)
    go n (e : f) b acc = go (n - 1) f b (e : acc)
    go n [] b acc = go n (reverse b) [] acc

-- | The batch of color @c@ is done: clear the running mark, send the color
-- to the back of its priority class if it has more events (so other colors
-- get their turn), or home if it has none (Note [Colors go home]).
finishBatch :: Queues -> Int -> Int -> IO ()
finishBatch q core c = do
  wr q core wRunning (-1)
  n <- readPrimArray (cCount q) c
  if n == 0
    then when (homeOf q c /= core) $
      writePrimArray (cOwner q) c (fromIntegral (homeOf q c))
    else when (queueLayout q == ColorQueues) $ do
      nxt <- readPrimArray (cNext q) c
      when (nxt >= 0) $ unlinkColor q core c >> linkColor q core c
  refreshHint q core

-- | Events queued on a core (not counting those running).
coreEvents :: Queues -> Int -> IO Int
coreEvents q core = rd q core wEvents

-- | Colors in a core's list (ColorQueues layout).
coreColors :: Queues -> Int -> IO Int
coreColors q core = rd q core wColors

-- | The color whose batch a core is running, or @-1@.
runningColor :: Queues -> Int -> IO Int
runningColor q core = rd q core wRunning

colorCount :: Queues -> Int -> IO Int
colorCount q c = fromIntegral <$> readPrimArray (cCount q) c

colorWork :: Queues -> Int -> IO Int
colorWork q c = readPrimArray (cWork q) c

-- | Whether a color is in its core's stealing queue.
colorIsWorthy :: Queues -> Int -> IO Bool
colorIsWorthy q c = (>= 0) <$> readPrimArray (cBucket q) c

------------------------------------------------------------------------------
-- Stealing

-- Note [Steal hints]
-- ~~~~~~~~~~~~~~~~~~
-- An idle thief looks at its victims again and again, and a look must not
-- cost the victim. The words a victim's owner writes on every post, batch
-- and finish (its lock, list heads, event count, running color) share
-- cache lines; a thief that read them would pull those lines away from the
-- owner between every two of its operations. So each core also keeps one
-- word, in a cache line of its own, saying whether it holds something a
-- thief could take; the owner rewrites it (a plain store, with its lock
-- held) at the end of each operation, only when the answer changed, and
-- thieves read nothing else before they commit to locking a victim. A
-- waker that must see a parked thief after storing a hint puts a full
-- barrier between the two (Note [Parking]). Queues of one core, and those
-- of a runtime that never steals ('withoutHints'), keep no hints: nobody
-- would read them.

-- | Whether a core has something a thief could take: a queued color other
-- than the running one (worthy, with time-left). A racy read of the
-- core's steal hint (Note [Steal hints]), used only to decide whether to
-- wake or visit a victim.
hasStealable :: Queues -> Int -> IO Bool
hasStealable q v = (/= 0) <$> readCounter (qHints q) (v * coreStride)
{-# INLINE hasStealable #-}

-- | The same queues, keeping no steal hints: for a runtime whose workers
-- never steal, so that its owners' operations pay nothing for them
-- ('hasStealable' then always says no).
withoutHints :: Queues -> Queues
withoutHints q = q { qHinted = False }

-- | Recompute a core's steal hint from its own words, with its lock held;
-- write it only if it changed.
refreshHint :: Queues -> Int -> IO ()
refreshHint q v = when (qHinted q) $ do
  now <- stealableNow q v
  let new = if now then 1 else 0
  old <- readCounter (qHints q) (v * coreStride)
  when (old /= new) $ storeCounter (qHints q) (v * coreStride) new

-- | What the steal hint says, from the core's own words: a color a thief
-- could take, and, with a steal margin, at least that much backlog
-- (Note [When to steal] in "Weft.Color.Internal.Runtime").
stealableNow :: Queues -> Int -> IO Bool
stealableNow q v = do
  let margin = qMargin q
  enough <- if margin <= 0 then return True else (>= margin) <$> rd q v wBacklog
  if enough then takeable q v else return False

-- | Whether a core holds a color a thief could take under its layout.
takeable :: Queues -> Int -> IO Bool
takeable q v
  | qTimeLeft q = do
      r <- rd q v wRunning
      -- The buckets in turn, stopping at the first that has one.
      let usable :: Int -> IO Bool
          usable b
            | b > 2 = return False
            | otherwise = do
                h <- rd q v (wBucket0 + b)
                ok <- if h < 0 then return False
                      else if h /= r then return True
                      else (>= 0) <$> readPrimArray (cSNext q) h
                if ok then return True else usable (b + 1)
      usable 0
  | queueLayout q == SingleList = (>= 2) <$> rd q v wEvents
  | otherwise = do
      n <- rd q v wColors
      r <- rd q v wRunning
      h <- rd q v wHead
      return (n >= 2 || (n == 1 && h /= r))

-- | Libasync-smp's choice (§2.2): scan the victim's event list for the
-- first color that is not running and holds fewer than half its events.
chooseLibasync :: Queues -> Int -> IO Int
chooseLibasync q v = do
  Ring _ cols h size <- readIORef (indexArray (qRings q) v)
  running <- rd q v wRunning
  cap <- getSizeofMutablePrimArray cols
  let go :: Int -> IO Int
      go i
        | i >= size = return (-1)
        | otherwise = do
            c <- fromIntegral <$> readPrimArray cols ((h + i) `mod` cap)
            n <- readPrimArray (cCount q) c
            if c /= running && 2 * fromIntegral n < size then return c else go (i + 1)
  go 0

-- | The same decision on color queues (MelyBase): the first color of the
-- victim's list that is not running and holds fewer than half its events.
chooseFirst :: Queues -> Int -> IO Int
chooseFirst q v = do
  total <- rd q v wEvents
  running <- rd q v wRunning
  let go :: Int -> IO Int
      go c
        | c < 0 = return (-1)
        | otherwise = do
            n <- readPrimArray (cCount q) c
            if c /= running && 2 * fromIntegral n < total
              then return c
              else readPrimArray (cNext q) c >>= go . fromIntegral
  rd q v wHead >>= go

-- | Time-left's choice: a color from the victim's fullest stealing bucket
-- whose work exceeds the steal cost, never the running one.
chooseWorthy :: Queues -> Int -> IO Int
chooseWorthy q v = do
  running <- rd q v wRunning
  cost <- stealCost q
  let inBucket :: Int -> IO Int
      inBucket c
        | c < 0 = return (-1)
        | otherwise = do
            w <- readPrimArray (cWork q) c
            if c /= running && w > cost
              then return c
              else readPrimArray (cSNext q) c >>= inBucket . fromIntegral
      go b
        | b < 0 = return (-1)
        | otherwise = do
            c <- rd q v (wBucket0 + b) >>= inBucket
            if c >= 0 then return c else go (b - 1)
  go (2 :: Int)

-- | Move every queued event of color @c@ from core @v@ to core @t@, with
-- both locks held, and make @t@ its owner. Returns the number of events
-- and their work (ns).
migrate :: Queues -> Int -> Int -> Int -> IO (Int, Int)
migrate q v t c = do
  n <- fromIntegral <$> readPrimArray (cCount q) c
  ev <- rd q v wEvents
  wr q v wEvents (ev - n)
  et <- rd q t wEvents
  wr q t wEvents (et + n)
  writePrimArray (cOwner q) c (fromIntegral t)
  case queueLayout q of
    SingleList -> do
      moved <- ringExtract q v c
      mapM_ (ringPush q t c) moved
      refreshHint q v
      refreshHint q t
      -- The single list keeps no per-color work; the moved events carry
      -- theirs, so the stolen work is still reported.
      return (n, sum (map evWeight moved))
    ColorQueues -> do
      w <- readPrimArray (cWork q) c
      b <- fromIntegral <$> readPrimArray (cBucket q) c
      when (b >= 0) (sunlink q v c b)
      EvQ f r <- readArray (cEvents q) c
      let cost = foldr ((+) . evCost) 0 f + foldr ((+) . evCost) 0 r
      addBacklog q v (negate cost)
      addBacklog q t cost
      unlinkColor q v c
      linkColor q t c
      rebucket q t c
      refreshHint q v
      refreshHint q t
      return (n, w)

------------------------------------------------------------------------------
-- The single list

ringPush :: Queues -> Int -> Int -> Ev -> IO ()
ringPush q core c ev = do
  let ref = indexArray (qRings q) core
  Ring evs cols h size <- readIORef ref
  let cap = sizeofMutableArray evs
  Ring evs' cols' h' _ <-
    if size < cap then return (Ring evs cols h size) else do
      Ring ne nc _ _ <- newRing (2 * cap)
      forM_ [0 .. size - 1] $ \i -> do
        readArray evs ((h + i) `mod` cap) >>= writeArray ne i
        readPrimArray cols ((h + i) `mod` cap) >>= writePrimArray nc i
      return (Ring ne nc 0 size)
  let cap' = sizeofMutableArray evs'
      i = (h' + size) `mod` cap'
  writeArray evs' i ev
  writePrimArray cols' i (fromIntegral c)
  writeIORef ref (Ring evs' cols' h' (size + 1))

ringPop :: Queues -> Int -> IO (Maybe (Int, Ev))
ringPop q core = do
  let ref = indexArray (qRings q) core
  Ring evs cols h size <- readIORef ref
  if size == 0 then return Nothing else do
    ev <- readArray evs h
    c <- readPrimArray cols h
    writeArray evs h noEv
    writeIORef ref (Ring evs cols ((h + 1) `mod` sizeofMutableArray evs) (size - 1))
    return (Just (fromIntegral c, ev))

-- | Remove every event of color @c@ from a core's list, keeping the order
-- of the rest: one pass over the whole list, as Libasync-smp's
-- @construct_event_set@ does.
ringExtract :: Queues -> Int -> Int -> IO [Ev]
ringExtract q core c = do
  let ref = indexArray (qRings q) core
  Ring evs cols h size <- readIORef ref
  let cap = sizeofMutableArray evs
      go :: Int -> Int -> [Ev] -> IO (Int, [Ev])
      go !i !kept acc
        | i >= size = return (kept, reverse acc)
        | otherwise = do
            let src = (h + i) `mod` cap
            col <- readPrimArray cols src
            ev <- readArray evs src
            if fromIntegral col == c
              then go (i + 1) kept (ev : acc)
              else do
                let dst = (h + kept) `mod` cap
                writeArray evs dst ev
                writePrimArray cols dst col
                go (i + 1) (kept + 1) acc
  (kept, taken) <- go 0 0 []
  forM_ [kept .. size - 1] $ \i -> writeArray evs ((h + i) `mod` cap) noEv
  writeIORef ref (Ring evs cols h kept)
  return taken

------------------------------------------------------------------------------
-- Steal cost and parking

-- | The current estimate of a steal's cost, in ns.
stealCost :: Queues -> IO Int
stealCost q = readCounter (qGlobal q) gStealCost
{-# INLINE stealCost #-}

setStealCost :: Queues -> Int -> IO ()
setStealCost q = writeCounter (qGlobal q) gStealCost

-- | The same queues, whose steal hints say no while a core's backlog
-- (ns) is below the margin; 0 (the default) for none (Note [When to
-- steal] in "Weft.Color.Internal.Runtime"). Color queues only; before use.
withStealMargin :: Int -> Queues -> Queues
withStealMargin m q = q { qMargin = max 0 m }

-- | Whether a core's worker is parked (or about to park).
parkedFlag :: Queues -> Int -> IO Bool
parkedFlag q core = (/= 0) <$> rd q core wParked
{-# INLINE parkedFlag #-}

-- | Set or clear a core's parked flag (a full barrier).
setParked :: Queues -> Int -> Bool -> IO ()
setParked q core b = writeCounter (qCoreWords q) (cw q core wParked) (if b then 1 else 0)
