{-# LANGUAGE OverloadedStrings #-}
-- | What weft-kv's command modules share: how a command is carried out
-- ('Plan'), its table entry, and the replies and argument checks redis
-- gives in the same words for many commands.
module Kv.Plan
  ( Plan (..)
  , Block (..)
  , ClientCall (..)
  , TxCall (..)
  , Arity (..)
  , Command
    -- * Replies
  , ok
  , wrongType
  , notInteger
  , syntaxError
    -- * Arguments
  , upper
  , lower
  , printable
  , withInt
  , withCount
  , withTimeout
    -- * Collections
  , sizeOp
  , removeMembers
  , removeEach
  , onMembers
  , readMembers
  , answering
  , Combine (..)
    -- * Random choices
  , randoms
  , randomFrom
  , clockSeed
  , pickDistinct
  , randomArgs
  , randomItems
  , membersRandomItems
  ) where

import Control.Monad (foldM)
import Data.Bits (shiftR, xor)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import Data.Maybe (catMaybes)
import qualified Data.Set as Set
import Data.Word (Word64)

import Kv.Members (Members, membersPacked, membersRandom, membersRemove, membersSize, smallMembers)
import Kv.Packed (Packed, packedAt, packedDeleteAt, packedSize, packedToAscList)
import Kv.Resp
import Kv.Store
import Kv.Text (readDouble)

-- | How a command is carried out.
data Plan
  = Answer Reply
    -- ^ No key involved: the reply, computed on the connection's color.
  | Live (Store -> IO Reply)
    -- ^ As 'Answer', made when the command's turn comes, from the clocks
    -- or the server's counts (TIME, INFO).
  | OnKey !ByteString KeyOp
    -- ^ One operation on one key, run on the key's color.
  | OnKeys [(ByteString, KeyOp)] ([Reply] -> Reply)
    -- ^ One operation per key, each on its key's color; their replies, in
    -- the order of the list, are joined into the command's reply.
  | Steps [(ByteString, KeyOp)] ([Reply] -> Plan)
    -- ^ As 'OnKeys', but the replies decide the rest of the command: its
    -- reply ('Answer'), or more operations whose reply becomes the
    -- command's. The connection's later commands wait until it is done
    -- (Note [Multi-key commands] in "Kv.Batch").
  | Surveying Survey
    -- ^ A read of every key, once the connection's earlier commands have
    -- run (Note [Store-wide commands] in "Kv.Batch").
  | Flushing
    -- ^ Delete every key, on every key color.
  | Blocking Block
    -- ^ A command that waits for a list (BLPOP): Note [Blocked commands]
    -- in "Kv.Batch".
  | Park
    -- ^ A blocking command's attempt found nothing: it waits.
  | Unblock Reply
    -- ^ A blocking command's attempt's reply: it is done.
  | Expire Reply
    -- ^ A blocking command's time is up (its empty reply), or another
    -- client ended it (CLIENT UNBLOCK): answer it this.
  | OnClients ClientCall
    -- ^ A command about connections (CLIENT): run where the connection
    -- and its server's connections are known ("Kv.Batch").
  | Isolated [ByteString] Plan
    -- ^ A plan over these keys that runs in one event, with the gates of
    -- their colors held, so that it is atomic across colors (MSETNX:
    -- Note [Transactions] in "Kv.Transaction").
  | Transaction TxCall
    -- ^ MULTI, EXEC, DISCARD, WATCH or UNWATCH: Note [Transactions] in
    -- "Kv.Transaction".

-- | A blocking command: the keys whose lists wake it (its own copies,
-- each once: the command may outlive the read it came in), its attempt
-- (a plan that ends in 'Park' or 'Unblock', given whether the command
-- has waited, so that a key of another type counts as empty, and the
-- keys whose turn is its, Note [Blocked commands] in "Kv.Batch"), its
-- reply when its time is up, and its timeout in milliseconds (0: none).
data Block = Block
  { blockKeys :: [ByteString]
  , blockAttempt :: Bool -> (ByteString -> Bool) -> Plan
  , blockEmpty :: Reply
  , blockTimeout :: !Int
  }

-- | CLIENT's subcommands.
data ClientCall
  = ClientId
    -- ^ The connection's id: unique among the server's connections
    -- for as long as it runs.
  | ClientSetName !ByteString
    -- ^ Name the connection (its own copy; empty: no name).
  | ClientGetName
  | ClientUnblock !Int !Bool
    -- ^ End the blocking command that the connection with this id waits
    -- on: with its empty reply, as if its time were up ('False'), or with
    -- an @UNBLOCKED@ error ('True').

-- | The transaction commands.
data TxCall
  = TxMulti
  | TxExec
  | TxExecRefused
    -- ^ EXEC with arguments: redis discards the transaction, if any,
    -- and answers EXECABORT.
  | TxDiscard
  | TxWatch [ByteString]
    -- ^ The keys (own copies).
  | TxUnwatch

-- | How many arguments (after the name) a command takes.
data Arity = Exactly !Int | AtLeast !Int | Between !Int !Int

-- | A command's table entry: its name (upper case), its arity, and its
-- plan from its arguments (which the arity has checked).
type Command = (ByteString, (Arity, [ByteString] -> Plan))

ok :: Reply
ok = RSimple "OK"

-- | The reply to an operation on a key of another type.
wrongType :: Reply
wrongType = RError "WRONGTYPE Operation against a key holding the wrong kind of value"

notInteger, syntaxError :: Reply
notInteger = RError "ERR value is not an integer or out of range"
syntaxError = RError "ERR syntax error"

-- | The text with its ASCII letters lower-cased (names in error texts).
lower :: ByteString -> ByteString
lower = B.map (\c -> if c >= 65 && c <= 90 then c + 32 else c)

-- | Text that is safe inside an error reply: at most 64 bytes, controls
-- (CR, LF among them) replaced with spaces.
printable :: ByteString -> ByteString
printable = B.map (\c -> if c < 32 || c == 127 then 32 else c) . B.take 64

-- | The name upper-cased, without copying when it already is.
upper :: ByteString -> ByteString
upper s | B.any isLowerW s = B.map (\c -> if isLowerW c then c - 32 else c) s
        | otherwise = s
  where isLowerW c = c >= 97 && c <= 122

-- | An integer argument (redis's 64-bit rules), or redis's error.
withInt :: ByteString -> (Int -> Plan) -> Plan
withInt s k = maybe (Answer notInteger) k (readInteger s)

-- | A count argument, which must not be negative.
withCount :: ByteString -> (Int -> Plan) -> Plan
withCount s k = case readInteger s of
  Just n | n >= 0 -> k n
  _ -> Answer (RError "ERR value is out of range, must be positive")

-- | A blocking command's timeout, in seconds as redis reads it (a float,
-- truncated to milliseconds; 0 waits for ever), for the plan.
withTimeout :: ByteString -> (Int -> Plan) -> Plan
withTimeout t k = case readDouble t of
  Nothing -> Answer (RError "ERR timeout is not a float or out of range")
  Just d
    | isInfinite d || d * 1000 >= 4.0e18 -> Answer (RError "ERR timeout is out of range")
    | ms < 0 -> Answer (RError "ERR timeout is negative")
    | otherwise -> k ms
    where ms = truncate (d * 1000) :: Int

-- | LLEN, SCARD, HLEN, ZCARD: the collection's size (given by @size@ for
-- the right type), 0 for a missing key, WRONGTYPE for another type.
sizeOp :: (Value -> Maybe (IO Int)) -> KeyOp
sizeOp size _ _ v = case v of
  Nothing -> Outcome Keep (RInt 0)
  Just value -> case size value of
    Nothing -> Outcome Keep wrongType
    Just n -> InPlace (Outcome Keep . RInt <$> n)

-- | HDEL and SREM: remove members from a hash's or set's table (@view@
-- picks it out of the right type), in place: how many were there. A key
-- whose table empties goes; one of another type is WRONGTYPE.
removeMembers :: (Value -> Maybe Members) -> (Members -> Value) -> [ByteString] -> KeyOp
removeMembers view wrap items _ _ = onMembers view (Outcome Keep (RInt 0)) $ \m -> do
  (removed, update) <- removeEach membersRemove membersSize wrap m items
  return (Outcome update (RInt removed))

-- | Remove items from a collection, in place (with @remove@, which gives
-- what the key then holds and whether the item was there; @size@ counts
-- what is left): how many were there, and the key's update (it goes if
-- emptied, as in redis; it stays as it is if nothing was removed).
removeEach :: (c -> ByteString -> IO (c, Bool)) -> (c -> IO Int) -> (c -> Value) -> c -> [ByteString] -> IO (Int, Update)
removeEach remove size wrap c0 items = do
  (c, removed) <- foldM (\(c, n) x -> fmap (\was -> n + fromEnum was) <$> remove c x) (c0, 0) items
  left <- size c
  let update | removed == 0 = Keep
             | left == 0 = Delete
             | otherwise = Replace (wrap c)
  return (removed, update)

-- | An operation in place on a hash's, set's or sorted set's members
-- (Note [Values changed in place] in "Kv.Store"; @view@ picks them out
-- of a value of the right type): @missing@ for no key, WRONGTYPE for
-- another type.
onMembers :: (Value -> Maybe c) -> Outcome -> (c -> IO Outcome) -> Maybe Value -> Outcome
onMembers view missing act v = case v of
  Nothing -> missing
  Just x -> maybe (Outcome Keep wrongType) (InPlace . act) (view x)

-- | A read of a hash's, set's or sorted set's members ('onMembers'): the
-- reply from them, @missing@ for no key.
readMembers :: (Value -> Maybe c) -> Reply -> (c -> IO Reply) -> Maybe Value -> Outcome
readMembers view missing answer = onMembers view (Outcome Keep missing) (fmap (Outcome Keep) . answer)

-- | The operation with another reply where it succeeds (an error, such
-- as WRONGTYPE, stands): SMOVE and LMOVE add with SADD's and LPUSH's
-- operations but answer otherwise.
answering :: Reply -> KeyOp -> KeyOp
answering r op now c v = instead (op now c v)
  where
    instead (Outcome u e@(RError _)) = Outcome u e
    instead (Outcome u _) = Outcome u r
    instead (InPlace act) = InPlace (instead <$> act)

-- | How a command over several sets or sorted sets combines their
-- members.
data Combine = Union | Inter | Diff

-- | Up to @n@ distinct members drawn at random, in draw order, and the
-- members left (SPOP, SRANDMEMBER, ZRANDMEMBER).
pickDistinct :: Int -> Packed -> [Word64] -> ([(ByteString, ByteString)], Packed)
pickDistinct n0 s0 = go n0 s0 []
  where
    go n set acc (r : rs)
      | n > 0 && packedSize set > 0 =
          let i = fromIntegral (r `mod` fromIntegral (packedSize set))
          in go (n - 1) (packedDeleteAt i set) (packedAt i set : acc) rs
    go _ set acc _ = (reverse acc, set)

-- | A seed for random choices, from the monotonic clock in nanoseconds.
clockSeed :: Now -> Word64
clockSeed now = fromIntegral (nowSeed now) * 0x2545f4914f6cdd1d

-- | splitmix64's finaliser over a counter started at the seed: good enough
-- to spread choices, not for anything that needs secrecy.
randoms :: Word64 -> [Word64]
randoms z = map randomFrom (iterate (+ 0x9e3779b97f4a7c15) z)

-- | One random number from a seed: the first of 'randoms'.
randomFrom :: Word64 -> Word64
randomFrom z0 =
  let z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
      z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
  in z2 `xor` (z2 `shiftR` 31)

-- | The arguments of SRANDMEMBER, ZRANDMEMBER and HRANDFIELD after the
-- key, as redis reads them: none; a count (any 64-bit integer but the
-- smallest); or, where the command has one (@option@: WITHSCORES,
-- WITHVALUES), a count and that option, which then limits the count to
-- half the range either way. Then the plan for the count, if any, and
-- whether the option was given.
randomArgs :: Maybe ByteString -> [ByteString] -> (Maybe Int -> Bool -> Plan) -> Plan
randomArgs _ [] k = k Nothing False
randomArgs Nothing (_ : _ : _) _ = Answer syntaxError
randomArgs option (n : rest) k = case readInteger n of
  Nothing -> Answer notInteger
  Just c
    | c == minBound -> Answer (RError "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    | otherwise -> case (map upper rest, option) of
        ([], _) -> k (Just c) False
        ([o], Just o')
          | o == o' && (c < negate (maxBound `div` 2) || c > maxBound `div` 2) -> Answer (RError "ERR value is out of range")
          | o == o' -> k (Just c) True
        _ -> Answer syntaxError

-- | A collection's items chosen at random for a count, as SRANDMEMBER,
-- ZRANDMEMBER and HRANDFIELD choose them: for a negative count, that many
-- with repeats; for a count of at least the size, all of them, in the
-- order given (@whole@: each command's own); else that many distinct ones.
randomItems :: Now -> Int -> Packed -> [(ByteString, ByteString)] -> [(ByteString, ByteString)]
randomItems now c s whole
  | c < 0 = if packedSize s == 0 then [] else map at (take (negate c) rs)
  | c >= packedSize s = whole
  | otherwise = fst (pickDistinct c s rs)
  where
    rs = randoms (clockSeed now)
    at r = packedAt (fromIntegral (r `mod` fromIntegral (packedSize s))) s

-- | A hash's or set's members chosen at random for a count, as
-- 'randomItems' chooses them, in byte order where all are taken. From a
-- table of many members, a count small against its size (or negative:
-- with repeats) is drawn pick by pick ('membersRandom', near uniform),
-- distinct ones until there are enough; else the members are read into a
-- packed map and picked by rank, a walk over them all.
membersRandomItems :: Now -> Int -> Members -> IO [(ByteString, ByteString)]
membersRandomItems now c m = do
  n <- membersSize m
  if n > smallMembers && 4 * c < n
    then if c < 0 then catMaybes <$> mapM (membersRandom m) (take (negate c) rs) else distinct c Set.empty [] rs
    else do
      p <- membersPacked m
      return (randomItems now c p (packedToAscList p))
  where
    rs = randoms (clockSeed now)
    distinct :: Int -> Set.Set ByteString -> [(ByteString, ByteString)] -> [Word64] -> IO [(ByteString, ByteString)]
    distinct 0 _ acc _ = return (reverse acc)
    distinct k seen acc (r : rest) = do
      picked <- membersRandom m r
      case picked of
        Just x@(f, _) | not (Set.member f seen) -> distinct (k - 1) (Set.insert f seen) (x : acc) rest
        _ -> distinct k seen acc rest
    distinct _ _ acc [] = return (reverse acc)
