{-# LANGUAGE OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's commands that carry a value from one key to another:
-- RENAME, RENAMENX and COPY. The two keys may have two colors; the value
-- is read on the source's and written on the destination's, in steps
-- (Note [Multi-key commands] in "Kv.Batch", Note [Values in parts] in
-- "Kv.Part"), so another client may see the source gone and the
-- destination not yet written, or both; each key changes atomically.
module Kv.Copy
  ( copyCommands
  ) where

import Data.ByteString (ByteString)

import Kv.Plan
import Kv.Part (partValue, valuePart)
import Kv.Resp
import Kv.Store

-- | The commands of this module, for "Kv.Command"'s table.
copyCommands :: [Command]
copyCommands =
  [ ("RENAME", (Exactly 2, \[src, dst] -> renameCommand False src dst))
  , ("RENAMENX", (Exactly 2, \[src, dst] -> renameCommand True src dst))
  , ("COPY", (AtLeast 2, copyCommand))
  ]

noSuchKey :: Reply
noSuchKey = RError "ERR no such key"

-- | RENAME and RENAMENX (@nx@) source destination, as redis decides them:
-- a missing source is an error; a source renamed to itself is left as it
-- is; RENAMENX answers 0 if the destination exists. The destination
-- takes the source's value and expiry, replacing whatever it held.
--
-- In steps: the keys are looked at; the source is taken (it goes); the
-- value is written to the destination. Should RENAMENX find the
-- destination written in between, the value goes back to the source
-- (unless the source has been written too: then the newer value stays).
renameCommand :: Bool -> ByteString -> ByteString -> Plan
renameCommand nx src dst
  | src == dst = OnKey src (\_ _ v -> Outcome Keep (maybe noSuchKey (const same) v))
  | nx = Steps [(src, present), (dst, present)] $ \parts -> case parts of
      [RInt 0, _] -> Answer noSuchKey
      [_, RInt 1] -> Answer (RInt 0)
      _ -> move
  | otherwise = move
  where
    same = if nx then RInt 0 else ok
    present _ _ v = Outcome Keep (RInt (maybe 0 (const 1) v))
    move = Steps [(src, takeOp)] $ \parts -> case parts of
      [part] | Just (deadline, v) <- partValue part ->
        Steps [(dst, putOp (not nx) deadline v)] $ \written -> case written of
          [RInt 1] -> Answer (if nx then RInt 1 else ok)
          _ -> OnKey src (answering (RInt 0) (putOp False deadline v))
      [e] -> Answer e
      _ -> Answer syntaxError
    takeOp _ deadline v = case v of
      Nothing -> Outcome Keep noSuchKey
      Just x -> InPlace (Outcome Delete <$> valuePart deadline x)

-- | Write a carried value (made by the action, 'partValue') and its
-- expiry deadline (0: none) to a key: 1; or, unless @replace@, leave a
-- key that exists as it is: 0.
putOp :: Bool -> Int -> IO Value -> KeyOp
putOp replace deadline make _ _ v = case v of
  Just _ | not replace -> Outcome Keep (RInt 0)
  _ -> InPlace $ do
    x <- make
    return (Outcome (if deadline == 0 then Fresh x else FreshUntil x deadline) (RInt 1))

-- | COPY source destination [DB db] [REPLACE]: 1 if the source's value
-- and expiry were copied, 0 if the source is missing or the destination
-- exists (without REPLACE). weft-kv has database 0 only.
copyCommand :: [ByteString] -> Plan
copyCommand (src : dst : opts) = options opts False
  where
    options (o : rest) replace = case (upper o, rest) of
      ("REPLACE", _) -> options rest True
      ("DB", n : rest') -> withInt n $ \db ->
        if db == 0 then options rest' replace else Answer (RError "ERR DB index is out of range")
      _ -> Answer syntaxError
    options [] replace
      | src == dst = Answer (RError "ERR source and destination objects are the same")
      | otherwise = Steps [(src, readOp)] $ \parts -> case parts of
          [part] | Just (deadline, v) <- partValue part -> OnKey dst (putOp replace deadline v)
          _ -> Answer (RInt 0)
    readOp _ deadline v = maybe (Outcome Keep RNil) (InPlace . fmap (Outcome Keep) . valuePart deadline) v
copyCommand _ = Answer syntaxError
