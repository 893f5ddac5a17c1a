{-# LANGUAGE OverloadedStrings #-}
-- | The ranges of weft-kv's sorted-set commands: ZRANGE's arguments and
-- options as redis 7.0 parses them, score and lex bounds, and the
-- members a range picks.
module Kv.ZRange
  ( ZRange (..)
  , Bound
  , LexBound
  , zrangeArgs
  , zrangePick
  , byScore
  , countByScore
  , byRank
  , byLex
  , withScore
  , withLex
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.Maybe (fromMaybe)
import Kv.Plan
import Kv.Resp
import Kv.SortedSet
import Kv.Text (readBound)

-- | The members within score bounds, lowest first.
byScore :: Bound -> Bound -> SortedSet -> IO [(Double, ByteString)]
byScore lo hi = zrangePick (ByScore lo hi) False 0 (-1)

-- | How many members are within score bounds.
countByScore :: Bound -> Bound -> SortedSet -> IO Int
countByScore lo hi z = do
  below <- sortedCountWhile z False (not . atLeast lo . fst)
  upTo <- sortedCountWhile z False (atMost hi . fst)
  return (max 0 (upTo - below))

-- | The members from rank a to rank b, lowest first.
byRank :: Int -> Int -> SortedSet -> IO [(Double, ByteString)]
byRank a b = zrangePick (ByRank a b) False 0 (-1)

-- | The first and last rank of ranks a to b of n items (ZRANGE's index
-- rules: negative ones count from the end; out-of-range ends are
-- clamped); the first is past the last if none is picked.
rankSpan :: Int -> Int -> Int -> (Int, Int)
rankSpan n a b = (max 0 (if a < 0 then n + a else a), min (n - 1) (if b < 0 then n + b else b))

-- | The members a lex range picks, in order.
byLex :: LexBound -> LexBound -> SortedSet -> IO [(Double, ByteString)]
byLex lo hi = zrangePick (ByLex lo hi) False 0 (-1)

-- Note [Lex ranges over mixed scores]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Redis defines its lex ranges only for members of one score, and walks
-- them in score order as if that were byte order: it gives up unless the
-- last member is at or above the range's start and the first at or below
-- its end; then it starts at the first member at or above the start and
-- goes on while members stay at or below the end (ZRANGE's LIMIT offset
-- skips members before that check). 'lexStart' and 'zrangePick' walk the
-- same way. A small sorted set (up to 128 members, the form the
-- differential test makes) is walked member by member, as redis walks
-- its listpack, so with mixed scores weft-kv answers as redis does; a
-- large one is searched, as redis searches its skip list, and the two
-- searches can differ when the scores are mixed.

-- | The rank in walk order (highest first if reversed) where a lex
-- range's walk starts, if it picks any member: Note [Lex ranges over
-- mixed scores].
lexStart :: Bool -> LexBound -> LexBound -> SortedSet -> IO (Maybe Int)
lexStart rev lo hi z = do
  n <- sortedSize z
  if n == 0 || emptyRange then return Nothing else do
    (_, firstM) <- sortedAt z False 0
    (_, lastM) <- sortedAt z True 0
    if not (lexAtLeast lo lastM) || not (lexAtMost hi firstM) then return Nothing else do
      skip <- sortedCountWhile z rev (not . near . snd)
      if skip >= n then return Nothing else do
        (_, m) <- sortedAt z rev skip
        return (if far m then Just skip else Nothing)
  where
    (near, far) = if rev then (lexAtMost hi, lexAtLeast lo) else (lexAtLeast lo, lexAtMost hi)
    emptyRange = case (lo, hi) of
      (LexMin, LexMin) -> False
      (LexMax, LexMax) -> False
      (LexMin, _) -> False
      (_, LexMax) -> False
      (LexMax, _) -> True
      (_, LexMin) -> True
      (LexAt a ea, LexAt b eb) -> a > b || (a == b && (ea || eb))

-- | Two score bounds, or redis's error.
withScore :: ByteString -> ByteString -> (Bound -> Bound -> Plan) -> Plan
withScore lo hi k = maybe (Answer (RError "ERR min or max is not a float")) id (k <$> scoreBound lo <*> scoreBound hi)

-- | Two lex bounds, or redis's error.
withLex :: ByteString -> ByteString -> (LexBound -> LexBound -> Plan) -> Plan
withLex lo hi k = maybe (Answer (RError "ERR min or max not valid string range item")) id (k <$> lexBound lo <*> lexBound hi)

-- | Which members a ZRANGE selects.
data ZRange
  = ByRank !Int !Int
  | ByScore !Bound !Bound
  | ByLex !LexBound !LexBound

-- | A score bound: the score and whether it is excluded.
data Bound = Bound !Double !Bool

data LexBound = LexMin | LexMax | LexAt !ByteString !Bool

-- | ZRANGE's range and options, parsed (ZRANGESTORE's, without
-- WITHSCORES, if @store@): the range, reversed, offset, count (-1: no
-- limit), with scores.
zrangeArgs :: Bool -> ByteString -> ByteString -> [ByteString] -> (ZRange -> Bool -> Int -> Int -> Bool -> Plan) -> Plan
zrangeArgs store lo hi opts0 run = go opts0 Nothing False Nothing False
  where
    go (o : rest) kind rev limit scored = case (upper o, rest) of
      ("WITHSCORES", _) | not store -> go rest kind rev limit True
      ("LIMIT", a : b : rest') -> withInt a (\off -> withInt b (\cnt -> go rest' kind rev (Just (off, cnt)) scored))
      ("REV", _) | not rev -> go rest kind True limit scored
      ("BYLEX", _) | kind == Nothing -> go rest (Just False) rev limit scored
      ("BYSCORE", _) | kind == Nothing -> go rest (Just True) rev limit scored
      _ -> Answer syntaxError
    go [] kind rev limit scored
      | maybe False ((/= -1) . snd) limit && kind == Nothing =
          Answer (RError "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
      | scored && kind == Just False =
          Answer (RError "ERR syntax error, WITHSCORES not supported in combination with BYLEX")
      | otherwise =
          -- Reversed, a score or lex range is given highest first.
          let (from, to) = if rev && kind /= Nothing then (hi, lo) else (lo, hi)
              (offset, count) = fromMaybe (0, -1) limit
              run' r = run r rev offset count scored
          in case kind of
            Nothing -> withInt from (\a -> withInt to (\b -> run' (ByRank a b)))
            Just True -> maybe (Answer (RError "ERR min or max is not a float")) run'
                           (ByScore <$> scoreBound from <*> scoreBound to)
            Just False -> maybe (Answer (RError "ERR min or max not valid string range item")) run'
                            (ByLex <$> lexBound from <*> lexBound to)

-- | A lex bound as redis reads one: @-@, @+@, or @(@ (excluded) or @[@
-- (included) before the string.
lexBound :: ByteString -> Maybe LexBound
lexBound s = case B.uncons s of
  Just (45, rest) | B.null rest -> Just LexMin
  Just (43, rest) | B.null rest -> Just LexMax
  Just (40, rest) -> Just (LexAt (B.copy rest) True)
  Just (91, rest) -> Just (LexAt (B.copy rest) False)
  _ -> Nothing

-- | Is the member on the right side of the bound?
lexAtLeast, lexAtMost :: LexBound -> ByteString -> Bool
lexAtLeast LexMin _ = True
lexAtLeast LexMax _ = False
lexAtLeast (LexAt b ex) m = if ex then m > b else m >= b
lexAtMost LexMin _ = False
lexAtMost LexMax _ = True
lexAtMost (LexAt b ex) m = if ex then m < b else m <= b

-- | A score bound as redis reads one: @(@ before the score excludes it.
scoreBound :: ByteString -> Maybe Bound
scoreBound s = case B.uncons s of
  Just (40, rest) -> (`Bound` True) <$> readBound rest
  _ -> (`Bound` False) <$> readBound s

-- | Is the score on the right side of the bound?
atLeast, atMost :: Bound -> Double -> Bool
atLeast (Bound b ex) s = if ex then s > b else s >= b
atMost (Bound b ex) s = if ex then s < b else s <= b

-- | The members a ZRANGE picks, in its order (copies).
zrangePick :: ZRange -> Bool -> Int -> Int -> SortedSet -> IO [(Double, ByteString)]
zrangePick range rev offset count z = case range of
  ByRank a b -> do
    n <- sortedSize z
    let (first, lastRank) = rankSpan n a b
    if first > lastRank then return [] else sortedWalk z rev first (lastRank - first + 1) (const True)
  ByScore from to
    | offset < 0 -> return []
    | otherwise -> do
        -- Reversed, the walk starts at the high bound and ends at the low.
        let (near, far) = if rev then (atMost to, atLeast from) else (atLeast from, atMost to)
        sortedWalkPast z rev (not . near . fst) offset count (far . fst)
  ByLex lo hi
    -- The offset skips members before the far end is checked (Note
    -- [Lex ranges over mixed scores]); reversed, the far end is the low.
    | offset < 0 -> return []
    | otherwise -> lexStart rev lo hi z >>= \start -> case start of
        Nothing -> return []
        Just s -> sortedWalk z rev (s + offset) count (far . snd)
    where far = if rev then lexAtLeast lo else lexAtMost hi
