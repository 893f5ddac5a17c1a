{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the
-- longest common subsequence of two strings, as redis 7.0 computes and
-- reports it (Note [LCS as redis walks it]).
module Kv.Lcs
  ( lcsCommands
  , lcs
  , LcsMatch (..)
  ) where

import Control.Monad (forM_)
import Control.Monad.ST (ST, runST)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.Primitive.PrimArray
import Data.Word (Word32)

import Kv.Plan
import Kv.Resp
import Kv.Store
import Kv.Str (strString)

-- Note [LCS as redis walks it]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Two strings have many longest common subsequences; clients (and
-- redis's own tests) expect the one redis returns, and its matched
-- ranges in its order. So the table and the walk back through it are
-- redis's: the table holds, for every pair of prefixes, the length of
-- their longest common subsequence; the walk starts at the two whole
-- strings, takes a byte when both end in it, and otherwise drops the
-- last byte of the first string when that keeps a longer subsequence
-- than dropping the second's (of the second, on a tie). Ranges are
-- reported as the walk closes them: from the strings' ends towards their
-- starts. The table has a cell per pair of prefixes, so two strings of
-- n and m bytes cost (n + 1) * (m + 1) words of transient memory;
-- redis refuses more than its largest bulk string (512 MiB), and so
-- does weft-kv.

lcsCommands :: [Command]
lcsCommands = [("LCS", (AtLeast 2, lcsCommand))]

-- | What LCS was asked to report.
data LcsOptions = LcsOptions
  { optLen :: !Bool
  , optIdx :: !Bool
  , optMinLen :: !Int
  , optWithLen :: !Bool
  }

lcsCommand :: [ByteString] -> Plan
lcsCommand (a : b : rest) = OnKeys [(a, readOp), (b, readOp)] (\[x, y] -> answer (options rest) x y)
lcsCommand _ = Answer syntaxError

-- | The options, or the error they earn (reported, as redis does, only
-- once both keys were found to be strings).
options :: [ByteString] -> Either Reply LcsOptions
options = go (LcsOptions False False 0 False)
  where
    go o args = case args of
      [] | optLen o && optIdx o ->
             Left (RError "ERR If you want both the length and indexes, please just use IDX.")
         | otherwise -> Right o
      (w : more) -> case upper w of
        "LEN" -> go o { optLen = True } more
        "IDX" -> go o { optIdx = True } more
        "WITHMATCHLEN" -> go o { optWithLen = True } more
        "MINMATCHLEN" | (n : more') <- more -> case readInteger n of
          Nothing -> Left notInteger
          Just k -> go o { optMinLen = max 0 k } more'
        _ -> Left syntaxError

-- | The key's string ('RBulk'; a missing key is the empty string), or
-- 'RNil' for a key of another type.
readOp :: KeyOp
readOp _ _ v = Outcome Keep $ case v of
  Nothing -> RBulk B.empty
  Just (VString s) -> RBulk (strString s)
  Just _ -> RNil

answer :: Either Reply LcsOptions -> Reply -> Reply -> Reply
answer parsed x y = case (x, y, parsed) of
  (RBulk _, RBulk _, Left e) -> e
  (RBulk s, RBulk t, Right o)
    | tooLarge s t -> RError "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
    | otherwise ->
        let (common, ms) = lcs s t
        in if optIdx o
             then RArray [ RBulk "matches", RArray [ matchReply o m | m <- ms, matchLength m >= optMinLen o ]
                         , RBulk "len", RInt (B.length common) ]
             else if optLen o then RInt (B.length common) else RBulk common
  _ -> RError "ERR The specified keys must contain string values"
  where
    matchReply o m = RArray $
      [ RArray [RInt (matchA m), RInt (matchA m + matchLength m - 1)]
      , RArray [RInt (matchB m), RInt (matchB m + matchLength m - 1)] ]
      ++ [ RInt (matchLength m) | optWithLen o ]
    tooLarge s t = (B.length s + 1) * (B.length t + 1) * 4 > 512 * 1024 * 1024

-- | A common run: where it starts in each string, and its length.
data LcsMatch = LcsMatch { matchA :: !Int, matchB :: !Int, matchLength :: !Int }
  deriving (Eq, Show)

-- | The longest common subsequence redis finds, and its runs in the
-- order redis reports them (Note [LCS as redis walks it]).
lcs :: ByteString -> ByteString -> (ByteString, [LcsMatch])
lcs a b = runST $ do
  let !n = B.length a
      !m = B.length b
      !w = m + 1
      at i j = i * w + j
  table <- newPrimArray ((n + 1) * w) :: ST s (MutablePrimArray s Word32)
  setPrimArray table 0 ((n + 1) * w) 0
  forM_ [1 .. n] $ \i -> do
    let !ai = BU.unsafeIndex a (i - 1)
    forM_ [1 .. m] $ \j ->
      if ai == BU.unsafeIndex b (j - 1)
        then readPrimArray table (at (i - 1) (j - 1)) >>= writePrimArray table (at i j) . (+ 1)
        else do
          up <- readPrimArray table (at (i - 1) j)
          left <- readPrimArray table (at i (j - 1))
          writePrimArray table (at i j) (max up left)
  -- The walk back, collecting the bytes (last first) and closing runs.
  let walk !i !j run acc ms
        | i == 0 || j == 0 = return (acc, close run ms)
        | BU.unsafeIndex a (i - 1) == BU.unsafeIndex b (j - 1) =
            let run' = case run of
                  Just (LcsMatch sa sb k) | sa == i && sb == j -> Just (LcsMatch (i - 1) (j - 1) (k + 1))
                  _ -> Just (LcsMatch (i - 1) (j - 1) 1)
                -- A run that reached either string's start ends here.
                (run'', ms') = case run' of
                  Just r | matchA r == 0 || matchB r == 0 -> (Nothing, r : ms)
                  _ -> (run', ms)
            in walk (i - 1) (j - 1) run'' (BU.unsafeIndex a (i - 1) : acc) ms'
        | otherwise = do
            up <- readPrimArray table (at (i - 1) j)
            left <- readPrimArray table (at i (j - 1))
            let ms' = close run ms
            if up > left then walk (i - 1) j Nothing acc ms' else walk i (j - 1) Nothing acc ms'
      close run ms = maybe ms (: ms) run
  (bytes, runs) <- walk n m Nothing [] []
  return (B.pack bytes, reverse runs)
