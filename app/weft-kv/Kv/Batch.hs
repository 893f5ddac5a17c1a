{-# LANGUAGE BangPatterns, OverloadedStrings #-}
-- | weft-kv's commands at work: each read's commands get their sequence
-- numbers and go to their keys' colors, one event per color for the
-- batch (Note [Batches per color]), and their results go back to the
-- connection's color ('envResults'). Also multi-key and store-wide
-- commands, the blocked commands, and key expiry on weft timers. Over 600
-- lines: the dispatch and the blocked commands call each other (an
-- attempt is a plan the dispatch starts, and its outcome comes back
-- through it), so they share this module.
module Kv.Batch
  ( dispatch
  , continuePlan
  , placeResults
  , armExpiry
  , woken
  , abandonBlock
  ) where

import Control.Exception hiding (Handler)
import Control.Monad
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.IntMap.Strict as IntMap
import Data.IORef
import Data.Maybe (fromMaybe, isNothing)

import Weft.Color (Handler (..), RuntimeClosed (..), handler, post)
import qualified Weft.Net as Net
import Weft.Timer (TimeoutKey, cancelTimeout, getSystemTimerManager, registerTimeout)

import Kv.Command
import Kv.Conn
import Kv.Gate (gateOpen, gated)
import Kv.Out (Piece (..))
import Kv.Plan (Block (..), ClientCall (..), TxCall (..), clockSeed, ok, randomFrom)
import Kv.Request (Commands, argAt, argCount, commandsEnd, nextCommand)
import Kv.Resp
import Kv.Store
import Kv.Transaction
import Kv.Waiters

hCommand, hCommandSoon, hExpire :: Handler
hCommand = handler "kv-command"
hCommandSoon = (handler "kv-command") { handlerPriority = 1 }
hExpire = handler "kv-expire"

-- Note [Large batches run first]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A read's commands wait on their key colors until those colors' turns
-- come, behind the colors already queued on the core: under many
-- pipelining clients, usually the other connections' reads. That lets
-- one key color's event run the batches of many reads at once, which is
-- cheaper for small commands. But every command waiting holds its
-- decoded arguments on the heap, and with large batches (fifty clients
-- each pipelining 64 MSETs of ten keys: some 3,000 commands, 9 MB) the
-- waiting commands outgrow the nursery, and every minor collection copies
-- them: half of the CPU goes to the collector. So a read whose commands
-- carry at least 'soonArgs' arguments in all posts them with priority 1
-- ('hCommandSoon'): its key colors run before the next read, and at most
-- about one large read's commands wait at a time.

-- | The arguments (names included) of a read's commands from which they
-- run before the next read (Note [Large batches run first]).
soonArgs :: Int
soonArgs = 256

-- Note [Multi-key commands]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~
-- MSET, MGET, DEL and EXISTS name several keys, possibly of several
-- colors. The command takes one sequence number and leaves a 'Joining'
-- entry under it in 'connEarly'; each key's operation runs on its key's
-- color (in that color's event for the batch, Note [Batches per color])
-- and its result goes back with the command's number and the key's
-- position. When the last part arrives (on the connection's color, so
-- again without a lock) the parts, in argument order, decide the rest:
-- usually the one reply (a sum, OK, an array), which then takes its turn
-- as in Note [Reply order]; for a command that reads keys and then writes
-- one (SINTERSTORE, SMOVE: a 'Steps' plan), the next operations, which go
-- out under the same number ('continuePlan'), and whose reply is the
-- command's. Such a command holds the connection's later commands back
-- until it is done, like a store-wide one, those in later reads too (a
-- barrier in 'connHeld'): a later command on the key it writes must see
-- the write, and would otherwise overtake it. Each
-- key changes atomically, but the command as a whole does not: another
-- client may see some keys of an MSET updated and others not yet, or the
-- sources of an SINTERSTORE change between their reads and the write.
-- Parts on one key (DEL k k) run in argument order, as they share a
-- color. When all the keys share one color (one key named several times,
-- or keys that hash alike) the command needs no joining: one event of
-- that color runs every part and every later step in order and encodes
-- the reply, as for a single-key command, and the whole command is then
-- atomic.

-- | A command's work on one color: its sequence number, then the key and
-- operation of a single-key command, or the keys, operations and their
-- positions among the command's keys, of a multi-key command.
data Work
  = Work !Int !Int !ByteString KeyOp
    -- ^ a single-key command: its number, its key's hash ('keyHash'), its
    -- key and operation
  | WorkParts !Int [KeyPart]
  | WorkAll !Int [KeyPart] ([Reply] -> Plan)
    -- ^ A multi-key command whose keys all have this color: its parts
    -- and their join, done in one go (Note [Multi-key commands]).
  | WorkFlush !Int !(IORef Int)
    -- ^ FLUSHDB's part on this color, and the colors still to flush: the
    -- last one answers (Note [Store-wide commands]).
  | WorkSurvey !Int Survey !(IORef (Int, [Reply]))
    -- ^ KEYS's or RANDOMKEY's part on this color, the colors
    -- still to read and the parts so far: the last one answers.
  | WorkPick !Int
    -- ^ RANDOMKEY's first try, on a color picked by the counts: one of
    -- its live keys, or else a survey of every color (Note [Store-wide
    -- commands]).
  | WorkUnblock !Int Conn !Bool
    -- ^ CLIENT UNBLOCK of a connection of this color, with an error or
    -- not ('ClientUnblock').

-- | A multi-key command's operation on one of its keys: the key's
-- position among the command's keys, its hash ('keyHash', taken once
-- for its color and its table), the key and the operation.
data KeyPart = KeyPart {-# UNPACK #-} !Int {-# UNPACK #-} !Int !ByteString KeyOp

-- | A command's keys and operations, numbered and hashed.
keyParts :: [(ByteString, KeyOp)] -> [KeyPart]
keyParts = go 0
  where
    go !_ [] = []
    -- Built whole: every use walks all the parts, and a lazy tail
    -- would be a thunk per key.
    go i ((key, op) : rest) = let !part = KeyPart i (keyHash key) key op
                                  !more = go (i + 1) rest
                              in part : more

-- | The color all the parts' keys share, if they share one.
sharedColor :: Store -> [KeyPart] -> Maybe Int
sharedColor store parts = case parts of
  KeyPart _ h0 _ _ : more
    | all (\(KeyPart _ h _ _) -> hashColor store h == color) more -> Just color
    where color = hashColor store h0
  _ -> Nothing

-- | Give each command a sequence number and start it, one event per key
-- color for the whole batch (Note [Batches per color]). Returns whether a
-- QUIT or a protocol error ended the input (the commands after it are
-- dropped). A store-wide command that must wait holds the rest back in
-- 'connHeld'.
dispatch :: Env -> Conn -> Held -> IO Bool
dispatch env c (Held blocks0 i0 malformed _) = do
  (ended, groups) <- go (0 :: Int) blocks0 i0 NoWork
  let large = windowArgs blocks0 i0 >= soonArgs
  startGroups env c (if large then hCommandSoon else hCommand) groups
  return ended
  where
    go _ [] _ !groups = case malformed of
      Nothing -> return (False, groups)
      -- The protocol error, answered in its turn; no more input.
      Just msg -> do
        s <- takeSeq c
        place c s (RError msg)
        return (True, groups)
    go k blocks i !groups
      -- The rest waits until this window's replies are out (Note
      -- [Back-pressure on large replies] in "Kv.Conn").
      | k >= dispatchWindow = (False, groups) <$ writeIORef (connHeld c) (Held blocks i malformed False)
    go k blocks@(_ : _) i !groups = do
      multi <- readIORef (connMulti c)
      case multi of
        Nothing -> command k blocks i groups
        Just m -> inMulti m k blocks i groups
    -- After MULTI, commands are queued (Note [Transactions] in
    -- "Kv.Transaction"); one that runs at once but is refused (MULTI
    -- with arguments) fails the transaction too.
    inMulti m@(Multi q n _) k blocks@(cs : _) i groups
      | not (runsInMulti (argAt cs i 0)) = do
          s <- takeSeq c
          queueCommand c m cs i >>= place c s
          next
      | Just refusal <- queueable cs i = do
          writeIORef (connMulti c) (Just (Multi q n True))
          s <- takeSeq c
          place c s refusal
          next
      | otherwise = command k blocks i groups
      where next = onwardFrom k blocks i groups
    inMulti _ _ [] _ groups = return (False, groups)
    -- A command run (not queued).
    command _ [] _ groups = return (False, groups)
    command k blocks@(cs : _) i !groups = case plan cs i of
      Transaction t -> transaction t k blocks i groups
      -- Atomic across colors: as EXEC (Note [Transactions] in
      -- "Kv.Transaction").
      Isolated keys p -> storeWide $ \s -> do
        runIsolated env c (postKeyColor env) (armExpiry env) (replyLater env c s) keys p
        (False, groups) <$ writeIORef (connHeld c) heldAfter
      -- DBSIZE adds the colors' counts up, with no event on any.
      Surveying CountKeys -> storeWide $ \s -> do
        keyCount (envStore env) >>= place c s . RInt
        onward groups
      -- RANDOMKEY asks one color first; the commands after it wait, as
      -- it may need a survey of every color after all.
      Surveying RandomKey -> storeWide $ \s -> do
        now <- readNow
        picked <- pickColor (envStore env) (randomFrom (clockSeed now))
        case picked of
          Nothing -> place c s RNil >> onward groups
          Just color -> (False, add color (WorkPick s) groups) <$ writeIORef (connHeld c) heldAfter
      Surveying op -> storeWide $ \s -> keyWork env c s (Surveying op) groups >>= onward
      Flushing -> storeWide $ \s -> do
        colors <- occupiedColors (envStore env)
        if null colors then place c s ok >> onward groups else do
          left <- newIORef (length colors)
          onward (foldr (\color -> add color (WorkFlush s left)) groups colors)
      Live f -> do
        s <- takeSeq c
        f (envStore env) >>= place c s
        onward groups
      Blocking b -> do
        s <- takeSeq c
        groups' <- startBlock env c s b groups
        -- The commands after it wait until it is answered (Note [Blocked
        -- commands]).
        (False, groups') <$ writeIORef (connHeld c) heldAfter
      Answer r -> do
        s <- takeSeq c
        place c s r
        if isQuit (argAt cs i 0) then return (True, groups) else onward groups
      steps@(Steps {}) -> do
        s <- takeSeq c
        groups' <- keyWork env c s steps groups
        -- The commands after it wait until it is done (Note [Multi-key
        -- commands]).
        (False, groups') <$ writeIORef (connHeld c) heldAfter
      onKeys -> do
        s <- takeSeq c
        keyWork env c s onKeys groups >>= onward
      where
        onward = onwardFrom k blocks i
        heldAfter = heldBehind blocks i
        storeWide = storeWideAt blocks i groups
    -- MULTI, EXEC, DISCARD, WATCH and UNWATCH, at the command at an index
    -- (its arguments are plain values, not the closures 'command' makes,
    -- so that the common commands allocate none of them).
    transaction t k blocks i groups = case t of
      TxMulti -> answer next $ readIORef (connMulti c) >>= \m -> case m of
        Just _ -> return (RError "ERR MULTI calls can not be nested")
        Nothing -> ok <$ writeIORef (connMulti c) (Just (Multi [] 0 False))
      TxDiscard -> answer next $ readIORef (connMulti c) >>= \m -> case m of
        Nothing -> return (RError "ERR DISCARD without MULTI")
        Just _ -> ok <$ abandonTransaction env c
      TxUnwatch -> answer next (ok <$ unwatchAll env c)
      TxWatch keys -> readIORef (connMulti c) >>= \m -> case m of
        Just _ -> answer next (return (RError "ERR WATCH inside MULTI is not allowed"))
        Nothing -> storeWide $ \s -> do
          watchKeys env c keys
          place c s ok
          next
      TxExecRefused -> answer next $
        RError "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command" <$ abandonTransaction env c
      TxExec -> readIORef (connMulti c) >>= \m -> case m of
        Nothing -> answer next (return (RError "ERR EXEC without MULTI"))
        Just (Multi _ _ True) -> answer next $
          RError "EXECABORT Transaction discarded because of previous errors." <$ abandonTransaction env c
        Just (Multi queued _ False) -> storeWide $ \s -> do
          writeIORef (connMulti c) Nothing
          watching <- readIORef (connWatching c)
          writeIORef (connWatching c) Nothing
          runTransaction env c (postKeyColor env) (armExpiry env) (replyLater env c s) watching (reverse queued)
          -- The commands after it wait until it is answered (a store-wide
          -- wait runs it only when no work is posted: 'NoWork').
          (False, NoWork) <$ writeIORef (connHeld c) heldAfter
      where
        next = onwardFrom k blocks i groups
        heldAfter = heldBehind blocks i
        storeWide = storeWideAt blocks i groups
    -- The next command after the one at an index, in this read's
    -- commands or the next ones.
    onwardFrom k blocks@(cs : more) i g
      | j >= commandsEnd cs = go (k + 1) more 0 g
      | otherwise = go (k + 1) blocks j g
      where j = nextCommand cs i
    onwardFrom _ [] _ g = return (False, g)
    -- Behind a barrier at the command at an index: what comes later
    -- waits too.
    heldBehind blocks@(cs : more) i
      | j >= commandsEnd cs = Held more 0 malformed True
      | otherwise = Held blocks j malformed True
      where j = nextCommand cs i
    heldBehind [] _ = Held [] 0 malformed True
    -- A store-wide command runs once every command before it has run
    -- (nothing outstanding, nothing posted in this batch); until then it
    -- and the rest wait in 'connHeld' (Note [Store-wide commands]).
    storeWideAt blocks i groups run = do
      outstanding <- outstandingCount c
      if noWork groups && outstanding == 0
        then takeSeq c >>= run
        else (False, groups) <$ writeIORef (connHeld c) (Held blocks i malformed False)
    answer next act = do
      s <- takeSeq c
      act >>= place c s
      next

-- | Post an event to a key color (a transaction's steps, Note
-- [Transactions] in "Kv.Transaction").
postKeyColor :: Env -> Int -> IO () -> IO ()
postKeyColor env color act = post (envRuntime env) color hCommand act `catch` \RuntimeClosed -> return ()

-- | Answer the command with this number from a key color.
replyLater :: Env -> Conn -> Int -> Reply -> IO ()
replyLater env c s r = whole s r >>= \done -> deliver env c [done]

-- | The arguments (names included) of the commands a dispatch starts from
-- the command at an index of the first 'Commands' on, counted as far as
-- 'soonArgs'.
windowArgs :: [Commands] -> Int -> Int
windowArgs = go 0 0
  where
    go :: Int -> Int -> [Commands] -> Int -> Int
    go _ !acc [] _ = acc
    go k acc blocks@(cs : more) i
      | k >= dispatchWindow || acc >= soonArgs = acc
      | j >= commandsEnd cs = go (k + 1) acc' more 0
      | otherwise = go (k + 1) acc' blocks j
      where j = nextCommand cs i
            acc' = acc + argCount cs i

-- | Add a command's operations on keys, under its sequence number, to the
-- batch's work (an 'Answer' takes its place at once).
keyWork :: Env -> Conn -> Int -> Plan -> Groups -> IO Groups
keyWork env c s p groups = case p of
  Answer r -> groups <$ place c s r
  Live f -> f (envStore env) >>= \r -> groups <$ place c s r
  Park -> groups <$ parked env c s
  Unblock r -> groups <$ unblocked env c s r
  Expire r -> groups <$ expired env c s r
  OnClients call | Just answer <- ownClientCall c call -> groups <$ (answer >>= place c s)
  OnClients (ClientUnblock target withError) -> do
    live <- readIORef (envLive env)
    case IntMap.lookup target live of
      Nothing -> groups <$ place c s (RInt 0)
      -- Its blocked command is read and ended on its own color.
      Just t -> return (add (connColor t) (WorkUnblock s t withError) groups)
  OnKey key op -> do
    let !h = keyHash key
    prefetchKey (envStore env) h
    return $! add (hashColor (envStore env) h) (Work s h key op) groups
  OnKeys parts joinParts -> keyWork env c s (Steps parts (Answer . joinParts)) groups
  Steps [] joinParts -> keyWork env c s (joinParts []) groups
  Steps parts joinParts -> case sharedColor store hashed of
    Just color -> return (add color (WorkAll s hashed joinParts) groups)
    Nothing -> do
        modifyIORef' (connEarly c) (IntMap.insert s (Joining (length parts) IntMap.empty joinParts))
        -- The command's parts by color, in argument order within each.
        let byColor = IntMap.fromListWith (++) [ (hashColor store h, [part]) | part@(KeyPart _ h _ _) <- hashed ]
        return (IntMap.foldrWithKey (\color ps g -> add color (WorkParts s (reverse ps)) g) groups byColor)
    where hashed = keyParts parts
  -- A survey of every color that holds keys (Note [Store-wide commands]).
  Surveying op -> do
    colors <- occupiedColors (envStore env)
    if null colors then groups <$ place c s (joinSurvey op []) else do
      parts <- newIORef (length colors, [])
      return (foldr (\color -> add color (WorkSurvey s op parts)) groups colors)
  -- No command's parts decide on a store-wide step.
  _ -> groups <$ place c s (RError "ERR internal error: a store-wide step after a key's")
  where store = envStore env

-- Note [Work on the connection's color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A connection's color is one of the key colors ('fdColor' in
-- "Kv.Server"), and a batch's share on that color needs no event of its
-- own: the dispatch already runs on it, so no other event of the color
-- can run meanwhile, and it runs the share itself and places the results
-- at once ('placeResults'), with no reply event. With one key color per
-- core, a read's commands on keys of its own color run where they were
-- read, in one event, with nothing waiting between colors; with one core,
-- that is every command. The share waits as an event only while a
-- transaction holds the color's gate (Note [Transactions] in
-- "Kv.Transaction"). Results placed at once may release commands held
-- behind them, so 'resumeHeld' in "Kv.Server" dispatches again until
-- nothing held can start.

-- | Start each color's share of the work: the share of the connection's
-- own color here and now, the others as events with the given handler,
-- posted first so that other cores may run them meanwhile (Note [Work on
-- the connection's color]).
startGroups :: Env -> Conn -> Handler -> Groups -> IO ()
startGroups env c h groups = case groups of
  NoWork -> return ()
  OneColor color works -> start color works
  Colors m -> do
    forM_ (IntMap.toList m) $ \(color, works) -> unless (color == own) (start color works)
    forM_ (IntMap.lookup own m) (start own)
  where
    own = connColor c
    start color works
      | color == own = do
          open <- gateOpen (envGates env) color
          if open then runWorks env color works >>= placeHere else post' color works
      | otherwise = post' color works
    post' color works = post (envRuntime env) color h (runGated env c color works)
    placeHere results = unless (null results) (placeResults env c [results])

-- | Run a color's share of a batch (latest first) through the color's gate (Note
-- [Transactions] in "Kv.Transaction"), and hand its results to the
-- connection: the work waits only while a transaction holds the color
-- (the closure that waits is made only then).
runGated :: Env -> Conn -> Int -> [Work] -> IO ()
runGated env c color works = do
  open <- gateOpen (envGates env) color
  if open then send else gated (envGates env) color send
  where
    send = runWorks env color works >>= \results -> case results of
      [] -> return ()
      [_] -> deliver env c results
      _ -> runsOf results >>= deliver env c

-- | Results on the connection's color, latest first (Note [Latest
-- first]): each put in its place, or the command carried on.
placeResults :: Env -> Conn -> [[Result]] -> IO ()
placeResults env c = inOrder $ inOrder $ \r -> case r of
  Whole s n x -> placePiece c s 1 (Measured n x)
  Replies s k bs -> placePiece c s k (Encoded bs)
  Parts s parts -> partsArrived c s parts >>= mapM_ (continuePlan env c s)
  Then s next -> continuePlan env c s next
  Wake s -> woken env c s

-- | The rest of a multi-key command, as its parts decided, on the
-- connection's color (Note [Multi-key commands]).
continuePlan :: Env -> Conn -> Int -> Plan -> IO ()
continuePlan env c s p = keyWork env c s p NoWork >>= startGroups env c hCommand

-- | The most commands one dispatch starts; the rest are held until the
-- replies of these are out (Note [Back-pressure on large replies] in
-- "Kv.Conn").
dispatchWindow :: Int
dispatchWindow = 256

-- | A batch's work by color, each color's latest first. Most batches
-- (one key, or one command) have one color: that case allocates no map.
data Groups = NoWork | OneColor !Int [Work] | Colors !(IntMap.IntMap [Work])

add :: Int -> Work -> Groups -> Groups
add !color !w NoWork = OneColor color [w]
add color w (OneColor color0 ws)
  | color == color0 = OneColor color0 (w : ws)
  | otherwise = Colors (IntMap.insert color [w] (IntMap.singleton color0 ws))
add color w (Colors m) = Colors (IntMap.alter (Just . maybe [w] (w :)) color m)

noWork :: Groups -> Bool
noWork NoWork = True
noWork _ = False

-- Note [Store-wide commands]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- DBSIZE, KEYS, RANDOMKEY and FLUSHDB touch every key, hence every key
-- color (up to 65536), and a color's table may only be read by its own
-- events (Note [A color's table] in "Kv.Table"). Such a command runs only once every
-- command the client sent before it has run (nothing outstanding,
-- nothing posted in its batch); until then it and the commands after it
-- wait in 'connHeld', reading pauses, and 'settle' resumes them when the
-- replies are in. DBSIZE then adds up the tables' counts ('keyCount'),
-- which any color may read, and answers at once. KEYS and FLUSHDB run
-- on the colors that hold keys ('occupiedColors', which reads the same
-- counts): a part of it ('WorkSurvey' for KEYS, 'WorkFlush' for FLUSHDB
-- and FLUSHALL) joins each such color's group of the batch, ahead of the
-- commands the client sent after it. Each part lists or deletes its
-- color's keys; the colors count down a shared counter, and the last one
-- answers (for a survey, with the parts joined: 'joinSurvey'); no other
-- color posts a result. An empty store answers at once. With the default
-- key colors (one per core) that is at most one event per core; with
-- 65536 colors and 100,000 keys, some 50,000, about 0.1 s.
--
-- RANDOMKEY needs one key, so it picks one color by the same counts,
-- each with the odds of its share of the keys ('pickColor'), and asks it
-- alone for one of its live keys ('WorkPick'). The counts include keys
-- whose time is up but whose expiry timer has not yet deleted them, so
-- the color may have no live key; then, and only then, the command goes
-- on as a survey of every color that holds keys ('Then' a 'Surveying'
-- plan), whose parts each pick one and whose join picks among them. That
-- second step starts after the first has answered, so the client's
-- commands after a RANDOMKEY wait for its reply (in 'connHeld'), or the
-- survey could see what they wrote.
--
-- The client sees its own writes, as with redis. Unlike redis's, the
-- result is not one snapshot of the store when other clients write at
-- the same time: each key is seen (or deleted) before or after another
-- client's command on it, never half-way, and a key another client sets
-- while a flush runs may survive it, as if set just after.

-- Note [Batches per color]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- The commands decoded from one read are grouped by key color, in order:
-- each color gets one event that runs its commands one after another, and
-- hands their results back to the connection's color at once (Note [One
-- reply event per inbox] in "Kv.Conn"); the connection's own color runs
-- its share at once (Note [Work on the connection's color]). A pipeline
-- of 16 commands on one key of another color thus costs two events
-- instead of 32, and an MSET of keys that share a color one round trip.
-- Grouping keeps
-- the order of commands within a color, and the colors of one read run in
-- any order anyway, so what each command sees is what it would see with
-- one event per command. Ordering replies is the job of Note [Reply order]
-- in "Kv.Conn".

-- | Run a color's share of a batch (given latest first, run in order), on
-- that color; its results, latest first (Note [Latest first]).
runWorks :: Env -> Int -> [Work] -> IO [Result]
runWorks env color works = do
  -- One clock read for the batch: it only decides which keys have expired.
  now <- readNow
  let runOne h key op = runKeyOp (envStore env) (armExpiry env) now h key op
      -- The results, latest first; flushing colors but the last have
      -- nothing to answer. The older works run first, on the stack.
      go [] = return []
      -- After each command, the blocked commands its writes can serve
      -- (Note [Serving blocked commands]).
      go (w : older) = go older >>= \acc -> step acc w <* serveReady (storeWaiters (envStore env)) color
      step acc w = case w of
        Work s h key op -> do
          r <- runOne h key op
          done <- whole s r
          return (done : acc)
        WorkParts s ps -> do
          rs <- mapM (\(KeyPart i h key op) -> (,) i <$> runOne h key op) ps
          return (Parts s rs : acc)
        WorkAll s ps joinParts -> do
          -- Its keys are all this color's.
          rs <- mapM (\(KeyPart _ h key op) -> runOne h key op) ps
          r <- runHere env color now s (joinParts rs)
          return (r : acc)
        WorkFlush s left -> do
          flushColor (envStore env) color
          n <- atomicModifyIORef' left (\n -> (n - 1, n - 1))
          if n == 0 then whole s ok >>= \done -> return (done : acc) else return acc
        WorkSurvey s op parts -> do
          part <- surveyColor (envStore env) color now op
          (n, gathered) <- atomicModifyIORef' parts (\(n, ps) -> let st = (n - 1, part : ps) in (st, st))
          if n == 0 then whole s (joinSurvey op gathered) >>= \done -> return (done : acc) else return acc
        WorkPick s -> do
          part <- surveyColor (envStore env) color now RandomKey
          case part of
            RArray [_, key@(RBulk _), _] -> whole s key >>= \done -> return (done : acc)
            -- Its keys have all expired (their timers have not yet run).
            _ -> return (Then s (Surveying RandomKey) : acc)
        WorkUnblock s t withError -> do
          r <- unblockClient env t withError
          done <- whole s r
          return (done : acc)
  -- A batch of lookups loads its keys' entries together first (Note
  -- [Looking ahead] in "Kv.Table").
  case works of
    _ : _ : _ -> lookAhead (envStore env) (\w -> case w of Work _ h _ _ -> h; _ -> 0) works
    _ -> return ()
  go works

-- | What a multi-key command's parts decided, for the command with this
-- number: done here, on this color, as far as its keys are this color's;
-- the rest is sent on ('Then').
runHere :: Env -> Int -> Now -> Int -> Plan -> IO Result
runHere env color now s = finish
  where
    store = envStore env
    runPart (KeyPart _ h key op) = runKeyOp store (armExpiry env) now h key op
    here parts = sharedColor store parts == Just color
    finish next = case next of
      Answer r -> whole s r
      Live f -> f store >>= whole s
      OnKey key op | part <- KeyPart 0 (keyHash key) key op, here [part] -> runPart part >>= finish . Answer
      OnKeys ps joinParts | parts <- keyParts ps, here parts -> mapM runPart parts >>= finish . Answer . joinParts
      Steps ps joinParts | parts <- keyParts ps, here parts -> mapM runPart parts >>= finish . joinParts
      _ -> return (Then s next)


------------------------------------------------------------------------------
-- Expiry

-- | Register a key's expiry timer (for the key's deadline, after a delay
-- in microseconds): when it fires, an event of the key's color deletes
-- the key if it is due (the timer itself runs on a weft dispatcher, which
-- must not touch the store).
armExpiry :: Env -> ByteString -> Int -> Int -> IO TimeoutKey
armExpiry env key deadline us = do
  mgr <- getSystemTimerManager
  let !owned = B.copy key
  registerTimeout mgr us $
    let color = keyColor (envStore env) owned
    in post (envRuntime env) color hExpire (gated (envGates env) color (expireDue (envStore env) (armExpiry env) owned deadline))
         `catch` \RuntimeClosed -> return ()


------------------------------------------------------------------------------
-- Blocked commands

-- Note [Blocked commands]
-- ~~~~~~~~~~~~~~~~~~~~~~~
-- BLPOP, BRPOP, BLMPOP, BLMOVE and BRPOPLPUSH wait, up to their timeout,
-- for one of their keys to hold a list (BZPOPMIN, BZPOPMAX and BZMPOP, a
-- sorted set; what is said of lists here holds for them). Such a command ('Blocking') takes
-- its sequence number and holds the connection's later commands back
-- until it is answered, as a multi-key command does. It runs as attempts:
-- its non-blocking form, a plan over its keys' colors that ends in
-- 'Unblock' with the reply, or in 'Park' when no key had anything. Both
-- come back to the connection's color, which keeps the command's state
-- ('connBlocked'). After the first attempt parks, the command registers a
-- 'Waker' on each key's color ("Kv.Waiters", atomic updates of a map the
-- key colors read), arms its timeout, and attempts once more: a push
-- that came between the first attempt and the registrations is seen by
-- the second attempt, and one after them finds the registration. Only
-- the first attempt answers WRONGTYPE for a key of another type; later
-- ones count it as empty, as redis leaves a blocked client blocked when
-- its key is set to another type.
--
-- Blocking commands are served in the order they started (their
-- tickets, 'takeTicket'), one at a time per key, as redis serves them
-- in the order they blocked. A write that leaves a list under a key (any
-- command, on the key's color: 'runKeyOp' checks the color's
-- registrations, one read when nobody waits) marks the key to be served
-- once its command is done (Note [Serving blocked commands]); then the
-- first of the key's commands in line (the earliest ticket not done)
-- attempts again. An attempt pops only from the keys where its command
-- is first in line ('firstInLine', read as the attempt starts), and
-- parks if there is nothing there, still registered in its place; so a
-- command that has just started does not take the element the one in
-- line was served, and two commands served one after the other take
-- the elements in their order. A write during an attempt wakes it, and
-- it attempts again when that one parks. The timeout ('Expire') answers
-- the empty reply when the command is parked, or when its attempt parks;
-- CLIENT UNBLOCK from another client ends it the same way: an event on
-- its connection's color ends it at once, or, with an attempt under way,
-- marks it so that the attempt's park answers the empty reply, and its
-- inbox gets the 'Expire'. An attempt already under way that pops is
-- still answered with what it popped. Once answered, timed out, unblocked
-- or closed, the command is done: its registrations are removed and its
-- timer cancelled, and its keys' lists are announced again, which serves
-- the next in line for what is left. Each command in line either pops,
-- or is done, or waits on a key with nothing in it, so the line moves.
--
-- The order is the tickets', which follow the order in which the
-- commands' connections were read; commands on two connections sent at
-- nearly the same time may take their tickets in either order.
--
-- A blocked client is read on (while what it sent after the blocking
-- command spans few reads, which are held), so that its close is seen:
-- one whose input ends while it is blocked is closed, as redis closes it,
-- and takes nothing. One that waits is not idle (its idle timeout is
-- lifted while it is registered).
--
-- Note [Serving blocked commands]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- As redis does, a command whose writes leave lists under keys that
-- blocked commands wait for serves those commands before anything else
-- runs on the keys' color: after each command of a color's batch
-- ('runWorks'), and after a transaction, once all of it has run
-- ('serveHeld' in "Kv.Transaction": its pushes are seen by a blocked
-- client as one), the color serves the keys written ('serveReady' in
-- "Kv.Waiters"). A command whose keys all have the key's color (all of
-- them, with keys that share a hash tag: Note [Hash tags] in "Kv.Key")
-- attempts there and then ('serveHere'), so its element is taken before
-- the writer's next command runs and before the writer is answered; what
-- that attempt writes (a BLMOVE's push) is served in turn, so a chain of
-- blocked moves is done when the push that started it is answered. A
-- command with keys of other colors is woken: its connection's color
-- gets a 'Wake' and attempts, after the write has been answered.
--
-- The command's state, shared by its registrations and changed only
-- atomically ("Kv.Waiters"), makes sure one attempt runs at a time and a
-- command is answered once: a key's color attempts only a waiting
-- command (none under way), and its connection only a woken one or its
-- own first ones; a write during an attempt marks it woken, so that it
-- attempts again when the attempt parks; the timeout and CLIENT UNBLOCK
-- end a waiting or woken command at once, and one with an attempt under
-- way when the attempt's outcome arrives. An attempt by a key's color
-- that pops marks the command served at once, so that the next in line
-- is served by the same write; the outcome goes to the connection as any
-- attempt's does.

-- | Start a blocking command: its first attempt, with the batch's work.
startBlock :: Env -> Conn -> Int -> Block -> Groups -> IO Groups
startBlock env c s b groups = do
  st <- newIORef wAttempting
  ticket <- takeTicket (storeWaiters (envStore env))
  let blk = Blocked s b ticket st False False Nothing Nothing
  writeIORef (connBlocked c) (Just blk)
  attempt <- attemptPlan env blk
  keyWork env c s attempt groups

-- | The blocking command with this number, if it is the connection's.
withBlocked :: Conn -> Int -> (Blocked -> IO ()) -> IO ()
withBlocked c s k = readIORef (connBlocked c) >>= \m -> case m of
  Just blk | blkSeq blk == s -> k blk
  _ -> return ()

-- | Attempt the command again, from its connection. (A write that
-- marks it woken meanwhile comes after its state is set, so the attempt
-- sees what that write left.)
attemptAgain :: Env -> Conn -> Blocked -> IO ()
attemptAgain env c blk = do
  writeIORef (blkState blk) wAttempting
  writeIORef (connBlocked c) (Just blk)
  attemptPlan env blk >>= continuePlan env c (blkSeq blk)

-- | The command's attempt, which pops only from the keys where it is
-- first in line.
attemptPlan :: Env -> Blocked -> IO Plan
attemptPlan env blk = do
  let store = envStore env
      keys = blockKeys (blkBlock blk)
  mine <- filterM (\k -> firstInLine (storeWaiters store) (keyColor store k) k (blkTicket blk)) keys
  return (blockAttempt (blkBlock blk) (blkRegistered blk) (`elem` mine))

-- | An attempt found nothing.
parked :: Env -> Conn -> Int -> IO ()
parked env c s = withBlocked c s $ \blk -> do
  let b = blkBlock blk
      store = envStore env
      waiters = storeWaiters store
      register = do
        let wake = deliver env c [Wake s]
            registered = blk { blkRegistered = True }
            waker k = Waker (blkTicket blk) (blkState blk) wake (serving (keyColor store k))
            -- Served where its keys are, when they all share a color.
            serving color
              | all ((== color) . keyColor store) (blockKeys b) = Just (serveHere env c registered color)
              | otherwise = Nothing
        forM_ (blockKeys b) $ \k -> addWaker waiters (keyColor store k) k (waker k)
        -- A blocked client is not idle, as in redis (--timeout).
        when (fst (envTimeout env) > 0) $ Net.setIdleTimeout (connSocket c) 0
        timer <- if blockTimeout b <= 0 then return Nothing else do
          mgr <- getSystemTimerManager
          Just <$> registerTimeout mgr (blockTimeout b * 1000)
            (deliver env c [Then s (Expire (blockEmpty b))] `catch` \RuntimeClosed -> return ())
        attemptAgain env c registered { blkTimer = timer }
  case blkExpired blk of
    Just r -> answerBlocked env c s blk r
    Nothing | not (blkRegistered blk) -> register
            | otherwise -> do
                -- Waiting again, unless a write woke it meanwhile.
                before <- swapState blk (\st -> if st == wAttempting then wWaiting else st)
                if before == wWoken then attemptAgain env c blk else
                  -- Counted once it waits, so that a client INFO counts
                  -- is one a push serves at once.
                  unless (blkCounted blk) $ do
                    countBlocked waiters 1
                    writeIORef (connBlocked c) (Just blk { blkCounted = True })

-- | Attempt a registered command on one of its keys' color, as that
-- color serves a key (Note [Serving blocked commands]), and send the
-- outcome to its connection: its reply, its park, or the rest of the
-- attempt on other colors.
serveHere :: Env -> Conn -> Blocked -> Int -> IO ()
serveHere env c blk color = do
  now <- readNow
  r <- attemptPlan env blk >>= runHere env color now (blkSeq blk)
  case r of
    -- Answered: out of line at once, so the next in line can be served.
    Then _ (Unblock _) -> () <$ swapState blk (\st -> if st == wAttempting then wServed else st)
    _ -> return ()
  deliver env c [r] `catch` \RuntimeClosed -> return ()

-- | Change the command's state atomically; its state before.
swapState :: Blocked -> (Int -> Int) -> IO Int
swapState blk f = atomicModifyIORef' (blkState blk) (\st -> (f st, st))

-- | End the command (done) if it is waiting or woken, not if an attempt
-- is under way or it was served; its state before.
endUnlessAttempting :: Blocked -> IO Int
endUnlessAttempting blk = swapState blk (\st -> if st == wWaiting || st == wWoken then wDone else st)

-- | A write woke the command: attempt again, unless an attempt is under
-- way (its park will see the wake) or it was ended.
woken :: Env -> Conn -> Int -> IO ()
woken env c s = withBlocked c s $ \blk -> do
  before <- swapState blk (\st -> if st == wWoken then wAttempting else st)
  when (before == wWoken) $ case blkExpired blk of
    Just r -> answerBlocked env c s blk r
    Nothing -> attemptAgain env c blk

-- | An attempt's reply: the command is done.
unblocked :: Env -> Conn -> Int -> Reply -> IO ()
unblocked env c s r = do
  withBlocked c s $ \blk -> endBlock env c blk
  place c s r

-- | The command's time is up, or another client ended it: answer it
-- this, now, or when its attempt under way parks (an attempt that pops
-- answers what it popped).
expired :: Env -> Conn -> Int -> Reply -> IO ()
expired env c s r0 = withBlocked c s $ \blk -> do
  -- The first to end it decides its reply.
  let r = fromMaybe r0 (blkExpired blk)
  before <- endUnlessAttempting blk
  if before == wAttempting || before == wServed
    then writeIORef (connBlocked c) (Just blk { blkExpired = Just r })
    else answerBlocked env c s blk r

-- | End the blocking command, answering it this.
answerBlocked :: Env -> Conn -> Int -> Blocked -> Reply -> IO ()
answerBlocked env c s blk r = endBlock env c blk >> place c s r

-- | CLIENT UNBLOCK, on the connection's color: end its blocking command
-- with its empty reply or the @UNBLOCKED@ error, through its inbox as a
-- timeout is (so the reply goes out as any reply does). 1 if it had one
-- not already ended, else 0.
unblockClient :: Env -> Conn -> Bool -> IO Reply
unblockClient env t withError = do
  m <- readIORef (connBlocked t)
  case m of
    Just blk | isNothing (blkExpired blk) -> do
      let r | withError = RError "UNBLOCKED client unblocked via CLIENT UNBLOCK"
            | otherwise = blockEmpty (blkBlock blk)
      -- Ended now unless an attempt is under way, so that no key's color
      -- serves it before its inbox answers it.
      before <- endUnlessAttempting blk
      if before == wServed then return (RInt 0) else do
        -- Marked now, so that what reaches the command before the inbox
        -- does (its attempt's park) answers it this too.
        writeIORef (connBlocked t) (Just blk { blkExpired = Just r })
        (deliver env t [Then (blkSeq blk) (Expire r)] `catch` \RuntimeClosed -> return ())
        return (RInt 1)
    _ -> return (RInt 0)

-- | The command is done, having taken an element or not: its
-- registrations and timer go, and its keys' lists are announced again
-- (Note [Blocked commands]).
endBlock :: Env -> Conn -> Blocked -> IO ()
endBlock env c blk = do
  writeIORef (blkState blk) wDone
  writeIORef (connBlocked c) Nothing
  mapM_ cancelTimeout (blkTimer blk)
  when (blkRegistered blk) $ do
    let store = envStore env
    forM_ keys $ \k -> removeWaker (storeWaiters store) (keyColor store k) k (blkState blk)
    when (blkCounted blk) $ countBlocked (storeWaiters store) (-1)
    when (fst (envTimeout env) > 0) $ Net.setIdleTimeout (connSocket c) (fst (envTimeout env))
    -- Under the command's number, answered already: the 'Park' it ends in
    -- finds no blocked command and does nothing.
    continuePlan env c (blkSeq blk) (Steps [ (k, announce) | k <- keys ] (const Park))
  where
    keys = blockKeys (blkBlock blk)
    announce _ _ v = case v of
      Just x@(VList _) -> Outcome (Replace x) RNil
      Just x@(VZSet _) -> Outcome (Replace x) RNil
      _ -> Outcome Keep RNil

-- | The connection closes: a command blocked on it is done.
abandonBlock :: Env -> Conn -> IO ()
abandonBlock env c = readIORef (connBlocked c) >>= mapM_ (\blk -> endBlock env c blk)
