{-# OPTIONS_GHC -Wno-orphans #-}
-- | The slot state machine against a model: which registrations fire, what
-- stays, and that the armed interest always covers what waiters need.
module Test.Slot (spec) where

import Data.List (sort)
import Test.Hspec
import Test.Hspec.QuickCheck (prop)
import Test.QuickCheck

import Weft.Event.Internal
import Weft.Event.Internal.Slot

data Op = Add Int Event Trigger | Remove Int | Fire Event
  deriving Show

instance Arbitrary Event where
  arbitrary = elements [evtRead, evtWrite, evtRead <> evtWrite]

instance Arbitrary Trigger where
  arbitrary = frequency [(3, pure Once), (1, pure Level), (1, pure Edge)]

genOps :: Gen [Op]
genOps = listOf $ frequency
  [ (4, (\k ev t -> Add k (if t == Edge then evtRead <> evtWrite else ev) t)
          <$> choose (0, 20) <*> arbitrary <*> arbitrary)
  , (2, Remove <$> choose (0, 20))
  , (3, Fire <$> frequency [(8, arbitrary), (1, pure evtClose)]) ]

-- | The model: registrations as (key, events, trigger).
type Model = [(Int, Event, Trigger)]

-- | Apply an op to the slot (syncing the armed interest as the manager does)
-- and to the model; check that both agree on what fired.
step :: (SlotState (), Model) -> Op -> Either String (SlotState (), Model)
step (st, model) op = case op of
  Add k ev lt
    | any (\(k', _, _) -> k' == k) model -> Right (st, model)
    | otherwise -> Right (sync (addReg (Reg k ev lt ()) st), (k, ev, lt) : model)
  Remove k ->
    let (r, st') = removeReg k st
        model' = filter (\(k', _, _) -> k' /= k) model
    in if fmap regKey r == (if length model' /= length model then Just k else Nothing)
         then Right (sync st', model')
         else Left ("removeReg disagrees on " ++ show k)
  Fire ev ->
    let (fired, st') = fireSlot ev st
        -- Edge-triggered registrations are told by the dispatcher, not
        -- fired, except by a close.
        fires (_, e, t) = ev `eventIs` evtClose || (t /= Edge && e `eventIs` ev)
        expectFired = sort [ k | m@(k, _, _) <- model, fires m ]
        model' = [ m | m@(_, _, t) <- model, not (fires m) || (t /= Once && not (ev `eventIs` evtClose)) ]
    in if sort (map regKey fired) == expectFired
         then Right (sync st', model')
         else Left ("fireSlot " ++ show ev ++ " fired " ++ show (map regKey fired)
                    ++ ", expected " ++ show expectFired)
  where
    sync s = let want = wantedInterest (ssRegs s)
             in if needsArm want (ssArmed s) then armedWith want s else s

-- | After syncing: every registration's events are armed (no lost wakeup),
-- a persistent arm never reports events nobody wants, and an
-- edge-triggered registration makes the arm edge-triggered, for both
-- directions.
invariant :: SlotState () -> Model -> Either String ()
invariant st model
  | sort [ k | (k, _, _) <- model ] /= sort (map regKey (ssRegs st)) = Left "registrations differ from the model"
  | any (\(_, _, t) -> t == Edge) model =
      if armed == Interest (evtRead <> evtWrite) Edge then Right ()
      else Left ("an edge-triggered registration, armed " ++ show armed)
  | not (want `eventSubset` interestEvents armed) = Left ("armed " ++ show armed ++ " misses " ++ show want)
  | interestPersistent armed && interestEvents armed /= want = Left ("persistent watch " ++ show armed ++ " wider than " ++ show want)
  | (interestTrigger armed == Level) /= any (\(_, _, t) -> t == Level) model && want /= evtNothing = Left "persistence differs"
  | otherwise = Right ()
  where
    want = foldMap (\(_, e, _) -> e) model
    armed = ssArmed st

spec :: Spec
spec = describe "Slot state machine" $ do
  prop "agrees with the model, and the armed interest covers every waiter" $
    forAll genOps $ \ops ->
      let go s [] = invariant (fst s) (snd s)
          go s (o : os) = do
            s' <- step s o
            invariant (fst s') (snd s')
            go s' os
      in either (\msg -> counterexample msg False) (const (property True)) (go (emptySlotState, []) ops)

  it "needs no arm when a one-shot watch already covers the waiters" $
    needsArm (Interest evtRead Once) (Interest (evtRead <> evtWrite) Once) `shouldBe` False

  it "re-arms a one-shot watch that fired" $ do
    let st = armedWith (Interest evtRead Once) (addReg (Reg 1 evtRead Once ()) emptySlotState)
        (_, st') = fireSlot evtWrite st
    ssArmed st' `shouldBe` noInterest
    (wantedInterest (ssRegs st'), ssArmed st') `shouldSatisfy` uncurry needsArm

  it "disarms a persistent watch when its last multi-shot leaves" $ do
    let st = armedWith (Interest evtRead Level) (addReg (Reg 1 evtRead Level ()) emptySlotState)
        (_, st') = removeReg 1 st
    (wantedInterest (ssRegs st'), ssArmed st') `shouldSatisfy` uncurry needsArm

  it "an edge-triggered registration leaves the arm to the others when it ends" $ do
    let st = armedWith (Interest (evtRead <> evtWrite) Edge)
               (addReg (Reg 2 evtRead Edge ()) (addReg (Reg 1 evtRead Once ()) emptySlotState))
        (_, st') = removeReg 2 st
    wantedInterest (ssRegs st') `shouldBe` Interest evtRead Once
    (wantedInterest (ssRegs st'), ssArmed st') `shouldSatisfy` uncurry needsArm

  it "closeSlot returns every registration and bumps the generation" $ do
    let st = addReg (Reg 2 evtWrite Once ()) (addReg (Reg 1 evtRead Level ()) emptySlotState)
        (regs, st') = closeSlot st
    sort (map regKey regs) `shouldBe` [1, 2]
    ssTag st' `shouldBe` ssTag st + 1
    ssKnown st' `shouldBe` False
