{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands on hashes and sorted sets.
module Kv.Collections
  ( collectionCommands
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe)
import qualified Data.Set as Set

import Kv.Plan
import Kv.Resp
import Kv.Store
import Kv.Text (formatDouble, readBound, readDouble)

-- | The commands of this module, for "Kv.Command"'s table.
collectionCommands :: [Command]
collectionCommands =
    -- Hashes
  [ ("HSET", (AtLeast 3, hsetCommand))
  , ("HGET", (Exactly 2, \[k, f] -> OnKey k (hgetOp f)))
  , ("HLEN", (Exactly 1, \[k] -> OnKey k hlenOp))
  , ("HDEL", (AtLeast 2, \(k : fs) -> OnKey k (hdelOp fs)))
  , ("HGETALL", (Exactly 1, \[k] -> OnKey k hgetallOp))
  , ("HMSET", (AtLeast 3, hmsetCommand))
  , ("HSETNX", (Exactly 3, \[k, f, x] -> OnKey k (hsetnxOp (B.copy f) (B.copy x))))
  , ("HMGET", (AtLeast 2, \(k : fs) -> OnKey k (hmgetOp fs)))
  , ("HEXISTS", (Exactly 2, \[k, f] -> OnKey k (hashRead (\h -> RInt (if Map.member f h then 1 else 0)) (RInt 0))))
  , ("HSTRLEN", (Exactly 2, \[k, f] -> OnKey k (hashRead (\h -> RInt (maybe 0 B.length (Map.lookup f h))) (RInt 0))))
  , ("HKEYS", (Exactly 1, \[k] -> OnKey k (hashRead (RArray . map RBulk . Map.keys) (RArray []))))
  , ("HVALS", (Exactly 1, \[k] -> OnKey k (hashRead (RArray . map RBulk . Map.elems) (RArray []))))
  , ("HINCRBY", (Exactly 3, \[k, f, n] -> withInt n (OnKey k . hincrbyOp (B.copy f))))
    -- Sorted sets
  , ("ZADD", (AtLeast 3, zaddCommand))
  , ("ZINCRBY", (Exactly 3, \[k, n, m] -> zaddCommand [k, "INCR", n, m]))
  , ("ZPOPMIN", (Between 1 2, zpopCommand False))
  , ("ZPOPMAX", (Between 1 2, zpopCommand True))
  , ("ZREM", (AtLeast 2, \(k : ms) -> OnKey k (zremOp ms)))
  , ("ZCARD", (Exactly 1, \[k] -> OnKey k zcardOp))
  , ("ZSCORE", (Exactly 2, \[k, m] -> OnKey k (zscoreOp m)))
  , ("ZMSCORE", (AtLeast 2, \(k : ms) -> OnKey k (zmscoreOp ms)))
  , ("ZRANK", (Exactly 2, \[k, m] -> OnKey k (zrankOp False m)))
  , ("ZREVRANK", (Exactly 2, \[k, m] -> OnKey k (zrankOp True m)))
  , ("ZCOUNT", (Exactly 3, \[k, lo, hi] -> withScore lo hi (\a b -> OnKey k (zcountOp (byScore a b)))))
  , ("ZLEXCOUNT", (Exactly 3, \[k, lo, hi] -> withLex lo hi (\a b -> OnKey k (zcountOp (byLex a b)))))
  , ("ZREMRANGEBYSCORE", (Exactly 3, \[k, lo, hi] -> withScore lo hi (\a b -> OnKey k (zremrangeOp (byScore a b)))))
  , ("ZREMRANGEBYLEX", (Exactly 3, \[k, lo, hi] -> withLex lo hi (\a b -> OnKey k (zremrangeOp (byLex a b)))))
  , ("ZREMRANGEBYRANK", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (OnKey k . zremrangeOp . byRank i))))
  , ("ZRANGE", (AtLeast 3, zrangeCommand))
    -- ZRANGE's older forms: ZRANGE with the option each names, and only
    -- WITHSCORES and LIMIT after it.
  , ("ZREVRANGE", (AtLeast 3, zrangeForm ["REV"]))
  , ("ZRANGEBYSCORE", (AtLeast 3, zrangeForm ["BYSCORE"]))
  , ("ZREVRANGEBYSCORE", (AtLeast 3, zrangeForm ["BYSCORE", "REV"]))
  , ("ZRANGEBYLEX", (AtLeast 3, zrangeForm ["BYLEX"]))
  , ("ZREVRANGEBYLEX", (AtLeast 3, zrangeForm ["BYLEX", "REV"]))
  ]

------------------------------------------------------------------------------
-- Hashes

-- | HSET key field value [field value ...]
hsetCommand :: [ByteString] -> Plan
hsetCommand (k : fvs)
  | odd (length fvs) = Answer (RError "ERR wrong number of arguments for 'hset' command")
  | otherwise = OnKey k (hsetOp (pairs fvs))
  where
    pairs (f : x : rest) = (B.copy f, B.copy x) : pairs rest
    pairs _ = []
hsetCommand [] = Answer syntaxError

hsetOp :: [(ByteString, ByteString)] -> KeyOp
hsetOp fvs _ _ v = case v of
  Nothing -> set Map.empty
  Just (VHash h) -> set h
  Just _ -> Outcome Keep wrongType
  where
    set h = let h' = foldl (\m (f, x) -> Map.insert f x m) h fvs
            in Outcome (Replace (VHash h')) (RInt (Map.size h' - Map.size h))

hgetOp :: ByteString -> KeyOp
hgetOp f _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VHash h) -> maybe RNil RBulk (Map.lookup f h)
  Just _ -> wrongType

-- | HDEL: how many of the fields were there; an emptied hash goes.
hdelOp :: [ByteString] -> KeyOp
hdelOp = removeFrom (\x -> case x of VHash h -> Just h; _ -> Nothing) VHash Map.delete Map.size

-- | HGETALL: fields and values, alternating, in no order a client may
-- rely on (as SMEMBERS).
hgetallOp :: KeyOp
hgetallOp _ _ v = Outcome Keep $ case v of
  Nothing -> RArray []
  Just (VHash h) -> RArray (concat [ [RBulk f, RBulk x] | (f, x) <- Map.toList h ])
  Just _ -> wrongType

-- | HMSET: HSET under its old name, answering OK.
hmsetCommand :: [ByteString] -> Plan
hmsetCommand (k : fvs)
  | odd (length fvs) = Answer (RError "ERR wrong number of arguments for 'hmset' command")
  | otherwise = case hsetCommand (k : fvs) of
      OnKey key op -> OnKey key (\now c v -> case op now c v of
        Outcome u (RInt _) -> Outcome u (RSimple "OK")
        other -> other)
      other -> other
hmsetCommand [] = Answer syntaxError

-- | HSETNX: set a field only if the hash does not have it.
hsetnxOp :: ByteString -> ByteString -> KeyOp
hsetnxOp f x _ _ v = case v of
  Nothing -> Outcome (Replace (VHash (Map.singleton f x))) (RInt 1)
  Just (VHash h)
    | Map.member f h -> Outcome Keep (RInt 0)
    | otherwise -> Outcome (Replace (VHash (Map.insert f x h))) (RInt 1)
  Just _ -> Outcome Keep wrongType

-- | HMGET: each field's value, nil for a field (or hash) that is not there.
hmgetOp :: [ByteString] -> KeyOp
hmgetOp fs _ _ v = Outcome Keep $ case v of
  Nothing -> RArray (map (const RNil) fs)
  Just (VHash h) -> RArray [ maybe RNil RBulk (Map.lookup f h) | f <- fs ]
  Just _ -> wrongType

-- | A read of a hash: @onHash@ of it, @missing@ for no key, WRONGTYPE for
-- another type.
hashRead :: (Map.Map ByteString ByteString -> Reply) -> Reply -> KeyOp
hashRead onHash missing _ _ v = Outcome Keep $ case v of
  Nothing -> missing
  Just (VHash h) -> onHash h
  Just _ -> wrongType

-- | HINCRBY: add to a field's integer (0 if missing), with redis's checks.
hincrbyOp :: ByteString -> Int -> KeyOp
hincrbyOp f d _ _ v = case v of
  Nothing -> bump Map.empty
  Just (VHash h) -> bump h
  Just _ -> Outcome Keep wrongType
  where
    bump h = case maybe (Just 0) readInteger (Map.lookup f h) of
      Nothing -> Outcome Keep (RError "ERR hash value is not an integer")
      Just n
        | (d > 0 && n > maxBound - d) || (d < 0 && n < minBound - d) ->
            Outcome Keep (RError "ERR increment or decrement would overflow")
        | otherwise -> let n' = n + d in
            Outcome (Replace (VHash (Map.insert f (showInt n') h))) (RInt n')

hlenOp :: KeyOp
hlenOp = sizeOp (\x -> case x of VHash h -> Just (Map.size h); _ -> Nothing)

------------------------------------------------------------------------------
-- Sorted sets

-- | What ZADD's options ask for.
data ZAddFlags = ZAddFlags
  { zNx, zXx, zGt, zLt, zCh, zIncr :: !Bool }

-- | ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...],
-- with redis's checks in redis's order: options, pairs, conflicts, every
-- score, then the key.
zaddCommand :: [ByteString] -> Plan
zaddCommand (k : rest0) = options (ZAddFlags False False False False False False) rest0
  where
    options f (o : rest) = case upper o of
      "NX" -> options f { zNx = True } rest
      "XX" -> options f { zXx = True } rest
      "GT" -> options f { zGt = True } rest
      "LT" -> options f { zLt = True } rest
      "CH" -> options f { zCh = True } rest
      "INCR" -> options f { zIncr = True } rest
      _ -> pairsFrom f (o : rest)
    options f [] = pairsFrom f []
    pairsFrom f sms
      | odd (length sms) || null sms = Answer syntaxError
      | zNx f && zXx f = Answer (RError "ERR XX and NX options at the same time are not compatible")
      | (zGt f && zNx f) || (zLt f && zNx f) || (zGt f && zLt f) =
          Answer (RError "ERR GT, LT, and/or NX options at the same time are not compatible")
      | zIncr f && length sms > 2 = Answer (RError "ERR INCR option supports a single increment-element pair")
      | otherwise = case traverse score (pairs sms) of
          Just ps -> OnKey k (zaddOp f ps)
          Nothing -> Answer (RError "ERR value is not a valid float")
    pairs (s : m : more) = (s, m) : pairs more
    pairs _ = []
    score (s, m) = (\d -> (d, B.copy m)) <$> readDouble s
zaddCommand [] = Answer syntaxError

zaddOp :: ZAddFlags -> [(Double, ByteString)] -> KeyOp
zaddOp f ps _ _ v = case v of
  Nothing | zXx f -> Outcome Keep (reply 0 0 Nothing)
          | otherwise -> add emptyZSet
  Just (VZSet z) -> add z
  Just _ -> Outcome Keep wrongType
  where
    add z0 = go z0 0 0 Nothing ps
      where
        go z !added !updated lastScore [] =
          Outcome (if added + updated > 0 then Replace (VZSet z) else Keep) (reply added updated lastScore)
        go z@(ZSet scores _) added updated lastScore ((s, m) : more) = case Map.lookup m scores of
          Just old
            | zNx f -> go z added updated lastScore more
            | isNaN new -> Outcome (if added + updated > 0 then Replace (VZSet z) else Keep)
                                   (RError "ERR resulting score is not a number (NaN)")
            | (zLt f && new >= old) || (zGt f && new <= old) -> go z added updated lastScore more
            | new /= old -> go (zsetPut m new (Just old) z) added (updated + 1) (Just new) more
            | otherwise -> go z added updated (Just new) more
            where new = if zIncr f then s + old else s
          Nothing
            | zXx f -> go z added updated lastScore more
            | otherwise -> go (zsetPut m s Nothing z) (added + 1) updated (Just s) more
    reply :: Int -> Int -> Maybe Double -> Reply
    reply added updated lastScore
      | zIncr f = maybe RNil (RBulk . formatDouble) lastScore
      | zCh f = RInt (added + updated)
      | otherwise = RInt added

-- | Give a member a score (replacing its old one, if given). A score of
-- -0 is kept as 0, as redis keeps it in a small sorted set (in one of more
-- than 128 members, redis keeps the sign).
zsetPut :: ByteString -> Double -> Maybe Double -> ZSet -> ZSet
zsetPut m s0 old (ZSet scores ordered) =
  ZSet (Map.insert m s scores) (Set.insert (s, m) (maybe ordered (\o -> Set.delete (o, m) ordered) old))
  where s = if s0 == 0 then 0 else s0

-- | ZPOPMIN / ZPOPMAX (highest first: 'True') key [count]
zpopCommand :: Bool -> [ByteString] -> Plan
zpopCommand top [k] = OnKey k (zpopOp top 1)
zpopCommand top [k, n] = withCount n (OnKey k . zpopOp top)
zpopCommand _ _ = Answer syntaxError

zpopOp :: Bool -> Int -> KeyOp
zpopOp top count _ _ v = case v of
  Nothing -> Outcome Keep (RArray [])
  Just (VZSet (ZSet scores ordered)) ->
    let (taken, rest)
          | top = let (low, high) = Set.splitAt (Set.size ordered - count) ordered in (Set.toDescList high, low)
          | otherwise = let (low, high) = Set.splitAt count ordered in (Set.toAscList low, high)
        scores' = foldl (\m (_, x) -> Map.delete x m) scores taken
        update | Set.null rest = Delete
               | otherwise = Replace (VZSet (ZSet scores' rest))
    in Outcome (if null taken then Keep else update) (withScores True taken)
  Just _ -> Outcome Keep wrongType

-- | ZREM: how many of the members were there; an emptied sorted set goes.
zremOp :: [ByteString] -> KeyOp
zremOp = removeFrom (\x -> case x of VZSet z -> Just z; _ -> Nothing) VZSet remove (\(ZSet scores _) -> Map.size scores)
  where
    remove m z@(ZSet scores ordered) = case Map.lookup m scores of
      Just s -> ZSet (Map.delete m scores) (Set.delete (s, m) ordered)
      Nothing -> z

-- | ZMSCORE key member [member ...]: each member's score, or nil.
zmscoreOp :: [ByteString] -> KeyOp
zmscoreOp ms _ _ v = Outcome Keep $ case v of
  Nothing -> RArray (map (const RNil) ms)
  Just (VZSet (ZSet scores _)) -> RArray [ maybe RNil (RBulk . formatDouble) (Map.lookup m scores) | m <- ms ]
  Just _ -> wrongType

-- | ZRANK / ZREVRANK (from the highest: 'True'): the member's place, or nil.
zrankOp :: Bool -> ByteString -> KeyOp
zrankOp fromTop m _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VZSet (ZSet scores ordered)) -> case Map.lookup m scores of
    Just s -> let i = Set.findIndex (s, m) ordered
              in RInt (if fromTop then Set.size ordered - 1 - i else i)
    Nothing -> RNil
  Just _ -> wrongType

-- | ZCOUNT and ZLEXCOUNT: how many members the range picks.
zcountOp :: (Set.Set (Double, ByteString) -> [(Double, ByteString)]) -> KeyOp
zcountOp pick _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VZSet (ZSet _ ordered)) -> RInt (length (pick ordered))
  Just _ -> wrongType

-- | ZREMRANGEBYSCORE, ZREMRANGEBYLEX and ZREMRANGEBYRANK: remove the
-- members the range picks, and say how many; an emptied sorted set goes.
zremrangeOp :: (Set.Set (Double, ByteString) -> [(Double, ByteString)]) -> KeyOp
zremrangeOp pick _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just (VZSet (ZSet scores ordered)) ->
    let gone = pick ordered
        kept = foldl (flip Set.delete) ordered gone
        scores' = foldl (\m (_, x) -> Map.delete x m) scores gone
        update | null gone = Keep
               | Set.null kept = Delete
               | otherwise = Replace (VZSet (ZSet scores' kept))
    in Outcome update (RInt (length gone))
  Just _ -> Outcome Keep wrongType

-- | The members within score bounds, lowest first.
byScore :: Bound -> Bound -> Set.Set (Double, ByteString) -> [(Double, ByteString)]
byScore lo hi = filter (\(s, _) -> atLeast lo s && atMost hi s) . Set.toAscList

-- | The members from rank a to rank b, lowest first.
byRank :: Int -> Int -> Set.Set (Double, ByteString) -> [(Double, ByteString)]
byRank a b ordered = rankSlice (Set.size ordered) a b (Set.toAscList ordered)

-- | Ranks a to b of n items (ZRANGE's index rules: negative ones count
-- from the end; out-of-range ends are clamped).
rankSlice :: Int -> Int -> Int -> [x] -> [x]
rankSlice n a b xs = if start > end then [] else take (end - start + 1) (drop start xs)
  where
    start = max 0 (if a < 0 then n + a else a)
    end = min (n - 1) (if b < 0 then n + b else b)

-- | The members a lex range picks, in order.
byLex :: LexBound -> LexBound -> Set.Set (Double, ByteString) -> [(Double, ByteString)]
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
lexWalk :: Bool -> LexBound -> LexBound -> Set.Set (Double, ByteString) -> [(Double, ByteString)]
lexWalk rev lo hi ordered
  | Set.null ordered || emptyRange = []
  | not (lexAtLeast lo (snd (Set.findMax ordered))) || not (lexAtMost hi (snd (Set.findMin ordered))) = []
  | otherwise = case dropWhile (not . near . snd) ((if rev then Set.toDescList else Set.toAscList) ordered) of
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


-- | An older form of ZRANGE: the options it stands for, then only
-- WITHSCORES and LIMIT (another option is redis's syntax error).
zrangeForm :: [ByteString] -> [ByteString] -> Plan
zrangeForm implied (k : lo : hi : opts)
  | any ((`elem` ["REV", "BYSCORE", "BYLEX"]) . upper) opts = Answer syntaxError
  | otherwise = zrangeCommand (k : lo : hi : implied ++ opts)
zrangeForm _ _ = Answer syntaxError

-- | Members, with their scores after each if asked.
withScores :: Bool -> [(Double, ByteString)] -> Reply
withScores scored ms
  | scored = RArray (concat [ [RBulk m, RBulk (formatDouble s)] | (s, m) <- ms ])
  | otherwise = RArray [ RBulk m | (_, m) <- ms ]

zcardOp :: KeyOp
zcardOp = sizeOp (\x -> case x of VZSet (ZSet scores _) -> Just (Map.size scores); _ -> Nothing)

zscoreOp :: ByteString -> KeyOp
zscoreOp m _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VZSet (ZSet scores _)) -> maybe RNil (RBulk . formatDouble) (Map.lookup m scores)
  Just _ -> wrongType

-- | Which members a ZRANGE selects.
data ZRange
  = ByRank !Int !Int
  | ByScore !Bound !Bound
  | ByLex !LexBound !LexBound

-- | A score bound: the score and whether it is excluded.
data Bound = Bound !Double !Bool

data LexBound = LexMin | LexMax | LexAt !ByteString !Bool

-- | ZRANGE key min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]
-- [WITHSCORES], with redis 7.0's parsing and errors.
zrangeCommand :: [ByteString] -> Plan
zrangeCommand (k : lo : hi : opts) = go opts Nothing False Nothing False
  where
    go (o : rest) kind rev limit scored = case (upper o, rest) of
      ("WITHSCORES", _) -> go rest kind rev limit True
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
              run r = OnKey k (zrangeOp r rev offset count scored)
          in case kind of
            Nothing -> withInt from (\a -> withInt to (\b -> run (ByRank a b)))
            Just True -> maybe (Answer (RError "ERR min or max is not a float")) run
                           (ByScore <$> scoreBound from <*> scoreBound to)
            Just False -> maybe (Answer (RError "ERR min or max not valid string range item")) run
                            (ByLex <$> lexBound from <*> lexBound to)
zrangeCommand _ = Answer syntaxError

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

zrangeOp :: ZRange -> Bool -> Int -> Int -> Bool -> KeyOp
zrangeOp range rev offset count scored _ _ v = Outcome Keep $ case v of
  Nothing -> RArray []
  Just (VZSet (ZSet _ ordered)) ->
    let inOrder = (if rev then Set.toDescList else Set.toAscList) ordered
        limited xs | offset < 0 = []
                   | count < 0 = drop offset xs
                   | otherwise = take count (drop offset xs)
    in case range of
      ByRank a b -> withScores scored (rankSlice (Set.size ordered) a b inOrder)
      ByScore from to -> withScores scored (limited (filter (\(s, _) -> atLeast from s && atMost to s) inOrder))
      ByLex lo hi ->
        -- The offset skips members before the far end is checked (Note
        -- [Lex ranges over mixed scores]); reversed, the far end is the low.
        let far = if rev then lexAtLeast lo else lexAtMost hi
            walked = if offset < 0 then [] else takeWhile (far . snd) (drop offset (lexWalk rev lo hi ordered))
        in withScores False (if count < 0 then walked else take count walked)
  Just _ -> wrongType
