{-# LANGUAGE MagicHash, UnboxedTuples #-}
-- | The capability the calling thread runs on, read without allocating:
-- @threadCapability =<< myThreadId@ boxes the thread id, the capability
-- number and a tuple, which the per-capability lookups on every socket
-- call and every manager lookup would pay each time.
-- Internal and unstable: weft's own modules use it.
module Weft.Internal.Capability
  ( currentCapability
  ) where

import GHC.Exts (Int (I#), myThreadId#, threadStatus#)
import GHC.IO (IO (..))

-- | The number of the capability the calling thread runs on now (as
-- 'Control.Concurrent.threadCapability' gives it).
currentCapability :: IO Int
currentCapability = IO $ \s -> case myThreadId# s of
  (# s1, t #) -> case threadStatus# t s1 of
    (# s2, _, cap, _ #) -> (# s2, I# cap #)
{-# INLINE currentCapability #-}
