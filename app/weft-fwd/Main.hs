{-# LANGUAGE BangPatterns #-}
-- | weft-fwd DEV1 DEV2 [--batch N] [--seconds S]: ixy-fwd on weft.
--
-- Forwards everything DEV1 receives out of DEV2 and back, touching one
-- byte of each packet (the second, as ixy-fwd does) so that the data is
-- really read and written. Each direction is one thread pinned to a
-- capability: with @+RTS -N1@ both share one core, as ixy-fwd's single
-- loop does; with @-N2@ they run on two. Each receive queue follows the
-- hybrid rule of "Weft.Packet.Internal.Hybrid": it polls while busy and blocks in
-- weft's I/O manager while idle.
--
-- A transmit ring that comes back full gets time to drain: the direction
-- yields its capability and offers the rest again, and only once the ring
-- has taken no packet for 'txPatienceNanos' (1 ms) and 'txPatienceTries'
-- (64) tries are the rest freed and counted as drops. A device whose DMA engine shares the
-- capability (the ixgbe model) drains only while the forwarder yields, and
-- a burst the receive and transmit rings could hold between them is then
-- forwarded whole. Under real overload the wait pushes back onto the
-- receive ring, where the device counts what it cannot take.
--
-- Prints one line a second, @DEV1->DEV2 <Mpps> DEV2->DEV1 <Mpps>@, and at
-- the end @summary forwarded=N seconds=S dropped=D@.
module Main (main) where

import Control.Concurrent hiding (threadDelay)
import Control.Exception (finally, mask_)
import Control.Monad
import Data.IORef
import Data.Primitive.PrimArray
import Data.Word (Word64, Word8)
import Foreign.Storable
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Exts (RealWorld)
import System.Environment (getArgs)
import System.IO
import Text.Printf (printf)

import Example.Packet
import Weft (threadDelay)
import Weft.Packet

usage :: String
usage = "usage: weft-fwd DEV1 DEV2 [--batch N] [--seconds S]\n\
        \  DEV is afpacket:IFNAME[:QUEUES] or model:N[:options]\n\
        \  --batch N    packets per receive call, 1..256 (default 32)\n\
        \  --seconds S  stop after S seconds (default: run until SIGINT/SIGTERM)"

main :: IO ()
main = do
  hSetBuffering stdout LineBuffering
  args <- getArgs
  opts@(pos, _) <- either (\e -> die' (e ++ "\n" ++ usage)) pure (parseOptions [] args)
  (name1, name2) <- case pos of
    [a, b] -> pure (a, b)
    _ -> die' usage
  batch <- optionInt opts "batch" 32 (1, 256)
  seconds <- optionDouble opts "seconds" 0
  dev1 <- openNamedDevice name1
  dev2 <- openNamedDevice name2
  stop <- newStopFlag
  stopAfter stop seconds
  caps <- getNumCapabilities
  let shared = caps == 1
  c12 <- newCounters
  c21 <- newCounters
  d1 <- newEmptyMVar
  d2 <- newEmptyMVar
  start <- getMonotonicTimeNSec
  h12 <- newHybrid defaultHybridConfig
  h21 <- newHybrid defaultHybridConfig
  let yieldTo other = if shared then isPolling other else pure False
  t1 <- forkOn 0 (mask_ (forward stop (yieldTo h21) h12 batch dev1 dev2 c12) `finally` putMVar d1 ())
  t2 <- forkOn (1 `mod` caps) (mask_ (forward stop (yieldTo h12) h21 batch dev2 dev1 c21)
                               `finally` putMVar d2 ())
  let report prev12 prev21 prevT = do
        threadDelay 1000000
        s <- readIORef stop
        n12 <- readCounter c12 0
        n21 <- readCounter c21 0
        t <- getMonotonicTimeNSec
        let dt = fromIntegral (t - prevT) / 1e9 :: Double
            mpps n p = fromIntegral (n - p) / dt / 1e6 :: Double
        unless s $ do
          progress (printf "%s->%s %.3f Mpps  %s->%s %.3f Mpps" name1 name2 (mpps n12 prev12)
                           name2 name1 (mpps n21 prev21))
          report n12 n21 t
  report 0 0 start
  -- A busy direction sees the flag; an idle one is blocked in its wait,
  -- the only point where its masked loop can be interrupted, and where it
  -- holds no buffers.
  mapM_ (forkIO . killThread) [t1, t2]
  takeMVar d1
  takeMVar d2
  end <- getMonotonicTimeNSec
  forwarded <- (+) <$> readCounter c12 0 <*> readCounter c21 0
  dropped <- (+) <$> readCounter c12 1 <*> readCounter c21 1
  printf "summary forwarded=%d seconds=%.3f dropped=%d\n" forwarded
         (fromIntegral (end - start) / 1e9 :: Double) dropped
  closeDevice dev1
  closeDevice dev2

-- | Per direction: packets forwarded, packets dropped because the
-- transmit ring stayed full (see 'transmit'). Written by the direction's thread only.
type Counters = MutablePrimArray RealWorld Int

newCounters :: IO Counters
newCounters = do
  c <- newPrimArray 2
  setPrimArray c 0 2 0
  pure c

readCounter :: Counters -> Int -> IO Int
readCounter = readPrimArray

-- | One direction: receive on queue 0 of @rx@, send on queue 0 of @tx@.
-- Run masked: it is interruptible only while blocked waiting for packets.
-- When both directions share a capability and the other one is busy too
-- (polling), this one yields after each batch, so that neither is starved
-- until the next context switch (20 ms, several rings' worth of packets).
forward :: IORef Bool -> IO Bool -> Hybrid -> Int -> Device -> Device -> Counters -> IO ()
forward stop otherBusy hybrid batch rx tx counters = do
  bufs <- newBufferArray batch
  let pool = rxPool rx 0
      loop = do
        k <- receive hybrid rx 0 bufs batch
        when (k > 0) $ do
          touch bufs k
          rest <- transmit tx bufs k
          when (rest > 0) $ freeBatch pool bufs 0 rest
          bump 0 (k - rest)
          bump 1 rest
          busy <- otherBusy
          when busy yield
        s <- readIORef stop
        unless s loop
  loop
 where
  bump :: Int -> Int -> IO ()
  bump i n = readPrimArray counters i >>= writePrimArray counters i . (+ n)

-- | How long, and for how many tries, a full transmit ring may take no
-- packet before the rest of a batch is dropped. Both must pass: a process
-- the kernel deschedules mid-wait has not given the ring its time.
txPatienceNanos :: Word64
txPatienceNanos = 1000000

txPatienceTries :: Int
txPatienceTries = 64

-- | @transmit tx bufs k@ hands bufs[0..k) to queue 0 of @tx@ and returns
-- how many it did not take; those are left at bufs[0..rest). While the
-- ring is full it yields and tries again, until the ring has taken nothing
-- for 'txPatienceNanos' and 'txPatienceTries'.
transmit :: Device -> BufferArray -> Int -> IO Int
transmit tx bufs = go 0 0
 where
  -- since: when the ring last took something or first refused (0 before
  -- the first refusal); tries: refusals since then
  go :: Word64 -> Int -> Int -> IO Int
  go !since !tries k = do
    sent <- txBatch tx 0 bufs k
    let rest = k - sent
    if rest == 0 then pure 0 else do
      when (sent > 0) $ forM_ [0 .. rest - 1] $ \i -> readBuffer bufs (sent + i) >>= writeBuffer bufs i
      now <- getMonotonicTimeNSec
      let (since', tries') = if sent > 0 || since == 0 then (now, 0) else (since, tries + 1)
      if tries' >= txPatienceTries && now - since' >= txPatienceNanos
        then pure rest
        else yield >> go since' tries' rest

-- | Increments the second byte of each packet.
touch :: BufferArray -> Int -> IO ()
touch bufs k = go 0
 where
  go !i
    | i >= k = pure ()
    | otherwise = do
        b <- readBuffer bufs i
        let p = bufferData b
        x <- peekByteOff p 1 :: IO Word8
        pokeByteOff p 1 (x + 1)
        go (i + 1)
