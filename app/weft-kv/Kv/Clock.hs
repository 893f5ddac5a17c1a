{-# LANGUAGE BangPatterns #-}
-- | The clocks a batch of weft-kv's operations runs at: the monotonic
-- one, which expiry deadlines are kept on, and the wall clock, which
-- clients give absolute times in (Note [The wall clock]).
module Kv.Clock
  ( Now (..)
  , readNow
  , nowWallMicros
  , timerHorizon
  , timerDelay
  ) where

import Data.IORef
import Data.Time.Clock.System (SystemTime (..), getSystemTime)
import GHC.Clock (getMonotonicTimeNSec)
import System.IO.Unsafe (unsafePerformIO)

-- | The time a batch of operations runs at, in milliseconds (redis's
-- unit for expiry): the monotonic clock, which deadlines are kept on,
-- and the wall clock, which absolute times (EXPIREAT, SET ... PXAT) and
-- redis's overflow checks are given in (Note [The wall clock]).
data Now = Now
  { nowMono :: !Int  -- ^ monotonic clock, ms
  , nowWall :: !Int  -- ^ wall clock, ms since the epoch
  , nowSeed :: !Int  -- ^ monotonic clock, ns: a seed for random choices
  }

-- Note [The wall clock]
-- ~~~~~~~~~~~~~~~~~~~~~
-- A deadline is kept on the monotonic clock, and a time given on the wall
-- clock (EXPIREAT, PXAT) is moved onto it by the difference of the two
-- clocks; EXPIRETIME moves it back. For EXPIRETIME to answer exactly the
-- time given, that difference must be the same both times, so the wall
-- clock is read as the monotonic clock plus a whole number of
-- milliseconds that is kept ('wallOffset'): two separate readings, each
-- truncated to milliseconds, would differ by one now and then. The
-- offset is rounded up, and follows the system clock at once when that
-- gets ahead of it, so the wall clock read here is never behind the
-- system's: a client's PXAT a second from its now never leaves more than
-- a second to live. It follows the system clock back when that falls a
-- millisecond behind (the clock was set, or ran slow).

readNow :: IO Now
readNow = do
  mono <- getMonotonicTimeNSec
  -- The wall clock after the monotonic one: the difference, if anything,
  -- ahead of the true one.
  MkSystemTime secs nanos <- getSystemTime
  let !monoNs = fromIntegral mono :: Int
      !fresh = fromIntegral secs * 1000000000 + fromIntegral nanos - monoNs
  off <- readIORef wallOffset
  off' <- if off /= minBound && fresh <= off && fresh >= off - 1000000 then return off else do
    writeIORef wallOffset fresh
    return fresh
  let !monoMs = monoNs `quot` 1000000
  return (Now monoMs (monoMs + (off' + 999999) `div` 1000000) monoNs)

-- | The wall clock less the monotonic one, in nanoseconds, as kept (Note
-- [The wall clock]); 'minBound' before the first reading. Read and
-- written from every core: each writes what it read from the clocks, so
-- any value it holds is one of theirs.
{-# NOINLINE wallOffset #-}
wallOffset :: IORef Int
wallOffset = unsafePerformIO (newIORef minBound)

-- | The wall clock in microseconds since the epoch (TIME's reply).
nowWallMicros :: Now -> Int
nowWallMicros now = nowWall now * 1000 + (nowSeed now `quot` 1000) `rem` 1000

-- | The longest delay an expiry timer is armed for, in milliseconds
-- (about 12 days): redis accepts deadlines up to 2^63 ms away, far beyond
-- what a timer's microsecond 'Int' holds, so a far deadline arms a timer
-- for this long and 'Kv.Store.expireDue' arms the next one when it fires. (A key
-- read after its deadline is gone whatever its timer says: the timer
-- only reclaims the memory of keys nobody reads.)
timerHorizon :: Int
timerHorizon = 2 ^ (30 :: Int)

-- | The delay of the timer for a deadline, in microseconds.
timerDelay :: Int -> Int -> Int
timerDelay now deadline = min timerHorizon (deadline - now) * 1000
