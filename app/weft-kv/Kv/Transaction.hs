{-# LANGUAGE OverloadedStrings, ScopedTypeVariables #-}
-- | weft-kv's transactions: MULTI queues a connection's commands, EXEC
-- runs them as one, with no other client's command in between, and WATCH
-- makes EXEC fail if a key changed (Note [Transactions]).
module Kv.Transaction
  ( queueCommand
  , watchKeys
  , unwatchAll
  , runTransaction
  , runIsolated
  , abandonTransaction
  ) where

import Control.Exception (SomeException, try)
import Control.Monad (forM_)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.IntSet as IntSet
import Data.IORef
import Data.Maybe (fromMaybe)

import Weft.Timer (TimeoutKey)

import Kv.Command (planArgs, queueable)
import Kv.Conn
import Kv.Gate
import Kv.Plan
import Kv.Request (Commands, argsFrom)
import Kv.Resp
import Kv.Store
import Kv.Waiters (serveReady)
import Kv.Watches

-- Note [Transactions]
-- ~~~~~~~~~~~~~~~~~~~
-- After MULTI a connection's commands are not run but queued, each as
-- its own copy of its arguments (a view would keep the whole read it
-- came in alive), and answered QUEUED; an unknown command or one with the wrong number of
-- arguments is refused at once and fails the transaction, so EXEC
-- answers EXECABORT (redis's rules). EXEC runs the queue as one: no
-- other client's command on any key it names runs between its commands,
-- as redis, single-threaded, guarantees.
--
-- A key color's events touch its table without a lock (Note [One store
-- per color] in "Kv.Store"); a transaction touches the tables of several
-- colors, from one event. So every event that touches a color's table
-- passes through the color's gate ("Kv.Gate"): a batch's work, an
-- expiry timer's deletion, and a transaction's own steps. EXEC, once the
-- connection's earlier commands have run (as for a store-wide command,
-- Note [Store-wide commands] in "Kv.Batch"), holds the gates of the
-- colors its commands may touch: the colors of every argument of every
-- queued command (a superset of their keys), and if one of them is
-- store-wide (KEYS, DBSIZE, RANDOMKEY, FLUSHDB) every color that holds
-- keys (Note [Store-wide commands in a transaction]). It holds them one
-- after another, in ascending order, each by an event of that color that
-- passes the gate and closes it behind itself; the event of the last one
-- runs the commands, answers, and opens the gates again (the others by
-- an event each, which does not pass through the gate). Events that come
-- to a held gate wait in it and run, in their order, when it opens. Two
-- transactions that want the same colors take them in the same order,
-- so neither holds one the other has taken while waiting for one the
-- other holds: one waits at the first color they share. An event holds
-- no core while it waits: it is only a closure in the gate.
--
-- MSETNX, which must set all its keys or none, runs the same way, as a
-- transaction of one command ('Isolated').
--
-- Within EXEC, a blocking command does not block (redis: it answers its
-- empty reply if it has nothing to pop), and the pushes of the
-- transaction wake blocked clients as any push does; their attempts
-- reach the key colors through the gates, so they see the transaction's
-- end state, not a state half-way through it (an LPUSH then a DEL of the
-- same list wakes nobody for good).
--
-- WATCH registers the connection's flag on each key ("Kv.Watches"); a
-- change to the key, a deletion by expiry or a FLUSHDB of it, sets the
-- flag, and EXEC, once it holds its gates, answers a null array and runs
-- nothing if the flag is set. WATCH too runs once the connection's
-- earlier commands have run, so that its own earlier writes do not count.
-- A write on another color that races with the registration counts if
-- it came after it; one that comes after EXEC took its gates does not
-- (it is after the transaction). Unlike redis's, a key that had already
-- expired when watched counts as changed when it is deleted.

-- Note [Store-wide commands in a transaction]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A transaction with KEYS, DBSIZE, RANDOMKEY or FLUSHDB holds the gates
-- of the colors that hold keys when EXEC starts, and of the colors of its
-- arguments; not every key color's, since taking a gate costs an event
-- hop and there may be tens of thousands of colors. Its store-wide
-- commands read and flush only the colors it holds. A key that another
-- client creates meanwhile on a color it does not hold is one it never
-- sees, whether before or after its commands: the transaction is
-- ordered before that write, which had not ended when EXEC started (had
-- it ended, its color would count as holding keys). Its own commands
-- write only keys of its arguments, whose colors it holds.

-- | Queue a command of a transaction (its arguments copied), or refuse
-- it: the reply, QUEUED or the error.
queueCommand :: Conn -> Multi -> Commands -> Int -> IO Reply
queueCommand c (Multi queued bytes failed) cs i = case queueable cs i of
  Just refusal -> refuse refusal
  Nothing
    | bytes' > queueLimit -> refuse (RError "ERR weft-kv: a transaction may queue at most 268435456 bytes of arguments")
    | otherwise -> RSimple "QUEUED" <$ writeIORef (connMulti c) (Just (Multi (args : queued) bytes' failed))
  where
    args = map B.copy (argsFrom cs i 0)
    bytes' = bytes + sum (map B.length args) + 16 * length args
    refuse r = r <$ writeIORef (connMulti c) (Just (Multi queued bytes True))

-- | The most bytes (arguments, and 16 per argument) a transaction queues:
-- beyond that, the command is refused and the transaction fails, so that
-- a client that never sends EXEC cannot grow the server without bound.
queueLimit :: Int
queueLimit = 256 * 1048576

-- | WATCH: register the connection's flag on the keys (own copies).
watchKeys :: Env -> Conn -> [ByteString] -> IO ()
watchKeys env c keys = do
  let store = envStore env
  current <- readIORef (connWatching c)
  (flag, before) <- case current of
    Just (Watching f ks) -> return (f, ks)
    Nothing -> do
      countWatching (storeWatches store) 1
      (\f -> (f, [])) <$> newIORef False
  let added = [ (keyColor store k, k) | k <- keys ]
  forM_ added $ \(color, k) -> addWatch (storeWatches store) color k flag
  writeIORef (connWatching c) (Just (Watching flag (added ++ before)))

-- | UNWATCH, and what EXEC and DISCARD do first: the connection watches
-- nothing.
unwatchAll :: Env -> Conn -> IO ()
unwatchAll env c = do
  current <- readIORef (connWatching c)
  writeIORef (connWatching c) Nothing
  mapM_ (unwatch (envStore env)) current

unwatch :: Store -> Watching -> IO ()
unwatch store (Watching flag keys) = do
  forM_ keys $ \(color, k) -> removeWatch (storeWatches store) color k flag
  countWatching (storeWatches store) (-1)

-- | The transaction ends without running (DISCARD, an aborted EXEC, the
-- connection closing): its queue and its watches go.
abandonTransaction :: Env -> Conn -> IO ()
abandonTransaction env c = writeIORef (connMulti c) Nothing >> unwatchAll env c

-- | How to post an event to a key color, and to arm expiry timers (as
-- for 'runKeyOp'): what the server's events give a transaction.
type Post = Int -> IO () -> IO ()
type Arm = ByteString -> Int -> Int -> IO TimeoutKey

-- | EXEC of these queued commands (in order), with the keys the
-- connection watched, once its earlier commands have run: hold the
-- gates, run, answer with @answer@, open the gates (Note
-- [Transactions]).
runTransaction :: Env -> Conn -> Post -> Arm -> (Reply -> IO ()) -> Maybe Watching -> [[ByteString]] -> IO ()
runTransaction env c postTo arm answer watching queued = do
  -- Note [Store-wide commands in a transaction]
  occupied <- if any touchesEveryColor plans then occupiedColors store else return []
  let colors = IntSet.toAscList (IntSet.fromList occupied `IntSet.union` argColors)
  holdGates env postTo colors (execute colors) answer
  where
    store = envStore env
    plans = map planArgs queued
    argColors = IntSet.fromList [ keyColor store a | _ : args <- queued, a <- args ]
    execute colors = do
      changed <- maybe (return False) (\(Watching flag _) -> readIORef flag) watching
      mapM_ (unwatch store) watching
      if changed then return RNilArray else do
        now <- readNow
        replies <- mapM (runNow env c arm colors now (RError "ERR internal error: a transaction's command parked")) plans
        -- The blocked commands its writes can serve, once it is all done.
        serveHeld store colors
        return (RArray replies)

-- | A plan over these keys that must be atomic across their colors
-- ('Isolated': MSETNX), once the connection's earlier commands have run:
-- run as a transaction of one command is.
runIsolated :: Env -> Conn -> Post -> Arm -> (Reply -> IO ()) -> [ByteString] -> Plan -> IO ()
runIsolated env c postTo arm answer keys p = holdGates env postTo colors run answer
  where
    colors = ascending (envStore env) keys
    run = do
      now <- readNow
      r <- runNow env c arm colors now (RError "ERR internal error: an isolated command parked") p
      r <$ serveHeld (envStore env) colors

-- | Serve the blocked commands the writes on these colors (whose gates
-- are held) can serve (Note [Serving blocked commands] in "Kv.Batch").
serveHeld :: Store -> [Int] -> IO ()
serveHeld store = mapM_ (serveReady (storeWaiters store))

-- | The distinct colors of these keys, in ascending order.
ascending :: Store -> [ByteString] -> [Int]
ascending store keys = IntSet.toAscList (IntSet.fromList (map (keyColor store) keys))

-- | Hold the gates of these colors (ascending), one after another, each by
-- an event of its color; run the body on the last one's event (on the
-- caller's if there are none), answer with its reply, and open the gates
-- (Note [Transactions]).
holdGates :: Env -> Post -> [Int] -> IO Reply -> (Reply -> IO ()) -> IO ()
holdGates env postTo colors body answer = holdFrom colors
  where
    gates = envGates env
    holdFrom [] = finish
    holdFrom (color : rest) = postTo color (gated gates color (holdGate gates color >> holdFrom rest))
    finish = do
      outcome <- try body
      answer $ case outcome of
        Right r -> r
        Left (e :: SomeException) -> RError ("ERR weft-kv: the transaction failed: " <> B.take 200 (B.filter (\b -> b >= 32 && b < 127) (bytesOf (show e))))
      case reverse colors of
        [] -> return ()
        here : others -> do
          forM_ others $ \color -> postTo color (releaseGate gates color)
          releaseGate gates here

-- | A plan run here and now, with the gates of these colors held (all of
-- its keys' colors); @parked@ answers a blocking command's attempt that
-- found nothing.
runNow :: Env -> Conn -> Arm -> [Int] -> Now -> Reply -> Plan -> IO Reply
runNow env c arm colors now = go
  where
    store = envStore env
    held = IntSet.fromList colors
    go parked p = case p of
      Answer r -> return r
      Live f -> f store
      OnKey key op -> onKey key op
      OnKeys ps joinParts -> joinParts <$> mapM (uncurry onKey) ps
      Steps ps next -> mapM (uncurry onKey) ps >>= go parked . next
      Surveying op -> joinSurvey op <$> mapM (\color -> surveyColor store color now op) colors
      Flushing -> ok <$ mapM_ (flushColor store) colors
      -- Within a transaction a blocking command does not block.
      Blocking b -> go (blockEmpty b) (blockAttempt b False (const True))
      Park -> return parked
      Unblock r -> return r
      Expire r -> return r
      -- Its keys are among the transaction's: their gates are held.
      Isolated _ q -> go parked q
      OnClients call -> fromMaybe (return (RError "ERR weft-kv: CLIENT UNBLOCK is not supported inside a transaction"))
                                  (ownClientCall c call)
      Transaction TxUnwatch -> return ok
      Transaction _ -> return (RError "ERR internal error: a transaction command was queued")
    onKey key op
      | keyColor store key `IntSet.member` held = runKeyOp store arm now (keyHash key) key op
      | otherwise = return (RError "ERR internal error: a transaction's key outside its colors")

-- | Is the plan a store-wide command's (KEYS, DBSIZE, FLUSHDB), which
-- may touch every key color?
touchesEveryColor :: Plan -> Bool
touchesEveryColor p = case p of
  Surveying _ -> True
  Flushing -> True
  _ -> False

bytesOf :: String -> ByteString
bytesOf = B.pack . map (fromIntegral . fromEnum)
