{-# LANGUAGE BangPatterns #-}
-- | The blocking commands' registrations on keys (BLPOP, BZPOPMIN and
-- the other blocking pops): who waits for a key to hold a list or a
-- sorted set, and how to wake it (Note [Blocked commands] in "Kv.Batch").
module Kv.Waiters
  ( Waiters
  , newWaiters
  , Waker (..)
  , wWaiting
  , wWoken
  , wDone
  , addWaker
  , removeWaker
  , wakeKey
  , blockedClients
  , countBlocked
  ) where

import Control.Monad (unless, when)
import Data.ByteString (ByteString)
import Data.IORef
import qualified Data.Map.Strict as Map
import Data.Primitive.Array (Array, arrayFromListN, indexArray)

-- | Per key color, the keys waited for and their wakers in the order they
-- came; and how many clients are blocked (INFO's @blocked_clients@).
--
-- Unlike a color's keys, these maps are written from other colors (the
-- blocked clients' own), always by an atomic update of the whole map, and
-- read by the key's color when a write leaves a list under a key.
data Waiters = Waiters !(Array (IORef (Map.Map ByteString [Waker]))) !(IORef Int)

-- | A blocked command's registration on a key: its state, which it
-- shares with its registrations on its other keys, and what wakes it
-- (posts the wake-up to its connection's color).
data Waker = Waker
  { wakerState :: !(IORef Int)
  , wakerWake :: IO ()
  }

-- | A blocked command's states: waiting for a key to hold a list; woken
-- (its connection's color will try again); done (answered, timed out or
-- gone), so its registrations are dropped.
wWaiting, wWoken, wDone :: Int
wWaiting = 0; wWoken = 1; wDone = 2

newWaiters :: Int -> IO Waiters
newWaiters colors = Waiters <$> (arrayFromListN colors <$> mapM (const (newIORef Map.empty)) [1 .. colors]) <*> newIORef 0

-- | Register a waker on a key (of the given color). The key is the
-- caller's own copy. Runs on any color.
addWaker :: Waiters -> Int -> ByteString -> Waker -> IO ()
addWaker (Waiters maps _) color key w =
  atomicModifyIORef' (indexArray maps color) (\m -> (Map.insertWith (flip (++)) key [w] m, ()))

-- | Remove a command's registration on a key (given its state cell).
-- Runs on any color.
removeWaker :: Waiters -> Int -> ByteString -> IORef Int -> IO ()
removeWaker (Waiters maps _) color key st =
  atomicModifyIORef' (indexArray maps color) (\m -> (Map.update keep key m, ()))
  where
    keep ws = case filter ((/= st) . wakerState) ws of
      [] -> Nothing
      ws' -> Just ws'

-- | A write left a list (or sorted set) of the given length under a key:
-- wake as many of its waiting commands as it has elements, in the order
-- they came (a command already woken and not yet back counts as one).
-- Runs on the key's color, after the write.
wakeKey :: Waiters -> Int -> ByteString -> Int -> IO ()
wakeKey (Waiters maps _) color key len = do
  m <- readIORef (indexArray maps color)
  -- The common case: nobody waits for any key of this color.
  unless (Map.null m) $ case Map.lookup key m of
    Nothing -> return ()
    Just ws -> go len ws
  where
    go !budget (w : more) | budget > 0 = do
      st <- readIORef (wakerState w)
      if st == wDone then go budget more else do
        woke <- atomicModifyIORef' (wakerState w) (\s -> if s == wWaiting then (wWoken, True) else (s, False))
        when woke (wakerWake w)
        go (budget - 1) more
    go _ _ = return ()

-- | How many clients are blocked.
blockedClients :: Waiters -> IO Int
blockedClients (Waiters _ n) = readIORef n

-- | A client blocks (1) or is done blocking (-1).
countBlocked :: Waiters -> Int -> IO ()
countBlocked (Waiters _ n) d = atomicModifyIORef' n (\k -> (k + d, ()))
