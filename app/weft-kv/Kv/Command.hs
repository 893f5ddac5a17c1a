{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands: what each does, and on which keys.
--
-- 'plan' turns a decoded command into a 'Plan' on the connection's color:
-- an answer that needs no key, an operation on one key, operations on
-- several keys whose replies are joined (Note [Multi-key commands] in
-- "Kv.Batch"), or one on every key color. The operations themselves are
-- pure ('KeyOp'); "Kv.Store" runs them on their key's color. This module
-- has the table, the string and key commands; "Kv.Admin" the server,
-- connection and transaction commands; "Kv.Bytes" GETRANGE, SETRANGE and
-- the bit commands; "Kv.Lcs" LCS; "Kv.Copy" RENAME and COPY; "Kv.Lists",
-- "Kv.Sets", "Kv.Hashes" and "Kv.ZSets" the commands on lists, sets,
-- hashes and sorted sets. Each follows
-- redis 7.0: its arguments, its checks in their order, its replies and
-- its error texts.
module Kv.Command
  ( Plan (..)
  , plan
  , planArgs
  , queueable
  , runsInMulti
  , isQuit
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.Bits (xor, (.&.))
import Control.Monad (forM_)
import Data.Primitive.SmallArray
import Data.Word (Word64)
import Data.Maybe (isJust)

import Kv.Admin (serverCommands)
import Kv.Bytes (byteCommands)
import Kv.Copy (copyCommands)
import Kv.Hashes (hashCommands)
import Kv.Lcs (lcsCommands)
import Kv.Lists (listCommands)
import Kv.Plan
import Kv.Request (Commands, argAt, argCount, argsFrom, commandOf)
import Kv.Resp
import Kv.Sets (setCommands)
import Kv.Store
import Kv.Str (Str, strCopy, strLength, strString)
import Kv.Text (LongDoubleSum (..), addLongDouble)
import Kv.ZSets (zsetCommands)
import Weft.Net (byteAt)

-- | Is this command QUIT (answer it, then close the connection)?
isQuit :: ByteString -> Bool
isQuit = nameIs "QUIT"

-- | Whether a command runs at once inside MULTI rather than being
-- queued (as in redis: EXEC, DISCARD, MULTI, WATCH and QUIT).
runsInMulti :: ByteString -> Bool
runsInMulti name = any (`nameIs` name) ["EXEC", "DISCARD", "MULTI", "WATCH", "QUIT"]

-- | Whether the command at an index may be queued in a transaction: its
-- name is known and its arity fits; else redis's error, which fails the
-- transaction (EXECABORT).
queueable :: Commands -> Int -> Maybe Reply
queueable cs i = case lookupCommand name of
  Just (arity, _)
    | arityOk arity (argCount cs i - 1) -> Nothing
    | otherwise -> Just (arityError name)
  Nothing -> Just (unknownCommand name (argsFrom cs i 1))
  where name = argAt cs i 0

-- | The plan for a command given as its arguments, the name first (a
-- queued command, "Kv.Transaction").
planArgs :: [ByteString] -> Plan
planArgs [] = Answer (RError "ERR empty command")
planArgs (name : args) = case lookupCommand name of
  Just (arity, build)
    | arityOk arity (length args) -> case build of
        FromList f -> f args
        FromView f -> f (commandOf (name : args)) 0
    | otherwise -> Answer (arityError name)
  Nothing -> Answer (unknownCommand name args)

-- | The plan for the command at an index of a read's commands.
-- Unknown commands and bad arguments are answered with an error.
plan :: Commands -> Int -> Plan
plan cs i = case lookupCommand name of
  Just (arity, build)
    | arityOk arity (argCount cs i - 1) -> case build of
        FromList f -> let !args = argsFrom cs i 1 in f args
        FromView f -> f cs i
    | otherwise -> Answer (arityError name)
  Nothing -> Answer (unknownCommand name (argsFrom cs i 1))
  where
    name = argAt cs i 0

-- | Does a count of arguments (after the name) fit an arity?
arityOk :: Arity -> Int -> Bool
arityOk (Exactly n) k = k == n
arityOk (AtLeast n) k = k >= n
arityOk (Between lo hi) k = k >= lo && k <= hi

-- | redis's error for a command given the wrong number of arguments.
arityError :: ByteString -> Reply
arityError name = RError ("ERR wrong number of arguments for '" <> lower (printable name) <> "' command")

-- | redis's error for an unknown command: the name and the first
-- arguments, quoted, up to 128 bytes of each (newlines as spaces).
unknownCommand :: ByteString -> [ByteString] -> Reply
unknownCommand name args =
  RError ("ERR unknown command '" <> quoted 128 name <> "', with args beginning with: " <> go B.empty args)
  where
    go acc (a : rest) | B.length acc < 128 = go (acc <> "'" <> quoted (128 - B.length acc) a <> "' ") rest
    go acc _ = acc
    quoted n = B.map (\c -> if c == 13 || c == 10 then 32 else c) . B.take n

-- | The command table: a bucket per value of the low bits of 'nameHash',
-- each holding the entries whose names hash there, each entry with its
-- name to tell apart names that share a bucket. A lookup hashes the name
-- once, indexes once and compares it once, in place: no upper-cased
-- copy, no search down a tree, on every command.
commands :: SmallArray [(ByteString, (Arity, Build))]
commands = runSmallArray $ do
  table <- newSmallArray (commandBuckets + 1) []
  let lists = serverCommands ++ stringCommands ++ lcsCommands ++ byteCommands ++ keyCommands ++ copyCommands ++ listCommands ++ setCommands ++ hashCommands ++ zsetCommands
  forM_ ([ (name, (arity, FromList f)) | (name, (arity, f)) <- lists ] ++ [ (name, (arity, FromView f)) | (name, (arity, f)) <- viewCommands ]) $ \entry@(name, _) -> do
    let b = nameHash name .&. commandBuckets
    old <- readSmallArray table b
    writeSmallArray table b (old ++ [entry])
  return table

-- | The buckets of 'commands', less one (a mask): four or more per
-- command, so that most buckets hold one name at most.
commandBuckets :: Int
commandBuckets = 1023

-- | How a command's plan is given its arguments: as a list (most
-- commands), or where they lie in the read they came in (Note [Commands
-- as views] in "Kv.Request"), for a command of many arguments that copies
-- out only what it keeps (MSET: a list would be two objects per argument).
data Build = FromList ([ByteString] -> Plan) | FromView (Commands -> Int -> Plan)

-- | The commands planned from views of their read ('FromView').
viewCommands :: [(ByteString, (Arity, Commands -> Int -> Plan))]
viewCommands = [("MSET", (AtLeast 2, msetView))]

-- | A command's table entry, by its name in any case.
lookupCommand :: ByteString -> Maybe (Arity, Build)
lookupCommand name = match (indexSmallArray commands (nameHash name .&. commandBuckets))
  where
    match [] = Nothing
    match ((known, entry) : rest)
      | nameIs known name = Just entry
      | otherwise = match rest
-- Inlined into 'plan', so that its 'Maybe' is not built for every
-- command.
{-# INLINE lookupCommand #-}

-- | Is the name (in any ASCII case) this upper-case one? Compared in
-- place, with 'byteAt' (no copy, and no closure per byte as
-- 'BU.unsafeIndex' makes with GHC 9.0's base).
nameIs :: ByteString -> ByteString -> Bool
nameIs known name = B.length known == B.length name && go 0
  where
    go !i | i == B.length name = True
          | otherwise = byteAt known i == toUpperW (byteAt name i) && go (i + 1)
    toUpperW c = if c >= 97 && c <= 122 then c - 32 else c

-- | FNV-1a over the name's bytes with bit 5 cleared, so that a name
-- hashes alike in any ASCII case.
nameHash :: ByteString -> Int
nameHash name = go 0 14695981039346656037
  where
    -- A loop of its own: 'B.foldl'' boxes its 'Word64' at every byte.
    go :: Int -> Word64 -> Int
    go !i !h
      | i == B.length name = fromIntegral h
      | otherwise = go (i + 1) ((h `xor` fromIntegral (byteAt name i .&. 0xdf)) * 1099511628211)

sumInts :: [Reply] -> Reply
sumInts rs = case [ e | e@(RError _) <- rs ] of
  (e : _) -> e
  [] -> RInt (sum [ n | RInt n <- rs ])

------------------------------------------------------------------------------
-- Strings

stringCommands :: [Command]
stringCommands =
  [ ("GET", (Exactly 1, \[k] -> OnKey k getOp))
  , ("SET", (AtLeast 2, setCommand))
  , ("MGET", (AtLeast 1, \ks -> OnKeys [ (k, mgetOp) | k <- ks ] RArray))
  , ("MSETNX", (AtLeast 2, msetnxCommand))
  , ("SETNX", (Exactly 2, \[k, v] -> OnKey k (setnxOp (strCopy v))))
  , ("SETEX", (Exactly 3, \[k, t, v] -> setexCommand "setex" Seconds k t v))
  , ("PSETEX", (Exactly 3, \[k, t, v] -> setexCommand "psetex" Millis k t v))
  , ("GETDEL", (Exactly 1, \[k] -> OnKey k getdelOp))
  , ("GETEX", (AtLeast 1, getexCommand))
  , ("GETSET", (Exactly 2, \[k, v] -> OnKey k (getsetOp (strCopy v))))
  , ("INCRBYFLOAT", (Exactly 2, \[k, n] -> OnKey k (incrbyfloatOp (B.copy n))))
  , ("STRLEN", (Exactly 1, \[k] -> OnKey k strlenOp))
  , ("INCR", (Exactly 1, \[k] -> OnKey k (incrOp 1)))
  , ("DECR", (Exactly 1, \[k] -> OnKey k (incrOp (-1))))
  , ("INCRBY", (Exactly 2, \[k, n] -> withInt n (OnKey k . incrOp)))
  , ("DECRBY", (Exactly 2, \[k, n] -> withInt n (\d -> if d == minBound then Answer (RError "ERR decrement would overflow") else OnKey k (incrOp (negate d)))))
  ]

getOp :: KeyOp
getOp _ _ v = Outcome Keep (stringReply v)

-- | SETEX / PSETEX key time value: SET with EX / PX, its time an integer.
setexCommand :: ByteString -> TimeUnit -> ByteString -> ByteString -> ByteString -> Plan
setexCommand command unit k t v = case readInteger t of
  Nothing -> Answer notInteger
  Just _ -> OnKey k (setOp command (strCopy v) (SetOptions Nothing False False (Just (unit, t))))

-- | GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]: GET, changing
-- the key's expiry. As in redis, the options are checked first, then the
-- key (nil without it) and its type, and only then the time.
getexCommand :: [ByteString] -> Plan
getexCommand (k : opts0) = go opts0 Nothing False
  where
    -- An option may be repeated (the last time wins), not mixed with
    -- another, as redis parses them.
    go [] expiry persist = OnKey k (getexOp expiry persist)
    go (opt : rest) expiry persist = case (upper opt, rest) of
      ("PERSIST", _) | expiry == Nothing -> go rest expiry True
      (name, n : rest')
        | Just unit <- lookup name units, not persist, maybe True ((== unit) . fst) expiry ->
            go rest' (Just (unit, n)) persist
      _ -> Answer syntaxError
    units = [("EX", Seconds), ("PX", Millis), ("EXAT", UnixSeconds), ("PXAT", UnixMillis)]
getexCommand [] = Answer syntaxError

getexOp :: Maybe (TimeUnit, ByteString) -> Bool -> KeyOp
getexOp expiry persist now deadline v = case v of
  Just (VString s) -> case expiry of
    Just (unit, n) -> case readInteger n of
      Nothing -> Outcome Keep notInteger
      Just t -> case expiryDeadline "getex" now unit t of
        Left e -> Outcome Keep e
        Right d -> Outcome (ExpireAt d) (RStored s)
    Nothing
      | persist && deadline /= 0 -> Outcome (Fresh (VString s)) (RStored s)
      | otherwise -> Outcome Keep (RStored s)
  _ -> Outcome Keep (stringReply v)

-- | GETDEL: GET, then delete the key if it held a string.
getdelOp :: KeyOp
getdelOp _ _ v = case v of
  Just (VString s) -> Outcome Delete (RStored s)
  _ -> Outcome Keep (stringReply v)

-- | INCRBYFLOAT key increment: in C's long double, as redis; the key
-- keeps its expiry.
incrbyfloatOp :: ByteString -> KeyOp
incrbyfloatOp incr _ _ v = case v of
  Nothing -> add Nothing
  Just (VString s) -> add (Just (strString s))
  Just _ -> Outcome Keep wrongType
  where
    add start = case addLongDouble start incr of
      Sum r -> Outcome (Replace (VString (strCopy r))) (RBulk r)
      NotFinite -> Outcome Keep (RError "ERR increment would produce NaN or Infinity")
      _ -> Outcome Keep (RError "ERR value is not a valid float")

-- | What GET answers for a value.
stringReply :: Maybe Value -> Reply
stringReply v = case v of
  Nothing -> RNil
  Just (VString s) -> RStored s
  Just _ -> wrongType

-- | SETNX: set a string only if the key does not exist (of any type).
setnxOp :: Str -> KeyOp
setnxOp new _ _ v = case v of
  Nothing -> Outcome (Fresh (VString new)) (RInt 1)
  Just _ -> Outcome Keep (RInt 0)

-- | GETSET: set a string (dropping any expiry), answering the old one.
getsetOp :: Str -> KeyOp
getsetOp new _ _ v = case v of
  Nothing -> Outcome (Fresh (VString new)) RNil
  Just (VString old) -> Outcome (Fresh (VString new)) (RStored old)
  Just _ -> Outcome Keep wrongType

strlenOp :: KeyOp
strlenOp _ _ v = Outcome Keep $ case v of
  Nothing -> RInt 0
  Just (VString s) -> RInt (strLength s)
  Just _ -> wrongType

-- | MGET's part for one key: as GET, but a key of another type is nil,
-- as redis has it.
mgetOp :: KeyOp
mgetOp _ _ v = Outcome Keep $ case v of
  Just (VString s) -> RStored s
  _ -> RNil

-- | How SET's expiry argument counts.
data TimeUnit = Seconds | Millis | UnixSeconds | UnixMillis deriving Eq

-- | SET's options, as redis 7.0 parses them.
data SetOptions = SetOptions
  { setIfExists :: !(Maybe Bool)
    -- ^ NX ('Just False'), XX ('Just True').
  , setGet      :: !Bool
  , setKeepTtl  :: !Bool
  , setExpiry   :: !(Maybe (TimeUnit, ByteString))
    -- ^ Read as an integer once all options are parsed, as redis does.
  }

-- | SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]. As
-- in redis, NX with XX, and KEEPTTL or two kinds of expiry together, are
-- syntax errors, and a repeated option is not (the last expiry counts).
setCommand :: [ByteString] -> Plan
setCommand (k : v : opts0) = go opts0 (SetOptions Nothing False False Nothing)
  where
    go [] o = case setExpiry o of
      Just (_, n) | Nothing <- readInteger n -> Answer notInteger
      _ -> let !s = strCopy v in OnKey k (setOp "set" s o)
    go (opt : rest) o = case upper opt of
      "NX" | setIfExists o /= Just True -> go rest o { setIfExists = Just False }
      "XX" | setIfExists o /= Just False -> go rest o { setIfExists = Just True }
      "GET" -> go rest o { setGet = True }
      "KEEPTTL" | setExpiry o == Nothing -> go rest o { setKeepTtl = True }
      "EX" -> expiry Seconds
      "PX" -> expiry Millis
      "EXAT" -> expiry UnixSeconds
      "PXAT" -> expiry UnixMillis
      _ -> Answer syntaxError
      where
        expiry unit = case rest of
          (n : rest')
            | not (setKeepTtl o), maybe True ((== unit) . fst) (setExpiry o) ->
                go rest' o { setExpiry = Just (unit, n) }
          _ -> Answer syntaxError
setCommand _ = Answer syntaxError

-- | SET (and the commands that are SET with options: SETEX, PSETEX,
-- MSETNX), named in its errors as the command that was sent.
setOp :: ByteString -> Str -> SetOptions -> KeyOp
-- Without options the outcome depends on nothing the key holds.
setOp _ new (SetOptions Nothing False False Nothing) = freshOp new
setOp command new o = \now _ old -> setWith command new o now old

-- | SET without options: the new value, whatever the key held. Its
-- outcome is made as it runs, not with the plan: a plan waits for its
-- key color's turn, and what waits is copied by each minor collection
-- meanwhile.
freshOp :: Str -> KeyOp
freshOp new _ _ _ = Outcome (Fresh (VString new)) ok

-- | SET with options, given the clocks and the key's value.
setWith :: ByteString -> Str -> SetOptions -> Now -> Maybe Value -> Outcome
setWith command new o now old = case setExpiry o of
  Just (unit, n) -> case expiryDeadline command now unit (maybe 0 id (readInteger n)) of
    Left e -> Outcome Keep e
    Right deadline -> decide (FreshUntil (VString new) deadline)
  Nothing -> decide (if setKeepTtl o then Replace (VString new) else Fresh (VString new))
  where
    decide update
      | setGet o, Just value <- old, not (isString value) = Outcome Keep wrongType
      | maybe False (/= isJust old) (setIfExists o) = Outcome Keep (if setGet o then stringReply old else RNil)
      | otherwise = Outcome update (if setGet o then stringReply old else ok)
    isString (VString _) = True
    isString _ = False

-- | SET's expiry as a monotonic deadline in milliseconds, with redis's
-- checks: a positive time, and one that does not overflow a 64-bit count
-- of milliseconds since the epoch.
expiryDeadline :: ByteString -> Now -> TimeUnit -> Int -> Either Reply Int
expiryDeadline command now unit t
  | t <= 0 || (inSeconds unit && t > maxBound `quot` 1000) = Left (invalidExpire command)
  | ms > maxBound - base = Left (invalidExpire command)
  | otherwise = Right (monotonic now (ms + base))
  where
    ms = inMillis unit t
    base = baseOf unit now

-- | Is the time given in seconds?
inSeconds :: TimeUnit -> Bool
inSeconds unit = unit == Seconds || unit == UnixSeconds

-- | A time in this unit in milliseconds (checked for overflow by the caller).
inMillis :: TimeUnit -> Int -> Int
inMillis unit t = if inSeconds unit then t * 1000 else t

-- | What a time in this unit counts from on the wall clock: now for a
-- relative time, the epoch for an absolute one.
baseOf :: TimeUnit -> Now -> Int
baseOf unit now = if unit == Seconds || unit == Millis then nowWall now else 0

-- | A wall-clock time in milliseconds on the monotonic clock; any time
-- not in the future is the moment just past (which also keeps a time
-- near the 64-bit minimum from overflowing).
monotonic :: Now -> Int -> Int
monotonic now wall
  | wall <= nowWall now = nowMono now - 1
  | otherwise = nowMono now + (wall - nowWall now)

invalidExpire :: ByteString -> Reply
invalidExpire command = RError ("ERR invalid expire time in '" <> command <> "' command")

-- | MSET key value [key value ...], the command at an index of a read:
-- each key sliced out of the read, each value copied straight out of it.
msetView :: Commands -> Int -> Plan
msetView cs i
  | even n = Answer (RError "ERR wrong number of arguments for 'mset' command")
  | otherwise = OnKeys (pairs 1) (\rs -> case [ e | e@(RError _) <- rs ] of (e : _) -> e; [] -> ok)
  where
    n = argCount cs i
    -- Each value copied as its pair is made, not by a thunk run on the
    -- key's color.
    pairs j
      | j >= n = []
      | otherwise = let !k = argAt cs i j
                        !s = strCopy (argAt cs i (j + 1))
                    in (k, freshOp s) : pairs (j + 2)

-- | MSETNX: set every key, or none if any of them exists; atomic across
-- the keys' colors ('Isolated'), as MSET is not.
msetnxCommand :: [ByteString] -> Plan
msetnxCommand kvs
  | odd (length kvs) = Answer (RError "ERR wrong number of arguments for 'msetnx' command")
  | otherwise = Isolated keys (Steps [ (k, existsOp) | k <- keys ] decide)
  where
    keys = [ k | (k, _) <- pairs kvs ]
    decide found
      | any (/= RInt 0) found = Answer (RInt 0)
      | otherwise = OnKeys [ (k, setOp "msetnx" (strCopy v) plain) | (k, v) <- pairs kvs ]
                           (\rs -> case [ e | e@(RError _) <- rs ] of (e : _) -> e; [] -> RInt 1)
    plain = SetOptions Nothing False False Nothing
    pairs (k : v : rest) = (k, v) : pairs rest
    pairs _ = []

incrOp :: Int -> KeyOp
incrOp d _ _ v = case v of
  Nothing -> store 0
  Just (VString s) -> maybe (Outcome Keep notInteger) store (readStoredInteger s)
  Just _ -> Outcome Keep wrongType
  where
    store n
      | (d > 0 && n > maxBound - d) || (d < 0 && n < minBound - d) =
          Outcome Keep (RError "ERR increment or decrement would overflow")
      | otherwise = let n' = n + d in Outcome (Replace (VString (storedDecimal n'))) (RInt n')

------------------------------------------------------------------------------
-- Keys

keyCommands :: [Command]
keyCommands =
  [ ("DEL", (AtLeast 1, \ks -> OnKeys [ (k, delOp) | k <- ks ] sumInts))
  , ("EXISTS", (AtLeast 1, \ks -> OnKeys [ (k, existsOp) | k <- ks ] sumInts))
  , ("EXPIRE", (AtLeast 2, expireCommand "expire" Seconds))
  , ("PEXPIRE", (AtLeast 2, expireCommand "pexpire" Millis))
  , ("EXPIREAT", (AtLeast 2, expireCommand "expireat" UnixSeconds))
  , ("PEXPIREAT", (AtLeast 2, expireCommand "pexpireat" UnixMillis))
  , ("TTL", (Exactly 1, \[k] -> OnKey k (ttlOp False)))
  , ("PTTL", (Exactly 1, \[k] -> OnKey k (ttlOp True)))
  , ("EXPIRETIME", (Exactly 1, \[k] -> OnKey k (expireTimeOp False)))
  , ("PEXPIRETIME", (Exactly 1, \[k] -> OnKey k (expireTimeOp True)))
  , ("RANDOMKEY", (Exactly 0, \_ -> Surveying RandomKey))
  , ("PERSIST", (Exactly 1, \[k] -> OnKey k persistOp))
  , ("TYPE", (Exactly 1, \[k] -> OnKey k typeOp))
  ]

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

-- | PERSIST: 1 if the key's expiry was removed, 0 if it had none or is
-- missing.
persistOp :: KeyOp
persistOp _ deadline v = case v of
  Just value | deadline /= 0 -> Outcome (Fresh value) (RInt 1)
  _ -> Outcome Keep (RInt 0)

-- | Which keys EXPIRE's options let it change.
data ExpireCondition = IfNone | IfSome | IfLater | IfEarlier deriving Eq

-- | EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT key time [NX|XX|GT|LT]: a
-- time not in the future deletes the key, as redis does.
expireCommand :: ByteString -> TimeUnit -> [ByteString] -> Plan
expireCommand command unit (k : t : opts) = case conditions of
  Left bad -> Answer (RError ("ERR Unsupported option " <> bad))
  Right cs
    | elem "NX" cs && any (`elem` cs) ["XX", "GT", "LT"] ->
        Answer (RError "ERR NX and XX, GT or LT options at the same time are not compatible")
    | elem "GT" cs && elem "LT" cs ->
        Answer (RError "ERR GT and LT options at the same time are not compatible")
    | otherwise -> withInt t (\n -> OnKey k (expireOp command unit n (conditionOf cs)))
  where
    conditions = mapM (\o -> let u = upper o in if u `elem` ["NX", "XX", "GT", "LT"] then Right u else Left o) opts
    -- XX may come with GT or LT: both must hold.
    conditionOf cs = [ c | (name, c) <- [("NX", IfNone), ("XX", IfSome), ("GT", IfLater), ("LT", IfEarlier)], name `elem` cs ]
expireCommand _ _ _ = Answer syntaxError

expireOp :: ByteString -> TimeUnit -> Int -> [ExpireCondition] -> KeyOp
expireOp command unit t conds now deadline v
  | inSeconds unit && (t > maxBound `quot` 1000 || t < minBound `quot` 1000) = Outcome Keep (invalidExpire command)
  | ms > maxBound - base = Outcome Keep (invalidExpire command)
  | Nothing <- v = Outcome Keep (RInt 0)
  | not (all allowed conds) = Outcome Keep (RInt 0)
  | otherwise = Outcome (ExpireAt (monotonic now when)) (RInt 1)
  where
    ms = inMillis unit t
    base = baseOf unit now
    when = ms + base
    -- The key's current expiry on the wall clock, if any.
    current = if deadline == 0 then Nothing else Just (deadline - nowMono now + nowWall now)
    allowed c = case c of
      IfNone -> current == Nothing
      IfSome -> current /= Nothing
      IfLater -> maybe False (when >) current
      IfEarlier -> maybe True (when <) current

-- | TTL / PTTL: the time left in seconds (rounded to the nearest, as
-- redis does) or milliseconds; -2 for a missing key, -1 for a key
-- without expiry.
ttlOp :: Bool -> KeyOp
ttlOp millis now deadline v = Outcome Keep $ case v of
  Nothing -> RInt (-2)
  Just _ | deadline == 0 -> RInt (-1)
         | otherwise -> let left = max 0 (deadline - nowMono now)
                        in RInt (if millis then left else (left + 500) `quot` 1000)

-- | EXPIRETIME / PEXPIRETIME: when the key expires, in seconds (rounded
-- to the nearest, as redis does) or milliseconds since the epoch (an
-- EXPIREAT's or PXAT's time as given: Note [The wall clock] in
-- "Kv.Store"); -2 for a missing key, -1 for a key without expiry.
expireTimeOp :: Bool -> KeyOp
expireTimeOp millis now deadline v = Outcome Keep $ case v of
  Nothing -> RInt (-2)
  Just _ | deadline == 0 -> RInt (-1)
         | otherwise -> let wall = deadline - nowMono now + nowWall now
                        in RInt (if millis then wall else (wall + 500) `quot` 1000)
