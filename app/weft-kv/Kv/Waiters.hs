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
  , takeTicket
  , addWaker
  , removeWaker
  , wakeKey
  , firstInLine
  , blockedClients
  , countBlocked
  ) where

import Control.Monad (unless, when)
import Data.ByteString (ByteString)
import Data.IORef
import qualified Data.Map.Strict as Map
import Data.Primitive.Array (Array, arrayFromListN, indexArray)

-- | Per key color, the keys waited for and their wakers in the order of
-- their tickets; how many clients are blocked (INFO's @blocked_clients@);
-- and the next ticket.
--
-- Unlike a color's keys, these maps are written from other colors (the
-- blocked clients' own), always by an atomic update of the whole map, and
-- read by the key's color when a write leaves a list under a key.
data Waiters = Waiters !(Array (IORef (Map.Map ByteString [Waker]))) !(IORef Int) !(IORef Int)

-- | A blocked command's registration on a key: its state, which it
-- shares with its registrations on its other keys, and what wakes it
-- (posts the wake-up to its connection's color).
data Waker = Waker
  { wakerTicket :: !Int
    -- ^ Its command's ticket: the order in which blocked commands are
    -- served.
  , wakerState :: !(IORef Int)
  , wakerWake :: IO ()
  }

-- | A blocked command's states: waiting for a key to hold a list; woken
-- (its connection's color will try again); done (answered, timed out or
-- gone), so its registrations are dropped.
wWaiting, wWoken, wDone :: Int
wWaiting = 0; wWoken = 1; wDone = 2

newWaiters :: Int -> IO Waiters
newWaiters colors = Waiters <$> (arrayFromListN colors <$> mapM (const (newIORef Map.empty)) [1 .. colors]) <*> newIORef 0 <*> newIORef 0

-- | A blocking command's ticket, taken when it starts: commands are
-- served in the order of their tickets. Runs on any color.
takeTicket :: Waiters -> IO Int
takeTicket (Waiters _ _ next) = atomicModifyIORef' next (\t -> (t + 1, t))

-- | Register a waker on a key (of the given color), in its ticket's place.
-- The key is the caller's own copy. Runs on any color.
addWaker :: Waiters -> Int -> ByteString -> Waker -> IO ()
addWaker (Waiters maps _ _) color key w =
  atomicModifyIORef' (indexArray maps color) (\m -> (Map.alter (Just . maybe [w] place) key m, ()))
  where
    place ws = let (before, after) = span ((< wakerTicket w) . wakerTicket) ws in before ++ w : after

-- | Remove a command's registration on a key (given its state cell).
-- Runs on any color.
removeWaker :: Waiters -> Int -> ByteString -> IORef Int -> IO ()
removeWaker (Waiters maps _ _) color key st =
  atomicModifyIORef' (indexArray maps color) (\m -> (Map.update keep key m, ()))
  where
    keep ws = case filter ((/= st) . wakerState) ws of
      [] -> Nothing
      ws' -> Just ws'

-- | A write left a list (or sorted set) under a key: wake the first of
-- its commands in line (the one with the earliest ticket that is not
-- done), unless it is woken already and not yet back. Runs on the key's
-- color, after the write.
wakeKey :: Waiters -> Int -> ByteString -> IO ()
wakeKey (Waiters maps _ _) color key = do
  m <- readIORef (indexArray maps color)
  -- The common case: nobody waits for any key of this color.
  unless (Map.null m) $ case Map.lookup key m of
    Nothing -> return ()
    Just ws -> go ws
  where
    go (w : more) = do
      st <- readIORef (wakerState w)
      if st == wDone then go more else do
        woke <- atomicModifyIORef' (wakerState w) (\s -> if s == wWaiting then (wWoken, True) else (s, False))
        when woke (wakerWake w)
    go [] = return ()

-- | Whether no command with an earlier ticket than this one waits for the
-- key and is not done: it is this command's turn to pop from the key's
-- list (Note [Blocked commands] in "Kv.Batch"). Runs on any color.
firstInLine :: Waiters -> Int -> ByteString -> Int -> IO Bool
firstInLine (Waiters maps _ _) color key ticket = do
  m <- readIORef (indexArray maps color)
  if Map.null m then return True else case Map.lookup key m of
    Nothing -> return True
    Just ws -> go ws
  where
    go (w : more) | wakerTicket w < ticket = do
      st <- readIORef (wakerState w)
      if st == wDone then go more else return False
    go _ = return True

-- | How many clients are blocked.
blockedClients :: Waiters -> IO Int
blockedClients (Waiters _ n _) = readIORef n

-- | A client blocks (1) or is done blocking (-1).
countBlocked :: Waiters -> Int -> IO ()
countBlocked (Waiters _ n _) d = atomicModifyIORef' n (\k -> (k + d, ()))
