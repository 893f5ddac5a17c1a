{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- | weft-kv's commands: what each does, and on which keys.
--
-- 'plan' turns a decoded command into a 'Plan' on the connection's color:
-- an answer that needs no key, an operation on one key, or operations on
-- several keys whose replies are joined (Note [Multi-key commands] in
-- "Kv.Server"). The operations themselves are pure ('KeyOp'); "Kv.Store"
-- runs them on their key's color.
module Kv.Command
  ( Plan (..)
  , plan
  , isQuit
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import Data.Char (toLower)
import Data.Foldable (foldr', toList)
import qualified Data.Map.Strict as Map
import Data.Bits (shiftR, xor)
import Data.Maybe (fromMaybe, isJust)
import qualified Data.Sequence as Seq
import qualified Data.Set as Set
import Data.Word (Word64)
import Numeric (showGFloat)
import Text.Read (readMaybe)

import Kv.Resp
import Kv.Store

-- | How a command is carried out.
data Plan
  = Answer Reply
    -- ^ No key involved: the reply, computed on the connection's color.
  | OnKey !ByteString KeyOp
    -- ^ One operation on one key, run on the key's color.
  | OnKeys [(ByteString, KeyOp)] ([Reply] -> Reply)
    -- ^ One operation per key, each on its key's color; their replies, in
    -- the order of the list, are joined into the command's reply.

-- | Is this command QUIT (answer it, then close the connection)?
isQuit :: [ByteString] -> Bool
isQuit (name : _) = upper name == "QUIT"
isQuit [] = False

-- | The plan for a command (a non-empty argument list, name first).
-- Unknown commands and bad arguments are answered with an error.
plan :: [ByteString] -> Plan
plan [] = Answer (RError "ERR empty command")
plan (name : args) = case Map.lookup (upper name) commands of
  Just (arity, build)
    | arityOk arity (length args) -> build args
    | otherwise -> Answer (RError ("ERR wrong number of arguments for '" <> lower (printable name) <> "' command"))
  Nothing -> Answer (unknownCommand name args)
  where
    arityOk (Exactly n) k = k == n
    arityOk (AtLeast n) k = k >= n
    arityOk (Between lo hi) k = k >= lo && k <= hi
    lower = C.map toLower

-- | The name upper-cased, without copying when it already is.
upper :: ByteString -> ByteString
upper s | B.any isLowerW s = B.map (\c -> if isLowerW c then c - 32 else c) s
        | otherwise = s
  where isLowerW c = c >= 97 && c <= 122

-- | Text that is safe inside an error reply: at most 64 bytes, controls
-- (CR, LF among them) replaced with spaces.
-- | redis's error for an unknown command: the name and the first
-- arguments, quoted, up to 128 bytes of each (newlines as spaces).
unknownCommand :: ByteString -> [ByteString] -> Reply
unknownCommand name args =
  RError ("ERR unknown command '" <> quoted 128 name <> "', with args beginning with: " <> go B.empty args)
  where
    go acc (a : rest) | B.length acc < 128 = go (acc <> "'" <> quoted (128 - B.length acc) a <> "' ") rest
    go acc _ = acc
    quoted n = B.map (\c -> if c == 13 || c == 10 then 32 else c) . B.take n

printable :: ByteString -> ByteString
printable = B.map (\c -> if c < 32 || c == 127 then 32 else c) . B.take 64

-- | How many arguments (after the name) a command takes.
data Arity = Exactly !Int | AtLeast !Int | Between !Int !Int

commands :: Map.Map ByteString (Arity, [ByteString] -> Plan)
commands = Map.fromList
  [ ("PING", (Between 0 1, \a -> Answer (case a of [m] -> RBulk m; _ -> RSimple "PONG")))
  , ("ECHO", (Exactly 1, \[m] -> Answer (RBulk m)))
  , ("QUIT", (Exactly 0, \_ -> Answer ok))
  , ("SELECT", (Exactly 1, \[db] -> Answer (if db == "0" then ok else RError "ERR DB index is out of range")))
  , ("CONFIG", (AtLeast 1, configCommand))
  , ("COMMAND", (AtLeast 0, \_ -> Answer (RArray [])))
    -- Strings
  , ("GET", (Exactly 1, \[k] -> OnKey k getOp))
  , ("SET", (AtLeast 2, setCommand))
  , ("MGET", (AtLeast 1, \ks -> OnKeys [ (k, mgetOp) | k <- ks ] RArray))
  , ("MSET", (AtLeast 2, msetCommand))
  , ("SETNX", (Exactly 2, \[k, v] -> OnKey k (setnxOp (B.copy v))))
  , ("GETSET", (Exactly 2, \[k, v] -> OnKey k (getsetOp (B.copy v))))
  , ("APPEND", (Exactly 2, \[k, v] -> OnKey k (appendOp v)))
  , ("STRLEN", (Exactly 1, \[k] -> OnKey k strlenOp))
  , ("PERSIST", (Exactly 1, \[k] -> OnKey k persistOp))
  , ("SREM", (AtLeast 2, \(k : ms) -> OnKey k (sremOp ms)))
  , ("HDEL", (AtLeast 2, \(k : fs) -> OnKey k (hdelOp fs)))
  , ("INCR", (Exactly 1, \[k] -> OnKey k (incrOp 1)))
  , ("DECR", (Exactly 1, \[k] -> OnKey k (incrOp (-1))))
  , ("INCRBY", (Exactly 2, \[k, n] -> withInt n (OnKey k . incrOp)))
  , ("DECRBY", (Exactly 2, \[k, n] -> withInt n (\d -> if d == minBound then Answer (RError "ERR decrement would overflow") else OnKey k (incrOp (negate d)))))
    -- Keys
  , ("DEL", (AtLeast 1, \ks -> OnKeys [ (k, delOp) | k <- ks ] sumInts))
  , ("EXISTS", (AtLeast 1, \ks -> OnKeys [ (k, existsOp) | k <- ks ] sumInts))
  , ("EXPIRE", (Exactly 2, \[k, s] -> expireCommand k s 1000000))
  , ("PEXPIRE", (Exactly 2, \[k, ms] -> expireCommand k ms 1000))
  , ("TTL", (Exactly 1, \[k] -> OnKey k (ttlOp 1000000000)))
  , ("PTTL", (Exactly 1, \[k] -> OnKey k (ttlOp 1000000)))
  , ("TYPE", (Exactly 1, \[k] -> OnKey k typeOp))
    -- Lists
  , ("LPUSH", (AtLeast 2, \(k : vs) -> OnKey k (pushOp True (map B.copy vs))))
  , ("RPUSH", (AtLeast 2, \(k : vs) -> OnKey k (pushOp False (map B.copy vs))))
  , ("LPOP", (Between 1 2, popCommand True))
  , ("RPOP", (Between 1 2, popCommand False))
  , ("LRANGE", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (\j -> OnKey k (lrangeOp i j)))))
  , ("LLEN", (Exactly 1, \[k] -> OnKey k llenOp))
    -- Sets
  , ("SADD", (AtLeast 2, \(k : ms) -> OnKey k (saddOp (map B.copy ms))))
  , ("SPOP", (Between 1 2, spopCommand))
  , ("SCARD", (Exactly 1, \[k] -> OnKey k scardOp))
  , ("SISMEMBER", (Exactly 2, \[k, m] -> OnKey k (sismemberOp m)))
    -- Hashes
  , ("HSET", (AtLeast 3, hsetCommand))
  , ("HGET", (Exactly 2, \[k, f] -> OnKey k (hgetOp f)))
  , ("HLEN", (Exactly 1, \[k] -> OnKey k hlenOp))
    -- Sorted sets
  , ("ZADD", (AtLeast 3, zaddCommand))
  , ("ZPOPMIN", (Between 1 2, zpopminCommand))
  , ("ZCARD", (Exactly 1, \[k] -> OnKey k zcardOp))
  , ("ZSCORE", (Exactly 2, \[k, m] -> OnKey k (zscoreOp m)))
  ]

------------------------------------------------------------------------------
-- Replies and argument checks

ok :: Reply
ok = RSimple "OK"

-- | The reply to an operation on a key of another type.
wrongType :: Reply
wrongType = RError "WRONGTYPE Operation against a key holding the wrong kind of value"

notInteger, syntaxError :: Reply
notInteger = RError "ERR value is not an integer or out of range"
syntaxError = RError "ERR syntax error"

withInt :: ByteString -> (Int -> Plan) -> Plan
withInt s k = maybe (Answer notInteger) k (readInteger s)

sumInts :: [Reply] -> Reply
sumInts rs = case [ e | e@(RError _) <- rs ] of
  (e : _) -> e
  [] -> RInt (sum [ n | RInt n <- rs ])

-- | A count argument, which must not be negative.
withCount :: ByteString -> (Int -> Plan) -> Plan
withCount s k = case readInteger s of
  Just n | n >= 0 -> k n
  _ -> Answer (RError "ERR value is out of range, must be positive")

------------------------------------------------------------------------------
-- Server commands

-- | CONFIG GET answers what clients probe at start-up as a server with
-- persistence off would.
configCommand :: [ByteString] -> Plan
configCommand (sub : rest)
  | upper sub == "GET", [param] <- rest = Answer (RArray (concat
      [ [RBulk name, RBulk value] | (name, value) <- settings, globMatch (C.map toLower param) name ]))
  | upper sub == "GET" = Answer (RError "ERR wrong number of arguments for 'config|get' command")
  | otherwise = Answer (RError ("ERR unsupported CONFIG subcommand '" <> printable sub <> "'"))
  where
    settings = [("save", ""), ("appendonly", "no"), ("databases", "1")]
configCommand [] = Answer (RError "ERR wrong number of arguments for 'config' command")

-- | Glob match with @*@ only (what CONFIG GET patterns use in practice).
globMatch :: ByteString -> ByteString -> Bool
globMatch pat s = case B.uncons pat of
  Nothing -> B.null s
  Just (42, rest) -> any (globMatch rest) (B.tails s)
  Just (c, rest) -> case B.uncons s of
    Just (d, s') -> c == d && globMatch rest s'
    Nothing -> False

------------------------------------------------------------------------------
-- Strings

getOp :: KeyOp
getOp _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VString s) -> RBulk s
  Just _ -> wrongType

-- | SETNX: set a string only if the key does not exist (of any type).
setnxOp :: ByteString -> KeyOp
setnxOp new _ _ v = case v of
  Nothing -> Outcome (Fresh (VString new)) (RInt 1)
  Just _ -> Outcome Keep (RInt 0)

-- | GETSET: set a string (dropping any expiry), answering the old one.
getsetOp :: ByteString -> KeyOp
getsetOp new _ _ v = case v of
  Nothing -> Outcome (Fresh (VString new)) RNil
  Just (VString old) -> Outcome (Fresh (VString new)) (RBulk old)
  Just _ -> Outcome Keep wrongType

-- | APPEND: the string's new length; a missing key is an empty string.
appendOp :: ByteString -> KeyOp
appendOp more _ _ v = case v of
  Nothing -> grown B.empty
  Just (VString s) -> grown s
  Just _ -> Outcome Keep wrongType
  where grown s = let s' = s <> more in Outcome (Replace (VString s')) (RInt (B.length s'))

strlenOp :: KeyOp
strlenOp _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VString s) -> RInt (B.length s)
  Just _ -> wrongType

-- | PERSIST: 1 if the key's expiry was removed, 0 if it had none or is
-- missing.
persistOp :: KeyOp
persistOp _ deadline v = case v of
  Just value | deadline /= 0 -> Outcome (Fresh value) (RInt 1)
  _ -> Outcome Keep (RInt 0)

-- | MGET's part for one key: as GET, but a key of another type is nil,
-- as redis has it.
mgetOp :: KeyOp
mgetOp _ _ v = Outcome Keep $ case v of
  Just (VString s) -> RBulk s
  _ -> RNil

-- | SET key value [EX seconds | PX milliseconds] [NX | XX]
setCommand :: [ByteString] -> Plan
setCommand (k : v : opts) = go opts Nothing Nothing
  where
    go [] ttl cond = OnKey k (setOp (B.copy v) ttl cond)
    go (o : rest) ttl cond = case upper o of
      "EX" | (n : rest') <- rest -> expiry n 1000000 rest' cond
      "PX" | (n : rest') <- rest -> expiry n 1000 rest' cond
      "NX" | cond == Nothing -> go rest ttl (Just False)
      "XX" | cond == Nothing -> go rest ttl (Just True)
      _ -> Answer syntaxError
      where
        expiry n unit rest' c = case readInteger n of
          Just t | t > 0 && t <= maxExpire unit -> if ttl == Nothing then go rest' (Just (t * unit)) c else Answer syntaxError
          Just _ -> Answer (RError "ERR invalid expire time in 'set' command")
          Nothing -> Answer notInteger
setCommand _ = Answer syntaxError

-- | Set a string; with a TTL in microseconds; only if the key exists
-- ('Just True') or does not ('Just False').
setOp :: ByteString -> Maybe Int -> Maybe Bool -> KeyOp
setOp v ttl cond _ _ old
  | maybe True (== exists) cond = Outcome (maybe (Fresh (VString v)) (FreshIn (VString v)) ttl) ok
  | otherwise = Outcome Keep RNil
  where exists = isJust old

msetCommand :: [ByteString] -> Plan
msetCommand kvs
  | odd (length kvs) = Answer (RError "ERR wrong number of arguments for 'mset' command")
  | otherwise = OnKeys (pairs kvs) (\rs -> case [ e | e@(RError _) <- rs ] of (e : _) -> e; [] -> ok)
  where
    pairs (k : v : rest) = (k, setOp (B.copy v) Nothing Nothing) : pairs rest
    pairs _ = []

incrOp :: Int -> KeyOp
incrOp d _ _ v = case v of
  Nothing -> store 0
  Just (VString s) -> maybe (Outcome Keep notInteger) store (readInteger s)
  Just _ -> Outcome Keep wrongType
  where
    store n
      | (d > 0 && n > maxBound - d) || (d < 0 && n < minBound - d) =
          Outcome Keep (RError "ERR increment or decrement would overflow")
      | otherwise = let n' = n + d in Outcome (Replace (VString (C.pack (show n')))) (RInt n')

------------------------------------------------------------------------------
-- Keys

delOp, existsOp, typeOp :: KeyOp
delOp _ _ v = maybe (Outcome Keep (RInt 0)) (\_ -> Outcome Delete (RInt 1)) v
existsOp _ _ v = Outcome Keep (RInt (maybe 0 (const 1) v))
typeOp _ _ v = Outcome Keep $ RSimple $ case v of
  Nothing -> "none"
  Just (VString _) -> "string"
  Just (VList _) -> "list"
  Just (VSet _) -> "set"
  Just (VHash _) -> "hash"
  Just (VZSet _) -> "zset"

-- | The longest expiry accepted, in the given unit (microseconds per
-- unit): about 30 years, far from overflowing a microsecond 'Int'.
maxExpire :: Int -> Int
maxExpire unit = 1000000000000000 `quot` unit

-- | EXPIRE / PEXPIRE: @unit@ microseconds per unit of the argument. A
-- time of 0 or less deletes the key, as Redis does.
expireCommand :: ByteString -> ByteString -> Int -> Plan
expireCommand k t unit = case readInteger t of
  Just n | n <= maxExpire unit -> OnKey k (expireOp (max 0 n * unit))
         | otherwise -> Answer (RError "ERR invalid expire time in 'expire' command")
  Nothing -> Answer notInteger

expireOp :: Int -> KeyOp
expireOp us _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just _ -> Outcome (ExpireIn us) (RInt 1)

-- | TTL / PTTL: the time left in units of @unit@ nanoseconds, rounded to
-- the nearest; -2 for a missing key, -1 for a key without expiry.
ttlOp :: Word64 -> KeyOp
ttlOp unit now deadline v = Outcome Keep $ case v of
  Nothing -> RInt (-2)
  Just _ | deadline == 0 -> RInt (-1)
         | otherwise -> RInt (fromIntegral ((deadline - min deadline now + unit `quot` 2) `quot` unit))

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

llenOp :: KeyOp
llenOp _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VList l) -> RInt (Seq.length l)
  Just _ -> wrongType

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
    let picks = take (min (Set.size s) (fromMaybe 1 count)) (randoms now)
        go set [] acc = (set, reverse acc)
        go set (r : rs) acc = let i = fromIntegral (r `mod` fromIntegral (Set.size set))
                              in go (Set.deleteAt i set) rs (Set.elemAt i set : acc)
        (rest, taken) = go s picks []
        update = if Set.null rest then Delete else Replace (VSet rest)
        reply = case count of
          Nothing -> maybe RNil RBulk (safeHead taken)
          Just _ -> RArray (map RBulk taken)
    in Outcome (if null taken then Keep else update) reply
  Just _ -> Outcome Keep wrongType
  where
    safeHead xs = case xs of (x : _) -> Just x; [] -> Nothing
    -- splitmix64's finaliser over a counter started at the clock.
    randoms :: Word64 -> [Word64]
    randoms seed = map mix (iterate (+ 0x9e3779b97f4a7c15) seed)
    mix z0 = let z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
                 z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
             in z2 `xor` (z2 `shiftR` 31)

scardOp :: KeyOp
scardOp _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VSet s) -> RInt (Set.size s)
  Just _ -> wrongType

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

hlenOp :: KeyOp
hlenOp _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VHash h) -> RInt (Map.size h)
  Just _ -> wrongType

------------------------------------------------------------------------------
-- Sorted sets

-- | ZADD key score member [score member ...] (no options).
zaddCommand :: [ByteString] -> Plan
zaddCommand (k : sms)
  | odd (length sms) = Answer syntaxError
  | otherwise = case pairs sms of
      Just ps -> OnKey k (zaddOp ps)
      Nothing -> Answer (RError "ERR value is not a valid float")
  where
    pairs (s : m : rest) = (:) <$> ((\x -> (x, B.copy m)) <$> readScore s) <*> pairs rest
    pairs _ = Just []
zaddCommand [] = Answer syntaxError

-- | A score as Redis reads it: a decimal float, or @inf@, @+inf@, @-inf@.
readScore :: ByteString -> Maybe Double
readScore s
  | Just n <- readInteger s = Just (fromIntegral n)   -- the common case, without 'read'
  | otherwise = case C.map toLower s of
      "inf" -> Just (1 / 0)
      "+inf" -> Just (1 / 0)
      "-inf" -> Just (-1 / 0)
      t -> case readMaybe (C.unpack (fixup t)) of
        Just d | not (isNaN d) -> Just d
        _ -> Nothing
  where
    -- Haskell's reader wants digits around the point and no leading '+'.
    fixup t = let t1 = if C.take 1 t == "+" then B.drop 1 t else t
                  (sign, body) = if C.take 1 t1 == "-" then ("-", B.drop 1 t1) else ("", t1)
                  body1 = if C.take 1 body == "." then "0" <> body else body
                  body2 = if not (B.null body1) && C.last body1 == '.' then body1 <> "0" else body1
              in sign <> body2

-- | A score as Redis writes it: integral values without a point.
formatScore :: Double -> ByteString
formatScore d
  | isInfinite d = if d > 0 then "inf" else "-inf"
  | d == fromIntegral r && abs d < 1e17 = C.pack (show r)
  | otherwise = C.pack (showGFloat Nothing d "")
  where r = round d :: Integer

zaddOp :: [(Double, ByteString)] -> KeyOp
zaddOp ps _ _ v = case v of
  Nothing -> add emptyZSet
  Just (VZSet z) -> add z
  Just _ -> Outcome Keep wrongType
  where
    add z0 = let (z', added) = foldl step (z0, 0 :: Int) ps
             in Outcome (Replace (VZSet z')) (RInt added)
    step (ZSet scores ordered, n) (s, m) = case Map.lookup m scores of
      Just old -> (ZSet (Map.insert m s scores) (Set.insert (s, m) (Set.delete (old, m) ordered)), n)
      Nothing -> (ZSet (Map.insert m s scores) (Set.insert (s, m) ordered), n + 1)

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
    in Outcome (if Set.null taken then Keep else update)
               (RArray (concat [ [RBulk m, RBulk (formatScore s)] | (s, m) <- Set.toList taken ]))
  Just _ -> Outcome Keep wrongType

zcardOp :: KeyOp
zcardOp _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VZSet (ZSet scores _)) -> RInt (Map.size scores)
  Just _ -> wrongType

zscoreOp :: ByteString -> KeyOp
zscoreOp m _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VZSet (ZSet scores _)) -> maybe RNil (RBulk . formatScore) (Map.lookup m scores)
  Just _ -> wrongType
