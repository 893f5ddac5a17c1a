{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands on sets, those of one key and those that combine
-- several (SINTER, SUNION, SDIFF and their STORE forms, SINTERCARD,
-- SMOVE), whose keys may have several colors (Note [Multi-key commands]
-- in "Kv.Batch").
module Kv.Sets
  ( setCommands
  ) where

import Control.Monad (foldM)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.Maybe (listToMaybe)
import qualified Data.Set as Set

import Kv.Members
import Kv.Plan
import Kv.Resp
import Kv.Store

-- | The commands of this module, for "Kv.Command"'s table.
setCommands :: [Command]
setCommands =
  [ ("SADD", (AtLeast 2, \(k : ms) -> OnKey k (saddOp ms)))
  , ("SPOP", (Between 1 2, spopCommand))
  , ("SCARD", (Exactly 1, \[k] -> OnKey k scardOp))
  , ("SRANDMEMBER", (AtLeast 1, \(k : rest) -> randomArgs Nothing rest (\c _ -> OnKey k (srandmemberOp c))))
  , ("SISMEMBER", (Exactly 2, \[k, m] -> OnKey k (sismemberOp m)))
  , ("SREM", (AtLeast 2, \(k : ms) -> OnKey k (sremOp ms)))
  , ("SMEMBERS", (Exactly 1, \[k] -> OnKey k smembersOp))
  , ("SMISMEMBER", (AtLeast 2, \(k : ms) -> OnKey k (smismemberOp ms)))
  , ("SINTER", (AtLeast 1, \ks -> reading Inter ks (RArray . map RBulk . Set.toList)))
  , ("SUNION", (AtLeast 1, \ks -> reading Union ks (RArray . map RBulk . Set.toList)))
  , ("SDIFF", (AtLeast 1, \ks -> reading Diff ks (RArray . map RBulk . Set.toList)))
  , ("SINTERSTORE", (AtLeast 2, \(d : ks) -> combining Inter ks (OnKey d . storeOp)))
  , ("SUNIONSTORE", (AtLeast 2, \(d : ks) -> combining Union ks (OnKey d . storeOp)))
  , ("SDIFFSTORE", (AtLeast 2, \(d : ks) -> combining Diff ks (OnKey d . storeOp)))
  , ("SINTERCARD", (AtLeast 2, sintercardCommand))
  , ("SMOVE", (Exactly 3, \[src, dst, m] -> smoveCommand src dst m))
  ]

-- | A set's members, if the value is a set.
setOf :: Value -> Maybe Members
setOf (VSet s) = Just s
setOf _ = Nothing

-- | A set's operation in place ('onMembers'): @missing@ for no key.
onSet :: Outcome -> (Members -> IO Outcome) -> Maybe Value -> Outcome
onSet = onMembers setOf

-- | A read of a set: the reply from its members, @missing@ for no key.
setRead :: Reply -> (Members -> IO Reply) -> Maybe Value -> Outcome
setRead = readMembers setOf

-- | SADD. The members are slices of the request: those not in the set are
-- copied in, and a set that gains none stays as it is.
saddOp :: [ByteString] -> KeyOp
saddOp ms _ _ = onSet (InPlace (add emptyMembers)) add
  where
    add = go 0 ms
    go :: Int -> [ByteString] -> Members -> IO Outcome
    go !added (m : rest) s = membersAdd s m B.empty >>= \(s', new) -> go (if new then added + 1 else added) rest s'
    go added [] s = return (Outcome (if added == 0 then Keep else Replace (VSet s)) (RInt added))

-- | SPOP key [count]
spopCommand :: [ByteString] -> Plan
spopCommand [k] = OnKey k (spopOp Nothing)
spopCommand [k, n] = withCount n (OnKey k . spopOp . Just)
spopCommand _ = Answer syntaxError

-- | Remove random members: one picked from the table, or for a count
-- that many distinct ones ('membersRandomItems'; all of them for a count
-- of at least the size). The randomness comes from the clock, mixed:
-- good enough to spread choices, not for anything that needs secrecy.
spopOp :: Maybe Int -> KeyOp
spopOp count now _ = onSet (Outcome Keep (if count == Nothing then RNil else RArray [])) $ \s0 -> do
  taken <- case count of
    Nothing -> maybe [] (\p -> [fst p]) <$> membersRandom s0 (randomFrom (clockSeed now))
    Just c -> map fst <$> membersRandomItems now c s0
  s <- foldM (\s m -> fst <$> membersRemove s m) s0 taken
  left <- membersSize s
  let update | null taken = Keep
             | left == 0 = Delete
             | otherwise = Replace (VSet s)
      reply = case count of
        Nothing -> maybe RNil RBulk (listToMaybe taken)
        Just _ -> RArray (map RBulk taken)
  return (Outcome update reply)

-- | SRANDMEMBER key [count]: a random member (nil without the set); with a
-- count, up to that many distinct members, or, for a negative count,
-- that many with repeats. The count is read before the key, as redis does.
srandmemberOp :: Maybe Int -> KeyOp
srandmemberOp count now _ = setRead (if count == Nothing then RNil else RArray []) $ \s -> case count of
  Nothing -> maybe RNil (RBulk . fst) <$> membersRandom s (randomFrom (clockSeed now))
  Just c -> RArray . map (RBulk . fst) <$> membersRandomItems now c s

scardOp :: KeyOp
scardOp = sizeOp (fmap membersSize . setOf)

-- | SREM: how many of the members were there; an emptied set goes.
sremOp :: [ByteString] -> KeyOp
sremOp = removeMembers setOf VSet

-- | SMEMBERS: the members, in no order a client may rely on (redis's
-- order is its hash table's; this is byte order).
smembersOp :: KeyOp
smembersOp _ _ = setRead (RArray []) (fmap (RArray . map (RBulk . fst)) . membersAscList)

sismemberOp :: ByteString -> KeyOp
sismemberOp m _ _ = setRead (RInt 0) (fmap isIn . (`membersHas` m))

-- | SMISMEMBER key member [member ...]: 1 or 0 for each.
smismemberOp :: [ByteString] -> KeyOp
smismemberOp ms _ _ = setRead (RArray (map (const (RInt 0)) ms)) $ \s ->
  RArray <$> mapM (fmap isIn . membersHas s) ms

-- | 1 for a member that is there, else 0.
isIn :: Bool -> Reply
isIn b = RInt (if b then 1 else 0)

------------------------------------------------------------------------------
-- Several sets

-- | Read every key's set (each on its key's color), combine them, and
-- answer from the result.
reading :: Combine -> [ByteString] -> (Set.Set ByteString -> Reply) -> Plan
reading how ks answer = OnKeys [ (k, readSet) | k <- ks ] (either id answer . combineParts how)

-- | Read every key's set, combine them, and go on with the result (a
-- write: the STORE forms).
combining :: Combine -> [ByteString] -> (Set.Set ByteString -> Plan) -> Plan
combining how ks next = Steps [ (k, readSet) | k <- ks ] (either Answer next . combineParts how)

-- | The keys' parts combined. As in redis, a missing key is an empty set,
-- and any key of another type makes the command WRONGTYPE, wherever it is.
combineParts :: Combine -> [Reply] -> Either Reply (Set.Set ByteString)
combineParts how rs = case [ e | e@(RError _) <- rs ] of
  e : _ -> Left e
  [] -> Right (combine how (map membersOf rs))
  where
    combine Inter ss | any Set.null ss = Set.empty
                     | otherwise = foldr1 Set.intersection ss
    combine Union ss = Set.unions ss
    combine Diff (s : rest) = foldl Set.difference s rest
    combine Diff [] = Set.empty
    membersOf (RArray xs) = Set.fromDistinctAscList [ m | RBulk m <- xs ]
    membersOf _ = Set.empty

-- | A key's part of a combining command: its members in order (none for a
-- missing key), or WRONGTYPE.
readSet :: KeyOp
readSet = smembersOp

-- | The STORE forms' write: the destination, of whatever type it was,
-- becomes the result without expiry, or goes if the result is empty.
storeOp :: Set.Set ByteString -> KeyOp
storeOp s _ _ v
  | Set.null s = Outcome (maybe Keep (const Delete) v) (RInt 0)
  | otherwise = InPlace $ do
      m <- membersFromList [ (x, B.empty) | x <- Set.toAscList s ]
      return (Outcome (Fresh (VSet m)) (RInt (Set.size s)))

-- | SINTERCARD numkeys key [key ...] [LIMIT limit]: the intersection's
-- size, counted up to the limit (0: no limit), with redis's errors.
sintercardCommand :: [ByteString] -> Plan
sintercardCommand (n : rest) = case readInteger n of
  Just numkeys | numkeys > 0 ->
    if numkeys > length rest then Answer (RError "ERR Number of keys can't be greater than number of args") else
    let (ks, opts) = splitAt numkeys rest
    in case opts of
      [] -> count ks 0
      [l, x] | upper l == "LIMIT" -> case readInteger x of
        Just limit | limit >= 0 -> count ks limit
        _ -> Answer (RError "ERR LIMIT can't be negative")
      _ -> Answer syntaxError
  _ -> Answer (RError "ERR numkeys should be greater than 0")
  where
    count ks limit = reading Inter ks $ \s ->
      RInt (if limit == 0 then Set.size s else min limit (Set.size s))
sintercardCommand _ = Answer syntaxError

-- | SMOVE source destination member, in two steps, as redis decides it:
-- first both keys are checked (a missing source answers 0 before the
-- destination's type is looked at; a source or destination of another
-- type is WRONGTYPE) and the member looked for; then, if it is there, it
-- is removed from the source, and once removed, added to the
-- destination. Between the steps another client may change either key;
-- should the destination have become another type, the member is
-- dropped and the reply is WRONGTYPE.
smoveCommand :: ByteString -> ByteString -> ByteString -> Plan
smoveCommand src dst m = Steps [(src, probe), (dst, readType)] decide
  where
    probe _ _ = setRead RNil (fmap isIn . (`membersHas` m))
    readType _ _ v = Outcome Keep $ case v of
      Just (VSet _) -> RInt 1
      Nothing -> RInt 0
      Just _ -> wrongType
    decide [srcPart, dstPart] = case (srcPart, dstPart) of
      (RNil, _) -> Answer (RInt 0)
      (e@(RError _), _) -> Answer e
      (_, e@(RError _)) -> Answer e
      (present, _) | src == dst || present == RInt 0 -> Answer present
      _ -> Steps [(src, sremOp [m])] moved
    decide _ = Answer syntaxError
    moved [RInt 1] = OnKey dst (answering (RInt 1) (saddOp [m]))
    moved [r] = Answer r
    moved _ = Answer syntaxError
