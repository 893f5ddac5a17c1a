{-# LANGUAGE BangPatterns #-}
-- | weft-kv's connections: what the server's events share ('Env'), a
-- connection's state ('Conn'), and putting replies in request order
-- (Note [Reply order]). Every field of a 'Conn' but its inbox belongs to
-- the connection's color.
module Kv.Conn
  ( -- * What the events share
    Env (..)
    -- * Connections
  , Conn (..)
  , Phase (..)
  , Early (..)
  , Held (..)
  , Blocked (..)
  , Multi (..)
  , Watching (..)
  , noneHeld
  , holding
  , andThen
    -- * Counts
  , seqCount
  , nextCount
  , sentCount
  , getCount
  , setCount
  , addCount
  , outstandingCount
    -- * Replies in order
  , Result (..)
  , takeSeq
  , place
  , placePiece
  , partsArrived
    -- * Results from the key colors
  , deliver
  , inOrder
  , whole
  , runsOf
  , runReplyBytes
    -- * CLIENT
  , ownClientCall
  ) where

import Control.Monad (when)
import Control.Monad.Primitive (RealWorld)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.IntMap.Strict as IntMap
import Data.IORef
import Data.Maybe (isJust)
import Data.Primitive.PrimArray (MutablePrimArray, readPrimArray, writePrimArray)
import Foreign.Ptr (plusPtr)
import Network.Socket (SockAddr)

import Weft.Color (FdWatch, Handler, Runtime, handler, post)
import Weft.Timer (TimeoutKey)
import qualified Weft.Net as Net

import Kv.Gate (Gates)
import Kv.Out
import Kv.Plan (Block, ClientCall (..), Plan, ok)
import Kv.Request (Commands, Decoder, Limits)
import Kv.Resp
import Kv.Store (Store)

------------------------------------------------------------------------------
-- State

-- | What every event of the server shares; all of it immutable or, for
-- the connection table, touched only when connections come and go.
data Env = Env
  { envRuntime :: !Runtime
  , envStore   :: !Store
  , envLimits  :: !Limits
  , envLive    :: !(IORef (IntMap.IntMap Conn))
    -- ^ Open connections by id ('connId'): for CLIENT UNBLOCK, for
    -- eviction, and for closing them at shutdown.
  , envNextId  :: !(IORef Int)
    -- ^ The id the next connection gets.
  , envTimeout :: !(Int, Int)
    -- ^ The idle timeout and minimum receive ('serverTimeout').
  , envOutputLimit :: !Int
    -- ^ 'serverOutputLimit'.
  , envSendStall :: !Int
    -- ^ 'serverSendStall'.
  , envGates   :: !Gates
    -- ^ The key colors' gates (Note [Transactions] in "Kv.Transaction").
  , envResults :: Conn -> [[Result]] -> IO ()
    -- ^ What the connection's color does with results that come back
    -- from the key colors ("Kv.Batch"), latest first (Note [Latest
    -- first]): put them in order and move the connection on
    -- ("Kv.Server").
  }

-- | A connection. Every field but 'connInbox' is read and written only by
-- events of 'connColor' (the acceptor creates it before the first such
-- event).
data Conn = Conn
  { connSocket  :: !Net.Socket
  , connPeer    :: !SockAddr
  , connWatch   :: !FdWatch
  , connColor   :: !Int
  , connId      :: !Int
    -- ^ Unique among the server's connections (CLIENT ID).
  , connName    :: !(IORef ByteString)
    -- ^ CLIENT SETNAME's name; empty for none.
  , connDecoder :: !(IORef Decoder)
  , connCounts  :: !(MutablePrimArray RealWorld Int)
    -- ^ Unboxed counts, updated for every command and reply: 'seqCount',
    -- 'nextCount' and 'sentCount'.
  , connEarly   :: !(IORef (IntMap.IntMap Early))
    -- ^ Replies that came before their turn, and multi-key commands
    -- being joined, by sequence number.
  , connOut     :: !Out
    -- ^ Replies in their turn, not yet sent (Note [Replies in place] in
    -- "Kv.Out").
  , connStall   :: !(IORef Bool)
    -- ^ A stall check is armed.
  , connPhase   :: !(IORef Phase)
  , connReading :: !(IORef Bool)
    -- ^ A read is coming: the watch is rearmed for it, or it is posted.
  , connDrained :: !(IORef Bool)
    -- ^ The last read got less than it asked for (or @EAGAIN@), so the
    -- next data will announce itself with an edge.
  , connWriting :: !(IORef Bool)
    -- ^ The watch is rearmed for writing (the socket's buffer was full).
  , connHeld    :: !(IORef Held)
    -- ^ Commands decoded but held back behind a survey until the
    -- commands before it have run (Note [Store-wide commands] in
    -- "Kv.Batch"); reading pauses while there are any.
  , connBlocked :: !(IORef (Maybe Blocked))
    -- ^ The blocking command it waits on, if any (Note [Blocked commands]
    -- in "Kv.Batch").
  , connInbox   :: !(IORef [[Result]])
    -- ^ The one field other colors write: results the key colors have
    -- delivered and the connection's color has not yet taken: each
    -- color's batch, latest batch first and each latest first (Note
    -- [Latest first], Note [One reply event per inbox]).
  , connMulti   :: !(IORef (Maybe Multi))
    -- ^ The transaction being queued, after MULTI (Note [Transactions]
    -- in "Kv.Transaction").
  , connWatching :: !(IORef (Maybe Watching))
    -- ^ The keys it WATCHes, if any.
  }

-- | A transaction being queued: its commands, latest first, each as its
-- arguments (own copies, the name first); how many bytes they hold; and
-- whether one was refused (unknown, or with the wrong number of
-- arguments), so that EXEC discards it.
data Multi = Multi [[ByteString]] !Int !Bool

-- | The keys a connection WATCHes, each with its color, and the flag that
-- a change to any of them sets ("Kv.Watches").
data Watching = Watching !(IORef Bool) [(Int, ByteString)]

-- | A connection's counts ('connCounts'): the sequence number the next
-- command gets; the sequence number of the next reply to send; the bytes
-- sent so far, which a stall check compares (Note [Output limits] in
-- "Kv.Server").
seqCount, nextCount, sentCount :: Int
seqCount = 0
nextCount = 1
sentCount = 2

getCount :: Conn -> Int -> IO Int
getCount c = readPrimArray (connCounts c)
{-# INLINE getCount #-}

setCount :: Conn -> Int -> Int -> IO ()
setCount c = writePrimArray (connCounts c)
{-# INLINE setCount #-}

addCount :: Conn -> Int -> Int -> IO ()
addCount c i d = getCount c i >>= \v -> setCount c i (v + d)
{-# INLINE addCount #-}

-- | Commands sent but not yet answered in order.
outstandingCount :: Conn -> IO Int
outstandingCount c = (-) <$> getCount c seqCount <*> getCount c nextCount

-- | Commands decoded, in order, from the command at an index of the first
-- 'Commands' on (Note [Commands as views] in "Kv.Request"), and the
-- protocol error that ended the input after them, if any. The index is
-- that of a command of the first 'Commands', and 0 when there is none.
--
-- The last field marks a barrier: a command before them (a multi-key or
-- blocking one, Note [Multi-key commands] and Note [Blocked commands] in
-- "Kv.Batch") must be answered before they run, so commands read later
-- join them rather than run at once, even when none are held yet.
data Held = Held [Commands] !Int !(Maybe ByteString) !Bool

noneHeld :: Held
noneHeld = Held [] 0 Nothing False

-- | Is anything held?
holding :: Held -> Bool
holding (Held cmds _ malformed barrier) = barrier || not (null cmds) || isJust malformed

-- | What was held, then what came after it (from its start).
andThen :: Held -> Held -> Held
andThen (Held cmds i _ barrier) (Held more _ malformed _)
  | null cmds = Held more 0 malformed barrier
  | otherwise = Held (cmds ++ more) i malformed barrier

-- | A blocking command under way on its connection's color (Note
-- [Blocked commands] in "Kv.Batch").
data Blocked = Blocked
  { blkSeq :: !Int
  , blkBlock :: !Block
  , blkTicket :: !Int
    -- ^ Its place among blocked commands ('takeTicket').
  , blkState :: !(IORef Int)
    -- ^ Its state ("Kv.Waiters"), shared with its registrations.
  , blkCounted :: !Bool
    -- ^ Counted as blocked: since its first attempt after registering
    -- parked, when it waits with no attempt under way.
  , blkRegistered :: !Bool
    -- ^ It is registered on its keys (and counted as blocked).
  , blkExpired :: !(Maybe Reply)
    -- ^ What it ends with, once its time ran out or CLIENT UNBLOCK ended
    -- it while an attempt was under way (or before its inbox told it).
  , blkTimer :: !(Maybe TimeoutKey)
  }

-- | A reply waiting for its turn.
data Early
  = Waiting !Int !Piece
    -- ^ The replies to this many commands, from its number on.
  | Joining !Int !(IntMap.IntMap Reply) ([Reply] -> Plan)
    -- ^ Parts still to come, the parts so far by position, and what the
    -- parts decide (Note [Multi-key commands] in "Kv.Batch").

data Phase
  = Open
    -- ^ Reading commands.
  | Finishing !Bool
    -- ^ No more commands will be read (the peer ended its input, sent
    -- QUIT, or broke the protocol): send the replies still due, then
    -- close, lingering first ('True') if the close is ours.
  | Lingering
    -- ^ Replies sent, and the connection handed to 'Color.lingerClose',
    -- so that unread input does not make the kernel reset the connection
    -- and destroy the last reply.
  | Closed

-- Note [Reply order]
-- ~~~~~~~~~~~~~~~~~~
-- A client may pipeline: send many commands before reading a reply, and
-- it reads the replies in the order of the commands. The commands of one
-- pipeline may hit different keys, hence different colors, which run in
-- any order and in parallel. So the connection gives each command a
-- sequence number ('seqCount') when it decodes it, on the connection's
-- color. The command runs on its key's color (Note [Batches per color] in
-- "Kv.Batch"), where its reply is computed and made a 'Piece' (Note
-- [Replies in place] in "Kv.Out") and posted back
-- to the connection's color with that number. There, a reply whose
-- number is 'nextCount' is written to the output ('connOut'), followed
-- by any replies
-- that were waiting for it in 'connEarly'; a reply that comes early waits
-- in 'connEarly'. Replies decided on the
-- connection's color itself (PING, errors, and the commands on keys of
-- that color: Note [Work on the connection's color] in "Kv.Batch") take
-- the same path at once.
-- Both sides of the reorder step run on the connection's color, so it
-- needs no lock, and 'nextCount' only ever grows, one reply at a time.
--
-- Output is sent ("Kv.Server") once nothing is outstanding ('nextCount'
-- has caught up with 'seqCount'), or once it holds 'flushBytes': so a pipeline's replies
-- go out in one send, and a single command's reply goes out at once. A
-- connection stops reading while it has 'maxInFlight' commands
-- outstanding or 'maxOutBytes' unsent, and resumes when below both, so a
-- client that pipelines without reading its replies cannot make the
-- server buffer without bound.
--
-- Note [Back-pressure on large replies]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- Pausing the reads is not enough when each command is small and its
-- reply large: one read of 64 KiB of GETs is thousands of commands, and
-- of 100 KB values, hundreds of megabytes of replies. So one dispatch
-- starts at most 'dispatchWindow' commands ("Kv.Batch"); the rest wait in
-- 'connHeld', like commands behind a survey, and the next window starts
-- once nothing is outstanding and the waiting replies are below
-- 'maxOutBytes'. Reading stays paused while anything is held. A client
-- that stops reading then holds at most 'maxOutBytes' plus one window of
-- replies and its unread input, and is kept, as on every backend; the
-- output limit (Note [Output limits] in "Kv.Server") is left for a single
-- window whose replies are larger than it.

-- | What a 'Work' answered: a whole command's reply as its 'Piece' (a
-- 'Measured' one's fields, or an 'Encoded' one's bytes, held in the
-- result itself: results wait for their connection's reply event, and
-- what waits is copied by each minor collection), one color's parts of a
-- multi-key command, or the next step of a multi-key command that names
-- keys of other colors; or a wake-up of a blocked command.
data Result = Whole !Int !Int !Reply
  | Replies !Int !Int !ByteString
    -- ^ The replies to the commands from this number on, this many,
    -- encoded one after another (Note [Runs of replies]).
  | Parts !Int [(Int, Reply)] | Then !Int Plan
  | Wake !Int
    -- ^ A write woke the blocking command with this number.

takeSeq :: Conn -> IO Int
takeSeq c = do
  s <- getCount c seqCount
  setCount c seqCount (s + 1)
  return s

-- | One color's parts of a multi-key command, by position
-- (Note [Multi-key commands] in "Kv.Batch"): once every part is in, what
-- they decide, for the caller to carry out.
partsArrived :: Conn -> Int -> [(Int, Reply)] -> IO (Maybe Plan)
partsArrived c s new = do
  early <- readIORef (connEarly c)
  case IntMap.lookup s early of
    Just (Joining left parts joinParts) -> do
      let left' = left - length new
          parts' = foldl (\m (i, r) -> IntMap.insert i r m) parts new
      if left' > 0
        then Nothing <$ writeIORef (connEarly c) (IntMap.insert s (Joining left' parts' joinParts) early)
        else do
          writeIORef (connEarly c) (IntMap.delete s early)
          return (Just (joinParts (IntMap.elems parts')))
    _ -> return Nothing

-- | Put a reply in its place (Note [Reply order]).
place :: Conn -> Int -> Reply -> IO ()
place c s r = placePiece c s 1 (piece r)

-- | 'place' the replies to k commands from the one numbered s on, as a
-- 'Piece' made ready where the commands ran.
placePiece :: Conn -> Int -> Int -> Piece -> IO ()
placePiece c s k r = do
  next <- getCount c nextCount
  if s /= next
    then modifyIORef' (connEarly c) (IntMap.insert s (Waiting k r))
    else do
      outPiece (connOut c) r
      early <- readIORef (connEarly c)
      if IntMap.null early then setCount c nextCount (s + k) else catchUp early (s + k)
  where
    catchUp early at = case IntMap.lookup at early of
      Just (Waiting k' r') -> outPiece (connOut c) r' >> catchUp (IntMap.delete at early) (at + k')
      _ -> writeIORef (connEarly c) early >> setCount c nextCount at
-- Inlined, so that a result's piece is taken apart where it was made.
{-# INLINE placePiece #-}

------------------------------------------------------------------------------
-- Results back to the connection's color

hReply :: Handler
hReply = handler "kv-reply"

-- Note [One reply event per inbox]
-- ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
-- A read's commands on random keys go to as many key colors as there are
-- commands, and each color's event has results for the connection. Were
-- each to post its own event to the connection's color, a pipeline of 16
-- such commands would cost 33 events, each a post, a turn of the
-- connection's color and a walk of its replies. So the key colors leave
-- their results in the connection's inbox ('connInbox', the one field of
-- a 'Conn' that other colors write, always with an atomic update), and
-- only the color whose results find the inbox empty posts the reply
-- event; that event takes everything in the inbox when it runs. Every result is taken: a result
-- that finds the inbox not empty is put beside results whose reply event
-- has been posted and has not yet taken them, and that event takes it
-- too. A reply event never finds the inbox empty, since only reply events
-- empty it and each was posted by a result that made it not empty. The
-- results of one color's batch stay in their order; batches of different
-- colors are in no particular order, as they were as separate events
-- (Note [Reply order] in "Kv.Conn" puts replies in order).

-- Note [Latest first]
-- ~~~~~~~~~~~~~~~~~~~
-- Lists that grow by consing come out latest first, and a batch's work
-- and results are such lists: a batch's works by color ('add' in
-- "Kv.Batch"), the results a color's event makes, the inbox's batches of
-- results. Rather than reverse each (a copy of every list cell, once per
-- batch and per result), they travel latest first: a color's event runs
-- its works oldest first by recursing down the list before running the
-- head ('runWorks'), and the connection's color handles the inbox's
-- batches and each batch's results the same way ('inOrder'). The
-- recursion is as deep as a batch (at most 'dispatchWindow' commands per
-- color) and uses stack, which the collector does not copy.

-- | Hand a key color's results for the connection (latest first, Note
-- [Latest first]) to its color (Note [One reply event per inbox]).
deliver :: Env -> Conn -> [Result] -> IO ()
deliver env c results = do
  first <- atomicModifyIORef' (connInbox c) (\batches -> (results : batches, null batches))
  when first $ post (envRuntime env) (connColor c) hReply takeInbox
  where
    takeInbox = do
      batches <- atomicModifyIORef' (connInbox c) (\batches -> ([], batches))
      envResults env c batches

-- | Run an action on the elements of a list given latest first, oldest
-- first (Note [Latest first]).
inOrder :: (a -> IO ()) -> [a] -> IO ()
inOrder f = go
  where
    go [] = return ()
    go (x : older) = go older >> f x
{-# INLINE inOrder #-}

-- | A command's reply as a result, made ready here (in IO, so that it is
-- made now, not left as a thunk holding the command's work): built
-- before it is returned, as it waits for the reply event (returned lazily
-- it was a thunk and a boxed number).
whole :: Int -> Reply -> IO Result
whole !s r = case piece r of
  Measured n x -> let !w = Whole s n x in return w
  Encoded bs -> let !w = Replies s 1 bs in return w
{-# INLINE whole #-}

-- Note [Runs of replies]
-- ~~~~~~~~~~~~~~~~~~~~~~
-- Results from another color than the connection's wait for its reply
-- event, and each minor collection copies what waits: with many
-- pipelining clients, thousands of results, each a 'Whole', a list cell
-- and its reply. So such a color's event, once its batch has run
-- ('runGated' in "Kv.Batch"), encodes each run of its
-- results that answer consecutive commands, every reply small
-- ('runReplyBytes'), into one string ('runsOf'): a pinned string, which
-- the collector does not copy, and one placement in the reply event
-- rather than one per command. An entry of 'connEarly' stands for the
-- replies to as many commands as it holds, and catching up moves past
-- all of them. A result alone, or a large reply, stays a 'Whole', to be
-- written in place once, not encoded and then copied.

-- | The largest reply that joins a run (Note [Runs of replies]).
runReplyBytes :: Int
runReplyBytes = 512

-- | A color's results, latest first (Note [Latest first]), with each run
-- of two or more 'Whole' results for consecutive commands, each of at
-- most 'runReplyBytes', encoded as one 'Replies' (Note [Runs of
-- replies]).
runsOf :: [Result] -> IO [Result]
runsOf results = case results of
  r@(Whole s n _) : more | fits n -> extend r results s 1 n more
  r : more -> (r :) <$> runsOf more
  [] -> return []
  where
    fits n = n >= 0 && n <= runReplyBytes
    -- The run so far: the first k results of 'start' (the first of
    -- them 'r0'), for the commands down from 'top', of 'total' bytes.
    extend r0 start !top !k !total rest = case rest of
      Whole s n _ : more | s == top - k, fits n -> extend r0 start top (k + 1) (total + n) more
      _ | k == 1 -> (r0 :) <$> runsOf rest
        | otherwise -> do
            bytes <- BI.create total (\p -> writeDown p total k start)
            let !run = Replies (top - k + 1) k bytes
            (run :) <$> runsOf rest
    -- Latest first: each reply goes just below the one after it.
    writeDown p !at !k rs = case rs of
      Whole _ n r : more | k > 0 -> writeReply (p `plusPtr` (at - n)) r >> writeDown p (at - n) (k - 1) more
      _ -> return ()

------------------------------------------------------------------------------
-- CLIENT

-- | CLIENT ID, SETNAME and GETNAME, which concern the connection only: its
-- reply. 'Nothing' for UNBLOCK, which concerns another connection. On the
-- connection's color, or where its commands are held back (a transaction).
ownClientCall :: Conn -> ClientCall -> Maybe (IO Reply)
ownClientCall c call = case call of
  ClientId -> Just (return (RInt (connId c)))
  ClientSetName name -> Just (ok <$ writeIORef (connName c) name)
  ClientGetName -> Just ((\name -> if B.null name then RNil else RBulk name) <$> readIORef (connName c))
  ClientUnblock _ _ -> Nothing
