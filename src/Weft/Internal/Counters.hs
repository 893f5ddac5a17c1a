{-# LANGUAGE MagicHash, UnboxedTuples #-}
-- | A fixed-size array of machine-word counters that any thread may bump
-- atomically. Used for the manager statistics and key supplies: bumping one
-- costs one locked add and allocates nothing.
-- Internal and unstable: weft's own modules and tests use it.
module Weft.Internal.Counters
  ( Counters (..)
  , newCounters
  , addCounter
  , readCounter
  , casCounter
  , writeCounter
  , bumpCounter
  , storeCounter
  ) where

import GHC.Exts
import GHC.IO (IO (..))

data Counters = Counters (MutableByteArray# RealWorld)

-- | @newCounters n@ makes @n@ counters, all zero.
newCounters :: Int -> IO Counters
newCounters (I# n) = IO $ \s ->
  case newByteArray# (n *# 8#) s of
    (# s1, arr #) -> case setByteArray# arr 0# (n *# 8#) 0# s1 of
      s2 -> (# s2, Counters arr #)

-- | Atomically add to counter @i@ and return its previous value.
addCounter :: Counters -> Int -> Int -> IO Int
addCounter (Counters arr) (I# i) (I# d) = IO $ \s ->
  case fetchAddIntArray# arr i d s of
    (# s1, old #) -> (# s1, I# old #)
{-# INLINE addCounter #-}

-- | Read counter @i@ (an atomic, ordered read).
readCounter :: Counters -> Int -> IO Int
readCounter (Counters arr) (I# i) = IO $ \s ->
  case atomicReadIntArray# arr i s of
    (# s1, v #) -> (# s1, I# v #)
{-# INLINE readCounter #-}

-- | Atomically write counter @i@ (a full barrier).
writeCounter :: Counters -> Int -> Int -> IO ()
writeCounter (Counters arr) (I# i) (I# v) = IO $ \s ->
  case atomicWriteIntArray# arr i v s of
    s1 -> (# s1, () #)
{-# INLINE writeCounter #-}

-- | @casCounter c i expected new@ sets counter @i@ to @new@ if it held
-- @expected@, and returns the value it held before.
casCounter :: Counters -> Int -> Int -> Int -> IO Int
casCounter (Counters arr) (I# i) (I# old) (I# new) = IO $ \s ->
  case casIntArray# arr i old new s of
    (# s1, prev #) -> (# s1, I# prev #)
{-# INLINE casCounter #-}

-- | Add to counter @i@ without a locked instruction. Only for counters that
-- a single thread writes (readers may see a slightly old value).
bumpCounter :: Counters -> Int -> Int -> IO ()
bumpCounter (Counters arr) (I# i) (I# d) = IO $ \s ->
  case readIntArray# arr i s of
    (# s1, v #) -> (# writeIntArray# arr i (v +# d) s1, () #)
{-# INLINE bumpCounter #-}

-- | Write counter @i@ with a plain store: no barrier, no locked
-- instruction. Only for counters that one thread at a time writes (under
-- a lock whose release is a barrier).
storeCounter :: Counters -> Int -> Int -> IO ()
storeCounter (Counters arr) (I# i) (I# v) = IO $ \s ->
  case writeIntArray# arr i v s of
    s1 -> (# s1, () #)
{-# INLINE storeCounter #-}
