module Test.FdTable (spec) where

import Control.Concurrent.Async (forConcurrently_)
import Control.Monad
import Data.IORef
import qualified Data.Set as Set
import Test.Hspec
import Test.Hspec.QuickCheck (prop)
import Test.QuickCheck
import Test.QuickCheck.Monadic

import qualified Weft.Event.Internal.FdTable as FT

-- | A table whose slots record the fd they were made for and a serial
-- number, counting how many were made.
newCountingTable :: IO (FT.FdTable (Int, Int), IORef Int)
newCountingTable = do
  made <- newIORef 0
  t <- FT.new (\fd -> atomicModifyIORef' made (\n -> (n + 1, (fd, n))))
  return (t, made)

spec :: Spec
spec = describe "FdTable" $ do
  prop "makes exactly one slot per fd and always returns it" $
    forAll (listOf (choose (0, 3000))) $ \fds -> monadicIO $ do
      (t, made) <- run newCountingTable
      firsts <- run (mapM (FT.lookupOrCreate t) fds)
      seconds <- run (mapM (FT.lookupOrCreate t) fds)
      n <- run (readIORef made)
      assert (firsts == seconds)
      assert (map fst firsts == fds)
      assert (n == Set.size (Set.fromList fds))

  prop "lookup finds only slots that were made" $
    forAll (listOf (choose (0, 500))) $ \fds -> forAll (choose (0, 700)) $ \probe -> monadicIO $ do
      (t, _) <- run newCountingTable
      run (mapM_ (FT.lookupOrCreate t) fds)
      found <- run (FT.lookup t probe)
      assert ((fst <$> found) == (if probe `elem` fds then Just probe else Nothing))

  it "keeps slots across growth, and elems lists every slot" $ do
    (t, _) <- newCountingTable
    a <- FT.lookupOrCreate t 3
    _ <- FT.lookupOrCreate t 100000
    FT.lookup t 3 `shouldReturn` Just a
    cap <- FT.capacity t
    cap `shouldSatisfy` (> 100000)
    map fst <$> FT.elems t `shouldReturn` [3, 100000]

  it "rejects a negative fd with an IOError" $ do
    (t, _) <- newCountingTable
    FT.lookupOrCreate t (-1) `shouldThrow` anyIOException

  it "makes one slot per fd when four threads race to create them" $
    replicateM_ 20 $ do
      (t, made) <- newCountingTable
      forConcurrently_ [0 .. 3 :: Int] $ \_ -> forM_ [0 .. 2000] (FT.lookupOrCreate t)
      readIORef made `shouldReturn` 2001
      slots <- FT.elems t
      map (fst . snd) slots `shouldBe` [0 .. 2000]
