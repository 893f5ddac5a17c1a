{-# LANGUAGE ScopedTypeVariables #-}
-- | A hierarchical timing wheel: the timer queue of one capability's manager.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Time is counted in ticks of 'tickNs' nanoseconds (16.384 µs). The wheel
-- has 'levels' levels of 64 slots; a slot of level @l@ spans @64^l@ ticks,
-- so nine levels cover 2^54 ticks (about 9,000 years). Timers live in a
-- slab of unboxed arrays (deadline, generation, links, home slot) plus one
-- boxed array of payloads, so a pending timer is about 40 bytes and costs
-- the garbage collector one pointer. A key is a slab index and the
-- generation of that slab entry; freeing an entry bumps its generation, so
-- a stale key never touches the entry's next tenant.
--
-- Register, cancel and reschedule are O(1): link or unlink one entry and
-- flip one bit of a level's occupancy bitmap. Expiry walks only occupied
-- slots, found with count-trailing-zeros on the bitmaps.
--
-- This module is not synchronised: callers hold 'withLock' (the manager
-- does), and the tests drive it directly with a simulated clock.
--
-- Note [Wheel levels]
-- ~~~~~~~~~~~~~~~~~~~
-- The wheel's clock is @elapsed@, the tick up to which it has expired. A
-- timer due at tick @t >= elapsed@ goes to the level of the highest bit in
-- which @t@ and @elapsed@ differ (divided by 6), in the slot that @t@'s six
-- bits of that level name. So every timer of level @l > 0@ lies beyond the
-- current level-@l@ slot, and every timer of level 0 lies in the current
-- 64-tick span; the earliest occupied slot of the lowest occupied level is
-- the next expiry. When @elapsed@ reaches a slot of level @l > 0@, its
-- timers cascade: each is placed again, relative to the new @elapsed@, into
-- a lower level. Only level-0 slots fire, so timers fire in tick order.
-- Moving @elapsed@ to any time not past the next expiry keeps every timer's
-- level valid, because no occupied slot starts at or before it.
--
-- Note [Lazy rescheduling]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- Moving a timer later (the "tickle" of a connection's idle timeout) only
-- writes the new deadline: the entry stays in its old slot. When that slot
-- comes due the entry is placed again, by its real deadline, instead of
-- firing. So a tickle is two array writes, and a timer that is tickled a
-- thousand times before its slot comes due is moved once. Moving a timer
-- earlier relinks it at once.
module Weft.Timer.Internal.Wheel
  ( Wheel
  , new
    -- * Time
  , tickNs
  , deadlineTick
  , nowTick
  , tickStartNs
  , noExpiry
    -- * Operations (hold 'withLock')
  , withLock
  , insert
  , cancel
  , reschedule
  , expire
  , nextExpiry
  , drain
    -- * Lock-free reads
  , size
  , earliest
  , planned
  , setPlanned
  ) where

import Control.Exception (mask_)
import Control.Monad (when)
import Control.Concurrent (yield)
import Data.Bits hiding (bit, shift)
import Data.IORef
import Data.Int (Int32, Int16)
import Data.Primitive.Array
import Data.Primitive.PrimArray
import Data.Word (Word64)
import GHC.Exts (RealWorld)

import Weft.Internal.Counters

-- | The nanoseconds in one tick: 2^14, 16.384 µs.
tickNs :: Word64
tickNs = 1 `shiftL` tickShift

tickShift :: Int
tickShift = 14

-- Levels of 64 slots each.
levels :: Int
levels = 9

-- | The largest tick a deadline may have (2^54 - 1).
maxTick :: Int
maxTick = (1 `shiftL` (6 * levels)) - 1

-- | 'earliest' and 'nextExpiry' when no timer is pending.
noExpiry :: Int
noExpiry = maxBound

-- | The tick at which a deadline (monotonic nanoseconds) may fire: rounded
-- up, so that a timer never fires before its deadline.
deadlineTick :: Word64 -> Int
deadlineTick ns
  | ns > maxBound - tickNs = maxTick
  | otherwise = min maxTick (fromIntegral ((ns + tickNs - 1) `shiftR` tickShift))
{-# INLINE deadlineTick #-}

-- | The tick a monotonic time falls in: rounded down, so every timer due at
-- or before it has reached its deadline.
nowTick :: Word64 -> Int
nowTick ns = fromIntegral (ns `shiftR` tickShift)
{-# INLINE nowTick #-}

-- | The monotonic nanoseconds at which a tick starts.
tickStartNs :: Int -> Word64
tickStartNs t = fromIntegral t `shiftL` tickShift
{-# INLINE tickStartNs #-}

-- The slab: one entry per timer, free entries chained through 'sNext'.
data Slab a = Slab
  { sWhen    :: !(MutablePrimArray RealWorld Int)   -- ^ deadline tick
  , sGen     :: !(MutablePrimArray RealWorld Int)   -- ^ bumped when freed
  , sNext    :: !(MutablePrimArray RealWorld Int32) -- ^ next in slot or free list, -1 ends
  , sPrev    :: !(MutablePrimArray RealWorld Int32) -- ^ previous in slot, -1 at the head
  , sHome    :: !(MutablePrimArray RealWorld Int16) -- ^ slot index, or -1 when free
  , sPayload :: !(MutableArray RealWorld a)
  , sSize    :: {-# UNPACK #-} !Int
  }

-- | One capability's timers, each carrying a payload of type @a@.
data Wheel a = Wheel
  { wSlab     :: !(IORef (Slab a))
  , wHeads    :: !(MutablePrimArray RealWorld Int32)  -- ^ levels × 64 list heads
  , wOccupied :: !(MutablePrimArray RealWorld Word64) -- ^ a bitmap per level
  , wMeta     :: !Counters
  }

-- Meta counters. The lock word sits apart from the fields the dispatcher
-- reads unlocked, and each group on its own cache line.
mLock, mElapsed, mLive, mFree, mEarliest, mPlanned, nMeta :: Int
mLock = 0; mElapsed = 8; mFree = 9; mLive = 16; mEarliest = 17; mPlanned = 18; nMeta = 24

-- | An empty wheel whose clock starts at the given tick.
new :: Int -> IO (Wheel a)
new start = do
  slab <- newSlab 64
  heads <- newPrimArray (levels * 64)
  setPrimArray heads 0 (levels * 64) (-1)
  occ <- newPrimArray levels
  setPrimArray occ 0 levels 0
  meta <- newCounters nMeta
  writeCounter meta mElapsed start
  writeCounter meta mFree 0
  writeCounter meta mEarliest noExpiry
  ref <- newIORef slab
  return (Wheel ref heads occ meta)

newSlab :: Int -> IO (Slab a)
newSlab n = do
  whens <- newPrimArray n
  gens <- newPrimArray n
  setPrimArray gens 0 n 0
  nexts <- newPrimArray n
  prevs <- newPrimArray n
  homes <- newPrimArray n
  setPrimArray homes 0 n (-1)
  payload <- newArray n noPayload
  let slab = Slab whens gens nexts prevs homes payload n
  chainFree slab 0 n
  return slab

-- Chain entries [from, to) into a free list ending in -1.
chainFree :: Slab a -> Int -> Int -> IO ()
chainFree slab from to = go from
  where
    go :: Int -> IO ()
    go i | i >= to = return ()
         | otherwise = do
             writePrimArray (sNext slab) i (if i + 1 < to then fromIntegral (i + 1) else -1)
             go (i + 1)

noPayload :: a
noPayload = errorWithoutStackTrace "weft: read of a free timer entry"
{-# NOINLINE noPayload #-}

------------------------------------------------------------------------------
-- The lock

-- The fields other than the lock word are written with plain stores: only
-- the lock holder writes them, and releasing the lock is a full barrier.
-- The few read without the lock ('size', 'earliest', 'planned') are single
-- words, so a reader sees the old value or the new one.

-- | Run an action holding the wheel's lock, with async exceptions masked.
-- The action must not block, and must not throw: the operations below
-- throw nothing (short of heap exhaustion, which ends the program). A thread that finds the lock taken yields:
-- the holder may be a thread of the same capability, preempted inside.
withLock :: Wheel a -> IO b -> IO b
withLock w act = mask_ $ do
  acquire
  r <- act
  writeCounter meta mLock 0
  return r
  where
    meta = wMeta w
    acquire = do
      old <- casCounter meta mLock 0 1
      when (old /= 0) (yield >> acquire)
{-# INLINE withLock #-}

------------------------------------------------------------------------------
-- Operations

-- | Add a timer due at the given tick, and pass its slab index and
-- generation, which together name it, to the continuation (so that the
-- caller builds its key without an intermediate tuple).
insert :: Wheel a -> Int -> a -> (Int -> Int -> r) -> IO r
insert w t payload key = do
  free <- readCounter (wMeta w) mFree
  slab <- if free >= 0 then readIORef (wSlab w) else grow w
  i <- readCounter (wMeta w) mFree
  next <- readPrimArray (sNext slab) i
  storeCounter (wMeta w) mFree (fromIntegral next)
  let t' = min maxTick t
  writePrimArray (sWhen slab) i t'
  writeArray (sPayload slab) i payload
  link w slab i t'
  bumpCounter (wMeta w) mLive 1
  e <- readCounter (wMeta w) mEarliest
  when (t' < e) $ storeCounter (wMeta w) mEarliest t'
  g <- readPrimArray (sGen slab) i
  return $! key i g
{-# INLINE insert #-}

-- Double the slab; the free list was empty. (Indices are 32-bit: 2^31
-- pending timers on one capability would need some 70 GB first.)
grow :: Wheel a -> IO (Slab a)
grow w = do
  old <- readIORef (wSlab w)
  let n = sSize old
      n' = 2 * n
  slab <- newSlab n'
  copyMutablePrimArray (sWhen slab) 0 (sWhen old) 0 n
  copyMutablePrimArray (sGen slab) 0 (sGen old) 0 n
  copyMutablePrimArray (sNext slab) 0 (sNext old) 0 n
  copyMutablePrimArray (sPrev slab) 0 (sPrev old) 0 n
  copyMutablePrimArray (sHome slab) 0 (sHome old) 0 n
  copyMutableArray (sPayload slab) 0 (sPayload old) 0 n
  chainFree slab n n'
  storeCounter (wMeta w) mFree n
  writeIORef (wSlab w) slab
  return slab

-- Put entry @i@ into the slot for tick @t@ (Note [Wheel levels]). A tick
-- already passed goes to the current slot, which fires next.
link :: Wheel a -> Slab a -> Int -> Int -> IO ()
link w slab i t = do
  elapsed <- readCounter (wMeta w) mElapsed
  let t' = max t elapsed
      lvl = levelFor elapsed t'
      bit = (t' `unsafeShiftR` (6 * lvl)) .&. 63
      home = lvl * 64 + bit
  h <- readPrimArray (wHeads w) home
  writePrimArray (sNext slab) i h
  writePrimArray (sPrev slab) i (-1)
  when (h >= 0) $ writePrimArray (sPrev slab) (fromIntegral h) (fromIntegral i)
  writePrimArray (wHeads w) home (fromIntegral i)
  writePrimArray (sHome slab) i (fromIntegral home)
  occ <- readPrimArray (wOccupied w) lvl
  writePrimArray (wOccupied w) lvl (occ .|. (1 `unsafeShiftL` bit))

levelFor :: Int -> Int -> Int
levelFor elapsed t =
  let significant = 63 - countLeadingZeros ((elapsed `xor` t) .|. 63)
  in significant `quot` 6
{-# INLINE levelFor #-}

-- Take entry @i@ out of its slot.
unlink :: Wheel a -> Slab a -> Int -> IO ()
unlink w slab i = do
  home <- fromIntegral <$> readPrimArray (sHome slab) i
  next <- readPrimArray (sNext slab) i
  prev <- readPrimArray (sPrev slab) i
  if prev >= 0
    then writePrimArray (sNext slab) (fromIntegral prev) next
    else writePrimArray (wHeads w) home next
  when (next >= 0) $ writePrimArray (sPrev slab) (fromIntegral next) prev
  when (prev < 0 && next < 0) $ do
    let lvl = home `quot` 64
    occ <- readPrimArray (wOccupied w) lvl
    writePrimArray (wOccupied w) lvl (occ .&. complement (1 `unsafeShiftL` (home .&. 63)))

-- Return entry @i@ (already unlinked) to the free list.
release :: Wheel a -> Slab a -> Int -> IO ()
release w slab i = do
  g <- readPrimArray (sGen slab) i
  writePrimArray (sGen slab) i (g + 1)
  writePrimArray (sHome slab) i (-1)
  writeArray (sPayload slab) i noPayload
  free <- readCounter (wMeta w) mFree
  writePrimArray (sNext slab) i (fromIntegral free)
  storeCounter (wMeta w) mFree i
  bumpCounter (wMeta w) mLive (-1)

-- The slab, if the key names a pending timer.
live :: Wheel a -> Int -> Int -> IO (Maybe (Slab a))
live w i g = do
  slab <- readIORef (wSlab w)
  if i < 0 || i >= sSize slab then return Nothing else do
    g' <- readPrimArray (sGen slab) i
    home <- readPrimArray (sHome slab) i
    return (if g' == g && home >= 0 then Just slab else Nothing)
{-# INLINE live #-}

-- | Remove a pending timer. 'True' if it was pending; 'False' if it already
-- fired or was cancelled (its payload is then not touched).
cancel :: Wheel a -> Int -> Int -> IO Bool
cancel w i g = do
  found <- live w i g
  case found of
    Nothing -> return False
    Just slab -> do
      unlink w slab i
      release w slab i
      return True

-- | Move a pending timer to a new deadline tick (Note [Lazy rescheduling]).
-- 'False' if the key names no pending timer.
reschedule :: Wheel a -> Int -> Int -> Int -> IO Bool
reschedule w i g t = do
  found <- live w i g
  case found of
    Nothing -> return False
    Just slab -> do
      let t' = min maxTick t
      old <- readPrimArray (sWhen slab) i
      writePrimArray (sWhen slab) i t'
      when (t' < old) $ do
        unlink w slab i
        link w slab i t'
        e <- readCounter (wMeta w) mEarliest
        when (t' < e) $ storeCounter (wMeta w) mEarliest t'
      return True

-- | The tick of the earliest occupied slot: the next time 'expire' has work
-- (a cascade or a firing). 'noExpiry' if no timer is pending.
nextExpiry :: Wheel a -> IO Int
nextExpiry w = do
  elapsed <- readCounter (wMeta w) mElapsed
  r <- findSlot w elapsed 0
  return (case r of Slot _ _ t -> t; NoSlot -> noExpiry)

data Found = Slot {-# UNPACK #-} !Int {-# UNPACK #-} !Int {-# UNPACK #-} !Int | NoSlot

-- The earliest occupied slot at or above a level: its level, index and
-- starting tick.
findSlot :: Wheel a -> Int -> Int -> IO Found
findSlot w elapsed = go
  where
    go :: Int -> IO Found
    go lvl
      | lvl >= levels = return NoSlot
      | otherwise = do
          occ <- readPrimArray (wOccupied w) lvl
          if occ == 0 then go (lvl + 1) else do
            let shift = 6 * lvl
                pos = (elapsed `unsafeShiftR` shift) .&. 63
                -- Rotated, so that no slot can be overlooked even if one
                -- lay behind the clock (which Note [Wheel levels] rules out).
                bit = (pos + countTrailingZeros (occ `rotateR` pos)) .&. 63
                span' = 1 `unsafeShiftL` (shift + 6)
                base = elapsed .&. complement (span' - 1)
                start = base + (bit `unsafeShiftL` shift) + (if bit < pos then span' else 0)
            return (Slot lvl bit start)

-- | Advance the wheel's clock to the given tick and return the payloads of
-- the timers due by then, in deadline order (timers due in the same tick in
-- no particular order). They are no longer pending.
expire :: forall a. Wheel a -> Int -> IO [a]
expire w now = go []
  where
    meta = wMeta w
    go :: [a] -> IO [a]
    go acc = do
      elapsed <- readCounter meta mElapsed
      r <- findSlot w elapsed 0
      case r of
        Slot lvl bit start | start <= now -> do
          storeCounter meta mElapsed (max elapsed start)
          let home = lvl * 64 + bit
          first <- readPrimArray (wHeads w) home
          writePrimArray (wHeads w) home (-1)
          occ <- readPrimArray (wOccupied w) lvl
          writePrimArray (wOccupied w) lvl (occ .&. complement (1 `unsafeShiftL` bit))
          slab <- readIORef (wSlab w)
          acc' <- walk slab lvl start (fromIntegral first) acc
          go acc'
        _ -> do
          when (now > elapsed) $ storeCounter meta mElapsed now
          next <- nextExpiry w
          storeCounter meta mEarliest next
          return (reverse acc)
    -- Level 0 fires, unless the deadline moved later (then it is placed
    -- again, like the higher levels' timers, which cascade): a timer fires
    -- only in the slot of its own tick, so timers fire in tick order.
    walk :: Slab a -> Int -> Int -> Int -> [a] -> IO [a]
    walk slab lvl start i acc
      | i < 0 = return acc
      | otherwise = do
          next <- fromIntegral <$> readPrimArray (sNext slab) i
          t <- readPrimArray (sWhen slab) i
          if lvl == 0 && t <= start
            then do
              p <- readArray (sPayload slab) i
              release w slab i
              walk slab lvl start next (p : acc)
            else do
              link w slab i t
              walk slab lvl start next acc

-- | Remove every pending timer and return their payloads (at shutdown).
drain :: forall a. Wheel a -> IO [a]
drain w = do
  slab <- readIORef (wSlab w)
  let go :: Int -> [a] -> IO [a]
      go i acc
        | i < 0 = return acc
        | otherwise = do
            home <- readPrimArray (sHome slab) i
            if home < 0 then go (i - 1) acc else do
              p <- readArray (sPayload slab) i
              unlink w slab i
              release w slab i
              go (i - 1) (p : acc)
  ps <- go (sSize slab - 1) []
  writeCounter (wMeta w) mEarliest noExpiry
  return ps

------------------------------------------------------------------------------
-- Reads without the lock

-- | Timers pending now.
size :: Wheel a -> IO Int
size w = readCounter (wMeta w) mLive

-- | A tick at or before the next expiry ('noExpiry' if none is pending):
-- until the clock reaches it, 'expire' has nothing to do.
earliest :: Wheel a -> IO Int
earliest w = readCounter (wMeta w) mEarliest
{-# INLINE earliest #-}

-- | The tick the dispatcher sleeps until, as it last set it (0 while it
-- does not sleep). Registering a timer due before it must wake the
-- dispatcher.
planned :: Wheel a -> IO Int
planned w = readCounter (wMeta w) mPlanned
{-# INLINE planned #-}

-- | Set the tick the dispatcher sleeps until.
setPlanned :: Wheel a -> Int -> IO ()
setPlanned w = writeCounter (wMeta w) mPlanned
{-# INLINE setPlanned #-}
