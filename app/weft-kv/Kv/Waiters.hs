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
  , wAttempting
  , wServed
  , takeTicket
  , addWaker
  , removeWaker
  , wakeKey
  , serveReady
  , firstInLine
  , blockedClients
  , countBlocked
  ) where

import Control.Monad (forM_, unless, when)
import Data.ByteString (ByteString)
import Data.IORef
import Data.Maybe (fromMaybe)
import qualified Data.Map.Strict as Map
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)

-- | Per key color, the keys waited for and their wakers in the order of
-- their tickets, and the keys written since the color last served them
-- ('serveReady'); how many clients are blocked (INFO's
-- @blocked_clients@); and the next ticket.
--
-- Unlike a color's keys, the maps of wakers are written from other colors
-- (the blocked clients' own), always by an atomic update of the whole
-- map, and read by the key's color when a write leaves a list under a
-- key. The keys to serve are the color's own, as its table is.
data Waiters = Waiters
  { waitedKeys   :: !(Array (IORef (Map.Map ByteString [Waker])))
    -- ^ Per key color, its waited keys' wakers in ticket order.
  , keysToServe  :: !(Array (IORef [ByteString]))
    -- ^ Per key color, the waited keys written since it last served
    -- them, latest first.
  , blockedCount :: !(IORef Int)
  , nextTicket   :: !(IORef Int)
  }

-- | A blocked command's registration on a key: its state, which it
-- shares with its registrations on its other keys, and what wakes it
-- (posts the wake-up to its connection's color).
data Waker = Waker
  { wakerTicket :: !Int
    -- ^ Its command's ticket: the order in which blocked commands are
    -- served.
  , wakerState :: !(IORef Int)
  , wakerWake :: IO ()
    -- ^ Post the wake-up to the command's connection, which attempts
    -- again.
  , wakerServe :: Maybe (IO ())
    -- ^ Attempt the command here, on the key's color, and send its
    -- outcome to its connection: when all its keys have this color.
  }

-- | A blocked command's states (Note [Serving blocked commands] in
-- "Kv.Batch"): waiting for a key to hold a list, no attempt under way;
-- woken (a write came: its connection's color will attempt again, or
-- its attempt under way will when it parks); done (answered, timed out
-- or gone), so its registrations are dropped; an attempt under way
-- (started by its connection or by a key's color); served by a key's
-- color (its reply on the way to its connection), as good as done.
wWaiting, wWoken, wDone, wAttempting, wServed :: Int
wWaiting = 0; wWoken = 1; wDone = 2; wAttempting = 3; wServed = 4

-- | Whether a command in this state is out of line.
outOfLine :: Int -> Bool
outOfLine st = st == wDone || st == wServed

newWaiters :: Int -> IO Waiters
newWaiters colors =
  Waiters <$> (arrayFromListN colors <$> mapM (const (newIORef Map.empty)) [1 .. colors])
          <*> (arrayFromListN colors <$> mapM (const (newIORef [])) [1 .. colors])
          <*> newIORef 0 <*> newIORef 0

-- | A blocking command's ticket, taken when it starts: commands are
-- served in the order of their tickets. Runs on any color.
takeTicket :: Waiters -> IO Int
takeTicket w = atomicModifyIORef' (nextTicket w) (\t -> (t + 1, t))

-- | Register a waker on a key (of the given color), in its ticket's place.
-- The key is the caller's own copy. Runs on any color.
addWaker :: Waiters -> Int -> ByteString -> Waker -> IO ()
addWaker waiters color key w =
  atomicModifyIORef' (indexArray (waitedKeys waiters) color) (\m -> (Map.alter (Just . maybe [w] place) key m, ()))
  where
    place ws = let (before, after) = span ((< wakerTicket w) . wakerTicket) ws in before ++ w : after

-- | Remove a command's registration on a key (given its state cell).
-- Runs on any color.
removeWaker :: Waiters -> Int -> ByteString -> IORef Int -> IO ()
removeWaker waiters color key st =
  atomicModifyIORef' (indexArray (waitedKeys waiters) color) (\m -> (Map.update keep key m, ()))
  where
    keep ws = case filter ((/= st) . wakerState) ws of
      [] -> Nothing
      ws' -> Just ws'

-- | A write left a list (or sorted set) under a key: if a command waits
-- for it, the key is to be served once the write's command is done
-- ('serveReady'). Runs on the key's color, after the write.
wakeKey :: Waiters -> Int -> ByteString -> IO ()
wakeKey waiters color key = do
  m <- readIORef (indexArray (waitedKeys waiters) color)
  -- The common case: nobody waits for any key of this color.
  unless (Map.null m) $ when (Map.member key m) $
    modifyIORef' (indexArray (keysToServe waiters) color) (key :)

-- | Serve the keys of a color written since it last served them, in the
-- order they were written: for each, the first of its commands in line
-- (the earliest ticket not done) attempts now, here, if it waits (and
-- all its keys have this color: 'wakerServe'), or is woken (its
-- connection attempts); if its attempt is under way, it is woken, to
-- attempt again when that one parks. Until none is left: what an
-- attempt here writes is served too. Runs on the color (or where its
-- gate is held), after each command; does nothing on a color that is
-- not a key color (a connection's).
serveReady :: Waiters -> Int -> IO ()
serveReady waiters color = when (color < sizeofArray ready) $ do
  keys <- readIORef (indexArray ready color)
  unless (null keys) $ do
    writeIORef (indexArray ready color) []
    forM_ (reverse keys) $ \key ->
      readIORef (indexArray (waitedKeys waiters) color) >>= maybe (return ()) go . Map.lookup key
    serveReady waiters color
  where
    go (w : more) = do
      st <- readIORef (wakerState w)
      if outOfLine st then go more else do
        let next s | s == wWaiting = (maybe wWoken (const wAttempting) (wakerServe w), s)
                   | s == wAttempting = (wWoken, s)
                   | otherwise = (s, s)
        before <- atomicModifyIORef' (wakerState w) next
        when (before == wWaiting) $ fromMaybe (wakerWake w) (wakerServe w)
    go [] = return ()
    ready = keysToServe waiters

-- | Whether no command with an earlier ticket than this one waits for the
-- key and is not done: it is this command's turn to pop from the key's
-- list (Note [Blocked commands] in "Kv.Batch"). Runs on any color.
firstInLine :: Waiters -> Int -> ByteString -> Int -> IO Bool
firstInLine waiters color key ticket = do
  m <- readIORef (indexArray (waitedKeys waiters) color)
  if Map.null m then return True else case Map.lookup key m of
    Nothing -> return True
    Just ws -> go ws
  where
    go (w : more) | wakerTicket w < ticket = do
      st <- readIORef (wakerState w)
      if outOfLine st then go more else return False
    go _ = return True

-- | How many clients are blocked.
blockedClients :: Waiters -> IO Int
blockedClients = readIORef . blockedCount

-- | A client blocks (1) or is done blocking (-1).
countBlocked :: Waiters -> Int -> IO ()
countBlocked w d = atomicModifyIORef' (blockedCount w) (\k -> (k + d, ()))
