{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands on sorted sets: those of one key, and those that
-- combine several (ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD,
-- ZRANGESTORE, ZMPOP), whose keys may have several colors.
module Kv.ZSets
  ( zsetCommands
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.Map.Strict as Map
import Data.List (nub, sort, sortOn)
import Data.Maybe (fromMaybe, mapMaybe)
import qualified Data.Set as Set

import Kv.Plan
import Kv.Members (membersAscList, smallMembers)
import Kv.Packed (packedToDescList)
import Kv.Part (itemsScored, scoredItems)
import Kv.Resp
import Kv.Sorted (orderedItem, zsetOrdered)
import Kv.SortedSet
import Kv.Store
import Kv.Text (formatDouble, readDouble)
import Kv.ZRange

-- | The commands of this module, for "Kv.Command"'s table.
zsetCommands :: [Command]
zsetCommands =
  [ ("ZADD", (AtLeast 3, zaddCommand))
  , ("ZINCRBY", (Exactly 3, \[k, n, m] -> zaddCommand [k, "INCR", n, m]))
  , ("ZPOPMIN", (Between 1 2, zpopCommand False))
  , ("ZPOPMAX", (Between 1 2, zpopCommand True))
  , ("ZREM", (AtLeast 2, \(k : ms) -> OnKey k (zremOp ms)))
  , ("ZCARD", (Exactly 1, \[k] -> OnKey k zcardOp))
  , ("ZSCORE", (Exactly 2, \[k, m] -> OnKey k (zscoreOp m)))
  , ("ZMSCORE", (AtLeast 2, \(k : ms) -> OnKey k (zmscoreOp ms)))
  , ("ZRANK", (Exactly 2, \[k, m] -> OnKey k (zrankOp False m)))
  , ("ZREVRANK", (Exactly 2, \[k, m] -> OnKey k (zrankOp True m)))
  , ("ZCOUNT", (Exactly 3, \[k, lo, hi] -> withScore lo hi (\a b -> OnKey k (zcountOp (countByScore a b)))))
  , ("ZLEXCOUNT", (Exactly 3, \[k, lo, hi] -> withLex lo hi (\a b -> OnKey k (zcountOp (fmap length . byLex a b)))))
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
  , ("ZRANDMEMBER", (AtLeast 1, \(k : rest) -> randomArgs (Just "WITHSCORES") rest (\c scored -> OnKey k (zrandmemberOp c scored))))
    -- Several keys, perhaps of several colors (Note [Multi-key commands]
    -- in "Kv.Batch").
  , ("ZUNIONSTORE", (AtLeast 3, combineCommand "ZUNIONSTORE" Union Storing))
  , ("ZINTERSTORE", (AtLeast 3, combineCommand "ZINTERSTORE" Inter Storing))
  , ("ZDIFFSTORE", (AtLeast 3, combineCommand "ZDIFFSTORE" Diff Storing))
  , ("ZUNION", (AtLeast 2, combineCommand "ZUNION" Union Listing))
  , ("ZINTER", (AtLeast 2, combineCommand "ZINTER" Inter Listing))
  , ("ZDIFF", (AtLeast 2, combineCommand "ZDIFF" Diff Listing))
  , ("ZINTERCARD", (AtLeast 2, combineCommand "ZINTERCARD" Inter Counting))
  , ("ZRANGESTORE", (AtLeast 4, zrangestoreCommand))
  , ("ZMPOP", (AtLeast 3, zmpopCommand))
  , ("BZPOPMIN", (AtLeast 2, bzpopCommand False))
  , ("BZPOPMAX", (AtLeast 2, bzpopCommand True))
  , ("BZMPOP", (AtLeast 4, \(t : rest) -> withTimeout t (\ms -> zmpopArgs rest (bzmpop ms))))
  ]

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
    score (s, m) = (\d -> (d, m)) <$> readDouble s
zaddCommand [] = Answer syntaxError

-- | ZADD, given the members as slices of the request: a member is
-- copied in only when it is added or its score changes.
zaddOp :: ZAddFlags -> [(Double, ByteString)] -> KeyOp
zaddOp f ps _ _ v = case v of
  Nothing | zXx f -> Outcome Keep (reply 0 0 Nothing)
          | otherwise -> InPlace (add emptySorted)
  Just (VZSet z) -> InPlace (add z)
  Just _ -> Outcome Keep wrongType
  where
    add z0 = go z0 0 0 Nothing ps
      where
        changed z added updated = if added + updated > 0 then Replace (VZSet z) else Keep
        go :: SortedSet -> Int -> Int -> Maybe Double -> [(Double, ByteString)] -> IO Outcome
        go z !added !updated lastScore [] = return (Outcome (changed z added updated) (reply added updated lastScore))
        go z added updated lastScore ((s, m) : more) = sortedScore z m >>= \had -> case had of
          Just old
            | zNx f -> go z added updated lastScore more
            | isNaN new -> return (Outcome (changed z added updated) (RError "ERR resulting score is not a number (NaN)"))
            | (zLt f && new >= old) || (zGt f && new <= old) -> go z added updated lastScore more
            | new /= old -> sortedMove z m new (Just old) >>= \z' -> go z' added (updated + 1) (Just new) more
            | otherwise -> go z added updated (Just new) more
            where new = if zIncr f then s + old else s
          Nothing
            | zXx f -> go z added updated lastScore more
            | otherwise -> sortedMove z m s Nothing >>= \z' -> go z' (added + 1) updated (Just s) more
    reply :: Int -> Int -> Maybe Double -> Reply
    reply added updated lastScore
      | zIncr f = maybe RNil (RBulk . formatDouble) lastScore
      | zCh f = RInt (added + updated)
      | otherwise = RInt added

-- | ZPOPMIN / ZPOPMAX (highest first: 'True') key [count]
zpopCommand :: Bool -> [ByteString] -> Plan
zpopCommand top [k] = OnKey k (zpopOp top 1)
zpopCommand top [k, n] = withCount n (OnKey k . zpopOp top)
zpopCommand _ _ = Answer syntaxError

zpopOp :: Bool -> Int -> KeyOp
zpopOp top count _ _ = onZSet (Outcome Keep (RArray [])) $ \z -> do
  taken <- sortedWalk z top 0 count (const True)
  (_, update) <- removeAll z (map snd taken)
  return (Outcome (if null taken then Keep else update) (withScores True taken))

-- | A sorted set, if the value is one.
zsetOf :: Value -> Maybe SortedSet
zsetOf (VZSet z) = Just z
zsetOf _ = Nothing

-- | A sorted set's operation in place ('onMembers'): @missing@ for no key.
onZSet :: Outcome -> (SortedSet -> IO Outcome) -> Maybe Value -> Outcome
onZSet = onMembers zsetOf

-- | A read of a sorted set: the reply from it, @missing@ for no key.
zsetRead :: Reply -> (SortedSet -> IO Reply) -> Maybe Value -> Outcome
zsetRead = readMembers zsetOf

-- | Remove the members: how many were there, and the update.
removeAll :: SortedSet -> [ByteString] -> IO (Int, Update)
removeAll = removeEach sortedRemove sortedSize VZSet

-- | ZREM: how many of the members were there; an emptied sorted set goes.
zremOp :: [ByteString] -> KeyOp
zremOp ms _ _ = onZSet (Outcome Keep (RInt 0)) $ \z -> do
  (removed, update) <- removeAll z ms
  return (Outcome update (RInt removed))

-- | ZMSCORE key member [member ...]: each member's score, or nil.
zmscoreOp :: [ByteString] -> KeyOp
zmscoreOp ms _ _ = zsetRead (RArray (map (const RNil) ms)) $ \z ->
  RArray <$> mapM (fmap (maybe RNil (RBulk . formatDouble)) . sortedScore z) ms

-- | ZRANK / ZREVRANK (from the highest: 'True'): the member's place, or nil.
zrankOp :: Bool -> ByteString -> KeyOp
zrankOp fromTop m _ _ = zsetRead RNil $ \z -> do
  n <- sortedSize z
  maybe RNil (\i -> RInt (if fromTop then n - 1 - i else i)) <$> sortedRank z m

-- | ZCOUNT and ZLEXCOUNT: how many members the range picks.
zcountOp :: (SortedSet -> IO Int) -> KeyOp
zcountOp counted _ _ = zsetRead (RInt 0) (fmap RInt . counted)

-- | ZREMRANGEBYSCORE, ZREMRANGEBYLEX and ZREMRANGEBYRANK: remove the
-- members the range picks, and say how many; an emptied sorted set goes.
zremrangeOp :: (SortedSet -> IO [(Double, ByteString)]) -> KeyOp
zremrangeOp pick _ _ = onZSet (Outcome Keep (RInt 0)) $ \z -> do
  gone <- pick z
  (removed, update) <- removeAll z (map snd gone)
  return (Outcome update (RInt removed))

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
zcardOp = sizeOp (\x -> case x of VZSet z -> Just (sortedSize z); _ -> Nothing)

zscoreOp :: ByteString -> KeyOp
zscoreOp m _ _ = zsetRead RNil (fmap (maybe RNil (RBulk . formatDouble)) . (`sortedScore` m))

-- | ZRANGE key min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]
-- [WITHSCORES], with redis 7.0's parsing and errors.
zrangeCommand :: [ByteString] -> Plan
zrangeCommand (k : lo : hi : opts) = zrangeArgs False lo hi opts $ \r rev offset count scored ->
  OnKey k (zrangeOp r rev offset count scored)
zrangeCommand _ = Answer syntaxError

zrangeOp :: ZRange -> Bool -> Int -> Int -> Bool -> KeyOp
zrangeOp range rev offset count scored _ _ = zsetRead (RArray []) (fmap (withScores scored) . zrangePick range rev offset count)

-- | ZRANDMEMBER key [count [WITHSCORES]]: a random member (nil without the
-- sorted set); with a count, up to that many distinct members, or, for a
-- negative count, that many with repeats; all of them highest first (the
-- order redis walks a sorted set in) when the count covers them.
zrandmemberOp :: Maybe Int -> Bool -> KeyOp
zrandmemberOp count scored now _ = zsetRead (if count == Nothing then RNil else RArray []) $ \z -> case count of
  Nothing -> do
    n <- sortedSize z
    if n == 0 then return RNil else
      RBulk . snd <$> sortedAt z False (fromIntegral (randomFrom (clockSeed now) `mod` fromIntegral n))
  Just c -> do
    n <- sortedSize z
    let ranks = map (\r -> fromIntegral (r `mod` fromIntegral n)) (randoms (clockSeed now))
    if n > smallMembers && 4 * c < n
      -- Few from many (or with repeats): picked by rank, one by one.
      then withScores scored <$> mapM (sortedAt z False) (if c < 0 then take (negate c) ranks else distinctRanks c ranks)
      else do
        ordered <- zsetOrdered <$> sortedPacked z
        return (withScores scored (map orderedItem (randomItems now c ordered (packedToDescList ordered))))

-- | The first @c@ distinct ranks of a stream of random ones (which must
-- hold that many).
distinctRanks :: Int -> [Int] -> [Int]
distinctRanks c0 = go c0 Set.empty
  where
    go 0 _ _ = []
    go c seen (r : rs)
      | Set.member r seen = go c seen rs
      | otherwise = r : go (c - 1) (Set.insert r seen) rs
    go _ _ [] = []

------------------------------------------------------------------------------
-- Several sorted sets

-- Note [Scored parts]
-- ~~~~~~~~~~~~~~~~~~~
-- A command over several keys reads each key on its own color and gets
-- its part back as a 'Reply' (Note [Multi-key commands] in "Kv.Batch").
-- The sorted-set commands need every score exactly, so a part carries
-- members and scores as pairs of elements: the member's 'RBulk' and the
-- score's bits in an 'RInt' ('scoredItems' in "Kv.Part", which RENAME's
-- and COPY's parts use too). A part is never sent to a client. A plain
-- set's members score 1, as in redis.

-- | A key's part for a command over several sorted sets: its members and
-- scores, lowest first (Note [Scored parts]); none for a missing key; a
-- set's members at 1; WRONGTYPE for another type.
readScored :: KeyOp
readScored _ _ v = case v of
  Nothing -> Outcome Keep (RArray [])
  Just (VZSet z) -> InPlace (Outcome Keep . scoredPart <$> sortedAsc z)
  Just (VSet s) -> InPlace ((\ms -> Outcome Keep (scoredPart [ (1, m) | (m, _) <- ms ])) <$> membersAscList s)
  Just _ -> Outcome Keep wrongType

scoredPart :: [(Double, ByteString)] -> Reply
scoredPart = RArray . scoredItems

fromPart :: Reply -> [(Double, ByteString)]
fromPart (RArray xs) = fromMaybe [] (itemsScored xs)
fromPart _ = []

-- | The STORE forms' write: the destination, of whatever type it was,
-- becomes the result without expiry, or goes if the result is empty.
zstoreOp :: [(Double, ByteString)] -> KeyOp
zstoreOp ms _ _ v
  | null ms = Outcome (maybe Keep (const Delete) v) (RInt 0)
  | otherwise = InPlace $ do
      z <- sortedFromAscList (sort ms)
      n <- sortedSize z
      return (Outcome (Fresh (VZSet z)) (RInt n))

data Aggregate = Sum | Minimum | Maximum

-- | Where a combining command's result goes.
data Form
  = Storing    -- ^ the STORE forms: into the destination
  | Listing    -- ^ ZUNION, ZINTER, ZDIFF: to the client
  | Counting   -- ^ ZINTERCARD: its size, to the client
  deriving Eq

-- | A combining command's options.
data Options = Options
  { oWeights :: Maybe [Double]
  , oAggregate :: !Aggregate
  , oScored :: !Bool
  , oLimit :: !Int }

-- | ZUNION, ZINTER, ZDIFF, ZINTERCARD (@numkeys key [key ...] options@)
-- and the STORE forms (a destination first), as redis 7.0 parses them:
-- numkeys, then the keys' types (WRONGTYPE, whatever the options say),
-- then the options.
combineCommand :: ByteString -> Combine -> Form -> [ByteString] -> Plan
combineCommand name how form args0 = case (if form == Storing then drop 1 args0 else args0) of
  nk : rest -> case readInteger nk of
    Nothing -> Answer notInteger
    Just n
      | n < 1 -> Answer (RError ("ERR at least 1 input key is needed for '" <> lower name <> "' command"))
      | n > length rest -> Answer syntaxError
      | otherwise ->
          let (ks, opts) = splitAt n rest
              parsed = options n opts (Options Nothing Sum False 0)
          in Steps [ (k, readScored) | k <- ks ] $ \parts -> case ([ e | e@(RError _) <- parts ], parsed) of
               (e : _, _) -> Answer e
               (_, Left e) -> Answer e
               (_, Right o) -> finish o (combineScored how o (map fromPart parts))
  [] -> Answer syntaxError
  where
    weighted = case how of Diff -> False; _ -> form /= Counting
    options n (o : more) acc
      | weighted && upper o == "WEIGHTS" && length more >= n =
          case traverse readDouble (take n more) of
            Just ws -> options n (drop n more) acc { oWeights = Just ws }
            Nothing -> Left (RError "ERR weight value is not a float")
      | weighted && upper o == "AGGREGATE", a : more' <- more = case upper a of
          "SUM" -> options n more' acc { oAggregate = Sum }
          "MIN" -> options n more' acc { oAggregate = Minimum }
          "MAX" -> options n more' acc { oAggregate = Maximum }
          _ -> Left syntaxError
      | form == Listing && upper o == "WITHSCORES" = options n more acc { oScored = True }
      | form == Counting && upper o == "LIMIT", l : more' <- more = case readInteger l of
          Just limit | limit >= 0 -> options n more' acc { oLimit = limit }
          _ -> Left (RError "ERR LIMIT can't be negative")
      | otherwise = Left syntaxError
    options _ [] acc = Right acc
    finish o result = case (form, args0) of
      (Storing, dst : _) -> OnKey dst (zstoreOp result)
      (Counting, _) -> Answer (RInt (if oLimit o == 0 then length result else min (oLimit o) (length result)))
      _ -> Answer (withScores (oScored o) (Set.toAscList (Set.fromList result)))

-- | The keys' members combined as redis combines them: a union or
-- intersection goes through the inputs smallest first (so that scores
-- aggregate in redis's order), weighting each score (a NaN product is
-- 0); a sum that comes to NaN (infinities of both signs) is 0. A
-- difference keeps the first key's members and scores.
combineScored :: Combine -> Options -> [[(Double, ByteString)]] -> [(Double, ByteString)]
combineScored how o parts = case how of
  Diff -> case parts of
    first : others -> let gone = Set.fromList (map snd (concat others))
                      in [ e | e@(_, m) <- first, not (Set.member m gone) ]
    [] -> []
  Union -> [ (s, m) | (m, s) <- Map.toList (foldl addPart Map.empty inputs) ]
  Inter -> case inputs of
    (w0, smallest) : others ->
      let maps = [ (w, Map.fromList [ (m, s) | (s, m) <- p ]) | (w, p) <- others ]
          inAll (s0, m) = go (nanToZero (w0 * s0)) maps
            where
              go acc [] = Just (acc, m)
              go acc ((w, mp) : more) = case Map.lookup m mp of
                Just s -> go (aggregate acc (s * w)) more
                Nothing -> Nothing
      in mapMaybe inAll smallest
    [] -> []
  where
    inputs = sortOn (length . snd) (zip (fromMaybe (repeat 1) (oWeights o)) parts)
    addPart acc (w, p) = foldl (\m (s, x) -> Map.insertWith (\new old -> aggregate old new) x (nanToZero (w * s)) m) acc p
    aggregate target val = case oAggregate o of
      Sum -> nanToZero (target + val)
      Minimum -> if val < target then val else target
      Maximum -> if val > target then val else target
    nanToZero x = if isNaN x then 0 else x

-- | ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset
-- count]: ZRANGE's pick from the source, stored in the destination (which
-- goes if nothing is picked), in two steps, one on each key's color.
zrangestoreCommand :: [ByteString] -> Plan
zrangestoreCommand (dst : src : lo : hi : opts) = zrangeArgs True lo hi opts $ \r rev offset count _ ->
  let pick _ _ = zsetRead (RArray []) (fmap scoredPart . zrangePick r rev offset count)
  in Steps [(src, pick)] $ \parts -> case parts of
       [e@(RError _)] -> Answer e
       [part] -> OnKey dst (zstoreOp (fromPart part))
       _ -> Answer syntaxError
zrangestoreCommand _ = Answer syntaxError

-- | ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]: pop from the first
-- of the keys that exists (WRONGTYPE if it is not a sorted set), as redis
-- checks its arguments. The keys are looked at first, each on its color,
-- then the chosen one popped; should it have gone in between, the keys
-- after it are looked at again.
zmpopCommand :: [ByteString] -> Plan
zmpopCommand args = zmpopArgs args $ \top count ks -> zpopAttempt top count ks (uncurry nestedReply) Answer (Answer RNilArray) False (const True)

-- | ZMPOP's arguments, checked as redis checks them: the end, the count
-- and the keys, for the plan.
zmpopArgs :: [ByteString] -> (Bool -> Int -> [ByteString] -> Plan) -> Plan
zmpopArgs (nk : rest) go = case readInteger nk of
  Just n | n >= 1 -> case drop n rest of
    end : opts | Just top <- side (upper end) -> case opts of
      [] -> go top 1 (take n rest)
      [c, x] | upper c == "COUNT" -> case readInteger x of
        Just count | count >= 1 -> go top count (take n rest)
        _ -> Answer (RError "ERR count should be greater than 0")
      _ -> Answer syntaxError
    _ -> Answer syntaxError
  _ -> Answer (RError "ERR numkeys should be greater than 0")
  where
    side w = case w of "MIN" -> Just False; "MAX" -> Just True; _ -> Nothing
zmpopArgs [] _ = Answer syntaxError

-- | Pop from the first of the keys that holds a sorted set and whose
-- @turn@ is the caller's, ending in @done@ with the
-- reply @shape@ makes of the popped members and scores (flat) and the
-- key, or a type error; or in @none@ when no key holds one.
zpopAttempt :: Bool -> Int -> [ByteString] -> (([Reply], ByteString) -> Reply) -> (Reply -> Plan) -> Plan -> Bool -> (ByteString -> Bool) -> Plan
zpopAttempt top count ks0 shape done none waited turn = go ks0
  where
    go [] = none
    go ks = Steps [ (k, present (turn k)) | k <- ks ] $ \parts ->
      case dropWhile ((== RNil) . snd) (zip ks parts) of
        [] -> none
        (_, e@(RError _)) : _ -> done e
        (k, _) : after -> Steps [(k, zpopOp top count)] $ \popped -> case popped of
          [RArray []] -> go (map fst after)
          [RArray flat] -> done (shape (flat, k))
          [r] -> done r
          _ -> done syntaxError
    present mine _ _ v = Outcome Keep $ case v of
      Nothing -> RNil
      Just (VZSet _) | mine -> RInt 1
                     | otherwise -> RNil
      Just _ | waited -> RNil
             | otherwise -> wrongType

-- | ZMPOP's reply: the key, and each member with its score.
nestedReply :: [Reply] -> ByteString -> Reply
nestedReply flat k = RArray [RBulk k, RArray (nested flat)]
  where
    nested (m : sc : more) = RArray [m, sc] : nested more
    nested _ = []

-- | BZPOPMIN / BZPOPMAX key [key ...] timeout: the key, the member and its
-- score, once one of the keys holds a sorted set (Note [Blocked commands]
-- in "Kv.Batch"). The keys are copied: the command may outlive its read.
bzpopCommand :: Bool -> [ByteString] -> Plan
bzpopCommand top args = withTimeout (last args) $ \ms ->
  let ks = map B.copy (init args)
  in Blocking (Block (nub ks) (zpopAttempt top 1 ks (\(flat, k) -> RArray (RBulk k : flat)) Unblock Park) RNilArray ms)

-- | BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count].
bzmpop :: Int -> Bool -> Int -> [ByteString] -> Plan
bzmpop ms top count ks0 =
  let ks = map B.copy ks0
  in Blocking (Block (nub ks) (zpopAttempt top count ks (uncurry nestedReply) Unblock Park) RNilArray ms)
