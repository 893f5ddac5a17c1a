{-# LANGUAGE ScopedTypeVariables #-}
-- | The colored runtime's data structures without workers: the per-core
-- queues of "Weft.Color.Internal.Queues" against a pure model (single thread,
-- taking the locks the API asks for), and the cache topology of
-- "Weft.Color.Internal.Topology".
module Test.ColorQueues (spec) where

import Control.Monad
import Data.IORef
import qualified Data.List as L
import qualified Data.IntMap.Strict as IM
import Test.Hspec
import Test.QuickCheck hiding (total, (==>))
import Test.QuickCheck.Monadic

import Weft.Color.Internal.Queues
import Weft.Color.Internal.Topology

spec :: Spec
spec = do
  queuesSpec
  topologySpec

------------------------------------------------------------------------------
-- Queues against a model

-- | The queues under test: layout, whether they keep the stealing queues
-- (only color queues do: the runtime never asks a single list for them),
-- cores, batch size, the (fixed) steal cost and the steal margin (color
-- queues only, as in the runtime).
data Setup = Setup Layout Bool Int Int Int Int
  deriving Show

instance Arbitrary Setup where
  arbitrary = do
    layout <- elements [ColorQueues, SingleList]
    timeLeft <- if layout == ColorQueues then arbitrary else return False
    margin <- if layout == ColorQueues then frequency [(1, return 0), (2, choose (1, 120))] else return 0
    Setup layout timeLeft <$> choose (1, 4) <*> choose (1, 4) <*> choose (1, 60) <*> pure margin

-- | One operation. Colors are taken modulo 'modelColors', cores modulo the
-- core count.
data Op
  = Push Int Int Int  -- ^ color, weight (ns), priority: queued on the owner
  | Step Int          -- ^ core: finish its running batch, or take the next
  | Steal Int Int Bool
    -- ^ thief, victim, and on time-left queues whether to use
    --   'chooseWorthy' (else 'chooseFirst'); the single list uses
    --   'chooseLibasync'
  deriving Show

instance Arbitrary Op where
  arbitrary = frequency
    [ (5, Push <$> choose (0, modelColors - 1) <*> choose (0, 40) <*> choose (0, 2))
    , (4, Step <$> choose (0, 3))
    , (2, Steal <$> choose (0, 3) <*> choose (0, 3) <*> arbitrary) ]
  shrink (Push c w p) = [ Push c w' p | w' <- shrink w ] ++ [ Push c w p' | p' <- shrink p ]
  shrink _ = []

modelColors :: Int
modelColors = 8

-- | An event's handler cost, from its weight (different, as a penalty
-- makes them).
costOf :: Int -> Int
costOf w = 2 * w + 1

-- | What the queues should hold. Events are numbered in push order.
data Model = Model
  { mOwner   :: IM.IntMap Int                  -- ^ color -> owner core
  , mQueued  :: IM.IntMap [(Int, Int)]         -- ^ color -> queued (event, weight), oldest first
  , mWork    :: IM.IntMap Int                  -- ^ color -> queued work (ColorQueues)
  , mPrio    :: IM.IntMap Int                  -- ^ color -> its place in the list's priority order
  , mList    :: IM.IntMap [Int]                -- ^ core -> its colors in run order (ColorQueues)
  , mRing    :: IM.IntMap [(Int, Int)]         -- ^ core -> (color, event) in run order (SingleList)
  , mRunning :: IM.IntMap Int                  -- ^ core -> running color, or -1
  , mNextId  :: Int
  }

newModel :: Int -> Model
newModel cores = Model
  { mOwner = IM.fromList [ (c, c `mod` cores) | c <- [0 .. modelColors - 1] ]
  , mQueued = IM.fromList [ (c, []) | c <- [0 .. modelColors - 1] ]
  , mWork = IM.fromList [ (c, 0) | c <- [0 .. modelColors - 1] ]
  , mPrio = IM.fromList [ (c, 0) | c <- [0 .. modelColors - 1] ]
  , mList = IM.fromList [ (k, []) | k <- [0 .. cores - 1] ]
  , mRing = IM.fromList [ (k, []) | k <- [0 .. cores - 1] ]
  , mRunning = IM.fromList [ (k, -1) | k <- [0 .. cores - 1] ]
  , mNextId = 0 }

(!) :: IM.IntMap a -> Int -> a
m ! k = IM.findWithDefault (error ("model: no key " ++ show k)) k m

count :: Model -> Int -> Int
count m c = length (mQueued m ! c)

-- | Link a color after the last color of at least its priority.
linkM :: Model -> Int -> [Int] -> [Int]
linkM m c xs =
  let p = mPrio m ! c
      lastAtLeast = last ((-1) : [ i | (i, e) <- zip [0 ..] xs, mPrio m ! e >= p ])
  in take (lastAtLeast + 1) xs ++ [c] ++ drop (lastAtLeast + 1) xs

-- | Events queued on a core, as the model counts them.
modelCoreEvents :: Layout -> Model -> Int -> Int
modelCoreEvents SingleList m k = length (mRing m ! k)
modelCoreEvents ColorQueues m k = sum [ count m c | (c, o) <- IM.toList (mOwner m), o == k ]

runQueues :: Setup -> [Op] -> IO (Maybe String)
runQueues (Setup layout timeLeft cores batch cost margin) ops = do
  q <- withStealMargin margin <$> newQueues layout timeLeft cores modelColors batch
  setStealCost q cost
  model <- newIORef (newModel cores)
  let home c = c `mod` cores
      locked k act = lockCore q k *> act <* unlockCore q k
      worthy m c = timeLeft && count m c > 0 && mWork m ! c > cost
      bucketOf w | w <= 4 * cost = 0 | w <= 16 * cost = 1 | otherwise = 2 :: Int
      fails what = return (Just what)

      apply :: Int -> Op -> IO (Maybe String)
      apply _ (Push c0 w p) = do
        m <- readIORef model
        let c = c0 `mod` modelColors
            i = mNextId m
        o <- ownerOf q c
        if o /= mOwner m ! c then fails ("owner of " ++ show c ++ " is " ++ show o) else do
          locked o $ push q o c (Ev w (costOf w) p (show i) (return ()))
          let fresh = count m c == 0
              m1 = m { mQueued = IM.adjust (++ [(i, w)]) c (mQueued m)
                     , mWork = IM.adjust (+ w) c (mWork m), mNextId = i + 1 }
              m2 = case layout of
                SingleList -> m1 { mRing = IM.adjust (++ [(c, i)]) o (mRing m1) }
                ColorQueues
                  | fresh -> let m' = m1 { mPrio = IM.insert c p (mPrio m1) }
                             in m' { mList = IM.adjust (linkM m' c) o (mList m') }
                  | p > mPrio m1 ! c ->
                      let m' = m1 { mPrio = IM.insert c p (mPrio m1) }
                      in m' { mList = IM.adjust (linkM m' c . filter (/= c)) o (mList m') }
                  | otherwise -> m1
          writeIORef model m2
          return Nothing

      apply _ (Step k0) = do
        m <- readIORef model
        let k = k0 `mod` cores
            running = mRunning m ! k
        if running >= 0
          then do
            locked k $ finishBatch q k running
            let c = running
                m1 = m { mRunning = IM.insert k (-1) (mRunning m) }
                m2 | count m c == 0 = m1 { mOwner = IM.insert c (home c) (mOwner m1) }
                   | layout == ColorQueues, last (mList m ! k) /= c =
                       m1 { mList = IM.adjust (linkM m1 c . filter (/= c)) k (mList m1) }
                   | otherwise = m1
            writeIORef model m2
            return Nothing
          else do
            (c, evs) <- locked k $ takeBatch q k
            let got = map (read . evName) evs :: [Int]
                expected = case layout of
                  SingleList -> case mRing m ! k of
                    [] -> Nothing
                    (ec, _) : _ -> Just (ec, 1)
                  ColorQueues -> case mList m ! k of
                    [] -> Nothing
                    ec : _ -> Just (ec, min batch (count m ec))
            case expected of
              Nothing
                | c == -1 && null evs -> return Nothing
                | otherwise -> fails ("takeBatch on an empty core gave color " ++ show c)
              Just (ec, n) -> do
                let (taken, rest) = splitAt n (mQueued m ! ec)
                    want = map fst taken
                if c /= ec || got /= want
                  then fails ("takeBatch gave " ++ show (c, got) ++ ", expected " ++ show (ec, want))
                  else do
                    let drained = null rest
                        m1 = m { mQueued = IM.insert ec rest (mQueued m)
                               , mRunning = IM.insert k ec (mRunning m)
                               , mWork = IM.insert ec (if drained then 0 else max 0 (mWork m ! ec - sum (map snd taken))) (mWork m) }
                        m2 = case layout of
                          SingleList -> m1 { mRing = IM.adjust (drop 1) k (mRing m1) }
                          ColorQueues | drained -> m1 { mList = IM.adjust (filter (/= ec)) k (mList m1) }
                                      | otherwise -> m1
                    writeIORef model m2
                    return Nothing

      apply _ (Steal t0 v0 useWorthy) = do
        m <- readIORef model
        let t = t0 `mod` cores
            v = v0 `mod` cores
            running = mRunning m ! v
        if t == v then return Nothing else do
          lockPair q t v
          stealable <- hasStealable q v
          c <- case layout of
            SingleList -> chooseLibasync q v
            ColorQueues | timeLeft && useWorthy -> chooseWorthy q v
                        | otherwise -> chooseFirst q v
          unlockPair q t v
          let total = modelCoreEvents layout m v
              candidates = case layout of
                SingleList -> [ x | (x, _) <- mRing m ! v, x /= running, 2 * count m x < total ]
                ColorQueues
                  | timeLeft && useWorthy -> [ x | x <- mList m ! v, x /= running, worthy m x ]
                  | otherwise -> [ x | x <- mList m ! v, x /= running, 2 * count m x < total ]
              expectStealable = cores > 1 && (margin <= 0 || sum [ costOf w | x <- mList m ! v, (_, w) <- mQueued m ! x ] >= margin) && case layout of
                SingleList -> total >= 2
                ColorQueues
                  | timeLeft -> any (\x -> x /= running && worthy m x) (mList m ! v)
                  | otherwise -> any (/= running) (mList m ! v)
              choiceOk
                | c == running && c >= 0 = Just "chose the running color"
                | c < 0 = if null candidates then Nothing else Just ("chose nothing among " ++ show candidates)
                | layout == ColorQueues && timeLeft && useWorthy =
                    -- Any worthy color of the fullest bucket.
                    if c `elem` candidates
                         && bucketOf (mWork m ! c) == maximum (map (bucketOf . (mWork m !)) candidates)
                      then Nothing else Just ("chose " ++ show c ++ " among " ++ show candidates)
                | otherwise = if take 1 candidates == [c] then Nothing
                                else Just ("chose " ++ show c ++ ", not the first of " ++ show candidates)
          case choiceOk of
            Just why -> fails ("steal " ++ show v ++ " -> " ++ show t ++ ": " ++ why)
            Nothing
              | stealable /= expectStealable ->
                  fails ("hasStealable " ++ show v ++ " = " ++ show stealable)
              | c < 0 -> return Nothing
              | otherwise -> do
                  lockPair q t v
                  moved <- migrate q v t c
                  unlockPair q t v
                  let n = count m c
                      expectMoved = (n, if layout == ColorQueues then mWork m ! c else sum (map snd (mQueued m ! c)))
                      m1 = m { mOwner = IM.insert c t (mOwner m) }
                      m2 = case layout of
                        SingleList ->
                          let (mine, others) = span' ((== c) . fst) (mRing m ! v)
                          in m1 { mRing = IM.insert v others (IM.adjust (++ mine) t (mRing m1)) }
                        ColorQueues ->
                          m1 { mList = IM.adjust (linkM m1 c) t (IM.adjust (filter (/= c)) v (mList m1)) }
                  writeIORef model m2
                  if moved /= expectMoved
                    then fails ("migrate returned " ++ show moved ++ ", expected " ++ show expectMoved)
                    else return Nothing

      -- Every observable against the model.
      check :: IO (Maybe String)
      check = do
        m <- readIORef model
        perColor <- forM [0 .. modelColors - 1] $ \c -> do
          o <- ownerOf q c
          n <- colorCount q c
          w <- colorWork q c
          wy <- colorIsWorthy q c
          let idle = count m c == 0 && c `notElem` IM.elems (mRunning m)
          return $ firstJust
            [ o /= mOwner m ! c ==> ("owner of " ++ show c ++ ": " ++ show o ++ " /= " ++ show (mOwner m ! c))
            , idle && o /= home c ==> ("idle color " ++ show c ++ " is not home")
            , n /= count m c ==> ("count of " ++ show c ++ ": " ++ show n ++ " /= " ++ show (count m c))
            , layout == ColorQueues && w /= mWork m ! c ==> ("work of " ++ show c ++ ": " ++ show w ++ " /= " ++ show (mWork m ! c))
            , layout == ColorQueues && wy /= worthy m c ==> ("worthy " ++ show c ++ ": " ++ show wy) ]
        perCore <- forM [0 .. cores - 1] $ \k -> do
          e <- coreEvents q k
          n <- coreColors q k
          r <- runningColor q k
          hint <- hasStealable q k
          backlog <- coreBacklog q k
          -- What a thief reads: whether a steal pass would find a color
          -- (Note [Steal hints]); with time-left, a worthy one; with a
          -- margin, only while the core has that much work queued.
          let running = mRunning m ! k
              queuedWork = sum [ costOf w | x <- mList m ! k, (_, w) <- mQueued m ! x ]
              enough = margin <= 0 || queuedWork >= margin
              queued = cores > 1 && enough && case layout of
                SingleList -> modelCoreEvents layout m k >= 2
                ColorQueues
                  | timeLeft -> any (\x -> x /= running && worthy m x) (mList m ! k)
                  | otherwise -> any (/= running) (mList m ! k)
          return $ firstJust
            [ e /= modelCoreEvents layout m k ==> ("events of core " ++ show k ++ ": " ++ show e ++ " /= " ++ show (modelCoreEvents layout m k))
            , layout == ColorQueues && n /= length (mList m ! k) ==> ("colors of core " ++ show k ++ ": " ++ show n)
            , r /= mRunning m ! k ==> ("running on core " ++ show k ++ ": " ++ show r)
            , layout == ColorQueues && backlog /= queuedWork ==> ("backlog of core " ++ show k ++ ": " ++ show backlog ++ " /= " ++ show queuedWork)
            , hint /= queued ==> ("steal hint of core " ++ show k ++ ": " ++ show hint) ]
        return (firstJust (perColor ++ perCore))

      go _ [] = return Nothing
      go i (op : rest) = do
        r <- apply i op
        r' <- maybe check (return . Just) r
        case r' of
          Just why -> return (Just ("after op " ++ show i ++ " (" ++ show op ++ "): " ++ why))
          Nothing -> go (i + 1 :: Int) rest
  go 0 ops
  where
    infixr 0 ==>
    cond ==> msg = if cond then Just msg else Nothing
    firstJust = L.foldl' (\acc x -> maybe x Just acc) Nothing
    -- Split a list into the elements that satisfy p and the rest, keeping
    -- the order of both.
    span' p xs = (filter p xs, filter (not . p) xs)

queuesSpec :: Spec
queuesSpec = describe "Weft.Color.Internal.Queues" $ do
  it "push, takeBatch, finishBatch, choose and migrate agree with a model (both layouts)" $
    property $ withMaxSuccess 300 $ \setup (ops :: [Op]) -> monadicIO $ do
      r <- run (runQueues setup ops)
      case r of
        Nothing -> return ()
        Just why -> do
          monitor (counterexample why)
          assert False

  it "a color stolen and drained goes home (both layouts)" $
    forM_ [ColorQueues, SingleList] $ \layout -> do
      r <- runQueues (Setup layout False 2 10 10 0)
        [ Push 2 0 0, Push 2 0 0, Push 4 0 0, Push 6 0 0, Push 8 0 0, Push 10 0 0
        , Steal 1 0 False, Step 1, Step 1 ]
      r `shouldBe` Nothing
      -- The same, checked by hand: color 2 lives on core 1 while queued
      -- there, and is home on core 0 once it has run dry.
      q <- newQueues layout False 2 16 10
      let ev = Ev 0 0 0 "e" (return ())
      lockCore q 0 >> mapM_ (\c -> push q 0 c ev) [2, 2, 4, 6, 8, 10] >> unlockCore q 0
      lockPair q 1 0
      c <- (case layout of SingleList -> chooseLibasync; ColorQueues -> chooseFirst) q 0
      moved <- migrate q 0 1 c
      unlockPair q 1 0
      (c, fst moved) `shouldBe` (2, 2)
      ownerOf q 2 `shouldReturn` 1
      (,) <$> coreEvents q 0 <*> coreEvents q 1 `shouldReturn` (4, 2)
      let drain = do
            lockCore q 1
            (c', evs) <- takeBatch q 1
            when (c' >= 0) (finishBatch q 1 c')
            unlockCore q 1
            if c' < 0 then return [] else (length evs :) <$> drain
      drain `shouldReturn` (if layout == SingleList then [1, 1] else [2])
      ownerOf q 2 `shouldReturn` 0
      coreEvents q 1 `shouldReturn` 0

  it "chooseWorthy never takes a color whose work is at most the steal cost" $ do
    q <- newQueues ColorQueues True 2 16 10
    setStealCost q 1000
    lockCore q 0
    push q 0 2 (Ev 1000 1000 0 "at the cost" (return ()))
    push q 0 4 (Ev 999 999 0 "below" (return ()))
    push q 0 6 (Ev 0 0 0 "unknown" (return ()))
    unlockCore q 0
    lockPair q 1 0
    none <- chooseWorthy q 0
    stealable <- hasStealable q 0
    unlockPair q 1 0
    (none, stealable) `shouldBe` (-1, False)
    lockCore q 0 >> push q 0 6 (Ev 1001 1001 0 "now worth it" (return ())) >> unlockCore q 0
    lockPair q 1 0
    worth <- chooseWorthy q 0
    unlockPair q 1 0
    worth `shouldBe` 6

------------------------------------------------------------------------------
-- Topology

topologySpec :: Spec
topologySpec = describe "Weft.Color.Internal.Topology" $ do
  it "parseCpuList reads ranges and singles, and rejects garbage" $ do
    parseCpuList "0-3,8,10-11" `shouldBe` Just [0, 1, 2, 3, 8, 10, 11]
    parseCpuList "0" `shouldBe` Just [0]
    parseCpuList "garbage" `shouldBe` Nothing
    parseCpuList "" `shouldBe` Nothing
    parseCpuList "1-" `shouldBe` Nothing
    parseCpuList "1,,2" `shouldBe` Nothing

  it "distance and isNeighbour on the simulated Xeon" $ do
    map (distance simulatedXeon 0) [0 .. 7] `shouldBe` [0, 2, 3, 3, 4, 4, 4, 4]
    map (distance simulatedXeon 6) [0 .. 7] `shouldBe` [4, 4, 4, 4, 3, 3, 0, 2]
    filter (isNeighbour simulatedXeon 8 0) [0 .. 7] `shouldBe` [1]
    filter (isNeighbour simulatedXeon 8 5) [0 .. 7] `shouldBe` [4]
    topologyCores simulatedXeon `shouldBe` 8
    -- No shared cache, no neighbours.
    filter (isNeighbour (flatTopology 4) 4 0) [0 .. 3] `shouldBe` []

  it "victimOrder visits the L2 partner, then the socket, then the other socket" $ do
    victimOrder simulatedXeon 8 0 `shouldBe` [1, 2, 3, 4, 5, 6, 7]
    victimOrder simulatedXeon 8 5 `shouldBe` [4, 6, 7, 0, 1, 2, 3]
    victimOrder simulatedXeon 8 3 `shouldBe` [2, 0, 1, 4, 5, 6, 7]
    victimOrder (flatTopology 4) 4 2 `shouldBe` [3, 0, 1]

  it "systemTopology describes at least one core" $ do
    t <- systemTopology 2
    topologyCores t `shouldSatisfy` (>= 1)
