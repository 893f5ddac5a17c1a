{-# LANGUAGE BangPatterns #-}
-- | weft-pktcheck DEV [--expect N] [--seconds S] [--idle-exit MS]: counts
-- what weft-pktgen sent, as ixy-ci's checker does.
--
-- Every received test packet's sequence number is marked in a bitmap.
-- A number seen twice is a duplicate; a number below the highest seen so
-- far is reordered; numbers never seen between 0 and the highest (or
-- below @--expect@) are missing. Other packets are counted apart.
--
-- Stops after @--seconds@, after @--idle-exit@ ms without a packet once
-- one has arrived (default 500), or once @--expect@ distinct packets have
-- arrived and a further idle period has passed (so late duplicates still
-- count). Prints
-- @summary received=R distinct=D duplicates=X missing=M reordered=O max_seq=Q other=T@
-- and exits 0 when nothing is duplicated or missing (and, with
-- @--expect@, exactly that many arrived), 1 otherwise.
module Main (main) where

import Control.Concurrent hiding (threadDelay)
import Control.Exception (finally, mask_)
import Control.Monad
import Data.Bits
import Data.IORef
import Data.Primitive.ByteArray
import Data.Primitive.PrimArray
import Data.Word (Word32, Word64, Word8)
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Exts (RealWorld)
import System.Environment (getArgs)
import System.Exit
import System.IO
import Text.Printf (printf)

import Example.Packet
import Weft (threadDelay)
import Weft.Packet

usage :: String
usage = "usage: weft-pktcheck DEV [--expect N] [--seconds S] [--idle-exit MS] [--batch N]"

-- | Sequence numbers above this are counted as other packets; the bitmap
-- would need 512 MiB for the full 32-bit range.
maxSequence :: Int
maxSequence = 1 `shiftL` 30

main :: IO ()
main = do
  hSetBuffering stdout LineBuffering
  args <- getArgs
  opts@(pos, _) <- either (\e -> die' (e ++ "\n" ++ usage)) pure (parseOptions [] args)
  name <- case pos of
    [a] -> pure a
    _ -> die' usage
  expect <- optionInt opts "expect" 0 (0, maxSequence)
  seconds <- optionDouble opts "seconds" 0
  idleMs <- optionInt opts "idle-exit" 500 (1, 3600000)
  batch <- optionInt opts "batch" 64 (1, 256)
  dev <- openNamedDevice name
  stop <- newStopFlag
  stopAfter stop seconds
  st <- newCheck
  done <- newEmptyMVar
  t <- forkOn 0 (mask_ (check stop dev batch st) `finally` putMVar done ())
  -- the watchdog: idle exit and the --expect rule
  let watch lastCount lastChange = do
        threadDelay 20000
        s <- readIORef stop
        n <- readPrimArray (ckCounts st) cReceived
        d <- readPrimArray (ckCounts st) cDistinct
        now <- getMonotonicTimeNSec
        let changed = n /= lastCount
            idleNs = fromIntegral idleMs * 1000000 :: Word64
            idle = n > 0 && not changed && now - lastChange >= idleNs
            reached = expect > 0 && d >= expect && not changed && now - lastChange >= idleNs
        if s || idle || reached
          then writeIORef stop True
          else watch n (if changed then now else lastChange)
  now0 <- getMonotonicTimeNSec
  watch 0 now0
  killThread t
  takeMVar done
  [received, distinct, dups, reordered, other, maxSeq] <-
    mapM (readPrimArray (ckCounts st)) [cReceived, cDistinct, cDuplicates, cReordered, cOther, cMaxSeq]
  let top = if expect > 0 then expect else maxSeq + 1
  seenBelow <- countSeen st top
  let missing = top - seenBelow
  printf "summary received=%d distinct=%d duplicates=%d missing=%d reordered=%d max_seq=%d other=%d\n"
         received distinct dups missing reordered maxSeq other
  closeDevice dev
  if dups == 0 && missing == 0 && (expect == 0 || distinct == expect)
    then exitSuccess
    else exitWith (ExitFailure 1)

data Check = Check
  { ckCounts :: !(MutablePrimArray RealWorld Int)
  , ckBitmap :: !(IORef (MutableByteArray RealWorld))
  }

cReceived, cDistinct, cDuplicates, cReordered, cOther, cMaxSeq :: Int
cReceived = 0
cDistinct = 1
cDuplicates = 2
cReordered = 3
cOther = 4
cMaxSeq = 5  -- -1 before the first

newCheck :: IO Check
newCheck = do
  counts <- newPrimArray 6
  setPrimArray counts 0 6 0
  writePrimArray counts cMaxSeq (-1)
  bm <- newByteArray (1 `shiftL` 20)
  setByteArray bm 0 (1 `shiftL` 20) (0 :: Word8)
  Check counts <$> newIORef bm

check :: IORef Bool -> Device -> Int -> Check -> IO ()
check stop dev batch st = do
  hybrid <- newHybrid defaultHybridConfig
  bufs <- newBufferArray batch
  let loop = do
        k <- receive hybrid dev 0 bufs batch
        forM_ [0 .. k - 1] $ \i -> do
          b <- readBuffer bufs i
          len <- bufferLength b
          r <- readTemplateSequence (bufferData b) len
          record st r
        freeBatch (rxPool dev 0) bufs 0 k
        s <- readIORef stop
        unless s loop
  loop

record :: Check -> Maybe Word32 -> IO ()
record st r = do
  bump cReceived
  case r of
    Just w | fromIntegral w < maxSequence -> do
      let sq = fromIntegral w :: Int
      bm <- ensure sq
      let byte = sq `shiftR` 3
          bitNo = sq .&. 7
      old <- readByteArray bm byte :: IO Word8
      if testBit old bitNo
        then bump cDuplicates
        else do
          writeByteArray bm byte (setBit old bitNo)
          bump cDistinct
      mx <- readPrimArray (ckCounts st) cMaxSeq
      if sq < mx then bump cReordered else writePrimArray (ckCounts st) cMaxSeq sq
    _ -> bump cOther
 where
  bump :: Int -> IO ()
  bump i = readPrimArray (ckCounts st) i >>= writePrimArray (ckCounts st) i . (+ 1)
  ensure sq = do
    bm <- readIORef (ckBitmap st)
    size <- getSizeofMutableByteArray bm
    if sq `shiftR` 3 < size
      then pure bm
      else do
        let size' = until (\s -> sq `shiftR` 3 < s) (* 2) (max 1 size)
        bm' <- newByteArray size'
        setByteArray bm' 0 size' (0 :: Word8)
        copyMutableByteArray bm' 0 bm 0 size
        writeIORef (ckBitmap st) bm'
        pure bm'

-- | How many numbers below @top@ were seen.
countSeen :: Check -> Int -> IO Int
countSeen st top = do
  bm <- readIORef (ckBitmap st)
  size <- getSizeofMutableByteArray bm
  let go !i !acc
        | i >= top || (i `shiftR` 3) >= size = pure acc
        | otherwise = do
            byte <- readByteArray bm (i `shiftR` 3) :: IO Word8
            go (i + 1) (if testBit byte (i .&. 7) then acc + 1 else acc)
  go 0 (0 :: Int)
