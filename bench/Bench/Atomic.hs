{-# LANGUAGE MagicHash, UnboxedTuples #-}
-- | An atomic machine word for the benchmarks' join counters and flags:
-- fetch-and-add, compare-and-swap, ordered reads and writes, none of
-- which allocates. (An 'IORef' updated with 'atomicModifyIORef'' allocates
-- on every update, which the colored microbenchmarks, whose events run
-- for about 100 cycles, would measure as part of each event.)
module Bench.Atomic
  ( AtomicInt
  , newAtomicInt
  , fetchAddInt
  , casInt
  , writeInt
  ) where

import Data.Primitive.ByteArray (MutableByteArray (..), newByteArray, writeByteArray)
import GHC.Exts (Int (..), RealWorld, atomicWriteIntArray#, casIntArray#, fetchAddIntArray#)
import GHC.IO (IO (..))

newtype AtomicInt = AtomicInt (MutableByteArray RealWorld)

-- | A word holding the value, alone on its cache line.
newAtomicInt :: Int -> IO AtomicInt
newAtomicInt v = do
  arr <- newByteArray 64
  writeByteArray arr 0 v
  return (AtomicInt arr)

-- | Add, and return the value before.
fetchAddInt :: AtomicInt -> Int -> IO Int
fetchAddInt (AtomicInt (MutableByteArray a)) (I# d) =
  IO (\s -> case fetchAddIntArray# a 0# d s of (# s', old #) -> (# s', I# old #))

-- | Set to @new@ if the word holds @old@; return the value before.
casInt :: AtomicInt -> Int -> Int -> IO Int
casInt (AtomicInt (MutableByteArray a)) (I# old) (I# new) =
  IO (\s -> case casIntArray# a 0# old new s of (# s', before #) -> (# s', I# before #))

-- | Write with a full barrier.
writeInt :: AtomicInt -> Int -> IO ()
writeInt (AtomicInt (MutableByteArray a)) (I# v) =
  IO (\s -> (# atomicWriteIntArray# a 0# v s, () #))
