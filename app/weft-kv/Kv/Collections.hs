{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands on lists, sets, hashes and sorted sets.
module Kv.Collections
  ( collectionCommands
  ) where

import Data.Bits (shiftR, xor)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.Foldable (foldr', toList)
import qualified Data.Map.Strict as Map
import Data.Maybe (fromMaybe, listToMaybe)
import qualified Data.Sequence as Seq
import qualified Data.Set as Set
import Data.Word (Word64)

import Kv.Plan
import Kv.Resp
import Kv.Store
import Kv.Text (formatDouble, readBound, readDouble)

-- | The commands of this module, for "Kv.Command"'s table.
collectionCommands :: [Command]
collectionCommands =
    -- Lists
  [ ("LPUSH", (AtLeast 2, \(k : vs) -> OnKey k (pushOp True (map B.copy vs))))
  , ("RPUSH", (AtLeast 2, \(k : vs) -> OnKey k (pushOp False (map B.copy vs))))
  , ("LPOP", (Between 1 2, popCommand True))
  , ("RPOP", (Between 1 2, popCommand False))
  , ("LRANGE", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (\j -> OnKey k (lrangeOp i j)))))
  , ("LLEN", (Exactly 1, \[k] -> OnKey k llenOp))
  , ("LPUSHX", (AtLeast 2, \(k : vs) -> OnKey k (pushxOp True (map B.copy vs))))
  , ("RPUSHX", (AtLeast 2, \(k : vs) -> OnKey k (pushxOp False (map B.copy vs))))
  , ("LINDEX", (Exactly 2, \[k, i] -> OnKey k (lindexOp i)))
  , ("LSET", (Exactly 3, \[k, i, x] -> OnKey k (lsetOp i (B.copy x))))
  , ("LTRIM", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (OnKey k . ltrimOp i))))
  , ("LREM", (Exactly 3, \[k, n, x] -> withInt n (\c -> OnKey k (lremOp c x))))
  , ("LINSERT", (Exactly 4, linsertCommand))
    -- Sets
  , ("SADD", (AtLeast 2, \(k : ms) -> OnKey k (saddOp (map B.copy ms))))
  , ("SPOP", (Between 1 2, spopCommand))
  , ("SCARD", (Exactly 1, \[k] -> OnKey k scardOp))
  , ("SRANDMEMBER", (AtLeast 1, srandmemberCommand))
  , ("SISMEMBER", (Exactly 2, \[k, m] -> OnKey k (sismemberOp m)))
  , ("SREM", (AtLeast 2, \(k : ms) -> OnKey k (sremOp ms)))
  , ("SMEMBERS", (Exactly 1, \[k] -> OnKey k smembersOp))
    -- Hashes
  , ("HSET", (AtLeast 3, hsetCommand))
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
  , ("ZPOPMIN", (Between 1 2, zpopminCommand))
  , ("ZCARD", (Exactly 1, \[k] -> OnKey k zcardOp))
  , ("ZSCORE", (Exactly 2, \[k, m] -> OnKey k (zscoreOp m)))
  , ("ZRANGE", (AtLeast 3, zrangeCommand))
  ]

------------------------------------------------------------------------------
-- Lists

-- | Push values one by one, at the head (LPUSH) or the tail (RPUSH).
pushOp :: Bool -> [ByteString] -> KeyOp
pushOp atHead vs _ _ v = case v of
  Nothing -> push Seq.empty
  Just (VList l) -> push l
  Just _ -> Outcome Keep wrongType
  where
    push l = let l' = if atHead then foldl (flip (Seq.<|)) l vs else foldl (Seq.|>) l vs
             in Outcome (Replace (VList l')) (RInt (Seq.length l'))

-- | LPOP / RPOP key [count]
popCommand :: Bool -> [ByteString] -> Plan
popCommand fromHead [k] = OnKey k (popOp fromHead Nothing)
popCommand fromHead [k, n] = withCount n (OnKey k . popOp fromHead . Just)
popCommand _ _ = Answer syntaxError

popOp :: Bool -> Maybe Int -> KeyOp
popOp fromHead count _ _ v = case v of
  Nothing -> Outcome Keep (if count == Nothing then RNil else RNilArray)
  Just (VList l) ->
    let n = fromMaybe 1 count
        (taken, rest) = if fromHead then Seq.splitAt n l
                        else let (a, b) = Seq.splitAt (Seq.length l - n) l in (Seq.reverse b, a)
        update = if Seq.null rest then Delete else Replace (VList rest)
        reply = case count of
          Nothing -> maybe RNil RBulk (Seq.lookup 0 taken)
          Just _ -> RArray (map RBulk (toList taken))
    in Outcome (if Seq.null taken then Keep else update) reply
  Just _ -> Outcome Keep wrongType

-- | LRANGE key start stop, with Redis's index rules (negative counts from
-- the end; out-of-range ends are clamped).
lrangeOp :: Int -> Int -> KeyOp
lrangeOp start stop _ _ v = case v of
  Nothing -> Outcome Keep (RArray [])
  Just (VList l) ->
    let n = Seq.length l
        norm i = if i < 0 then max 0 (n + i) else i
        a = norm start
        b = min (n - 1) (if stop < 0 then n + stop else stop)
        -- A strict list of evaluated replies: built lazily, each element
        -- was a thunk that the encoder's passes forced and then re-entered.
        bulks = foldr' (\x rest -> let !r = RBulk x in r : rest) [] (Seq.take (b - a + 1) (Seq.drop a l))
    in Outcome Keep (RArray (if a > b then [] else bulks))
  Just _ -> Outcome Keep wrongType

-- | LPUSHX / RPUSHX: push only onto an existing list (0 if there is none).
pushxOp :: Bool -> [ByteString] -> KeyOp
pushxOp atHead vs now c v = case v of
  Nothing -> Outcome Keep (RInt 0)
  _ -> pushOp atHead vs now c v

-- | A list index as redis reads it: negative ones count from the end.
listIndex :: Int -> Int -> Int
listIndex n i = if i < 0 then n + i else i

-- | LINDEX key index: the element there, nil out of range. As in redis,
-- the key and its type are checked before the index is read.
lindexOp :: ByteString -> KeyOp
lindexOp i _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VList l) -> case readInteger i of
    Nothing -> notInteger
    Just n -> maybe RNil RBulk (Seq.lookup (listIndex (Seq.length l) n) l)
  Just _ -> wrongType

-- | LSET key index value (the key and its type checked first, as LINDEX).
lsetOp :: ByteString -> ByteString -> KeyOp
lsetOp i x _ _ v = case v of
  Nothing -> Outcome Keep (RError "ERR no such key")
  Just (VList l) -> case readInteger i of
    Nothing -> Outcome Keep notInteger
    Just n
      | j < 0 || j >= Seq.length l -> Outcome Keep (RError "ERR index out of range")
      | otherwise -> Outcome (Replace (VList (Seq.update j x l))) (RSimple "OK")
      where j = listIndex (Seq.length l) n
  Just _ -> Outcome Keep wrongType

-- | LTRIM key start stop: keep that range (redis's clamping); a list left
-- empty goes.
ltrimOp :: Int -> Int -> KeyOp
ltrimOp start stop _ _ v = case v of
  Nothing -> Outcome Keep (RSimple "OK")
  Just (VList l) ->
    let n = Seq.length l
        a = max 0 (listIndex n start)
        b = min (n - 1) (listIndex n stop)
        kept = if a > b || a >= n then Seq.empty else Seq.take (b - a + 1) (Seq.drop a l)
    in Outcome (if Seq.null kept then Delete else Replace (VList kept)) (RSimple "OK")
  Just _ -> Outcome Keep wrongType

-- | LREM key count element: remove up to |count| equal elements from the
-- head (count > 0) or the tail (count < 0), or all of them (0).
lremOp :: Int -> ByteString -> KeyOp
lremOp count x _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just (VList l) ->
    let limit = if count == 0 then maxBound else abs count
        dropSome xs = go limit xs
          where go 0 ys = ys
                go k ys = case Seq.viewl ys of
                  Seq.EmptyL -> Seq.empty
                  y Seq.:< rest -> if y == x then go (k - 1) rest else y Seq.<| go k rest
        l' = if count < 0 then Seq.reverse (dropSome (Seq.reverse l)) else dropSome l
        removed = Seq.length l - Seq.length l'
    in Outcome (if removed == 0 then Keep else if Seq.null l' then Delete else Replace (VList l')) (RInt removed)
  Just _ -> Outcome Keep wrongType

-- | LINSERT key BEFORE|AFTER pivot element: the new length, -1 without
-- the pivot, 0 without the key.
linsertCommand :: [ByteString] -> Plan
linsertCommand [k, where_, pivot, x] = case upper where_ of
  "BEFORE" -> OnKey k (linsertOp 0 pivot (B.copy x))
  "AFTER" -> OnKey k (linsertOp 1 pivot (B.copy x))
  _ -> Answer syntaxError
linsertCommand _ = Answer syntaxError

linsertOp :: Int -> ByteString -> ByteString -> KeyOp
linsertOp after pivot x _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just (VList l) -> case Seq.elemIndexL pivot l of
    Nothing -> Outcome Keep (RInt (-1))
    Just i -> let l' = Seq.insertAt (i + after) x l
              in Outcome (Replace (VList l')) (RInt (Seq.length l'))
  Just _ -> Outcome Keep wrongType

llenOp :: KeyOp
llenOp = sizeOp (\x -> case x of VList l -> Just (Seq.length l); _ -> Nothing)

-- | LLEN, SCARD, HLEN, ZCARD: the collection's size (given by @size@ for
-- the right type), 0 for a missing key, WRONGTYPE for another type.
sizeOp :: (Value -> Maybe Int) -> KeyOp
sizeOp size _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just value -> maybe wrongType RInt (size value)

------------------------------------------------------------------------------
-- Sets

saddOp :: [ByteString] -> KeyOp
saddOp ms _ _ v = case v of
  Nothing -> add Set.empty
  Just (VSet s) -> add s
  Just _ -> Outcome Keep wrongType
  where
    add s = let s' = foldr Set.insert s ms
            in Outcome (Replace (VSet s')) (RInt (Set.size s' - Set.size s))

-- | SPOP key [count]
spopCommand :: [ByteString] -> Plan
spopCommand [k] = OnKey k (spopOp Nothing)
spopCommand [k, n] = withCount n (OnKey k . spopOp . Just)
spopCommand _ = Answer syntaxError

-- | Remove random members. The randomness comes from the clock, mixed:
-- good enough to spread choices, not for anything that needs secrecy.
spopOp :: Maybe Int -> KeyOp
spopOp count now _ v = case v of
  Nothing -> Outcome Keep (if count == Nothing then RNil else RArray [])
  Just (VSet s) ->
    let (taken, rest) = pickDistinct (fromMaybe 1 count) s (randoms (clockSeed now))
        update = if Set.null rest then Delete else Replace (VSet rest)
        reply = case count of
          Nothing -> maybe RNil RBulk (listToMaybe taken)
          Just _ -> RArray (map RBulk taken)
    in Outcome (if null taken then Keep else update) reply
  Just _ -> Outcome Keep wrongType

-- | Up to @n@ distinct members drawn at random, in draw order, and the
-- members left.
pickDistinct :: Int -> Set.Set ByteString -> [Word64] -> ([ByteString], Set.Set ByteString)
pickDistinct n0 s0 = go n0 s0 []
  where
    go n set acc (r : rs)
      | n > 0 && not (Set.null set) =
          let i = fromIntegral (r `mod` fromIntegral (Set.size set))
          in go (n - 1) (Set.deleteAt i set) (Set.elemAt i set : acc) rs
    go _ set acc _ = (reverse acc, set)

-- | A seed for random choices, from the monotonic clock in nanoseconds.
clockSeed :: Now -> Word64
clockSeed now = fromIntegral (nowSeed now) * 0x2545f4914f6cdd1d

-- | splitmix64's finaliser over a counter started at the seed: good enough
-- to spread choices, not for anything that needs secrecy.
randoms :: Word64 -> [Word64]
randoms z = map mix (iterate (+ 0x9e3779b97f4a7c15) z)
  where
    mix z0 = let z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
                 z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
             in z2 `xor` (z2 `shiftR` 31)

-- | SRANDMEMBER key [count]: a random member (nil without the set); with a
-- count, up to that many distinct members, or, for a negative count,
-- that many with repeats. The count is read before the key, as redis does.
srandmemberCommand :: [ByteString] -> Plan
srandmemberCommand [k] = OnKey k (srandmemberOp Nothing)
srandmemberCommand [k, n] = case readInteger n of
  Nothing -> Answer notInteger
  Just c | c == minBound -> Answer (RError "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
         | otherwise -> OnKey k (srandmemberOp (Just c))
srandmemberCommand _ = Answer syntaxError

srandmemberOp :: Maybe Int -> KeyOp
srandmemberOp count now _ v = Outcome Keep $ case v of
  Nothing -> if count == Nothing then RNil else RArray []
  Just (VSet s) ->
    let rs = randoms (clockSeed now)
        at r = Set.elemAt (fromIntegral (r `mod` fromIntegral (Set.size s))) s
    in case count of
      Nothing -> maybe RNil (RBulk . at) (listToMaybe rs)
      Just c
        | c < 0 -> RArray (map (RBulk . at) (take (negate c) rs))
        | c >= Set.size s -> RArray (map RBulk (Set.toList s))
        | otherwise -> RArray (map RBulk (fst (pickDistinct c s rs)))
  Just _ -> wrongType

scardOp :: KeyOp
scardOp = sizeOp (\x -> case x of VSet m -> Just (Set.size m); _ -> Nothing)

-- | SREM: how many of the members were there; an emptied set goes.
sremOp :: [ByteString] -> KeyOp
sremOp = removeFrom (\x -> case x of VSet s -> Just s; _ -> Nothing) VSet Set.delete Set.size

-- | Remove items from a collection: how many were there. A key whose
-- collection empties goes, as in redis; one of another type is WRONGTYPE.
removeFrom :: (Value -> Maybe c) -> (c -> Value) -> (ByteString -> c -> c) -> (c -> Int) -> [ByteString] -> KeyOp
removeFrom view wrap remove size items _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just value -> case view value of
    Nothing -> Outcome Keep wrongType
    Just c -> let c' = foldr remove c items
              in Outcome (if size c' == 0 then Delete else Replace (wrap c')) (RInt (size c - size c'))

-- | SMEMBERS: the members, in no order a client may rely on (redis's
-- order is its hash table's; this is byte order).
smembersOp :: KeyOp
smembersOp _ _ v = Outcome Keep $ case v of
  Nothing -> RArray []
  Just (VSet s) -> RArray (map RBulk (Set.toList s))
  Just _ -> wrongType

sismemberOp :: ByteString -> KeyOp
sismemberOp m _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VSet s) -> RInt (if Set.member m s then 1 else 0)
  Just _ -> wrongType

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

-- | ZPOPMIN key [count]
zpopminCommand :: [ByteString] -> Plan
zpopminCommand [k] = OnKey k (zpopminOp 1)
zpopminCommand [k, n] = withCount n (OnKey k . zpopminOp)
zpopminCommand _ = Answer syntaxError

zpopminOp :: Int -> KeyOp
zpopminOp count _ _ v = case v of
  Nothing -> Outcome Keep (RArray [])
  Just (VZSet (ZSet scores ordered)) ->
    let (taken, rest) = Set.splitAt count ordered
        scores' = foldl (\m (_, x) -> Map.delete x m) scores (Set.toList taken)
        update | Set.null rest = Delete
               | otherwise = Replace (VZSet (ZSet scores' rest))
    in Outcome (if Set.null taken then Keep else update) (withScores True (Set.toList taken))
  Just _ -> Outcome Keep wrongType

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
    scoreBound s = case B.uncons s of
      Just (40, rest) -> (`Bound` True) <$> readBound rest
      _ -> (`Bound` False) <$> readBound s
    lexBound s = case B.uncons s of
      Just (45, rest) | B.null rest -> Just LexMin
      Just (43, rest) | B.null rest -> Just LexMax
      Just (40, rest) -> Just (LexAt (B.copy rest) True)
      Just (91, rest) -> Just (LexAt (B.copy rest) False)
      _ -> Nothing
zrangeCommand _ = Answer syntaxError

zrangeOp :: ZRange -> Bool -> Int -> Int -> Bool -> KeyOp
zrangeOp range rev offset count scored _ _ v = Outcome Keep $ case v of
  Nothing -> RArray []
  Just (VZSet (ZSet _ ordered)) ->
    let inOrder = (if rev then Set.toDescList else Set.toAscList) ordered
        n = Set.size ordered
        limited xs | offset < 0 = []
                   | count < 0 = drop offset xs
                   | otherwise = take count (drop offset xs)
    in case range of
      ByRank a b ->
        let start = max 0 (if a < 0 then n + a else a)
            end = min (n - 1) (if b < 0 then n + b else b)
        in if start > end || start >= n then RArray []
           else withScores scored (take (end - start + 1) (drop start inOrder))
      ByScore from to ->
        withScores scored (limited (filter (\(s, _) -> atLeast from s && atMost to s) inOrder))
      ByLex from to ->
        withScores False (limited (filter (\(_, m) -> lexAtLeast from m && lexAtMost to m) inOrder))
  Just _ -> wrongType
  where
    -- Is the score on the right side of the bound?
    atLeast (Bound b ex) s = if ex then s > b else s >= b
    atMost (Bound b ex) s = if ex then s < b else s <= b
    lexAtLeast LexMin _ = True
    lexAtLeast LexMax _ = False
    lexAtLeast (LexAt b ex) m = if ex then m > b else m >= b
    lexAtMost LexMin _ = False
    lexAtMost LexMax _ = True
    lexAtMost (LexAt b ex) m = if ex then m < b else m <= b
