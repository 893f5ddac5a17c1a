{-# LANGUAGE DeriveTraversable #-}
-- | Which connection a server closes when it is full (Note [Making room
-- under fd pressure] in "Weft.Net.Internal.Serve"): the pure choice, from
-- what each connection is doing. Internal and unstable: import "Weft.Net".
module Weft.Net.Internal.Eviction
  ( Standing (..)
  , Eviction (..)
  , evictionName
  , parseEviction
  , evictionGraceNs
  , Choice (..)
  , pickVictim
  ) where

import qualified Data.List as List
import Data.Word (Word64)

-- | What a connection is doing, as its socket's last calls tell (Note
-- [What a connection waits for] in "Weft.Net.Internal.Socket").
data Standing
  = Working
    -- ^ The server holds something of the peer's to act on, or has just
    -- answered: the peer waits for the server, not the other way round.
  | Stalled !Word64
    -- ^ Waiting for the peer in the middle of a request (part of it came),
    -- or for the peer to read what the server sends; the time of its last
    -- progress (monotonic ns).
  | Idle !Word64
    -- ^ Waiting for the peer's next request (or its first), nothing of it
    -- received yet; the time of its last progress.
  deriving (Eq, Show)

-- | Which established connections a full server may close to serve a new
-- client instead of refusing it.
data Eviction
  = EvictNone
    -- ^ None: newcomers are refused. For protocols where a client may
    -- rightly stay idle for as long as it likes (key-value stores, chat,
    -- echo); their idle timeout, if set, is what ends idle clients.
  | EvictStalled
    -- ^ A connection stalled in the middle of a request or on a peer
    -- that does not read, for at least 'evictionGraceNs' without
    -- progress (the slowloris signature), oldest progress first.
  | EvictStalledThenIdle
    -- ^ As 'EvictStalled'; if there is none, a connection idle between
    -- requests for at least 'evictionGraceNs', longest idle first. For
    -- HTTP, whose clients must expect a server to close an idle
    -- persistent connection (RFC 9112, section 9.3), as nginx does.
  deriving (Eq, Show)

-- | A policy's name in settings and on command lines: @none@, @stalled@,
-- @stalled-then-idle@.
evictionName :: Eviction -> String
evictionName EvictNone = "none"
evictionName EvictStalled = "stalled"
evictionName EvictStalledThenIdle = "stalled-then-idle"

-- | The policy of that name ('evictionName').
parseEviction :: String -> Maybe Eviction
parseEviction s = lookup s [ (evictionName e, e) | e <- [EvictNone, EvictStalled, EvictStalledThenIdle] ]

-- | A connection that made progress this recently (nanoseconds) is never
-- closed to make room: a steady client does not lose to one that has yet
-- to show whether it makes progress.
evictionGraceNs :: Word64
evictionGraceNs = 250000000

-- | What a full server does for a newcomer.
data Choice a
  = CloseFor a
    -- ^ Close this connection, and serve the newcomer.
  | WaitFor !Word64
    -- ^ No connection may be closed yet, but one the policy allows will
    -- have been without progress for the grace in this many ns.
  | Refuse
    -- ^ None may be closed: refuse the newcomer.
  deriving (Eq, Show, Functor, Foldable, Traversable)

-- | For a newcomer at the given time, under the policy: close the stalled
-- connection whose progress is oldest, past the grace; then, if the policy
-- allows, the idle one whose progress is oldest, past the grace; else wait
-- for the first candidate to age, if there is one; else refuse. A
-- 'Working' connection is never a candidate.
pickVictim :: Eviction -> Word64 -> [(Standing, a)] -> Choice a
pickVictim EvictNone _ _ = Refuse
pickVictim policy now conns =
  case (oldest stalled, oldest idle) of
    (Just (t, x), _) | aged t -> CloseFor x
    (_, Just (t, x)) | aged t -> CloseFor x
    (s, i) -> case [ t | Just (t, _) <- [s, i] ] of
      [] -> Refuse
      ts -> WaitFor (evictionGraceNs - (now - min now (minimum ts)))
  where
    stalled = [ (t, x) | (Stalled t, x) <- conns ]
    idle = if policy == EvictStalledThenIdle then [ (t, x) | (Idle t, x) <- conns ] else []
    aged t = now - min now t >= evictionGraceNs
    oldest :: [(Word64, a)] -> Maybe (Word64, a)
    oldest [] = Nothing
    oldest (first : rest) = Just (List.foldl' (\a b -> if fst b < fst a then b else a) first rest)
