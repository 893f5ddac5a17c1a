-- | Per key color, a gate its events pass through: open, they run at
-- once; held by a transaction, they wait, in order, until it lets go
-- (Note [Transactions] in "Kv.Transaction").
module Kv.Gate
  ( Gates
  , newGates
  , gated
  , gateOpen
  , holdGate
  , releaseGate
  ) where

import Control.Exception (SomeException, throwIO, try)
import Data.IORef
import Data.Primitive.Array (Array, arrayFromListN, indexArray, sizeofArray)

-- | A color's gate: open, or held, with the events that came since,
-- latest first.
data Gate = GateOpen | GateHeld [IO ()]

-- | One gate per key color. A color's gate is read and written only by
-- that color's events, like its table (Note [One store per color] in
-- "Kv.Store"), so it needs no lock.
newtype Gates = Gates (Array (IORef Gate))

newGates :: Int -> IO Gates
newGates n = Gates . arrayFromListN n <$> mapM (const (newIORef GateOpen)) [1 .. n]

-- | Run an event of a color through its gate: now if it is open, else
-- when it is released. Must run on the color. A color that is not a key
-- color has no gate: its events run at once.
gated :: Gates -> Int -> IO () -> IO ()
gated g@(Gates gates) color act = do
  open <- gateOpen g color
  if open then act else modifyIORef' (indexArray gates color) wait
  where
    wait (GateHeld waiting) = GateHeld (act : waiting)
    wait GateOpen = GateOpen
{-# INLINE gated #-}

-- | Is a color's gate open (or is it not a key color)? An event that
-- finds it open may run at once; else it goes through 'gated'. Must run
-- on the color.
gateOpen :: Gates -> Int -> IO Bool
gateOpen (Gates gates) color
  -- A color beyond the key colors (a connection's) has no gate.
  | color >= sizeofArray gates = return True
  | otherwise = do
      g <- readIORef (indexArray gates color)
      return $! case g of
        GateOpen -> True
        GateHeld _ -> False
{-# INLINE gateOpen #-}

-- | Hold a color's gate, which must be open (so call it through
-- 'gated'): the color's later events wait. Must run on the color.
holdGate :: Gates -> Int -> IO ()
holdGate (Gates gates) color = writeIORef (indexArray gates color) (GateHeld [])

-- | Open a color's gate: the events that waited run, in the order they
-- came, each through the gate again, so that one that holds it (the next
-- transaction) leaves those after it waiting. Each runs even if one
-- before it throws; the first exception is rethrown after them. Must run
-- on the color.
releaseGate :: Gates -> Int -> IO ()
releaseGate g@(Gates gates) color = do
  let r = indexArray gates color
  held <- readIORef r
  writeIORef r GateOpen
  case held of
    GateOpen -> return ()
    GateHeld waiting -> do
      failures <- mapM (\act -> try (gated g color act)) (reverse waiting)
      case [ e | Left e <- failures ] of
        e : _ -> throwIO (e :: SomeException)
        [] -> return ()
