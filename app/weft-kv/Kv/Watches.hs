-- | The keys clients WATCH: per key color, each watched key and the
-- flags of the clients that watch it, which a change to the key sets
-- (Note [Transactions] in "Kv.Transaction").
module Kv.Watches
  ( Watches
  , newWatches
  , addWatch
  , removeWatch
  , touchKey
  , watchedKeys
  , countWatching
  , watchCounts
  ) where

import Data.ByteString (ByteString)
import Data.IORef
import qualified Data.Map.Strict as Map
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)

-- | Per key color, the watched keys and their watchers' flags; and how
-- many clients watch keys. As with the blocked commands' registrations
-- ("Kv.Waiters"), the maps are written from the watching clients'
-- colors, always by an atomic update of the whole map, and read by the
-- key's color when it changes a key.
data Watches = Watches !(Array (IORef (Map.Map ByteString [IORef Bool]))) !(IORef Int)

newWatches :: Int -> IO Watches
newWatches n = Watches . arrayFromListN n <$> mapM (const (newIORef Map.empty)) [1 .. n] <*> newIORef 0

-- | Watch a key (of the given color; the caller's own copy) with a
-- client's flag. Runs on any color.
addWatch :: Watches -> Int -> ByteString -> IORef Bool -> IO ()
addWatch (Watches maps _) color key flag =
  atomicModifyIORef' (indexArray maps color) (\m -> (Map.insertWith (++) key [flag] m, ()))

-- | Stop watching a key with this flag. Runs on any color.
removeWatch :: Watches -> Int -> ByteString -> IORef Bool -> IO ()
removeWatch (Watches maps _) color key flag =
  atomicModifyIORef' (indexArray maps color) (\m -> (Map.update keep key m, ()))
  where
    keep flags = case filter (/= flag) flags of
      [] -> Nothing
      rest -> Just rest

-- | A key changed (or went): set the flags of the clients that watch it.
-- Runs on the key's color, after the change.
touchKey :: Watches -> Int -> ByteString -> IO ()
touchKey (Watches maps _) color key = do
  m <- readIORef (indexArray maps color)
  -- The common case: no key of this color is watched.
  if Map.null m then return () else case Map.lookup key m of
    Nothing -> return ()
    Just flags -> mapM_ (`atomicWriteIORef` True) flags
{-# INLINE touchKey #-}

-- | The watched keys of a color.
watchedKeys :: Watches -> Int -> IO [ByteString]
watchedKeys (Watches maps _) color = Map.keys <$> readIORef (indexArray maps color)

-- | A client starts (1) or stops (-1) watching keys. Runs on any color.
countWatching :: Watches -> Int -> IO ()
countWatching (Watches _ n) d = atomicModifyIORef' n (\k -> (k + d, ()))

-- | How many clients watch keys, and how many keys are watched (INFO's
-- @watching_clients@ and @total_watched_keys@, as redis 7.4 names them).
-- Runs on any color.
watchCounts :: Watches -> IO (Int, Int)
watchCounts (Watches maps n) = do
  clients <- readIORef n
  keys <- sum <$> mapM (\i -> Map.size <$> readIORef (indexArray maps i)) [0 .. sizeofArray maps - 1]
  return (clients, keys)
