{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands on lists, those of one key and those that move
-- elements between keys (LMOVE, RPOPLPUSH) or pick one of several
-- (LMPOP), whose keys may have several colors (Note [Multi-key commands]
-- in "Kv.Batch"), and their blocking forms (Note [Blocked commands] in
-- "Kv.Batch").
module Kv.Lists
  ( listCommands
  , listRangeReply
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.List as L
import Data.Maybe (listToMaybe)
import Data.Primitive.ByteArray (copyMutableByteArrayToPtr)
import Foreign.Ptr (plusPtr)

import Kv.Deque
import Kv.Plan
import Kv.Resp
import Kv.Store

-- | The commands of this module, for "Kv.Command"'s table.
listCommands :: [Command]
listCommands =
  [ ("LPUSH", (AtLeast 2, \(k : vs) -> OnKey k (pushOp True vs)))
  , ("RPUSH", (AtLeast 2, \(k : vs) -> OnKey k (pushOp False vs)))
  , ("LPOP", (Between 1 2, popCommand True))
  , ("RPOP", (Between 1 2, popCommand False))
  , ("LRANGE", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (\j -> OnKey k (lrangeOp i j)))))
  , ("LLEN", (Exactly 1, \[k] -> OnKey k llenOp))
  , ("LPUSHX", (AtLeast 2, \(k : vs) -> OnKey k (pushxOp True vs)))
  , ("RPUSHX", (AtLeast 2, \(k : vs) -> OnKey k (pushxOp False vs)))
  , ("LINDEX", (Exactly 2, \[k, i] -> OnKey k (lindexOp i)))
  , ("LSET", (Exactly 3, \[k, i, x] -> OnKey k (lsetOp i (B.copy x))))
  , ("LTRIM", (Exactly 3, \[k, a, b] -> withInt a (\i -> withInt b (OnKey k . ltrimOp i))))
  , ("LREM", (Exactly 3, \[k, n, x] -> withInt n (\c -> OnKey k (lremOp c x))))
  , ("LINSERT", (Exactly 4, linsertCommand))
  , ("LPOS", (AtLeast 2, lposCommand))
  , ("LMOVE", (Exactly 4, \[src, dst, from, to] -> withEnd from (withEnd to . lmove src dst)))
  , ("RPOPLPUSH", (Exactly 2, \[src, dst] -> lmove src dst False True))
  , ("LMPOP", (AtLeast 3, lmpopCommand))
  , ("BLPOP", (AtLeast 2, bpopCommand True))
  , ("BRPOP", (AtLeast 2, bpopCommand False))
  , ("BLMPOP", (AtLeast 4, \(t : rest) -> withTimeout t (blmpop rest)))
  , ("BLMOVE", (Exactly 5, \[src, dst, from, to, t] -> withEnd from (\h -> withEnd to (\h' -> withTimeout t (blmove src dst h h')))))
  , ("BRPOPLPUSH", (Exactly 3, \[src, dst, t] -> withTimeout t (blmove src dst False True)))
  ]

-- | Push values one by one, at the head (LPUSH) or the tail (RPUSH), in
-- place (Note [Lists in nodes] in "Kv.Deque"; the list copies them).
pushOp :: Bool -> [ByteString] -> KeyOp
pushOp atHead vs _ _ v = case v of
  Nothing -> InPlace (newDeque >>= push)
  Just (VList l) -> InPlace (push l)
  Just _ -> Outcome Keep wrongType
  where
    push l = do
      let each [] = return ()
          each (x : xs) = (if atHead then pushHead l x else pushTail l x) >> each xs
      each vs
      n <- dequeLength l
      return (Outcome (Replace (VList l)) (RInt n))

-- | LPOP / RPOP key [count]
popCommand :: Bool -> [ByteString] -> Plan
popCommand fromHead [k] = OnKey k (popOp fromHead Nothing)
popCommand fromHead [k, n] = withCount n (OnKey k . popOp fromHead . Just)
popCommand _ _ = Answer syntaxError

popOp :: Bool -> Maybe Int -> KeyOp
popOp fromHead count _ _ v = case v of
  Nothing -> Outcome Keep (if count == Nothing then RNil else RNilArray)
  Just (VList l) -> InPlace $ do
    taken <- case count of
      Nothing -> maybe [] pure <$> pop l
      Just n -> popMany l n []
    left <- dequeLength l
    let update | null taken = Keep
               | left == 0 = Delete
               | otherwise = Replace (VList l)
        reply = case count of
          Nothing -> maybe RNil RBulk (listToMaybe taken)
          Just _ -> RArray (evaluatedBulks taken)
    return (Outcome update reply)
  Just _ -> Outcome Keep wrongType
  where
    pop = if fromHead then popHead else popTail
    -- Up to n elements, in the order popped.
    popMany l !n acc
      | n <= 0 = return (reverse acc)
      | otherwise = pop l >>= maybe (return (reverse acc)) (\x -> popMany l (n - 1) (x : acc))

-- | LRANGE key start stop, with Redis's index rules (negative counts from
-- the end; out-of-range ends are clamped).
lrangeOp :: Int -> Int -> KeyOp
lrangeOp start stop _ _ v = case v of
  Nothing -> Outcome Keep (RArray [])
  Just (VList l) -> InPlace $ do
    n <- dequeLength l
    let norm i = if i < 0 then max 0 (n + i) else i
        a = norm start
        b = min (n - 1) (if stop < 0 then n + stop else stop)
    Outcome Keep <$> listRangeReply a b l
  Just _ -> Outcome Keep wrongType

-- | The elements at indices a to b of a list (both within it, or a > b)
-- as an array of bulk strings, encoded as they are read: no string, reply
-- or list cell per element (Note [Replies in place] in "Kv.Out").
listRangeReply :: Int -> Int -> Deque -> IO Reply
listRangeReply a b l = do
  -- Not b - a + 1 when a > b: that overflows for a start near maxBound.
  let count = if a > b then 0 else b - a + 1
  size <- dequeFoldRange (\n _ _ len -> pure (n + bulkSize len)) (headerSize count) a b l
  REncoded <$> BI.create size (\p -> do
    q <- writeArrayHeader p count
    _ <- dequeFoldRange
      (\at node off len -> do
          at' <- writeBulkHeader at len
          copyMutableByteArrayToPtr at' node off len
          writeCrlf (at' `plusPtr` len))
      q a b l
    return ())

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
lindexOp i _ _ v = case v of
  Nothing -> Outcome Keep RNil
  Just (VList l) -> case readInteger i of
    Nothing -> Outcome Keep notInteger
    Just n -> InPlace $ do
      len <- dequeLength l
      Outcome Keep . maybe RNil RBulk <$> dequeIndex (listIndex len n) l
  Just _ -> Outcome Keep wrongType

-- | LSET key index value (the key and its type checked first, as LINDEX).
lsetOp :: ByteString -> ByteString -> KeyOp
lsetOp i x _ _ v = case v of
  Nothing -> Outcome Keep (RError "ERR no such key")
  Just (VList l) -> case readInteger i of
    Nothing -> Outcome Keep notInteger
    Just n -> InPlace $ do
      len <- dequeLength l
      let j = listIndex len n
      if j < 0 || j >= len then return (Outcome Keep (RError "ERR index out of range")) else do
        xs <- dequeToList l
        l' <- dequeFromList (take j xs ++ x : drop (j + 1) xs)
        return (Outcome (Replace (VList l')) (RSimple "OK"))
  Just _ -> Outcome Keep wrongType

-- | LTRIM key start stop: keep that range (redis's clamping); a list left
-- empty goes.
ltrimOp :: Int -> Int -> KeyOp
ltrimOp start stop _ _ v = case v of
  Nothing -> Outcome Keep (RSimple "OK")
  Just (VList l) -> InPlace $ do
    n <- dequeLength l
    let a = max 0 (listIndex n start)
        b = min (n - 1) (listIndex n stop)
    if a > b || a >= n then return (Outcome Delete (RSimple "OK")) else do
      dropTail (n - 1 - b) l
      dropHead a l
      return (Outcome (Replace (VList l)) (RSimple "OK"))
  Just _ -> Outcome Keep wrongType

-- | LREM key count element: remove up to |count| equal elements from the
-- head (count > 0) or the tail (count < 0), or all of them (0).
lremOp :: Int -> ByteString -> KeyOp
lremOp count x _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just (VList l) -> InPlace $ do
    xs <- dequeToList l
    let limit = if count == 0 then maxBound else abs count
        dropSome :: Int -> [ByteString] -> [ByteString]
        dropSome 0 ys = ys
        dropSome _ [] = []
        dropSome k (y : rest) = if y == x then dropSome (k - 1) rest else y : dropSome k rest
        kept = if count < 0 then reverse (dropSome limit (reverse xs)) else dropSome limit xs
        removed = length xs - length kept
    if removed == 0 then return (Outcome Keep (RInt 0))
    else if null kept then return (Outcome Delete (RInt removed))
    else do
      l' <- dequeFromList kept
      return (Outcome (Replace (VList l')) (RInt removed))
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
  Just (VList l) -> InPlace $ do
    xs <- dequeToList l
    case L.elemIndex pivot xs of
      Nothing -> return (Outcome Keep (RInt (-1)))
      Just i -> do
        let (front, back) = splitAt (i + after) xs
        l' <- dequeFromList (front ++ x : back)
        return (Outcome (Replace (VList l')) (RInt (length xs + 1)))
  Just _ -> Outcome Keep wrongType

llenOp :: KeyOp
llenOp = sizeOp (\x -> case x of VList l -> Just (dequeLength l); _ -> Nothing)

-- | Replies of the elements, each evaluated, so that the encoder's passes
-- do not each re-enter a thunk.
evaluatedBulks :: [ByteString] -> [Reply]
evaluatedBulks [] = []
evaluatedBulks (x : xs) = let !r = RBulk x; !rest = evaluatedBulks xs in r : rest

-- | LPOS key element [RANK rank] [COUNT num] [MAXLEN len]: the index of
-- the rank-th match (from the tail for a negative rank), or with COUNT an
-- array of up to that many (0: all), looking at no more than MAXLEN
-- elements (0: all). Options are read before the key, as redis does.
lposCommand :: [ByteString] -> Plan
lposCommand (k : x : opts0) = go opts0 1 Nothing 0
  where
    go [] rank count maxlen = OnKey k (lposOp x rank count maxlen)
    go (o : n : rest) rank count maxlen = case upper o of
      "RANK" -> case readInteger n of
        Just 0 -> Answer (RError "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
        Just r -> go rest r count maxlen
        Nothing -> Answer notInteger
      "COUNT" -> positive "COUNT" n (\c -> go rest rank (Just c) maxlen)
      "MAXLEN" -> positive "MAXLEN" n (go rest rank count)
      _ -> Answer syntaxError
    go _ _ _ _ = Answer syntaxError
    positive what n next = case readInteger n of
      Just c | c >= 0 -> next c
      _ -> Answer (RError ("ERR " <> what <> " can't be negative"))
lposCommand _ = Answer syntaxError

-- | Redis's search, step for step, in 'Int' arithmetic that wraps as
-- redis's does: a rank of -2^63 negates to itself, so it takes every
-- match from the tail, and with a count, takes them all.
lposOp :: ByteString -> Int -> Maybe Int -> Int -> KeyOp
lposOp x rank0 count maxlen _ _ v = case v of
  Nothing -> Outcome Keep (maybe RNil (const (RArray [])) count)
  Just (VList l) -> InPlace (Outcome Keep . lposReply x rank0 count maxlen <$> dequeToList l)
  Just _ -> Outcome Keep wrongType

-- | LPOS's reply over a list's elements.
lposReply :: ByteString -> Int -> Maybe Int -> Int -> [ByteString] -> Reply
lposReply x rank0 count maxlen xs =
    let n = length xs
        fromTail = rank0 < 0
        rank = if fromTail then negate rank0 else rank0
        positions = zip [0 :: Int ..] (if fromTail then zip [n - 1, n - 2 .. 0] (reverse xs)
                                       else zip [0 ..] xs)
        walk _ [] = []
        walk matches ((index, (i, y)) : rest)
          | maxlen /= 0 && index >= maxlen = []
          | y /= x = walk matches rest
          | matches' < rank = walk matches' rest
          | otherwise = case count of
              Just c | c /= 0 && matches' - rank + 1 >= c -> [i]
              Just _ -> i : walk matches' rest
              Nothing -> [i]
          where matches' = matches + 1
        hits = walk 0 positions
    in case count of
      Nothing -> case hits of
        i : _ -> RInt i
        [] -> RNil
      Just _ -> RArray (map RInt hits)

-- | LEFT or RIGHT (head: 'True'), else redis's syntax error.
withEnd :: ByteString -> (Bool -> Plan) -> Plan
withEnd w k = case upper w of
  "LEFT" -> k True
  "RIGHT" -> k False
  _ -> Answer syntaxError

-- | LMOVE source destination (RPOPLPUSH: from the tail to the head), in
-- steps, as redis decides it: a missing source answers nil; a source or
-- destination of another type is WRONGTYPE, before anything moves; then
-- the element is popped from the source and, once popped, pushed onto the
-- destination, and is the reply. Between the steps another client may
-- change either key; should the destination have become another type,
-- the element is dropped and the reply is WRONGTYPE. A list moved onto
-- itself is turned in one step ('rotateOp'): popped first, its last
-- element would delete the key, and its expiry with it.
lmove :: ByteString -> ByteString -> Bool -> Bool -> Plan
lmove src dst fromHead toHead = moveAttempt src dst fromHead toHead Answer (Answer RNil) False True

-- | LMOVE's steps, ending in @done@ with a reply or in @none@ when the
-- source has nothing, or it is not the caller's @turn@ at it (its
-- blocking form parks there).
moveAttempt :: ByteString -> ByteString -> Bool -> Bool -> (Reply -> Plan) -> Plan -> Bool -> Bool -> Plan
moveAttempt src dst fromHead toHead done none waited turn = Steps [(src, listProbe waited turn), (dst, listProbe False True)] decide
  where
    decide [srcPart, dstPart] = case (srcPart, dstPart) of
      (RNil, _) -> none
      (e@(RError _), _) -> done e
      (_, e@(RError _)) -> done e
      _ | src == dst -> Steps [(src, rotateOp fromHead toHead)] moved
        | otherwise -> Steps [(src, popOp fromHead Nothing)] pushed
    decide _ = done syntaxError
    pushed [RBulk x] = Steps [(dst, answering (RBulk x) (pushOp toHead [x]))] moved
    pushed rs = moved rs
    moved [RNil] = none
    moved [r] = done r
    moved _ = done syntaxError

-- | LMOVE of a list onto itself: its element at one end moved to the
-- other (or left where it is), the key and its expiry kept; nil when the
-- list has gone since the probe.
rotateOp :: Bool -> Bool -> KeyOp
rotateOp fromHead toHead _ _ v = case v of
  Just (VList l) -> InPlace $ do
    taken <- if fromHead then popHead l else popTail l
    case taken of
      Nothing -> return (Outcome Keep RNil)
      Just x -> do
        if toHead then pushHead l x else pushTail l x
        return (Outcome (Replace (VList l)) (RBulk x))
  Nothing -> Outcome Keep RNil
  Just _ -> Outcome Keep wrongType

-- | A key's part of LMOVE and LMPOP: its list's length when it is the
-- caller's @turn@ at it (nil for a missing key, or when it is not), or
-- WRONGTYPE; nil for a key of another type too once a blocking command
-- has @waited@ (Note [Blocked commands] in "Kv.Batch").
listProbe :: Bool -> Bool -> KeyOp
listProbe waited turn _ _ v = case v of
  Nothing -> Outcome Keep RNil
  Just (VList l) | turn -> InPlace (Outcome Keep . RInt <$> dequeLength l)
                 | otherwise -> Outcome Keep RNil
  Just _ | waited -> Outcome Keep RNil
         | otherwise -> Outcome Keep wrongType

-- | LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]: pop from the
-- first of the keys that holds a non-empty list, and answer its name and
-- the elements; nil if none does. As in redis, only the keys up to that
-- one are checked for their type.
lmpopCommand :: [ByteString] -> Plan
lmpopCommand args = lmpopArgs args $ \ks fromHead count -> popAttempt ks fromHead (Just count) Answer (Answer RNilArray) False (const True)

-- | LMPOP's arguments, checked as redis checks them: the keys, the end
-- and the count, for the plan.
lmpopArgs :: [ByteString] -> ([ByteString] -> Bool -> Int -> Plan) -> Plan
lmpopArgs (n : rest) go = case readInteger n of
  Just numkeys | numkeys > 0 -> case drop numkeys rest of
    [] -> Answer syntaxError
    w : opts -> withEnd w $ \fromHead -> case opts of
      [] -> go (take numkeys rest) fromHead 1
      [c, m] | upper c == "COUNT" -> case readInteger m of
        Just count | count > 0 -> go (take numkeys rest) fromHead count
        _ -> Answer (RError "ERR count should be greater than 0")
      _ -> Answer syntaxError
  _ -> Answer (RError "ERR numkeys should be greater than 0")
lmpopArgs _ _ = Answer syntaxError

-- | Pop from the first of the keys that holds a list and whose @turn@ is
-- the caller's: one element (the key and the element, as BLPOP answers)
-- or up to a count (the key and the elements, as LMPOP). Ends in @done@
-- with the reply or a type error of a key before that one, or in @none@
-- when no key holds such a list (or the list went before the pop).
popAttempt :: [ByteString] -> Bool -> Maybe Int -> (Reply -> Plan) -> Plan -> Bool -> (ByteString -> Bool) -> Plan
popAttempt ks fromHead count done none waited turn = Steps [ (k, listProbe waited (turn k)) | k <- ks ] pick
  where
    pick parts = case [ p | p@(_, r) <- zip ks parts, r /= RNil, r /= RInt 0 ] of
      (_, e@(RError _)) : _ -> done e
      (k, _) : _ -> Steps [(k, popOp fromHead count)] $ \popped -> case popped of
        [RArray xs@(_ : _)] -> done (RArray [RBulk k, RArray xs])
        [RBulk x] -> done (RArray [RBulk k, RBulk x])
        _ -> none
      [] -> none

------------------------------------------------------------------------------
-- Blocking forms (Note [Blocked commands] in "Kv.Batch")

-- | BLPOP / BRPOP key [key ...] timeout. The keys are copied: the command
-- may outlive the read it came in.
bpopCommand :: Bool -> [ByteString] -> Plan
bpopCommand fromHead args = withTimeout (last args) $ \ms ->
  let ks = map B.copy (init args)
  in Blocking (Block (L.nub ks) (popAttempt ks fromHead Nothing Unblock Park) RNilArray ms)

-- | BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
blmpop :: [ByteString] -> Int -> Plan
blmpop args ms = lmpopArgs args $ \ks0 fromHead count ->
  let ks = map B.copy ks0
  in Blocking (Block (L.nub ks) (popAttempt ks fromHead (Just count) Unblock Park) RNilArray ms)

-- | BLMOVE / BRPOPLPUSH: LMOVE that waits for the source.
blmove :: ByteString -> ByteString -> Bool -> Bool -> Int -> Plan
blmove src0 dst0 fromHead toHead ms =
  let src = B.copy src0
      dst = B.copy dst0
  in Blocking (Block [src] (\waited turn -> moveAttempt src dst fromHead toHead Unblock Park waited (turn src)) RNil ms)
