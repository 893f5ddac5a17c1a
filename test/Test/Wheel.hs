-- | The timing wheel against a pure model, on a simulated clock: random
-- sequences of insert, cancel, reschedule and clock jumps of every size
-- (so that timers sit on, and cascade through, every level).
module Test.Wheel (spec) where

import Control.Monad
import Data.Bits (shiftL)
import Data.IORef
import Data.List (sort, sortOn)
import Data.Word (Word64)
import qualified Data.Map.Strict as Map
import Test.Hspec
import Test.QuickCheck
import Test.QuickCheck.Monadic

import qualified Weft.Timer.Internal.Wheel as W

-- | One step of a schedule. Timer numbers index the timers inserted so far
-- (modulo their count), so a cancel or reschedule may hit a live timer or
-- one already fired or cancelled.
data Op
  = Insert Int        -- ^ a timer due this many ticks from the clock
  | Cancel Int
  | Reschedule Int Int -- ^ timer, new delay in ticks from the clock
  | Advance Int       -- ^ move the clock this many ticks and expire
  deriving Show

-- Delays of every magnitude: within a tick, within level 0, up to level 5,
-- plus exact powers of 64 (slot and level boundaries).
genDelay :: Gen Int
genDelay = oneof
  [ choose (0, 3)
  , choose (0, 64)
  , choose (0, 5000)
  , (\e -> 1 `shiftL` (6 * e)) <$> choose (1, 5)
  , (\e d -> (1 `shiftL` (6 * e)) + d) <$> choose (1, 5) <*> choose (-2, 2)
  , choose (0, 1 `shiftL` 30) ]

instance Arbitrary Op where
  arbitrary = frequency
    [ (6, Insert <$> genDelay)
    , (2, Cancel <$> arbitrarySizedNatural)
    , (2, Reschedule <$> arbitrarySizedNatural <*> genDelay)
    , (4, Advance <$> genDelay) ]
  shrink (Insert d) = Insert <$> shrink d
  shrink (Reschedule i d) = Reschedule i <$> shrink d
  shrink (Advance d) = Advance <$> shrink d
  shrink _ = []

-- | Run a schedule on a wheel and on the model; 'Nothing' if they agree.
-- The model: a map from timer to deadline. Advancing to @now@ must fire
-- exactly the timers due by @now@, in deadline order, each once.
runSchedule :: Int -> [Op] -> IO (Maybe String)
runSchedule start ops = do
  w <- W.new start :: IO (W.Wheel Int)
  keys <- newIORef (Map.empty :: Map.Map Int (Int, Int)) -- timer -> wheel key
  let go _ _ _ [] = finish
      go now n model (op : rest) = case op of
        Insert d -> do
          (i, g) <- W.insert w (now + d) n (,)
          modifyIORef' keys (Map.insert n (i, g))
          check now (n + 1) (Map.insert n (now + d) model) rest
        Cancel k | n > 0 -> do
          let t = k `mod` n
          Just (i, g) <- Map.lookup t <$> readIORef keys
          ok <- W.cancel w i g
          if ok /= Map.member t model
            then return (Just ("cancel of timer " ++ show t ++ " said " ++ show ok))
            else check now n (Map.delete t model) rest
        Reschedule k d | n > 0 -> do
          let t = k `mod` n
          Just (i, g) <- Map.lookup t <$> readIORef keys
          ok <- W.reschedule w i g (now + d)
          if ok /= Map.member t model
            then return (Just ("reschedule of timer " ++ show t ++ " said " ++ show ok))
            else check now n (Map.adjust (const (now + d)) t model) rest
        Advance d -> do
          let now' = now + d
          fired <- W.expire w now'
          let (due, later) = Map.partition (<= now') model
              deadlines = map (model Map.!) fired
          if sort fired /= Map.keys due
            then return (Just ("at " ++ show now' ++ " fired " ++ show fired
                               ++ ", due " ++ show (Map.toList due)))
            else if deadlines /= sort deadlines
              then return (Just ("fired out of deadline order: " ++ show (zip fired deadlines)))
              else check now' n later rest
        _ -> go now n model rest
      -- After every step: the live count, and the next expiry is a lower
      -- bound of the earliest deadline (never after it).
      check now n model rest = do
        live <- W.size w
        next <- W.nextExpiry w
        let earliest = if Map.null model then W.noExpiry else minimum (Map.elems model)
        if live /= Map.size model
          then return (Just ("size " ++ show live ++ ", model " ++ show (Map.size model)))
          else if next > max now earliest && not (Map.null model)
            then return (Just ("next expiry " ++ show next ++ " after the earliest deadline " ++ show earliest))
            else if Map.null model && next /= W.noExpiry
              then return (Just "next expiry with no timer pending")
              else go now n model rest
      finish = do
        rest <- W.drain w
        live <- W.size w
        return (if live /= 0 then Just ("drain left " ++ show live) else const Nothing rest)
  go start 0 Map.empty ops

spec :: Spec
spec = describe "timing wheel (Weft.Timer.Internal.Wheel)" $ do
  it "matches the model on random schedules (clock from 0 and from a large tick)" $
    property $ \ops (Positive off) -> monadicIO $ do
      r1 <- run (runSchedule 0 ops)
      r2 <- run (runSchedule (off * 987654321) ops)
      case (r1, r2) of
        (Nothing, Nothing) -> return ()
        (Just e, _) -> fail e
        (_, Just e) -> fail e

  it "rounds deadlines up and the clock down, so a due tick is never early" $
    property $ \(Large d) -> forAll (choose (-40000, 40000)) $ \off -> do
      -- A clock reading near the deadline: the same tick, or one either side.
      let deadline = d `div` 2 + 100000 :: Word64
          clock = fromIntegral (fromIntegral deadline + off :: Integer) :: Word64
      -- A timer due at tick t fires once the clock's tick reaches t.
      when (W.nowTick clock >= W.deadlineTick deadline) $
        clock `shouldSatisfy` (>= deadline)
      -- At the top of the clock's range it saturates rather than wrapping.
      W.deadlineTick maxBound `shouldSatisfy` (> W.deadlineTick (maxBound `div` 2))

  it "fires timers inserted in the past at once, and never before their tick" $ do
    w <- W.new 1000 :: IO (W.Wheel Int)
    _ <- W.insert w 10 1 (,)
    _ <- W.insert w 1001 2 (,)
    W.expire w 1000 `shouldReturn` [1]
    W.expire w 1000 `shouldReturn` []
    W.expire w 1001 `shouldReturn` [2]

  it "keeps a key dead once its entry is reused" $ do
    w <- W.new 0 :: IO (W.Wheel Int)
    (i, g) <- W.insert w 5 1 (,)
    W.cancel w i g `shouldReturn` True
    (i', g') <- W.insert w 5 2 (,)
    i' `shouldBe` i
    g' `shouldNotBe` g
    W.cancel w i g `shouldReturn` False
    W.reschedule w i g 1 `shouldReturn` False
    W.expire w 5 `shouldReturn` [2]

  it "grows past its first slab and gives every timer back" $ do
    w <- W.new 0 :: IO (W.Wheel Int)
    forM_ [1 .. 10000] $ \k -> W.insert w (k * 7919 `mod` 100000) k (,)
    W.size w `shouldReturn` 10000
    fired <- W.expire w 100000
    sort fired `shouldBe` [1 .. 10000]
    map (\k -> k * 7919 `mod` 100000) fired `shouldSatisfy` (\ds -> ds == sort ds)
    W.size w `shouldReturn` 0

  it "moves a timer later lazily, and earlier at once" $ do
    w <- W.new 0 :: IO (W.Wheel Int)
    (i, g) <- W.insert w 100 1 (,)
    (j, h) <- W.insert w 5000 2 (,)
    W.reschedule w i g 200000 `shouldReturn` True
    W.reschedule w j h 50 `shouldReturn` True
    W.expire w 150000 `shouldReturn` [2]
    W.expire w 199999 `shouldReturn` []
    W.expire w 200000 `shouldReturn` [1]

  it "orders a mixed batch by deadline across levels" $ do
    w <- W.new 0 :: IO (W.Wheel Int)
    let ds = [300000, 5, 70, 4100, 262144, 64, 63, 4096]
    forM_ (zip [0 ..] ds) $ \(k, d) -> W.insert w d k (,)
    fired <- W.expire w 1000000
    map (ds !!) fired `shouldBe` sortOn id ds
