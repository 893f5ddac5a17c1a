-- | The dispatcher's spin policy as a pure function of the spells it sees
-- (Note [Adaptive spinning] in "Weft.Event.Internal.Spin").
module Test.Spin (spec) where

import qualified Data.List as L
import Data.Word (Word64)
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess)
import Test.QuickCheck

import Weft.Event.Internal.Spin

-- | A spell as the dispatcher reports it: spun through or not, and its
-- length in nanoseconds (up to a millisecond).
data Spell = Spell Bool Word64 deriving Show

instance Arbitrary Spell where
  arbitrary = Spell <$> arbitrary <*> (fromIntegral <$> choose (0 :: Int, 1000000))

-- | A cap between 0 and 200 µs, often the default 50.
newtype Cap = Cap Word64 deriving Show

instance Arbitrary Cap where
  arbitrary = Cap <$> frequency [(1, pure 0), (2, pure 50000), (4, fromIntegral <$> choose (1 :: Int, 200000))]

feed :: SpinPolicy -> [Spell] -> SpinPolicy
feed = L.foldl' (\p (Spell spun len) -> endSpell spun len p)

spec :: Spec
spec = describe "Weft.Event.Internal.Spin" $ do
  it "never spins past the cap" $ property $ \(Cap cap) adaptive spells ->
    all (\p -> spinWindow p <= cap) (scanl (\p (Spell s l) -> endSpell s l p) (newSpinPolicy adaptive cap) spells)

  it "stops spinning after repeated spins that found nothing within the break-even" $
    property $ \(Cap cap) history (Positive extra) ->
      let p0 = feed (newSpinPolicy True cap) history
          long = breakEvenNs + fromIntegral (extra :: Int)
          p = feed p0 (replicate (scoreLimit + 1) (Spell True long))
          -- Then as the dispatcher reports spells: spun iff the window is open.
          later = take 64 (iterate (\q -> endSpell (spinWindow q > 0) long q) p)
          spun = length (filter ((> 0) . spinWindow) later)
      in counterexample (show (map spinWindow later)) $
           cap > 0 ==> spinWindow p <= min cap breakEvenNs .&&. spun <= 64 `div` probeEvery + 1

  it "spins the whole cap again after a spin that an event ended soon" $
    property $ \(Cap cap) history ->
      let p0 = feed (newSpinPolicy True cap) history
          short = min (spinWindow p0) breakEvenNs
      in spinWindow p0 > 0 ==> spinWindow (endSpell True short p0) === cap

  it "probes now and then while not spinning, and a short probe turns spinning back on" $
    property $ \(Positive capUs) history ->
      let cap = fromIntegral (capUs :: Int) * 1000
          stopped = feed (newSpinPolicy True cap) (history ++ replicate (scoreLimit + 1) (Spell True (cap + breakEvenNs + 1)))
          blocked = iterate (endSpell False (10 * breakEvenNs)) stopped
          windows = map spinWindow (take (probeEvery + 1) blocked)
          probeAt = length (takeWhile (== 0) windows)
          probe = blocked !! probeAt
      in counterexample (show windows) $
           probeAt < probeEvery + 1 .&&. spinWindow probe === min cap breakEvenNs
           .&&. spinWindow (endSpell True (spinWindow probe) probe) === cap

  -- Most generated histories end with spinning off (a window of 0), where
  -- there is nothing to check; rather than discard those (which gives up
  -- on some seeds), every case passes them and many cases are run.
  modifyMaxSuccess (const 1000) $ it "spells it blocked through say nothing about spinning" $
    property $ \(Cap cap) history (Spell _ len) ->
      let p = feed (newSpinPolicy True cap) history
      in classify (spinWindow p > 0) "spinning" $
           if spinWindow p > 0 then endSpell False len p === p else property True

  it "the fixed policy always spins the cap; a cap of 0 never spins" $
    property $ \(Cap cap) spells ->
      spinWindow (feed (newSpinPolicy False cap) spells) === cap
      .&&. spinWindow (feed (newSpinPolicy True 0) spells) === 0
