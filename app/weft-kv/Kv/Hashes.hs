{-# LANGUAGE OverloadedStrings #-}
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
import Kv.Packed
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
  , ("HEXISTS", (Exactly 2, \[k, f] -> OnKey k (hashRead (\h -> RInt (if packedMember f h then 1 else 0)) (RInt 0))))
  , ("HSTRLEN", (Exactly 2, \[k, f] -> OnKey k (hashRead (\h -> RInt (maybe 0 B.length (packedLookup f h))) (RInt 0))))
  , ("HKEYS", (Exactly 1, \[k] -> OnKey k (hashRead (RArray . map RBulk . packedKeys) (RArray []))))
  , ("HVALS", (Exactly 1, \[k] -> OnKey k (hashRead (RArray . map (RBulk . snd) . packedToAscList) (RArray []))))
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

-- | HSET and HMSET, given the fields and values as slices of the request
-- (the hash copies them in).
hsetOp :: [(ByteString, ByteString)] -> KeyOp
hsetOp fvs _ _ v = case v of
  Nothing -> set packedEmpty
  Just (VHash h) -> set h
  Just _ -> Outcome Keep wrongType
  where
    set h = let h' = foldl (\m (f, x) -> packedInsert f x m) h fvs
            in Outcome (Replace (VHash h')) (RInt (packedSize h' - packedSize h))

hgetOp :: ByteString -> KeyOp
hgetOp f _ _ v = Outcome Keep $ case v of
  Nothing -> RNil
  Just (VHash h) -> maybe RNil RBulk (packedLookup f h)
  Just _ -> wrongType

-- | HDEL: how many of the fields were there; an emptied hash goes.
hdelOp :: [ByteString] -> KeyOp
hdelOp = removeFrom (\x -> case x of VHash h -> Just h; _ -> Nothing) VHash packedDelete packedSize

-- | HGETALL: fields and values, alternating, in no order a client may
-- rely on (as SMEMBERS).
hgetallOp :: KeyOp
hgetallOp _ _ v = Outcome Keep $ case v of
  Nothing -> RArray []
  Just (VHash h) -> RArray (concat [ [RBulk f, RBulk x] | (f, x) <- packedToAscList h ])
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
  Nothing -> Outcome (Replace (VHash (packedInsert f x packedEmpty))) (RInt 1)
  Just (VHash h)
    | packedMember f h -> Outcome Keep (RInt 0)
    | otherwise -> Outcome (Replace (VHash (packedInsert f x h))) (RInt 1)
  Just _ -> Outcome Keep wrongType

-- | HMGET: each field's value, nil for a field (or hash) that is not there.
hmgetOp :: [ByteString] -> KeyOp
hmgetOp fs _ _ v = Outcome Keep $ case v of
  Nothing -> RArray (map (const RNil) fs)
  Just (VHash h) -> RArray [ maybe RNil RBulk (packedLookup f h) | f <- fs ]
  Just _ -> wrongType

-- | A read of a hash: @onHash@ of it, @missing@ for no key, WRONGTYPE for
-- another type.
hashRead :: (Packed -> Reply) -> Reply -> KeyOp
hashRead onHash missing _ _ v = Outcome Keep $ case v of
  Nothing -> missing
  Just (VHash h) -> onHash h
  Just _ -> wrongType

-- | HINCRBY: add to a field's integer (0 if missing), with redis's checks.
hincrbyOp :: ByteString -> Int -> KeyOp
hincrbyOp f d _ _ v = case v of
  Nothing -> bump packedEmpty
  Just (VHash h) -> bump h
  Just _ -> Outcome Keep wrongType
  where
    bump h = case maybe (Just 0) readInteger (packedLookup f h) of
      Nothing -> Outcome Keep (RError "ERR hash value is not an integer")
      Just n
        | (d > 0 && n > maxBound - d) || (d < 0 && n < minBound - d) ->
            Outcome Keep (RError "ERR increment or decrement would overflow")
        | otherwise -> let n' = n + d in
            Outcome (Replace (VHash (packedInsert f (showInt n') h))) (RInt n')

hlenOp :: KeyOp
hlenOp = sizeOp (\x -> case x of VHash h -> Just (packedSize h); _ -> Nothing)

-- | HRANDFIELD key [count [WITHVALUES]]: a random field (nil without the
-- hash); with a count, up to that many distinct fields, or, for a
-- negative count, that many with repeats; with their values if asked.
hrandfieldOp :: Maybe Int -> Bool -> KeyOp
hrandfieldOp count valued now _ v = Outcome Keep $ case v of
  Nothing -> if count == Nothing then RNil else RArray []
  Just (VHash h) -> case count of
    Nothing -> maybe RNil (RBulk . fst) (randomItem now h)
    Just c -> RArray (concat [ if valued then [RBulk f, RBulk x] else [RBulk f]
                             | (f, x) <- randomItems now c h (packedToAscList h) ])
  Just _ -> wrongType

-- | HINCRBYFLOAT key field increment, in C's long double and with redis's
-- checks in redis's order: the increment (a float, finite), then the key's
-- type, then the field's value.
hincrbyfloatCommand :: ByteString -> ByteString -> ByteString -> Plan
hincrbyfloatCommand k f incr = case finiteLongDouble incr of
  Nothing -> Answer (RError "ERR value is not a valid float")
  Just False -> Answer (RError "ERR value is NaN or Infinity")
  Just True -> OnKey k $ \_ _ v -> case v of
    Nothing -> add packedEmpty
    Just (VHash h) -> add h
    Just _ -> Outcome Keep wrongType
  where
    add h = case addLongDouble (packedLookup f h) incr of
      Sum r -> Outcome (Replace (VHash (packedInsert f r h))) (RBulk r)
      BadStart -> Outcome Keep (RError "ERR hash value is not a float")
      _ -> Outcome Keep (RError "ERR increment would produce NaN or Infinity")
