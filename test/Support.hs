-- | Helpers shared by weft's tests: pipes, byte I/O, bounded waiting and
-- leak counters.
module Support
  ( withPipe
  , newPipe
  , closePipe
  , writeByte
  , readByte
  , within
  , eventually
  , liveRegistrations
  , pendingTimers
  , settledRecords
  , recordsFreedOnDrop
  , modelRun
  , modelRunInRecord
  , openFdCount
  , startManagers
  , raiseFdLimit
  , withFdHeadroom
  , forkResult
  , isBadFd
  , openReadOnly
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import qualified Data.ByteString.Char8
import Data.Word (Word8)
import Foreign.C.Error (eBADF, Errno (..))
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Marshal.Alloc (alloca)
import Foreign.Marshal.Array (allocaArray, peekArray)
import Foreign.Ptr (Ptr)
import Foreign.Storable (peek, poke)
import GHC.IO.Exception (IOException (..))
import System.Directory (listDirectory)
import qualified System.Timeout as GHC
import System.Mem (performMajorGC)
import System.IO (IOMode (ReadMode), openBinaryFile)
import System.Posix.IO (closeFd, handleToFd)
import System.Posix.Resource
import System.Posix.Types (CSsize (..), Fd (..))
import Test.Hspec
import Test.QuickCheck (Property, conjoin, (.&&.))

import Kv.Record (Record, recordFits, recordFree, recordNewWith, recordOverwriteWith, recordReadWith, recordable, recordsLive)

import qualified Weft.Event as E

-- | A non-blocking, close-on-exec pipe: (read end, write end).
newPipe :: IO (Fd, Fd)
newPipe = allocaArray 2 $ \fds -> do
  r <- c_pipe2 fds (0o4000 + 0o2000000)
  when (r /= 0) $ throwIO (userError "pipe2 failed")
  [a, b] <- peekArray 2 fds
  return (Fd a, Fd b)

closePipe :: (Fd, Fd) -> IO ()
closePipe (a, b) = void (c_close a) >> void (c_close b)

withPipe :: ((Fd, Fd) -> IO a) -> IO a
withPipe = bracket newPipe closePipe

writeByte :: Fd -> IO ()
writeByte fd = alloca $ \p -> do
  poke p (7 :: Word8)
  n <- c_write fd p 1
  when (n /= 1) $ throwIO (userError ("write returned " ++ show n))

-- | Read one byte; 'Nothing' if none is there (EAGAIN).
readByte :: Fd -> IO (Maybe Word8)
readByte fd = alloca $ \p -> do
  n <- c_read fd p 1
  if n == 1 then Just <$> peek p else return Nothing

-- | Run an action that must finish within the given number of seconds
-- (timed with GHC's own timeout, independent of weft).
within :: Double -> String -> IO a -> IO a
within secs what act = do
  r <- GHC.timeout (round (secs * 1e6)) act
  maybe (expectationFailure ("did not finish within " ++ show secs ++ " s: " ++ what)
         >> throwIO (userError "unreachable")) return r

-- | Poll a condition every millisecond for up to 5 seconds.
eventually :: String -> IO Bool -> IO ()
eventually what cond = go (5000 :: Int)
  where
    go 0 = expectationFailure ("condition never held: " ++ what)
    go n = do
      ok <- cond
      unless ok (threadDelayGHC 1000 >> go (n - 1))
    threadDelayGHC = Control.Concurrent.threadDelay

-- | Registrations and waits pending across every system manager.
liveRegistrations :: IO Int
liveRegistrations = sum . map E.statLiveRegistrations <$> (mapM E.getManagerStats =<< E.systemManagers)

pendingTimers :: IO Int
pendingTimers = sum . map E.statPendingTimers <$> (mapM E.getManagerStats =<< E.systemManagers)

-- | weft-kv's live records once collections have run until no more than
-- the given count are left, or a bounded while (2 s) has passed: a
-- table nothing holds frees its records in a finalizer, in a thread of
-- its own after a collection.
recordsDownTo :: Int -> IO Int
recordsDownTo target = go (100 :: Int)
  where
    go n = do
      performMajorGC
      Control.Concurrent.threadDelay 20000
      (now, _) <- recordsLive
      if now <= target || n == 0 then return now else go (n - 1)

-- | weft-kv's live records once collections have run until two readings
-- agree, or a bounded while (2 s) has passed: what earlier tests dropped
-- is freed by then, so a count taken afterwards moves only with what
-- the caller does.
settledRecords :: IO Int
settledRecords = go (100 :: Int) . fst =<< recordsLive
  where
    go n previous = do
      performMajorGC
      Control.Concurrent.threadDelay 20000
      (now, _) <- recordsLive
      if now == previous || n == 0 then return now else go (n - 1) now

-- | What @build@ makes holds at least @n@ records while it is held, and
-- frees every one once dropped. @build@ returns an action reading the
-- structure's size, which holds the structure until the count is taken.
recordsFreedOnDrop :: Int -> IO (IO Int) -> Expectation
recordsFreedOnDrop n build = do
  atStart <- settledRecords
  sizeOf <- build
  (during, _) <- recordsLive
  sizeOf `shouldReturn` n
  during - atStart `shouldSatisfy` (>= n)
  recordsDownTo atStart >>= (`shouldSatisfy` (<= atStart))

-- | Start the system manager of every capability, so that fd counts taken
-- afterwards do not see managers starting.
startManagers :: IO ()
startManagers = do
  n <- getNumCapabilities
  forM_ [0 .. n - 1] $ \cap -> do
    done <- newEmptyMVar
    _ <- forkOn cap (E.getSystemManager >>= putMVar done)
    void (takeMVar done)

openFdCount :: IO Int
openFdCount = length <$> listDirectory "/proc/self/fd"

-- | Raise the soft fd limit to n; fail the test, saying why, if the hard
-- limit is lower.
raiseFdLimit :: Integer -> IO ()
raiseFdLimit n = do
  lim <- getResourceLimit ResourceOpenFiles
  case hardLimit lim of
    ResourceLimit h | h < n ->
      expectationFailure ("this test needs " ++ show n ++ " fds; the hard limit (ulimit -Hn) is " ++ show h)
    _ -> setResourceLimit ResourceOpenFiles lim { softLimit = ResourceLimit n }

-- | Fork an action on a capability; its outcome lands in the MVar.
forkResult :: Int -> IO a -> IO (ThreadId, MVar (Either SomeException a))
forkResult cap act = do
  m <- newEmptyMVar
  -- Masked until 'try' is in place, so a killThread that comes before the
  -- thread runs is still caught and reported.
  t <- mask $ \restore -> forkOn cap (try (restore act) >>= putMVar m)
  return (t, m)

-- | Is this the IOError a waiter gets when its fd is closed?
isBadFd :: Either SomeException a -> Bool
isBadFd (Left e) = case fromException e of
  Just ioe -> ioe_errno ioe == Just (let Errno b = eBADF in b)
  Nothing -> False
isBadFd (Right _) = False

foreign import ccall unsafe "unistd.h pipe2" c_pipe2 :: Ptr CInt -> CInt -> IO CInt
foreign import ccall unsafe "unistd.h close" c_close :: Fd -> IO CInt
foreign import ccall unsafe "unistd.h read" c_read :: Fd -> Ptr Word8 -> CSize -> IO CSsize
foreign import ccall unsafe "unistd.h write" c_write :: Fd -> Ptr Word8 -> CSize -> IO CSsize

-- | Run an action with the open-file limit set so that exactly @n@ more fds
-- can be opened. The limit bounds fd numbers, not counts, so the free
-- numbers below the highest open fd are filled with @/dev/null@ first.
-- The action gets an action that lifts the limit again; the limit is
-- restored and the fillers closed at the end in any case.
withFdHeadroom :: Int -> (IO () -> IO a) -> IO a
withFdHeadroom n act = do
  -- Fds that only a finalizer will close (lazily read files) would free
  -- numbers under the limit midway: let them go now.
  performMajorGC >> threadDelay 10000
  lim <- getResourceLimit ResourceOpenFiles
  highest <- maximum . map read <$> listDirectory "/proc/self/fd"
  let fill acc = do
        fd <- openReadOnly "/dev/null"
        if fd < Fd highest then fill (fd : acc) else closeFd fd >> return (fd, acc)
  (Fd firstFree, fillers) <- fill []
  let lift = setResourceLimit ResourceOpenFiles lim
  (`finally` (lift >> mapM_ closeFd fillers)) $ do
    setResourceLimit ResourceOpenFiles lim { softLimit = ResourceLimit (fromIntegral firstFree + fromIntegral n) }
    act lift

-- | Open a file for reading, as an fd the caller closes.
openReadOnly :: FilePath -> IO Fd
openReadOnly path = handleToFd =<< openBinaryFile path ReadMode

-- | A model test's run over a list of operations: @step@ applies each to
-- the structure and to its model, checking the operation's own answer;
-- @agrees@ then checks every read of the structure against the model.
-- Gives the structure left at the end too.
modelRun :: (s -> m -> op -> IO (s, m, Property)) -> (s -> m -> IO Property) -> s -> m -> [op] -> IO (Property, s)
modelRun step agrees = go []
  where
    go acc s _ [] = return (conjoin (reverse acc), s)
    go acc s m (op : ops) = do
      (s', m', p) <- step s m op
      a <- agrees s' m'
      go ((p .&&. a) : acc) s' m' ops

-- | 'modelRun' over a small value as weft-kv's store keeps one (Note
-- [Small values in records] in "Kv.Store"): after each operation, what
-- it left is written to a record while it has a flat copy (@flat@) that
-- fits one (over the record if of its length, else into a new one, as
-- the store writes), and the next operation sees it there (@inRecord@);
-- else it is made its own (@own@). The last record is freed.
modelRunInRecord :: (s -> Maybe (Int, Ptr Word8 -> IO ())) -> (Ptr Word8 -> Int -> s) -> (s -> IO s)
                 -> (s -> m -> op -> IO (s, m, Property)) -> (s -> m -> IO Property) -> s -> m -> [op] -> IO Property
modelRunInRecord flat inRecord own step agrees s0 m0 ops = do
  (p, HeldIn r _) <- modelRun held (\(HeldIn _ s) -> agrees s) (HeldIn Nothing s0) m0 ops
  mapM_ recordFree r
  return p
  where
    held (HeldIn r s) m op = do
      (s', m', p) <- step s m op
      h <- case flat s' of
        Just (n, write) | recordable key n -> do
          fits <- maybe (return False) (\old -> recordFits old kind n) r
          r' <- case r of
            Just old | fits -> old <$ recordOverwriteWith old write
            _ -> do
              new <- recordNewWith key kind n write
              mapM_ recordFree r
              return new
          HeldIn (Just r') <$> recordReadWith r' (\at len -> return (inRecord at len))
        _ -> do
          o <- own s'
          mapM_ recordFree r
          return (HeldIn Nothing o)
      return (h, m', p)
    key = Data.ByteString.Char8.pack "k"
    kind = 3

-- | A value under test and the record it is in, if any.
data HeldIn s = HeldIn (Maybe Record) s
