-- | The choice a full server makes for a newcomer ("Weft.Net.Internal.Eviction"),
-- against a model written from its specification.
module Test.Eviction (spec) where

import Data.Word (Word64)
import Test.Hspec
import Test.Hspec.QuickCheck (prop)
import Test.QuickCheck

import Weft.Net.Internal.Eviction

-- | Connections numbered by position, each with its standing; progress
-- times within two graces of now, so that some are past the grace.
newtype Conns = Conns [Standing]
  deriving Show

now :: Word64
now = 10 * evictionGraceNs

instance Arbitrary Conns where
  arbitrary = Conns <$> listOf standing
    where
      standing = do
        t <- (now -) <$> choose (0, 2 * evictionGraceNs)
        elements [Working, Stalled t, Idle t]
  shrink (Conns l) = Conns <$> shrinkList (const []) l

policies :: Gen Eviction
policies = elements [EvictNone, EvictStalled, EvictStalledThenIdle]

stamp :: Standing -> Maybe Word64
stamp (Stalled t) = Just t
stamp (Idle t) = Just t
stamp Working = Nothing

spec :: Spec
spec = describe "Eviction" $ do
  it "names every policy, and parses exactly those names" $ do
    map (parseEviction . evictionName) [EvictNone, EvictStalled, EvictStalledThenIdle]
      `shouldBe` map Just [EvictNone, EvictStalled, EvictStalledThenIdle]
    map evictionName [EvictNone, EvictStalled, EvictStalledThenIdle] `shouldBe` ["none", "stalled", "stalled-then-idle"]
    parseEviction "idle" `shouldBe` Nothing
  prop "never closes a working connection, nor one within the grace, nor any under EvictNone" $
    forAll policies $ \policy (Conns cs) ->
      case pickVictim policy now (zip cs [0 :: Int ..]) of
        CloseFor i -> policy /= EvictNone
                      && maybe False (\t -> now - t >= evictionGraceNs) (stamp (cs !! i))
        _ -> True

  prop "closes the oldest stalled connection past the grace, before any idle one" $
    forAll policies $ \policy (Conns cs) ->
      let aged = [ (t, i) | (Stalled t, i) <- zip cs [0 :: Int ..], now - t >= evictionGraceNs ]
      in policy /= EvictNone && not (null aged) ==>
           case pickVictim policy now (zip cs [0 ..]) of
             CloseFor i -> stamp (cs !! i) == Just (minimum (map fst aged))
                           && isStalled (cs !! i)
             _ -> False

  prop "closes an idle connection only under EvictStalledThenIdle, and only with no stalled one past the grace" $
    forAll policies $ \policy (Conns cs) ->
      case pickVictim policy now (zip cs [0 :: Int ..]) of
        CloseFor i | not (isStalled (cs !! i)) ->
          policy == EvictStalledThenIdle
          && null [ () | Stalled t <- cs, now - t >= evictionGraceNs ]
          && stamp (cs !! i) == Just (minimum [ t | Idle t <- cs ])
        _ -> True

  prop "refuses only when no connection could ever be closed; else waits exactly until the first ages" $
    forAll policies $ \policy (Conns cs) ->
      let candidates = [ t | c <- cs, Just t <- [stamp c]
                           , isStalled c || policy == EvictStalledThenIdle ]
      in case pickVictim policy now (zip cs [0 :: Int ..]) of
           Refuse -> policy == EvictNone || null candidates
           WaitFor ns -> policy /= EvictNone && not (null candidates)
                         && all (\t -> now - t < evictionGraceNs) candidates
                         && ns == evictionGraceNs - (now - minimum candidates)
           CloseFor _ -> True
  where
    isStalled (Stalled _) = True
    isStalled _ = False
