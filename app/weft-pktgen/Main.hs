{-# LANGUAGE BangPatterns #-}
-- | weft-pktgen DEV [--rate R] [--size S] [--count N] [--seconds T] [--batch B]:
-- ixy-pktgen on weft.
--
-- Sends ixy's UDP test packet (see 'writeTestPacket') with a 32-bit
-- sequence number, from 0 up, in its last 4 bytes. Like ixy-pktgen it
-- fills every buffer of its pool with the template once, so that sending
-- a packet only writes its sequence number. A packet the device does not
-- take is sent again with the same number, so the numbers that leave are
-- exactly 0, 1, 2, ... with no gaps: a checker that sees a gap has found
-- a loss on the way.
--
-- @--rate@ is in packets per second (0, the default, sends as fast as the
-- device takes them). Pacing sleeps with weft's 'threadDelay' when ahead
-- of schedule and never bursts more than one batch to catch up.
--
-- Prints one line a second, @tx <Mpps>@, and at the end
-- @summary sent=N seconds=S@.
module Main (main) where

import Control.Concurrent hiding (threadDelay)
import Control.Exception (finally)
import Control.Monad
import Data.IORef
import Data.Word (Word32, Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.IO
import Text.Printf (printf)

import Example.Packet
import Weft (threadDelay)
import Weft.Packet

usage :: String
usage = "usage: weft-pktgen DEV [--rate PPS] [--size BYTES] [--count N] [--seconds S] [--batch N]\n\
        \  --rate PPS    packets per second, 0 = as fast as possible (default 0)\n\
        \  --size BYTES  frame size without CRC, 60..1514 (default 60)\n\
        \  --count N     stop after N packets (default: no limit)\n\
        \  --seconds S   stop after S seconds (default: no limit)\n\
        \  --batch N     packets per send call, 1..256 (default 64)"

main :: IO ()
main = do
  hSetBuffering stdout LineBuffering
  args <- getArgs
  opts@(pos, _) <- either (\e -> die' (e ++ "\n" ++ usage)) pure (parseOptions [] args)
  name <- case pos of
    [a] -> pure a
    _ -> die' usage
  rate <- optionDouble opts "rate" 0
  size <- optionInt opts "size" minFrameLength (minFrameLength, 1514)
  count <- optionInt opts "count" 0 (0, maxBound)
  seconds <- optionDouble opts "seconds" 0
  batch <- optionInt opts "batch" 64 (1, 256)
  dev <- openNamedDevice name
  stop <- newStopFlag
  stopAfter stop seconds
  sent <- newIORef (0 :: Int)
  done <- newEmptyMVar
  start <- getMonotonicTimeNSec
  -- The pool outlives the device, which may still hold sent buffers
  -- until it is closed.
  pool <- newMemPool defaultPoolConfig { poolSize = 2048 }
  _ <- forkOn 0 (generate stop dev pool rate size count batch start sent `finally` putMVar done ())
  let report prev prevT = do
        finished <- tryTakeMVar done
        case finished of
          Just () -> pure ()
          Nothing -> do
            threadDelay 1000000
            n <- readIORef sent
            t <- getMonotonicTimeNSec
            progress (printf "tx %.3f Mpps" (fromIntegral (n - prev) / (fromIntegral (t - prevT) / 1e3) :: Double))
            report n t
  report 0 start
  end <- getMonotonicTimeNSec
  n <- readIORef sent
  printf "summary sent=%d seconds=%.3f\n" n (fromIntegral (end - start) / 1e9 :: Double)
  closeDevice dev
  destroyMemPool pool

generate :: IORef Bool -> Device -> MemPool -> Double -> Int -> Int -> Int -> Word64 -> IORef Int
         -> IO ()
generate stop dev pool rate size count batch start sentRef = do
    bufs <- newBufferArray batch
    prefill pool
    let nsPerPacket = if rate > 0 then 1e9 / rate else 0 :: Double
        loop !seqNo = do
          s <- readIORef stop
          let want = if count > 0 then min batch (count - seqNo) else batch
          unless (s || want <= 0) $ do
            pace seqNo
            k <- allocBatch pool bufs 0 want
            forM_ [0 .. k - 1] $ \i -> do
              b <- readBuffer bufs i
              writeSequence (bufferData b) size (fromIntegral (seqNo + i) :: Word32)
            taken <- txBatch dev 0 bufs k
            when (taken < k) $ freeBatch pool bufs taken (k - taken)
            writeIORef sentRef (seqNo + taken)
            when (taken == 0) yield
            loop (seqNo + taken)
        pace seqNo = when (nsPerPacket > 0) $ do
          now <- getMonotonicTimeNSec
          let due = start + round (fromIntegral seqNo * nsPerPacket)
          when (due > now + 20000) $ threadDelay (fromIntegral ((due - now) `quot` 1000))
    loop 0
 where
  prefill mp = do
    let n = poolEntries mp
    all' <- newBufferArray n
    k <- allocBatch mp all' 0 n
    forM_ [0 .. k - 1] $ \i -> do
      b <- readBuffer all' i
      writeTestPacket (bufferData b) size
      setBufferLength b size
    freeBatch mp all' 0 k
