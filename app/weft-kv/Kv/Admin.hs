{-# LANGUAGE OverloadedStrings #-}
-- The command table's plans match the argument lists their arity admits;
-- "Kv.Plan" checks the arity before a plan runs, so those patterns are
-- complete in use though not in type.
{-# OPTIONS_GHC -Wno-incomplete-uni-patterns #-}
-- | weft-kv's server and connection commands: PING, ECHO, QUIT, SELECT,
-- CONFIG, COMMAND, DBSIZE, KEYS, FLUSHDB, FLUSHALL, FUNCTION, INFO,
-- MEMORY, HELLO, TIME, CLIENT, and the transaction commands (MULTI, EXEC,
-- DISCARD, WATCH, UNWATCH; Note [Transactions] in "Kv.Transaction").
-- Each follows redis 7.0: its arguments, its checks in their order, its
-- replies and its error texts.
module Kv.Admin
  ( serverCommands
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import GHC.Stats (RTSStats (..), getRTSStats, getRTSStatsEnabled)
import Weft.Event (ManagerStats (..), getManagerStats, systemManagers)

import Kv.Deque (dequeToList)
import Kv.Members (membersFold)
import Kv.Plan
import Kv.Resp
import Kv.Record (recordsLive)
import Kv.Store
import Kv.SortedSet (sortedAsc)
import Kv.Str (strLength)
import Kv.Text (globMatch)
import Kv.Waiters (blockedClients)
import Kv.Watches (watchCounts)

serverCommands :: [Command]
serverCommands =
  [ ("PING", (Between 0 1, \a -> Answer (case a of [m] -> RBulk m; _ -> RSimple "PONG")))
  , ("ECHO", (Exactly 1, \[m] -> Answer (RBulk m)))
  , ("QUIT", (Exactly 0, \_ -> Answer ok))
  , ("SELECT", (Exactly 1, \[db] -> withInt db (\n -> Answer (selectReply n))))
  , ("CONFIG", (AtLeast 1, configCommand))
  , ("COMMAND", (AtLeast 0, \_ -> Answer (RArray [])))
  , ("DBSIZE", (Exactly 0, \_ -> Surveying CountKeys))
  , ("KEYS", (Exactly 1, \[pat] -> Surveying (MatchKeys (matcher pat))))
  , ("FLUSHDB", (AtLeast 0, flushCommand))
  , ("FLUSHALL", (AtLeast 0, flushCommand))
  , ("FUNCTION", (AtLeast 1, functionCommand))
  , ("INFO", (AtLeast 0, \_ -> Live infoReply))
  , ("MEMORY", (AtLeast 1, memoryCommand))
  , ("HELLO", (AtLeast 0, helloCommand))
  , ("TIME", (Exactly 0, \_ -> Live (\_ -> timeReply <$> readNow)))
  , ("CLIENT", (AtLeast 1, clientCommand))
  , ("MULTI", (Exactly 0, \_ -> Transaction TxMulti))
  , ("EXEC", (AtLeast 0, \args -> Transaction (if null args then TxExec else TxExecRefused)))
  , ("DISCARD", (Exactly 0, \_ -> Transaction TxDiscard))
  , ("WATCH", (AtLeast 1, \keys -> Transaction (TxWatch (map B.copy keys))))
  , ("UNWATCH", (Exactly 0, \_ -> Transaction TxUnwatch))
  ]
  where
    -- One database: redis's int check, then index 0 only.
    selectReply n
      | n < -2147483648 || n > 2147483647 =
          RError "ERR value is out of range, value must between -2147483648 and 2147483647"
      | n == 0 = ok
      | otherwise = RError "ERR DB index is out of range"
    -- "*" matches every key, the empty one too (redis's special case).
    matcher pat = if pat == "*" then const True else globMatch False (B.copy pat)

-- | TIME: the wall clock, seconds and microseconds since the epoch.
timeReply :: Now -> Reply
timeReply now = RArray [ RBulk (C.pack (show s)), RBulk (C.pack (show us)) ]
  where (s, us) = nowWallMicros now `quotRem` 1000000

-- | FLUSHDB / FLUSHALL [ASYNC|SYNC]: both delete every key at once.
flushCommand :: [ByteString] -> Plan
flushCommand args = case map upper args of
  [] -> flush
  [mode] | mode == "ASYNC" || mode == "SYNC" -> flush
  _ -> Answer syntaxError
  where flush = Flushing

-- | CLIENT ID; CLIENT SETNAME and GETNAME (the connection's name: printable
-- ASCII without spaces, empty for none); and CLIENT UNBLOCK id
-- [TIMEOUT|ERROR]: 1 if the connection with that id was blocked, and is
-- no more, else 0. Other subcommands are refused, as redis refuses one
-- it lacks.
clientCommand :: [ByteString] -> Plan
clientCommand (sub : rest) = case (upper sub, rest) of
  ("ID", []) -> OnClients ClientId
  ("ID", _) -> arity "id"
  ("SETNAME", [name])
    | B.all (\b -> b >= 33 && b <= 126) name -> OnClients (ClientSetName (B.copy name))
    | otherwise -> Answer (RError "ERR Client names cannot contain spaces, newlines or special characters.")
  ("SETNAME", _) -> arity "setname"
  ("GETNAME", []) -> OnClients ClientGetName
  ("GETNAME", _) -> arity "getname"
  ("UNBLOCK", [target]) -> unblock target False
  ("UNBLOCK", [target, how]) -> case upper how of
    "TIMEOUT" -> unblock target False
    "ERROR" -> unblock target True
    _ -> Answer (RError "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
  ("UNBLOCK", _) -> arity "unblock"
  _ -> Answer (RError ("ERR unknown subcommand '" <> printable sub <> "'. Try CLIENT HELP."))
  where
    unblock target withError = withInt target (\i -> OnClients (ClientUnblock i withError))
    arity name = Answer (RError ("ERR wrong number of arguments for 'client|" <> name <> "' command"))
clientCommand [] = Answer (RError "ERR wrong number of arguments for 'client' command")

-- | FUNCTION: weft-kv runs no scripts, so it holds no functions. FUNCTION
-- FLUSH [ASYNC|SYNC] succeeds with nothing to delete (clients and test
-- harnesses send it to start from a clean server); FUNCTION LIST answers
-- the empty library list; every other subcommand is refused.
functionCommand :: [ByteString] -> Plan
functionCommand (sub : rest) = case (upper sub, map upper rest) of
  ("FLUSH", []) -> Answer ok
  ("FLUSH", [mode]) | mode == "ASYNC" || mode == "SYNC" -> Answer ok
  ("FLUSH", _) -> Answer syntaxError
  ("LIST", _) -> Answer (RArray [])
  _ -> Answer (RError ("ERR unknown subcommand '" <> printable sub <> "'. Try FUNCTION HELP."))
functionCommand [] = Answer (RError "ERR wrong number of arguments for 'function' command")

-- | INFO, whatever sections are asked for: the server section, the
-- blocked clients and the watches, in redis's "field:value" lines, with
-- what clients and test harnesses read from it; and weft-kv's own
-- runtime section, GHC's collector and weft's polls since the start
-- ('runtimeLines'), and the strings kept off the heap (records: how many,
-- and their bytes; Note [Strings off the heap] in "Kv.Record").
-- weft-kv speaks redis 7.0's protocol; its memory is GHC's heap, not
-- jemalloc's (so allocator-specific checks are left out).
infoReply :: Store -> IO Reply
infoReply store = do
  blocked <- blockedClients (storeWaiters store)
  (watching, watched) <- watchCounts (storeWatches store)
  runtime <- runtimeLines
  (records, recordBytes) <- recordsLive
  return $ RBulk $ B.concat [ line <> "\r\n" | line <-
    [ "# Server", "redis_version:7.0.15", "redis_mode:standalone", "server_name:weft-kv"
    , "arch_bits:64", "multiplexing_api:weft", "mem_allocator:ghc", ""
    , "# Clients", "blocked_clients:" <> C.pack (show blocked)
    , "watching_clients:" <> C.pack (show watching), "total_watched_keys:" <> C.pack (show watched), ""
    , "# Runtime" ] ++ runtime ++
    [ "kv_records:" <> C.pack (show records), "kv_record_bytes:" <> C.pack (show recordBytes) ] ]

-- | The collector's counts since the start, from GHC's statistics, which
-- weft-kv's default RTS options enable (@-T@): collections (all and
-- major), the CPU time of the collector and of the rest of the program
-- (so the collector's share of the CPU between two reads is the
-- difference of the one over that of both), bytes allocated and copied,
-- and the largest live heap a major collection found. Without @-T@
-- (an @+RTS@ option cannot take it back, but a build without weft-kv's
-- options can lack it), only @gc_stats:off@. Then weft's own counts of
-- its I/O managers' polls, always.
runtimeLines :: IO [ByteString]
runtimeLines = (++) <$> gcLines <*> pollLines
  where
    gcLines = do
      enabled <- getRTSStatsEnabled
      if not enabled then return ["gc_stats:off"] else do
        st <- getRTSStats
        return
          [ "gc_stats:on"
          , field "gc_collections" (gcs st)
          , field "gc_major_collections" (major_gcs st)
          , field "gc_cpu_us" (gc_cpu_ns st `quot` 1000)
          , field "mutator_cpu_us" (mutator_cpu_ns st `quot` 1000)
          , field "gc_allocated_bytes" (allocated_bytes st)
          , field "gc_copied_bytes" (copied_bytes st)
          , field "gc_max_live_bytes" (max_live_bytes st) ]
    -- weft's I/O managers, added over the capabilities: polls that
    -- blocked and polls that did not (a dispatcher spinning makes the
    -- latter), the readiness events they brought, and the time spent
    -- spinning. Per request, they show what waiting for input costs.
    pollLines = do
      ms <- mapM getManagerStats =<< systemManagers
      let total f = sum (map f ms)
      return
        [ field "weft_polls_blocking" (total statBlockingPolls)
        , field "weft_polls_nonblocking" (total statNonBlockingPolls)
        , field "weft_poll_events" (total statEvents)
        , field "weft_spin_us" (total statSpinNanos `quot` 1000) ]
    field :: Show a => ByteString -> a -> ByteString
    field name v = name <> ":" <> C.pack (show v)

-- | MEMORY USAGE key [SAMPLES n]: an estimate of the bytes the key and its
-- value hold (the payload bytes and a fixed cost per element), nil for no
-- key. Other subcommands are refused.
memoryCommand :: [ByteString] -> Plan
memoryCommand (sub : k : opts)
  | upper sub == "USAGE" = case map upper opts of
      [] -> usage
      ["SAMPLES", _] -> usage
      _ -> Answer syntaxError
  where
    usage = OnKey k (\_ _ v -> maybe (Outcome Keep RNil) (\x -> InPlace (Outcome Keep . RInt . (+ (B.length k + perItem)) <$> valueBytes x)) v)
    valueBytes (VString s) = return (strLength s)
    valueBytes (VList xs) = (\ys -> sum [ B.length y + perItem | y <- ys ]) <$> dequeToList xs
    valueBytes (VSet xs) = membersFold (\n x _ -> n + B.length x + perItem) 0 xs
    valueBytes (VHash h) = membersFold (\n f x -> n + B.length f + B.length x + 2 * perItem) 0 h
    valueBytes (VZSet z) = (\ms -> sum [ B.length x + 3 * perItem | (_, x) <- ms ]) <$> sortedAsc z
    perItem = 16
memoryCommand (sub : _) = Answer (RError ("ERR unknown subcommand '" <> printable sub <> "'. Try MEMORY HELP."))
memoryCommand [] = Answer (RError "ERR wrong number of arguments for 'memory' command")

-- | HELLO [protover]: weft-kv speaks RESP2 only. Version 2 (or none)
-- answers redis's connection description, as an array of fields and
-- values; any other version is refused as redis refuses one it lacks.
-- AUTH and SETNAME are not supported.
helloCommand :: [ByteString] -> Plan
helloCommand [] = Answer hello
helloCommand [v] = case readInteger v of
  Nothing -> Answer (RError "ERR Protocol version is not an integer or out of range")
  Just 2 -> Answer hello
  Just _ -> Answer (RError "NOPROTO unsupported protocol version")
helloCommand (_ : opt : _) = Answer (RError ("ERR Syntax error in HELLO option '" <> printable opt <> "'"))

hello :: Reply
hello = RArray
  [ RBulk "server", RBulk "redis", RBulk "version", RBulk "7.0.15", RBulk "proto", RInt 2
  , RBulk "id", RInt 1, RBulk "mode", RBulk "standalone", RBulk "role", RBulk "master"
  , RBulk "modules", RArray [] ]

-- | CONFIG GET answers what clients probe at start-up as a server with
-- persistence off would. A name without glob characters is answered in
-- the case it was asked in, as redis does. CONFIG SET takes redis's
-- encoding thresholds (each type has one representation in weft-kv, so
-- they change nothing, and CONFIG GET keeps answering redis's defaults),
-- and persistence turned off (@save ""@, @appendonly no@), which it is;
-- anything else is refused.
configCommand :: [ByteString] -> Plan
configCommand (sub : rest)
  | upper sub == "GET", [param] <- rest = Answer (RArray (concat
      [ [RBulk (if C.any (`C.elem` "*?[") param then name else param), RBulk value]
      | (name, value) <- settings ++ encodings, globMatch True param name ]))
  | upper sub == "GET" = Answer (RError "ERR wrong number of arguments for 'config|get' command")
  | upper sub == "SET", not (null rest), even (length rest) = case [ p | (p, x) <- pairs rest, not (known p x) ] of
      [] -> Answer ok
      (p : _) -> Answer (RError ("ERR Unknown option or number of arguments for CONFIG SET - '" <> printable p <> "'"))
  | upper sub == "SET" = Answer (RError "ERR wrong number of arguments for 'config|set' command")
  | otherwise = Answer (RError ("ERR unsupported CONFIG subcommand '" <> printable sub <> "'"))
  where
    settings = [("save", ""), ("appendonly", "no"), ("databases", "1")]
    encodings =
      [ ("hash-max-listpack-entries", "128"), ("hash-max-listpack-value", "64")
      , ("hash-max-ziplist-entries", "128"), ("hash-max-ziplist-value", "64")
      , ("set-max-intset-entries", "512")
      , ("zset-max-listpack-entries", "128"), ("zset-max-listpack-value", "64")
      , ("zset-max-ziplist-entries", "128"), ("zset-max-ziplist-value", "64")
      , ("list-max-listpack-size", "-2"), ("list-max-ziplist-size", "-2"), ("list-compress-depth", "0") ]
    pairs (p : x : more) = (p, x) : pairs more
    pairs _ = []
    -- The encoding thresholds, and persistence set to what weft-kv has:
    -- none.
    known p x = lower p `elem` map fst encodings || (lower p, x) `elem` [("save", ""), ("appendonly", "no")]
configCommand [] = Answer (RError "ERR wrong number of arguments for 'config' command")
