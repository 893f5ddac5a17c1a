{-# LANGUAGE OverloadedStrings, ScopedTypeVariables #-}
-- | weft-kv's transactions: the gates that hold key colors (a model
-- test), and MULTI, EXEC, DISCARD and WATCH end to end: queuing and its
-- refusals, isolation from other clients under load, store-wide commands
-- among tens of thousands of key colors, watched keys, and
-- blocked clients around a transaction.
module Test.KvMulti (spec) where

import Control.Concurrent
import Control.Concurrent.Async (concurrently)
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import Data.IORef
import Test.Hspec
import Test.Hspec.QuickCheck (prop)
import Test.QuickCheck hiding (within)

import Kv.Gate
import Kv.Key (keyHash)
import Kv.Resp
import Kv.Server
import Support (within)
import Test.Kv hiding (spec)

spec :: Spec
spec = describe "weft-kv transactions" $ do
  gateSpec
  multiSpec
  storeWideSpec

------------------------------------------------------------------------------
-- Gates

-- | What happens at a color: an event, a transaction taking the gate (as
-- an event through it), or the transaction letting go.
data GateStep = Event Int | Hold | Release
  deriving (Show)

instance Arbitrary GateStep where
  arbitrary = frequency [(5, Event <$> arbitrary), (1, pure Hold), (1, pure Release)]

-- | The model: what runs, in order. A held gate queues what comes; a
-- release runs the queue in order, until a queued hold takes the gate
-- again and leaves the rest queued behind it.
gateModel :: [GateStep] -> [String]
gateModel = go False [] []
  where
    go _ _ out [] = reverse out
    go held queue out (step : rest) = case step of
      Release | held -> let (held', queue', out') = drain queue out in go held' queue' out' rest
              | otherwise -> go held queue out rest
      _ | held -> go held (queue ++ [step]) out rest
      Event n -> go held queue (show n : out) rest
      Hold -> go True queue ("hold" : out) rest
    drain [] out = (False, [], out)
    drain (Event n : more) out = drain more (show n : out)
    drain (Hold : more) out = (True, more, "hold" : out)
    drain (Release : more) out = drain more out

gateSpec :: Spec
gateSpec = describe "a color's gate" $
  prop "runs events at once when open, queues them when held, and runs them in order on release" $ \steps -> ioProperty $ do
    gates <- newGates 4
    held <- newIORef False
    out <- newIORef []
    let say x = modifyIORef out (x :)
    forM_ steps $ \step -> case step of
      Event n -> gated gates 2 (say (show n))
      Hold -> gated gates 2 (holdGate gates 2 >> writeIORef held True >> say "hold")
      Release -> do
        h <- readIORef held
        when h $ writeIORef held False >> releaseGate gates 2
    got <- reverse <$> readIORef out
    -- A gate-less color (one beyond the key colors) runs everything.
    beyond <- newIORef (0 :: Int)
    gated gates 9 (modifyIORef beyond (+ 1))
    n <- readIORef beyond
    return (got === gateModel steps .&&. n === 1)

------------------------------------------------------------------------------
-- MULTI, EXEC, DISCARD, WATCH

multiSpec :: Spec
multiSpec = around (withKvConfig defaultServerConfig { serverKeyColors = 64 }) $ describe "server" $ do
  it "picks RANDOMKEY's color with the odds of its share of the keys" $ \addr ->
    withClient addr $ \c -> do
      -- 40 keys on one color of the 64, and one key on another.
      let named = [ C.pack ("w:" ++ show i) | i <- [1 :: Int ..] ]
          colorOf k = keyHash k `mod` 64
          crowd = take 40 [ k | k <- named, colorOf k == 7 ]
          lone = take 1 [ k | k <- named, colorOf k == 9 ]
      run c [ ["SET", k, "v"] | k <- lone ++ crowd ] `shouldReturn` replicate 41 ok
      picks <- run c (replicate 2000 ["RANDOMKEY"])
      [ p | p <- picks, p `notElem` map bulk (lone ++ crowd) ] `shouldBe` []
      -- About 2000 / 41 = 49 (a color picked at even odds: about 1000).
      length (filter (`elem` map bulk lone) picks) `shouldSatisfy` (< 150)
  it "queues commands after MULTI and answers them at EXEC in one array, errors in their places" $ \addr ->
    withClient addr $ \c -> do
      run c [["MULTI"], ["SET", "m:a", "1"], ["INCR", "m:a"], ["LPUSH", "m:a", "x"], ["RPUSH", "m:l", "p", "q"], ["MGET", "m:a", "m:none"], ["EXEC"]]
        `shouldReturn` [ok, queued, queued, queued, queued, queued
                       , RArray [ok, RInt 2, wrongType, RInt 2, RArray [bulk "2", RNil]]]
      -- Nothing ran before EXEC: a command queued is not seen by another client.
      withClient addr $ \other -> do
        run c [["MULTI"], ["SET", "m:b", "queued"]] `shouldReturn` [ok, queued]
        cmd other ["EXISTS", "m:b"] `shouldReturn` RInt 0
        cmd c ["EXEC"] `shouldReturn` RArray [ok]
        cmd other ["GET", "m:b"] `shouldReturn` bulk "queued"
      run c [["MULTI"], ["EXEC"]] `shouldReturn` [ok, RArray []]

  it "refuses what redis refuses: nesting, EXEC and DISCARD alone, WATCH inside; a refused command aborts the EXEC" $ \addr ->
    withClient addr $ \c -> do
      run c [["EXEC"], ["DISCARD"], ["MULTI"], ["MULTI"], ["WATCH", "m:x"], ["SET", "m:c", "1"], ["EXEC"]]
        `shouldReturn` [ RError "ERR EXEC without MULTI", RError "ERR DISCARD without MULTI", ok
                       , RError "ERR MULTI calls can not be nested", RError "ERR WATCH inside MULTI is not allowed"
                       , queued, RArray [ok] ]
      run c [["MULTI"], ["SET", "m:d", "1"], ["NOSUCH"], ["GET"], ["SET", "m:e", "1"], ["EXEC"], ["EXISTS", "m:d", "m:e"]]
        `shouldReturn` [ ok, queued, RError "ERR unknown command 'NOSUCH', with args beginning with: "
                       , RError "ERR wrong number of arguments for 'get' command", queued
                       , RError "EXECABORT Transaction discarded because of previous errors.", RInt 0 ]
      run c [["MULTI"], ["SET", "m:d", "1"], ["DISCARD"], ["EXISTS", "m:d"], ["PING"]]
        `shouldReturn` [ok, queued, ok, RInt 0, RSimple "PONG"]

  it "runs a transaction with no other client's command between its commands, under load from both cores" $ \addr ->
    withClient addr $ \w -> withClient addr $ \r -> withClient addr $ \t -> do
      -- The writer's transactions set keys (of several colors), work on
      -- 300 others, and delete them again: a reader must never see one
      -- set, and a reading transaction must see both counters equal.
      let pads = [ "m:pad" <> C.pack (show i) | i <- [1 .. 300 :: Int] ]
          mids = [ "m:mid" <> C.pack (show i) | i <- [1 .. 8 :: Int] ]
          rounds = 100 :: Int
          transaction = [["MULTI"]] ++ [ ["SET", k, "half-way"] | k <- mids ] ++ [["INCR", "m:x"]]
                        ++ [ ["INCR", p] | p <- pads ] ++ [["INCR", "m:y"], "DEL" : mids, ["EXEC"]]
      done <- newEmptyMVar
      let writer = do
            forM_ [1 .. rounds] $ \_ -> do
              got <- run w transaction
              last got `shouldSatisfy` isArray
            putMVar done ()
          -- Plain GETs on the key, in pipelines, until the writer is done.
          reader seen = tryReadMVar done >>= \d -> case d of
            Just () -> return seen
            Nothing -> do
              got <- run r (concat (replicate 3 [ ["GET", k] | k <- mids ]))
              reader (seen + length (filter (/= RNil) got))
          -- Transactions that read both counters, with the pads between.
          checker pairs = tryReadMVar done >>= \d -> case d of
            Just () -> return pairs
            Nothing -> do
              got <- run t ([["MULTI"], ["GET", "m:x"]] ++ [ ["GET", p] | p <- take 20 pads ] ++ [["GET", "m:y"], ["EXEC"]])
              case last got of
                RArray rs@(first : _) -> checker ((first, last rs) : pairs)
                other -> fail ("EXEC answered " ++ show other)
      (((), seen), pairs) <- within 60 "the transactions" (concurrently (concurrently writer (reader 0)) (checker []))
      seen `shouldBe` 0
      filter (uncurry (/=)) pairs `shouldBe` []
      cmd w ["GET", "m:x"] `shouldReturn` bulk (C.pack (show rounds))

  it "sets all of MSETNX's keys or none, when two clients race for a shared key" $ \addr ->
    withClient addr $ \a -> withClient addr $ \b -> withClient addr $ \c -> do
      -- Keys of several colors each; "n:y" is in both commands.
      let rounds = 300 :: Int
          race r = do
            let tag = C.pack (show r)
                ka = [ "n:x" <> tag, "n:y" <> tag ] ++ [ "n:a" <> C.pack (show i) <> tag | i <- [1 .. 8 :: Int] ]
                kb = [ "n:b" <> C.pack (show i) <> tag | i <- [1 .. 8 :: Int] ] ++ [ "n:y" <> tag, "n:z" <> tag ]
                msetnx v ks = "MSETNX" : concat [ [k, v] | k <- ks ]
            (ra, rb) <- concurrently (cmd a (msetnx "A" ka)) (cmd b (msetnx "B" kb))
            vals <- run c [["MGET", "n:x" <> tag], ["MGET", "n:y" <> tag], ["MGET", "n:z" <> tag]]
            return (ra, rb, vals)
      results <- mapM race [1 .. rounds]
      forM_ results $ \(ra, rb, vals) -> case (ra, rb) of
        (RInt 1, RInt 0) -> vals `shouldBe` [RArray [bulk "A"], RArray [bulk "A"], RArray [RNil]]
        (RInt 0, RInt 1) -> vals `shouldBe` [RArray [RNil], RArray [bulk "B"], RArray [bulk "B"]]
        other -> expectationFailure ("MSETNX answered " ++ show other ++ ", then " ++ show vals)
      run a [["MSETNX", "n:only"], ["MSETNX", "n:p", "1", "n:q"]]
        `shouldReturn` replicate 2 (RError "ERR wrong number of arguments for 'msetnx' command")

  it "fails EXEC with a null array when a watched key changed, by anyone, by expiry or by a flush, and forgets watches after" $ \addr ->
    withClient addr $ \c -> withClient addr $ \other -> do
      _ <- run c [["SET", "w:a", "1"], ["DEL", "w:b", "w:gone"]]
      -- Unchanged: runs.
      run c [["WATCH", "w:a", "w:b"], ["MULTI"], ["INCR", "w:a"], ["EXEC"]] `shouldReturn` [ok, ok, queued, RArray [RInt 2]]
      -- Another client's write.
      run c [["WATCH", "w:a"], ["MULTI"], ["INCR", "w:a"]] `shouldReturn` [ok, ok, queued]
      cmd other ["SET", "w:a", "10"] `shouldReturn` ok
      cmd c ["EXEC"] `shouldReturn` RNilArray
      cmd c ["GET", "w:a"] `shouldReturn` bulk "10"
      -- The watch ended with EXEC: the next one runs.
      _ <- cmd other ["SET", "w:a", "11"]
      run c [["MULTI"], ["INCR", "w:a"], ["EXEC"]] `shouldReturn` [ok, queued, RArray [RInt 12]]
      -- Its own write after WATCH counts too; a key created counts.
      run c [["WATCH", "w:a"], ["SET", "w:a", "1"], ["MULTI"], ["PING"], ["EXEC"]] `shouldReturn` [ok, ok, ok, queued, RNilArray]
      run c [["WATCH", "w:b"], ["MULTI"]] `shouldReturn` [ok, ok]
      _ <- cmd other ["RPUSH", "w:b", "x"]
      cmd c ["EXEC"] `shouldReturn` RNilArray
      -- Expiry deletes it.
      run c [["SET", "w:gone", "v", "PX", "30"], ["WATCH", "w:gone"]] `shouldReturn` [ok, ok]
      threadDelay 150000
      run c [["MULTI"], ["PING"], ["EXEC"]] `shouldReturn` [ok, queued, RNilArray]
      -- A flush touches a watched key that exists, not one that does not.
      run c [["WATCH", "w:a"], ["FLUSHDB"], ["MULTI"], ["PING"], ["EXEC"]] `shouldReturn` [ok, ok, ok, queued, RNilArray]
      run c [["WATCH", "w:a"], ["FLUSHDB"], ["MULTI"], ["PING"], ["EXEC"]] `shouldReturn` [ok, ok, ok, queued, RArray [RSimple "PONG"]]
      -- UNWATCH and DISCARD forget the watches, and a failed flag.
      run c [["SET", "w:a", "1"], ["WATCH", "w:a"], ["SET", "w:a", "2"], ["UNWATCH"], ["MULTI"], ["GET", "w:a"], ["EXEC"]]
        `shouldReturn` [ok, ok, ok, ok, ok, queued, RArray [bulk "2"]]
      run c [["WATCH", "w:a"], ["SET", "w:a", "3"], ["MULTI"], ["DISCARD"], ["MULTI"], ["GET", "w:a"], ["EXEC"]]
        `shouldReturn` [ok, ok, ok, ok, ok, queued, RArray [bulk "3"]]

  it "forgets the watches and the transaction of a client that closes" $ \addr ->
    withClient addr $ \observer -> do
      forM_ [1 .. 5 :: Int] $ \i -> do
        withClient addr $ \c -> do
          run c [["WATCH", "l:a", "l:b", C.pack ("l:" ++ show i)], ["MULTI"], ["SET", "l:a", "1"]] `shouldReturn` [ok, ok, queued]
          counts observer `shouldReturn` (1, 3)
        -- The server sees the close soon after.
        within 3 "the watches to go" $ let wait = counts observer >>= \n -> unless (n == (0, 0)) (threadDelay 2000 >> wait) in wait
      cmd observer ["EXISTS", "l:a"] `shouldReturn` RInt 0

  it "does not block inside a transaction, and wakes blocked clients to the transaction's end state" $ \addr ->
    withClient addr $ \c -> withClient addr $ \b -> do
      _ <- cmd c ["DEL", "b:q", "b:z", "b:d"]
      run c [["MULTI"], ["BLPOP", "b:q", "0"], ["BRPOPLPUSH", "b:q", "b:d", "0"], ["BZPOPMIN", "b:z", "0"], ["BLMPOP", "0", "1", "b:q", "LEFT"], ["EXEC"]]
        `shouldReturn` [ok, queued, queued, queued, queued, RArray [RNilArray, RNil, RNilArray, RNilArray]]
      -- A push and a delete in one transaction leave the blocked client
      -- blocked; it takes the next push.
      sendRaw b (encodeCommand ["BLPOP", "b:q", "0"])
      waitBlocked c 1
      run c [["MULTI"], ["LPUSH", "b:q", "a"], ["DEL", "b:q"], ["EXEC"]] `shouldReturn` [ok, queued, queued, RArray [RInt 1, RInt 1]]
      nothingYet b
      -- Nor does a push then a SET of another type.
      run c [["MULTI"], ["LPUSH", "b:q", "a"], ["DEL", "b:q"], ["SET", "b:q", "s"], ["EXEC"]]
        `shouldReturn` [ok, queued, queued, queued, RArray [RInt 1, RInt 1, ok]]
      nothingYet b
      _ <- cmd c ["DEL", "b:q"]
      -- Three pushes: it sees the last, as redis serves it after EXEC.
      run c [["MULTI"], ["LPUSH", "b:q", "1"], ["LPUSH", "b:q", "2"], ["LPUSH", "b:q", "3"], ["EXEC"]]
        `shouldReturn` [ok, queued, queued, queued, RArray [RInt 1, RInt 2, RInt 3]]
      replies b 1 `shouldReturn` [RArray [bulk "b:q", bulk "3"]]
      waitBlocked c 0

-- | Store-wide commands (KEYS, DBSIZE, FLUSHDB in transactions, and
-- RANDOMKEY), with as many key colors as a server may have, most of them
-- empty.
storeWideSpec :: Spec
storeWideSpec = around (withKvConfig defaultServerConfig { serverKeyColors = 65536 }) $ describe "server with 65536 key colors" $ do
  it "reads and flushes in a transaction the keys it creates, and sees other clients' new keys all or not at all" $ \addr ->
    withClient addr $ \w -> withClient addr $ \t -> do
      -- Keys a transaction creates on colors that held no keys.
      run t [["MULTI"], ["SET", "s:a", "1"], ["SET", "s:b", "2"], ["FLUSHDB"], ["SET", "s:c", "3"], ["KEYS", "*"], ["DBSIZE"], ["EXEC"]]
        `shouldReturn` [ok, queued, queued, queued, queued, queued, queued, RArray [ok, ok, ok, ok, RArray [bulk "s:c"], RInt 1]]
      -- A writer creates new keys, mostly on empty colors, while
      -- transactions count the keys twice and list them in between.
      let rounds = 40 :: Int
          batch i = [ ["SET", C.pack ("s:w" ++ show i ++ ":" ++ show j), "x"] | j <- [1 .. 50 :: Int] ]
      done <- newEmptyMVar
      let writer = do
            forM_ [1 .. rounds] $ \i -> run w (batch i) >>= (`shouldBe` replicate 50 ok)
            putMVar done ()
          checker :: Int -> [(Int, Int, Int, Bool)] -> IO [(Int, Int, Int, Bool)]
          checker j views = tryReadMVar done >>= \d -> case d of
            Just () -> return views
            Nothing -> do
              let own = C.pack ("s:own" ++ show j)
              got <- run t [["MULTI"], ["DBSIZE"], ["SET", own, "1"], ["KEYS", "*"], ["DBSIZE"], ["EXEC"]]
              case last got of
                RArray [RInt n0, _, RArray ks, RInt n1] -> checker (j + 1) ((n0, length ks, n1, bulk own `elem` ks) : views)
                other -> fail ("EXEC answered " ++ show other)
      ((), views) <- within 60 "the transactions" (concurrently writer (checker 0 []))
      length views `shouldSatisfy` (> 0)
      [ v | v@(n0, listed, n1, own) <- views, n0 + 1 /= listed || listed /= n1 || not own ] `shouldBe` []
      -- The last transaction saw all the writer's keys, its own and s:c.
      cmd t ["DBSIZE"] `shouldReturn` RInt (rounds * 50 + length views + 1)

  it "answers RANDOMKEY from one color with each live key and no other, and never nil while keys expire" $ \addr ->
    withClient addr $ \c -> do
      cmd c ["RANDOMKEY"] `shouldReturn` RNil
      let keys = [ C.pack ("r:" ++ show i) | i <- [1 .. 30 :: Int] ]
      run c [ ["SET", k, "v"] | k <- keys ] `shouldReturn` replicate 30 ok
      picks <- run c (replicate 3000 ["RANDOMKEY"])
      [ p | p <- picks, p `notElem` map bulk keys ] `shouldBe` []
      [ k | k <- keys, bulk k `notElem` picks ] `shouldBe` []
      -- It sees the client's earlier writes, not its later ones.
      got <- run c [["RANDOMKEY"], "DEL" : keys, ["RANDOMKEY"]]
      drop 1 got `shouldBe` [RInt 30, RNil]
      take 1 got `shouldSatisfy` all (`elem` map bulk keys)
      -- Keys expire one by one, mostly each on a color of its own, beside
      -- one that does not: a color picked by the counts may hold only a
      -- key whose time is up and whose timer has not yet deleted it.
      run c ([ ["SET", C.pack ("e:" ++ show i), "v", "PX", C.pack (show (20 + i `rem` 400))] | i <- [1 .. 800 :: Int] ]
             ++ [["SET", "live", "v"]]) `shouldReturn` replicate 801 ok
      let draw :: Int -> [Reply] -> IO [Reply]
          draw rounds seen = do
            n <- cmd c ["DBSIZE"]
            if n == RInt 1 || rounds == 0 then return seen else do
              more <- run c (replicate 100 ["RANDOMKEY"])
              draw (rounds - 1) (filter (== RNil) more ++ seen)
      nils <- within 30 "RANDOMKEY while keys expire" (draw (2000 :: Int) [])
      nils `shouldBe` []
      cmd c ["RANDOMKEY"] `shouldReturn` bulk "live"

queued :: Reply
queued = RSimple "QUEUED"

isArray :: Reply -> Bool
isArray (RArray _) = True
isArray _ = False

-- | INFO's watching clients and watched keys.
counts :: Client -> IO (Int, Int)
counts c = do
  info <- cmd c ["INFO"]
  case info of
    RBulk text -> return (field "watching_clients:" text, field "total_watched_keys:" text)
    other -> fail ("INFO answered " ++ show other)
  where
    field name text = case B.breakSubstring name text of
      (_, rest) | not (B.null rest) -> maybe (-1) fst (C.readInt (B.drop (B.length name) rest))
      _ -> -1
