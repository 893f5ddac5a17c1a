{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands on hashes.
module Kv.Hashes
  ( hashCommands
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Kv.Members
import Kv.Plan
import Kv.Resp
import Kv.Store
import Kv.Text (LongDoubleSum (..), addLongDouble, finiteLongDouble)

-- | The commands of this module, for "Kv.Command"'s table.
hashCommands :: [Command]
hashCommands =
  [ ("HSET", (AtLeast 3, hsetCommand))
  , ("HGET", (Exactly 2, \[k, f] -> OnKey k (hgetOp f)))
  , ("HLEN", (Exactly 1, \[k] -> OnKey k hlenOp))
  , ("HDEL", (AtLeast 2, \(k : fs) -> OnKey k (hdelOp fs)))
  , ("HGETALL", (Exactly 1, \[k] -> OnKey k hgetallOp))
  , ("HMSET", (AtLeast 3, hmsetCommand))
  , ("HSETNX", (Exactly 3, \[k, f, x] -> OnKey k (hsetnxOp f x)))
  , ("HMGET", (AtLeast 2, \(k : fs) -> OnKey k (hmgetOp fs)))
  , ("HEXISTS", (Exactly 2, \[k, f] -> OnKey k (hashRead (RInt 0) (\h -> (\b -> RInt (if b then 1 else 0)) <$> membersHas h f))))
  , ("HSTRLEN", (Exactly 2, \[k, f] -> OnKey k (hashRead (RInt 0) (\h -> RInt . maybe 0 B.length <$> membersLookup h f))))
  , ("HKEYS", (Exactly 1, \[k] -> OnKey k (hashRead (RArray []) (fmap (RArray . map (RBulk . fst)) . membersAscList))))
  , ("HVALS", (Exactly 1, \[k] -> OnKey k (hashRead (RArray []) (fmap (RArray . map (RBulk . snd)) . membersAscList))))
  , ("HINCRBY", (Exactly 3, \[k, f, n] -> withInt n (OnKey k . hincrbyOp f)))
  , ("HINCRBYFLOAT", (Exactly 3, \[k, f, n] -> hincrbyfloatCommand k (B.copy f) (B.copy n)))
  , ("HRANDFIELD", (AtLeast 1, \(k : rest) -> randomArgs (Just "WITHVALUES") rest (\c valued -> OnKey k (hrandfieldOp c valued))))
  ]

-- | HSET key field value [field value ...]
hsetCommand :: [ByteString] -> Plan
hsetCommand (k : fvs)
  | odd (length fvs) = Answer (RError "ERR wrong number of arguments for 'hset' command")
  | otherwise = OnKey k (hsetOp (pairs fvs))
  where
    pairs (f : x : rest) = (f, x) : pairs rest
    pairs _ = []
hsetCommand [] = Answer syntaxError

-- | A hash's fields, if the value is a hash.
hashOf :: Value -> Maybe Members
hashOf (VHash h) = Just h
hashOf _ = Nothing

-- | A write in place to a hash's fields ('onMembers'), a new hash's for
-- no key.
hashWrite :: (Members -> IO Outcome) -> Maybe Value -> Outcome
hashWrite act = onMembers hashOf (InPlace (act emptyMembers)) act

-- | A read of a hash: the reply from its fields, @missing@ for no key,
-- WRONGTYPE for another type.
hashRead :: Reply -> (Members -> IO Reply) -> KeyOp
hashRead missing answer _ _ = readMembers hashOf missing answer

-- | HSET and HMSET, given the fields and values as slices of the request
-- (the hash copies them in): how many fields are new.
hsetOp :: [(ByteString, ByteString)] -> KeyOp
hsetOp fvs _ _ = hashWrite (go 0 fvs)
  where
    go :: Int -> [(ByteString, ByteString)] -> Members -> IO Outcome
    go !added ((f, x) : rest) h = membersPut h f x >>= \(h', new) -> go (if new then added + 1 else added) rest h'
    go added [] h = return (Outcome (Replace (VHash h)) (RInt added))

hgetOp :: ByteString -> KeyOp
hgetOp f = hashRead RNil (fmap (maybe RNil RBulk) . (`membersLookup` f))

-- | HDEL: how many of the fields were there; an emptied hash goes.
hdelOp :: [ByteString] -> KeyOp
hdelOp = removeMembers hashOf VHash

-- | HGETALL: fields and values, alternating, in no order a client may
-- rely on (as SMEMBERS).
hgetallOp :: KeyOp
hgetallOp = hashRead (RArray []) (fmap (RArray . concatMap (\(f, x) -> [RBulk f, RBulk x])) . membersAscList)

-- | HMSET: HSET under its old name, answering OK.
hmsetCommand :: [ByteString] -> Plan
hmsetCommand (k : fvs)
  | odd (length fvs) = Answer (RError "ERR wrong number of arguments for 'hmset' command")
  | otherwise = case hsetCommand (k : fvs) of
      OnKey key op -> OnKey key (\now c v -> okFor (op now c v))
      other -> other
  where
    okFor (Outcome u (RInt _)) = Outcome u (RSimple "OK")
    okFor (InPlace act) = InPlace (okFor <$> act)
    okFor other = other
hmsetCommand [] = Answer syntaxError

-- | HSETNX: set a field only if the hash does not have it.
hsetnxOp :: ByteString -> ByteString -> KeyOp
hsetnxOp f x _ _ = hashWrite $ \h0 -> do
  (h, added) <- membersAdd h0 f x
  return (if added then Outcome (Replace (VHash h)) (RInt 1) else Outcome Keep (RInt 0))

-- | HMGET: each field's value, nil for a field (or hash) that is not there.
hmgetOp :: [ByteString] -> KeyOp
hmgetOp fs = hashRead (RArray (map (const RNil) fs)) $ \h ->
  RArray <$> mapM (fmap (maybe RNil RBulk) . membersLookup h) fs

-- | HINCRBY: add to a field's integer (0 if missing), with redis's checks.
-- A new hash whose increment fails is not kept.
hincrbyOp :: ByteString -> Int -> KeyOp
hincrbyOp f d _ _ = hashWrite $ \h -> do
  old <- membersLookup h f
  case maybe (Just 0) readInteger old of
    Nothing -> return (Outcome Keep (RError "ERR hash value is not an integer"))
    Just n
      | (d > 0 && n > maxBound - d) || (d < 0 && n < minBound - d) ->
          return (Outcome Keep (RError "ERR increment or decrement would overflow"))
      | otherwise -> do
          let n' = n + d
          (h', _) <- membersPut h f (showInt n')
          return (Outcome (Replace (VHash h')) (RInt n'))

hlenOp :: KeyOp
hlenOp = sizeOp (fmap membersSize . hashOf)

-- | HRANDFIELD key [count [WITHVALUES]]: a random field (nil without the
-- hash); with a count, up to that many distinct fields, or, for a
-- negative count, that many with repeats; with their values if asked.
hrandfieldOp :: Maybe Int -> Bool -> KeyOp
hrandfieldOp count valued now = hashRead (if count == Nothing then RNil else RArray []) pick now
  where
    pick h = case count of
      Nothing -> maybe RNil (RBulk . fst) <$> membersRandom h (randomFrom (clockSeed now))
      Just c -> do
        picked <- membersRandomItems now c h
        return (RArray (concat [ if valued then [RBulk f, RBulk x] else [RBulk f] | (f, x) <- picked ]))

-- | HINCRBYFLOAT key field increment, in C's long double and with redis's
-- checks in redis's order: the increment (a float, finite), then the key's
-- type, then the field's value.
hincrbyfloatCommand :: ByteString -> ByteString -> ByteString -> Plan
hincrbyfloatCommand k f incr = case finiteLongDouble incr of
  Nothing -> Answer (RError "ERR value is not a valid float")
  Just False -> Answer (RError "ERR value is NaN or Infinity")
  Just True -> OnKey k $ \_ _ -> hashWrite $ \h -> do
    old <- membersLookup h f
    case addLongDouble old incr of
      Sum r -> (\(h', _) -> Outcome (Replace (VHash h')) (RBulk r)) <$> membersPut h f r
      BadStart -> return (Outcome Keep (RError "ERR hash value is not a float"))
      _ -> return (Outcome Keep (RError "ERR increment would produce NaN or Infinity"))
