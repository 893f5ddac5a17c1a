{-# LANGUAGE CPP, MagicHash, UnboxedTuples #-}
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
  , releaseCounter
  , fullBarrier
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
-- a lock, given back with 'releaseCounter').
storeCounter :: Counters -> Int -> Int -> IO ()
storeCounter (Counters arr) (I# i) (I# v) = IO $ \s ->
  case writeIntArray# arr i v s of
    s1 -> (# s1, () #)
{-# INLINE storeCounter #-}

-- Note [Releasing a lock word]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A lock word is taken with 'casCounter' (a locked instruction, a full
-- barrier) and given back with 'releaseCounter'. The release need only
-- keep the critical section's reads and writes before it; what follows
-- may safely move into the section. 'writeCounter' would add a full
-- barrier (@mfence@ on x86-64, tens of cycles) to every release. On
-- x86-64 a plain store already releases: the processor makes no store
-- visible before the stores before it and lets none pass earlier loads,
-- and GHC's native code generator moves no heap read or write past a
-- heap write. Elsewhere the release is 'writeCounter''s full barrier. A
-- worker that parks relies on the lock's acquisition, not its release,
-- to see what was published under it (Note [Parking] in
-- "Weft.Color.Internal.Runtime"). A thread that must read another's flag
-- only after its own store under the lock is visible (a store, then a
-- load of another location) cannot lean on the release, which lets the
-- load pass the store; it calls 'fullBarrier' between them.

-- | Give back a lock word taken with 'casCounter': write it so that
-- everything done under the lock is visible first (Note [Releasing a
-- lock word]).
releaseCounter :: Counters -> Int -> Int -> IO ()
#if defined(x86_64_HOST_ARCH)
releaseCounter = storeCounter
#else
releaseCounter = writeCounter
#endif
{-# INLINE releaseCounter #-}

-- | A full memory barrier: every store this thread made before it is
-- visible to other processors before any load it makes after it (Note
-- [Releasing a lock word]).
foreign import ccall unsafe "weft_full_barrier" fullBarrier :: IO ()
