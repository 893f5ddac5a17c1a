{-# LANGUAGE OverloadedStrings #-}
-- | The ranges of weft-kv's sorted-set commands: ZRANGE's arguments and
-- options as redis 7.0 parses them, score and lex bounds, and the
-- members a range picks (pure, over a sorted set's ordered members).
module Kv.ZRange
  ( ZRange (..)
  , Bound
  , LexBound
  , zrangeArgs
  , zrangePick
  , byScore
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
import Kv.Sorted
import Kv.Text (readBound)

-- | The members within score bounds, lowest first.
byScore :: Bound -> Bound -> ZSet -> [(Double, ByteString)]
byScore lo hi = filter (\(s, _) -> atLeast lo s && atMost hi s) . zsetAsc

-- | The members from rank a to rank b, lowest first.
byRank :: Int -> Int -> ZSet -> [(Double, ByteString)]
byRank a b ordered = rankSlice (zsetSize ordered) a b (`zsetAscFrom` ordered)

-- | Ranks a to b of n items (ZRANGE's index rules: negative ones count
-- from the end; out-of-range ends are clamped), given the items from a
-- rank on.
rankSlice :: Int -> Int -> Int -> (Int -> [x]) -> [x]
rankSlice n a b from = if start > end then [] else take (end - start + 1) (from start)
  where
    start = max 0 (if a < 0 then n + a else a)
    end = min (n - 1) (if b < 0 then n + b else b)

-- | The members a lex range picks, in order.
byLex :: LexBound -> LexBound -> ZSet -> [(Double, ByteString)]
byLex lo hi = takeWhile (lexAtMost hi . snd) . lexWalk False lo hi

-- Note [Lex ranges over mixed scores]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Redis defines its lex ranges only for members of one score, and walks
-- them in score order as if that were byte order: it gives up unless the
-- last member is at or above the range's start and the first at or below
-- its end; then it starts at the first member at or above the start and
-- goes on while members stay at or below the end (ZRANGE's LIMIT offset
-- skips members before that check). 'lexWalk' and its callers walk the
-- same way, so with mixed scores weft-kv answers as redis does for a
-- small sorted set (up to 128 members, the form the differential test
-- makes); redis's larger ones, searched by skip list, can differ.

-- | From the first member at or past the range's near end, in walk order
-- (highest first if reversed), before any check against its far end:
-- Note [Lex ranges over mixed scores].
lexWalk :: Bool -> LexBound -> LexBound -> ZSet -> [(Double, ByteString)]
lexWalk rev lo hi ordered
  | zsetNull ordered || emptyRange = []
  | not (lexAtLeast lo (snd (zsetAt (zsetSize ordered - 1) ordered))) || not (lexAtMost hi (snd (zsetAt 0 ordered))) = []
  | otherwise = case dropWhile (not . near . snd) ((if rev then zsetDesc else zsetAsc) ordered) of
      walk@(e : _) | far (snd e) -> walk
      _ -> []
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

-- | The members a ZRANGE picks, in its order.
zrangePick :: ZRange -> Bool -> Int -> Int -> ZSet -> [(Double, ByteString)]
zrangePick range rev offset count ordered = case range of
  ByRank a b -> rankSlice (zsetSize ordered) a b (\i -> (if rev then zsetDescFrom else zsetAscFrom) i ordered)
  ByScore from to -> limited (filter (\(s, _) -> atLeast from s && atMost to s) inOrder)
  ByLex lo hi ->
    -- The offset skips members before the far end is checked (Note
    -- [Lex ranges over mixed scores]); reversed, the far end is the low.
    let far = if rev then lexAtLeast lo else lexAtMost hi
        walked = if offset < 0 then [] else takeWhile (far . snd) (drop offset (lexWalk rev lo hi ordered))
    in if count < 0 then walked else take count walked
  where
    inOrder = (if rev then zsetDesc else zsetAsc) ordered
    limited xs | offset < 0 = []
               | count < 0 = drop offset xs
               | otherwise = take count (drop offset xs)
