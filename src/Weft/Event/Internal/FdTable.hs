-- | An fd-indexed table of slots, created on first use and kept for the
-- life of the table.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Note [FdTable concurrency]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Lookups take no lock: they read the current array from an 'IORef' and
-- index it. A slot, once stored, is never removed or replaced; fd numbers
-- are reused, and so are their slots. Creating a slot or growing the array
-- happens under one table lock. Growing copies the slot references into a
-- new array, so a thread still holding the old array finds the same slots
-- there: no slot ever exists twice for one fd. Creation is rare (once per fd
-- number over the table's life), so the lock is off the hot path.
module Weft.Event.Internal.FdTable
  ( FdTable
  , new
  , lookup
  , lookupOrCreate
  , capacity
  , elems
  ) where

import Prelude hiding (lookup)

import Control.Concurrent.MVar
import Control.Monad (forM)
import Control.Monad.Primitive (RealWorld)
import Data.IORef
import Data.Maybe (catMaybes)
import Data.Primitive.Array
import Foreign.C.Error (eBADF)
import GHC.IO.Exception (IOErrorType (InvalidArgument))

import Weft.Internal.Error (weftError)

data FdTable a = FdTable
  { ftSlots  :: !(IORef (MutableArray RealWorld (Maybe a)))
  , ftLock   :: !(MVar ())
  , ftCreate :: !(Int -> IO a)
  }

-- | An empty table whose slots are made by the given action (given the fd).
new :: (Int -> IO a) -> IO (FdTable a)
new create = do
  arr <- newArray initialCapacity Nothing
  FdTable <$> newIORef arr <*> newMVar () <*> pure create

initialCapacity :: Int
initialCapacity = 64

-- | The slot of an fd, if one was ever created.
lookup :: FdTable a -> Int -> IO (Maybe a)
lookup t i = do
  arr <- readIORef (ftSlots t)
  if i >= 0 && i < sizeofMutableArray arr then readArray arr i else return Nothing
{-# INLINE lookup #-}

-- | The slot of an fd, created if it is missing. Throws an 'IOError' for a
-- negative fd.
lookupOrCreate :: FdTable a -> Int -> IO a
lookupOrCreate t i = do
  found <- lookup t i
  case found of
    Just a -> return a
    Nothing
      | i < 0 -> ioError (weftError InvalidArgument eBADF "lookupOrCreate" ("invalid fd " ++ show i))
      | otherwise -> withMVar (ftLock t) $ \_ -> do
          arr0 <- readIORef (ftSlots t)
          arr <- if i < sizeofMutableArray arr0 then return arr0 else do
            let cap = until (> i) (* 2) (max 1 (sizeofMutableArray arr0))
            bigger <- newArray cap Nothing
            copyMutableArray bigger 0 arr0 0 (sizeofMutableArray arr0)
            writeIORef (ftSlots t) bigger
            return bigger
          again <- readArray arr i
          case again of
            Just a -> return a
            Nothing -> do
              a <- ftCreate t i
              writeArray arr i (Just a)
              return a
{-# INLINE lookupOrCreate #-}

-- | How many fds the current array covers.
capacity :: FdTable a -> IO Int
capacity t = sizeofMutableArray <$> readIORef (ftSlots t)

-- | Every slot created so far, with its fd.
elems :: FdTable a -> IO [(Int, a)]
elems t = do
  arr <- readIORef (ftSlots t)
  fmap catMaybes . forM [0 .. sizeofMutableArray arr - 1] $ \i ->
    fmap ((,) i) <$> readArray arr i
