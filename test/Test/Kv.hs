{-# LANGUAGE BangPatterns, OverloadedStrings, ScopedTypeVariables #-}
-- | weft-kv: the RESP decoder over arbitrary chunkings, encoder round
-- trips, and the server end to end over loopback (started in-process on
-- its own Weft.Color runtime): each command's reply, reply order across
-- key colors under pipelining, protocol errors that close one connection
-- while others are served, the bulk-string limit, and expiry.
module Test.Kv
  ( spec
    -- * A server and its clients, for the other weft-kv tests
  , withKv
  , withKvConfig
  , Client
  , withClient
  , sendRaw
  , replies
  , run
  , cmd
  , waitBlocked
  , nothingYet
  , bulk
  , ok
  , wrongType
  , withRedis
  , differential
  ) where

import Control.Concurrent
import Control.Concurrent.Async (async, forConcurrently_, wait)
import Control.Exception
import Control.Monad
import qualified Data.Bits as Bits
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as C
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Foreign.Ptr (minusPtr, nullPtr)
import Data.Char (toUpper)
import Data.Primitive.ByteArray (copyMutableByteArrayToPtr)
import Data.Word (Word8, Word64)
import Data.Time.Clock.POSIX (getPOSIXTime)
import Data.List (sort, sortOn, zip4, (\\))
import Data.Containers.ListUtils (nubOrd)
import qualified Data.Map.Strict as Map
import Network.Socket (SockAddr (..))
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import System.Directory (findExecutable)
import System.Mem (performMajorGC)
import System.Environment (lookupEnv)
import qualified System.Timeout as GHC
import System.Process (StdStream (NoStream), createProcess, proc, readProcessWithExitCode, std_err, std_out, terminateProcess, waitForProcess)
import Text.Read (readMaybe)
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess, prop)
import Test.QuickCheck hiding (within)

import Kv.Deque
import Kv.Key
import Kv.Lists (listRangeReply)
import Kv.Conn (Result (..), runReplyBytes, runsOf)
import Kv.Out
import Kv.Record
import Kv.Request
import Kv.Resp
import Kv.Server
import Kv.Str
import Kv.Table
import Support (settledRecords, within)
import Test.Net (connectClient, keepsClientsWhenFull, recvExactly)
import Weft.Net (Eviction (..))

spec :: Spec
spec = describe "weft-kv" $ do
  decoderSpec
  dequeSpec
  tableSpec
  serverSpec

-- | Elements a to b of a deque, read by its fold.
rangeOf :: Int -> Int -> Deque -> IO [ByteString]
rangeOf a b d = reverse <$> dequeFoldRange (\acc node off len -> (: acc) <$> BI.create len (\p -> copyMutableByteArrayToPtr p node off len)) [] a b d

------------------------------------------------------------------------------
-- List values

-- | An operation on a list value; counts may pass its length.
data DequeOp
  = OpPushHead [ByteString]  -- ^ pushed one by one
  | OpPushTail [ByteString]
  | OpPopHead Int            -- ^ popped one by one
  | OpPopTail Int
  | OpDropHead Int
  | OpDropTail Int
  deriving Show

instance Arbitrary DequeOp where
  arbitrary = frequency
    [ (3, OpPushHead <$> pushes), (3, OpPushTail <$> pushes)
    , (1, OpPopHead <$> choose (0, 40)), (1, OpPopTail <$> choose (0, 40))
    , (1, OpDropHead <$> dropped), (1, OpDropTail <$> dropped) ]
    where
      pushes = frequency [(4, resize 80 (listOf dequeItem)), (1, resize 500 (listOf dequeItem))]
      dropped = frequency [(3, choose (0, 40)), (1, choose (0, 700))]

-- | An element: mostly short, possibly empty; now and then larger than a
-- node ('nodeBytes') or a good part of one.
dequeItem :: Gen ByteString
dequeItem = frequency
  [ (40, C.pack <$> resize 6 (listOf (elements "ab\0\r")))
  , (2, (\n c -> C.replicate n c) <$> choose (100, 1500) <*> elements "cd")
  , (1, (\n c -> C.replicate n c) <$> choose (nodeBytes - 8, nodeBytes + 3000) <*> elements "ef") ]

-- | The operation on the value and on a plain list.
applyDequeOp :: Deque -> [ByteString] -> DequeOp -> IO [ByteString]
applyDequeOp d m op = case op of
  OpPushHead xs -> reverse xs ++ m <$ mapM_ (pushHead d) xs
  OpPushTail xs -> m ++ xs <$ mapM_ (pushTail d) xs
  OpPopHead k -> do
    got <- replicateM k (popHead d)
    return (if got == map Just (take k m) ++ replicate (k - length m) Nothing then drop k m else ["popped wrong"])
  OpPopTail k -> do
    got <- replicateM k (popTail d)
    let r = reverse m
    return (if got == map Just (take k r) ++ replicate (k - length m) Nothing then reverse (drop k r) else ["popped wrong"])
  OpDropHead k -> drop k m <$ dropHead k d
  OpDropTail k -> take (length m - k) m <$ dropTail k d

-- | What is wrong with a list value that should hold the given elements:
-- its elements, length, indexing and folds, and its nodes (Note [Lists
-- in nodes]: none empty, their counts adding up to the length, none
-- larger than 'nodeBytes' but a single element's).
dequeProblems :: Deque -> [ByteString] -> IO [String]
dequeProblems d m = do
  let n = length m
      -- Some 20 indices and 10 starts, spread over the list.
      step k = max 1 (n `div` k)
  xs <- dequeToList d
  len <- dequeLength d
  ixs <- mapM (\i -> (,) i <$> dequeIndex i d) ([-1, 0, n - 1, n] ++ [1, 1 + step 20 .. n])
  ranges <- forM [ (a, b) | a <- [0, step 10 .. n], b <- [a - 1, a + 5, a + 500] ] $ \(a, b) ->
    (,) (a, b) <$> rangeOf a (min b (n - 1)) d
  nodes <- dequeNodes d
  return $ [ "elements " ++ show (length xs) | xs /= m ] ++ [ "length " ++ show len | len /= n ]
    ++ [ "index " ++ show i | (i, x) <- ixs, x /= (if i < 0 || i >= n then Nothing else Just (m !! i)) ]
    ++ [ "range " ++ show ab | (ab@(a, b), r) <- ranges, r /= take (min b (n - 1) - a + 1) (drop a m) ]
    ++ [ "empty node" | (_, c) <- nodes, c <= 0 ]
    ++ [ "counts " ++ show (map snd nodes) | sum (map snd nodes) /= n ]
    ++ [ "node of " ++ show size | (size, c) <- nodes, size > nodeBytes, c > 1 ]

-- | An operation on a color's keys: insert or delete a key (of few
-- letters, so that they repeat), or insert many distinct keys (so that
-- the table grows) and delete them again (so that it shrinks).
data TableOp = TableInsert ByteString Int | TableDelete ByteString | TableGrow Int Bool
  deriving Show

instance Arbitrary TableOp where
  arbitrary = frequency
    [ (6, TableInsert <$> keyName <*> arbitrary), (3, TableDelete <$> keyName)
    , (1, TableGrow <$> choose (1, 60) <*> arbitrary) ]
    where
      -- Short keys, and some past the 16 bytes a key keeps in its words.
      keyName = frequency
        [ (3, C.pack <$> resize 4 (listOf (elements "abc")))
        , (1, C.pack . ("0123456789abcde" ++) <$> resize 4 (listOf (elements "abc"))) ]

-- | A table entry for the tests: a stored key and a number.
data TestEntry = TestEntry !Key !Int

testValue :: TestEntry -> Int
testValue (TestEntry _ v) = v

instance Keyed TestEntry where
  entryKey (TestEntry k _) = k

tableSpec :: Spec
tableSpec = describe "a color's keys (Kv.Table)" $ do
  -- Settled first: a finalizer of an earlier test's table must not move
  -- the count while the property compares it.
  before_ (void settledRecords) $ modifyMaxSuccess (const 200) $ prop "agree with Data.Map, with hashes that collide or not, entries and records mixed, and free every record" $
    \(collide :: Bool) ops -> ioProperty $ do
      (records0, bytes0) <- recordsLive
      -- Colliding: keys of one length share a hash (among them 0 and 1,
      -- which the table's empty and deleted slots use). Else spread, half
      -- of them negative.
      let hashOf k = if collide then B.length k `mod` 3
                     else B.foldl' (\h c -> h * 31 + fromIntegral c) 7 k * (-7046029254386353131)
          -- Insert or replace, as the store does: look first. An odd
          -- number is kept as a record of its digits, an even one in an
          -- entry, so that slots change from one to the other.
          put t k v = tableFind t (hashOf k) k >>= \i -> if odd v
            then do
              r <- recordNew k (strCopy (C.pack (show v)))
              if i >= 0 then tableSetRecord t i r else tableInsertRecord t (hashOf k) r
            else if i >= 0
              then storedKey k >>= \stored -> tableSet t i (TestEntry stored v)
              else storedKey k >>= \stored -> tableInsert t (hashOf k) (TestEntry stored v)
          valueAt t i = tableRecord t i >>= \r -> if isRecord r
            then readMaybe . C.unpack . strString <$> recordValue r
            else Just . testValue <$> tableValue t i
          remove t k = tableFind t (hashOf k) k >>= \i -> when (i >= 0) (tableDelete t i)
          grown n = [ C.pack ("g" ++ show j) | j <- [1 .. n] ]
          step t m op = case op of
            TableInsert k v -> put t k v >> return (Map.insert k v m)
            TableDelete k -> remove t k >> return (Map.delete k m)
            TableGrow n undo -> do
              mapM_ (\k -> put t k n) (grown n)
              if undo then mapM_ (remove t) (grown n) >> return (foldr Map.delete m (grown n))
                else return (foldr (\k -> Map.insert k n) m (grown n))
          agrees t m = do
            listed <- tableFold (\acc k e -> (k, maybe Nothing (Just . testValue) e) : acc) [] t
            let fromRecords = [ k | (k, Nothing) <- listed ]
            recordValues <- forM fromRecords $ \k -> tableFind t (hashOf k) k >>= valueAt t
            size <- tableSize t
            cap <- tableCapacity t
            found <- forM (Map.keys m ++ map C.pack ["", "a", "zz", "g1", "abca"]) $ \k -> do
              i <- tableFind t (hashOf k) k
              v <- if i >= 0 then valueAt t i else return Nothing
              return (v === Map.lookup k m)
            let inEntries = [ (k, v) | (k, Just v) <- listed ]
                asListed = sortOn fst (inEntries ++ [ (k, v) | (k, Just v) <- zip fromRecords recordValues ])
            return $ asListed === Map.toList m .&&. size === Map.size m
              .&&. counterexample "a record holds an even number" (all odd [ v | (_, Just v) <- zip fromRecords recordValues ])
              .&&. counterexample "an entry holds an odd number" (all even (map snd inEntries))
              .&&. counterexample ("capacity " ++ show cap) (4 * size <= 3 * cap && (cap <= 8 || 8 * size >= cap `div` 2))
              .&&. conjoin found
      t <- newTable
      let steps _ [] = return []
          steps m (op : rest) = do
            m' <- step t m op
            p <- agrees t m'
            (p :) <$> steps m' rest
      agreed <- conjoin <$> steps Map.empty ops
      tableClear t
      live <- recordsLive
      return (agreed .&&. counterexample "records left after the table was cleared" (live === (records0, bytes0)))
  prop "a stored key is its bytes, and only those" $
    \(Bytes a) (Bytes b) (NonNegative at) (x :: Word8) -> ioProperty $ do
      k <- storedKey a
      -- A one-byte change anywhere, and the key with a zero byte added.
      let changed = if B.null a then a else let i = at `mod` B.length a in B.take i a <> B.singleton x <> B.drop (i + 1) a
      return $ keyBytes k === a
        .&&. counterexample "the key is not its own bytes" (keyIs k a)
        .&&. keyIs k b === (b == a) .&&. keyIs k changed === (changed == a)
        .&&. counterexample "the key is its bytes with a zero byte added" (not (keyIs k (a <> B.singleton 0)))
  it "forgets every key when cleared" $ do
    t <- newTable
    forM_ [1 .. 100 :: Int] $ \j -> storedKey (C.pack (show j)) >>= \k -> tableInsert t j (TestEntry k j)
    tableClear t
    tableSize t `shouldReturn` 0
    tableFind t 7 "7" `shouldReturn` (-1)
    tableFold (\n _ _ -> n + 1) (0 :: Int) t `shouldReturn` 0
  prop "keys that share a hash tag share a color, and still hash apart" $
    \(Bytes pre) (Bytes tag0) (Bytes suf) (Bytes pre2) -> not (B.null tag0) ==>
      -- No '{' before the tag, no '}' in it: the tag as redis cluster
      -- reads it.
      let tag = B.map (\c -> if c == 125 then 126 else c) tag0
          key p = B.filter (/= 123) p <> "{" <> tag <> "}" <> suf
          colorOf k = keyHash k `mod` 65536
      in colorOf (key pre) === colorOf tag .&&. colorOf (key pre2) === colorOf tag
         .&&. (key pre /= key pre2 ==> keyHash (key pre) /= keyHash (key pre2))
  prop "hashes a key without a '{' as its bytes, and one with as its tag's color and its bytes" $
    \(Bytes pre) (Bytes tag0) (Bytes suf) -> not (B.null tag0) ==>
      let plain = B.filter (/= 123) (pre <> tag0 <> suf)
          tag = B.map (\c -> if c == 125 then 126 else c) tag0
          tagged = B.filter (/= 123) pre <> "{" <> tag <> "}" <> suf
      in keyHash plain === bytesHash plain
         .&&. keyHash tagged === ((bytesHash tagged Bits..&. Bits.complement 0xffff) Bits..|. (bytesHash tag Bits..&. 0xffff))
  it "takes the color from the whole key when it has no hash tag" $ do
    let colorOf k = keyHash k `mod` 65536
    map colorOf ["a{t}", "b{t}", "{t}x", "{t}}"] `shouldBe` replicate 4 (colorOf "t")
    colorOf "{{t}" `shouldBe` colorOf "{t"
    -- An empty tag, or a '{' without a '}' after it, is no tag.
    colorOf "{}a" `shouldNotBe` colorOf "{}b"
    colorOf "a{t" `shouldNotBe` colorOf "b{t"
    colorOf "a}{t" `shouldNotBe` colorOf "b}{t"
  it "defaults to one key color per core, a power of two, at most 65536" $
    map keyColorsFor [0, 1, 2, 3, 4, 5, 8192, 100000] `shouldBe` [1, 1, 2, 4, 4, 8, 8192, 65536]

dequeSpec :: Spec
dequeSpec = describe "list values (Kv.Deque)" $ do
  modifyMaxSuccess (const 100) $ prop "agree with a plain list after any operations" $
    forAll (resize 100 (listOf dequeItem)) $ \start -> forAll (resize 30 (listOf arbitrary)) $ \ops -> ioProperty $ do
      d <- dequeFromList start
      let go _ [] = return (property True)
          go m (op : rest) = do
            m' <- applyDequeOp d m op
            problems <- dequeProblems d m'
            if null problems then go m' rest
            else return (counterexample (show (op, length m', problems)) False)
      dequeProblems d start >>= \p -> if null p then go start ops else return (counterexample (show p) False)
  it "encodes LRANGE's reply as the elements read one by one would be" $
    forAll (resize 100 (listOf dequeItem)) $ \xs -> forAll (resize 30 (listOf arbitrary)) $ \ops -> ioProperty $ do
      d <- dequeFromList xs
      m <- foldM (applyDequeOp d) xs ops
      let n = length m
      checks <- forM ([ (a, b) | a <- [0, 7 .. n], b <- [a - 1, min (n - 1) (a + 3), n - 1] ]
                       -- LRANGE's start near maxBound, its end before it
                       ++ [(maxBound - 1, n - 6), (maxBound, minBound + 1)]) $ \(a, b) -> do
        r <- listRangeReply a b d
        return (encodeReply r === encodeReply (RArray (map RBulk (take (b - a + 1) (drop a m)))))
      return (conjoin checks)
  it "keeps a short list in a small node and a long one in full nodes" $ do
    d <- dequeFromList ["abc"]
    dequeNodes d `shouldReturn` [(64, 1)]
    replicateM_ 5000 (pushHead d "h")
    replicateM_ 5000 (pushTail d "t")
    nodes <- dequeNodes d
    -- Every node but those at the ends full size; 10,001 elements of 9
    -- to 11 bytes fill no more than 28 of them.
    map fst (drop 1 (init nodes)) `shouldSatisfy` all (== nodeBytes)
    length nodes `shouldSatisfy` (<= 28)
    dequeToList d `shouldReturn` (replicate 5000 "h" ++ ["abc"] ++ replicate 5000 "t")
    dropHead 4990 d >> dropTail 5000 d
    dequeToList d `shouldReturn` (replicate 10 "h" ++ ["abc"])
    dequeNodes d >>= (`shouldSatisfy` ((<= 2) . length))

------------------------------------------------------------------------------
-- The decoder

-- | Integers around each power of ten, and the ends of 'Int'.
edges :: [Int]
edges = [minBound, maxBound, minBound + 1, maxBound - 1]
  ++ concat [ [p - 1, p, p + 1, negate p, 1 - p] | k <- [0 .. 18 :: Int], let p = 10 ^ k ]

newtype Bytes = Bytes ByteString deriving Show
instance Arbitrary Bytes where
  arbitrary = Bytes . B.pack <$> frequency
    [ (4, resize 40 (listOf arbitrary))                  -- any bytes, CR and LF included
    , (1, vectorOf 300 arbitrary) ]                      -- longer than a small chunk
  shrink (Bytes b) = map (Bytes . B.pack) (shrink (B.unpack b))

-- | A command sent either way: multibulk (any bytes) or inline (words).
data Sent = Multibulk [ByteString] | Inline [ByteString] deriving Show
instance Arbitrary Sent where
  arbitrary = oneof
    [ Multibulk . map (\(Bytes a) -> a) <$> resize 8 (listOf1 arbitrary)
    , Inline <$> resize 8 (listOf1 (C.pack <$> listOf1 (elements "abcXYZ019:_-"))) ]

-- | Up to 20 commands.
newtype SentCommands = SentCommands [Sent] deriving Show
instance Arbitrary SentCommands where
  arbitrary = SentCommands <$> resize 20 (listOf arbitrary)
  shrink (SentCommands cs) = map SentCommands (shrinkList (const []) cs)

wire :: Sent -> ByteString
wire (Multibulk args) = encodeCommand args
wire (Inline ws) = C.unwords ws <> "\r\n"

argsOf :: Sent -> [ByteString]
argsOf (Multibulk a) = a
argsOf (Inline a) = a

-- | Cut a string into pieces of the given sizes (the rest in one piece).
chunk :: [Int] -> ByteString -> [ByteString]
chunk _ b | B.null b = []
chunk [] b = [b]
chunk (n : ns) b = let (x, y) = B.splitAt (max 1 n) b in x : chunk ns y

-- | Feed the chunks one by one: every command, and the error if any.
feedAll :: Limits -> [ByteString] -> ([[ByteString]], Maybe ProtocolError)
feedAll lim = go newDecoder []
  where
    go _ acc [] = (concat (reverse acc), Nothing)
    go d acc (c : cs) = case feed lim d c of
      Decoded cmds (Right d') -> go d' (concatMap commandLists cmds : acc) cs
      Decoded cmds (Left e) -> (concat (reverse (concatMap commandLists cmds : acc)), Just e)

err :: ByteString -> Maybe ProtocolError
err = Just . ProtocolError

newtype AnyReply = AnyReply Reply deriving Show
instance Arbitrary AnyReply where
  arbitrary = AnyReply <$> sized go
    where
      go n = frequency
        [ (2, RSimple . C.pack <$> listOf (elements "OKPONG abc"))
        , (1, RError . C.pack <$> listOf (elements "ERR wrong"))
        , (2, RInt <$> arbitrary)
        , (2, RBulk . (\(Bytes a) -> a) <$> arbitrary)
        , (1, pure RNil), (1, pure RNilArray)
        , (if n > 0 then 2 else 0, RArray <$> resize (n `div` 3) (listOf (go (n `div` 3)))) ]

decoderSpec :: Spec
decoderSpec = describe "RESP decoder" $ do
  modifyMaxSuccess (const 300) $ prop "decodes any commands the same over any chunking" $
    \(SentCommands sent) (Positive small) sizes ->
      let input = B.concat (map wire sent)
          pieces = chunk (map ((`mod` (small + 1)) . getPositive) sizes) input
      in feedAll defaultLimits pieces === (map argsOf sent, Nothing)

  prop "commands within one chunk are views of it: no argument is copied" $
    \(SentCommands sent) ->
      let multibulk = [ s | s@(Multibulk _) <- sent ]
          input = B.concat (map wire multibulk)
          Decoded cmds _ = feed defaultLimits newDecoder input
          args = concatMap commandLists cmds
          -- Where a string's bytes are: bytestring 0.11 keeps no offset
          -- apart from the pointer, so compare addresses.
          address b = BU.unsafeUseAsCString b (return . (`minusPtr` nullPtr))
      in ioProperty $ do
           start <- address input
           inInput <- mapM (\a -> (\at -> at >= start && at + B.length a <= start + B.length input) <$> address a) (concat args)
           return $ (args, length cmds <= 1) === (map argsOf multibulk, True)
             .&&. counterexample "an argument was copied" (and inInput)

  prop "a command made from its arguments (a queued one) reads back as them" $
    \(NonEmpty args) -> let cs = commandOf (map (\(Bytes a) -> a) args)
                       in (commandLists cs, commandsEnd cs) === ([map (\(Bytes a) -> a) args], 1 + 2 * length args)

  it "reads quoted inline commands split anywhere" $
    forM_ [1 .. 40] $ \k ->
      feedAll defaultLimits (chunk (repeat k) "GET x\r\nSET \"a b\" 'c'\r\n*1\r\n$4\r\nPING\r\n")
        `shouldBe` ([["GET", "x"], ["SET", "a b", "c"], ["PING"]], Nothing)

  prop "writes integers as show does, at every digit count and both ends" $
    forAll (oneof [arbitrary, arbitrarySizedBoundedIntegral, elements edges]) $ \n ->
      (showInt n, encodeReply (RInt n)) === (C.pack (show n), C.pack (':' : show n ++ "\r\n"))

  prop "a stored string keeps its bytes and is written as their bulk string, a large one not copied" $
    \(Bytes small) (NonNegative extra) (nearLarge :: Bool) -> ioProperty $ do
      let b = if nearLarge then B.replicate (sharedBulkBytes - 2 + extra `mod` 4) 120 <> small else small
          s = strCopy b
          -- A large one's string is its stored bytes, the same each time.
          sameString (BI.PS p o l) (BI.PS p' o' l') = p == p' && o == o' && l == l'
      o <- newOut
      outPiece o (piece (RStored s))
      chunks <- outChunks o
      let large = B.length b >= sharedBulkBytes
      return $ (strString s, strLength s, encodeReply (RStored s)) === (b, B.length b, encodeReply (RBulk b))
        .&&. B.concat chunks === encodeReply (RBulk b)
        .&&. counterexample "a large stored string was copied"
               (not large || (sameString (strString s) (strString s) && any (sameString (strString s)) chunks))

  prop "a stored string reads as an integer as the wire's does, and integers store as they are written" $
    forAll (oneof [arbitrary, arbitrarySizedBoundedIntegral, elements edges]) $ \n (Bytes b) ->
      let digits = C.pack (show n)
      in (readStoredInteger (strCopy digits), readStoredInteger (strCopy b), strString (storedDecimal n))
           === (Just n, readInteger b, digits)

  prop "encoded replies decode back, whole and followed by more" $ \(AnyReply r) ->
    decodeReply (encodeReply r <> "+next\r\n") === Right (Just (r, "+next\r\n"))

  prop "the output holds the replies' bytes in order over partial sends, large bulk strings not copied" $
    \(rs :: [AnyReply]) (sends :: [NonNegative Int]) (NonNegative extra) -> ioProperty $ do
      let big = B.replicate (sharedBulkBytes + extra) 120
          written = concat [ if even i then [r] else [r, RArray [r, RBulk big, r]] | (i, AnyReply r) <- zip [0 :: Int ..] rs ]
          -- The very string, not a copy: same buffer, offset and length.
          sameString (BI.PS p o l) (BI.PS p' o' l') = p == p' && o == o' && l == l'
      o <- newOut
      -- After each reply, send part of what waits (a send that takes
      -- some bytes, as a full socket does); count the large written whose
      -- string is not among the chunks by reference.
      let large r = case r of RArray [_, RBulk b, _] -> sameString b big; _ -> False
          step (sent, copied) (r, k) = do
            outPiece o (piece r)
            chunks <- outChunks o
            let n = min k (sum (map B.length chunks))
                copy = large r && not (any (sameString big) chunks)
            -- (Copied now: the buffer is written again once all is sent.)
            let !part = B.copy (B.take n (B.concat chunks))
            outSent o n
            return (sent <> part, if copy then copied + 1 else copied)
      (sent, copied) <- foldM step (B.empty, 0 :: Int) (zip written (map ((* 37) . getNonNegative) sends ++ repeat 0))
      rest <- outChunks o
      waitingNow <- outWaiting o
      return $ sent <> B.concat rest === B.concat (map encodeReply written)
        .&&. waitingNow === sum (map B.length rest)
        .&&. counterexample "a large string was copied" (copied === 0)

  prop "runs of results for consecutive commands hold the same replies, in order, as the results" $
    \(rs :: [(Bool, AnyReply)]) (NonNegative start) (NonNegative extra) -> ioProperty $ do
      -- Latest first: numbers down from the top, a gap wherever the flag
      -- says; now and then a large reply, which joins no run.
      let big = RBulk (B.replicate (600 + extra) 121)
          numbered = go (start + 2 * length rs) [ (gap, if gap && extra `mod` 3 == 0 then big else r) | (gap, AnyReply r) <- rs ]
          go _ [] = []
          go s ((gap, r) : more) = (s, r) : go (if gap then s - 2 else s - 1) more
          results = [ Whole s (plainSize r) r | (s, r) <- numbered, plainSize r >= 0 ]
          -- What each result answers: its commands and their bytes.
          answers res = case res of
            Whole s _ r -> ([s], encodeReply r)
            Replies s k bs -> ([s .. s + k - 1], bs)
            _ -> ([], B.empty)
          inOrder = sortOn fst . map answers
      runs <- runsOf results
      -- Two neighbours that may share a run: consecutive and small.
      let mergeable = or [ s == s' + 1 && n <= runReplyBytes && n' <= runReplyBytes
                         | (Whole s n _, Whole s' n' _) <- zip results (drop 1 results) ]
      return $ counterexample (show (map fst (inOrder runs)))
        (concatMap fst (inOrder runs) === concatMap fst (inOrder results)
           .&&. B.concat (map snd (inOrder runs)) === B.concat (map snd (inOrder results))
           .&&. (length runs < length results) === mergeable)

  prop "a reply cut short is incomplete, never wrong" $ \(AnyReply r) (NonNegative k) ->
    let bytes = encodeReply r
        cut = B.take (k `mod` B.length bytes) bytes
    in decodeReply cut === Right Nothing

  prop "errors are found over any chunking, after the commands before them" $
    \(Positive small) sizes -> forAll (elements badInputs) $ \(bad, msg) ->
      let input = encodeCommand ["SET", "k", "v"] <> bad <> encodeCommand ["GET", "k"]
          pieces = chunk (map ((`mod` (small + 1)) . getPositive) sizes) input
      in feedAll (defaultLimits { maxBulk = 100 }) pieces === ([["SET", "k", "v"]], err msg)

  it "skips empty commands and blank inline lines" $
    feedAll defaultLimits ["*0\r\n\r\n  \r\n*-1\r\nPING\r\n"] `shouldBe` ([["PING"]], Nothing)

  it "reads inline words separated by spaces and tabs, with or without CR" $
    feedAll defaultLimits ["SET  a\tb\nGET a\r\n"] `shouldBe` ([["SET", "a", "b"], ["GET", "a"]], Nothing)

  -- Each line's outcome as redis-server 7.0 answers it (ECHO's reply, or
  -- the protocol error).
  it "reads quoted inline words as redis does" $ do
    forM_ [ ("ECHO \"a b\"", ["a b"]), ("ECHO \"x\\x41\\x4a\\n\\ty\"", ["xAJ\n\ty"])
          , ("ECHO 'it\\'s'", ["it's"]), ("ECHO \"\"", [""]), ("ECHO ''", [""]), ("ECHO \"\\q\"", ["q"])
          , ("ECHO \"\\xZZ\"", ["xZZ"]), ("ECHO a\vb", ["a\vb"]) ] $ \(line, args) ->
      feedAll defaultLimits [line <> "\r\n"] `shouldBe` ([ "ECHO" : args ], Nothing)
    forM_ ["ECHO a\"b c\"d", "ECHO \"a\"b", "ECHO 'a'b", "ECHO \"abc"] $ \line ->
      feedAll defaultLimits [line <> "\r\n"] `shouldBe` ([], err "ERR Protocol error: unbalanced quotes in request")

  it "rejects an inline line longer than the limit before it ends" $
    feedAll defaultLimits { maxLine = 64 } [B.replicate 100 65]
      `shouldBe` ([], err "ERR Protocol error: too big inline request")

  it "rejects a multibulk with more arguments than the limit" $
    feedAll defaultLimits { maxArgs = 3 } ["*4\r\n"]
      `shouldBe` ([], err "ERR Protocol error: invalid multibulk length")

  it "accepts a bulk string of exactly the limit, split anywhere" $
    let big = B.replicate 100 120
    in feedAll defaultLimits { maxBulk = 100 } (chunk [7, 1, 50, 1] (encodeCommand ["SET", "k", big]))
         `shouldBe` ([["SET", "k", big]], Nothing)
  where
    badInputs =
      [ ("*x\r\n", "ERR Protocol error: invalid multibulk length")
      , ("*2\r\n$3\r\nGET\r\n$y\r\n", "ERR Protocol error: invalid bulk length")
      , ("*2\r\n$3\r\nGET\r\n$-3\r\n", "ERR Protocol error: invalid bulk length")
      , ("*1\r\n+GET\r\n", "ERR Protocol error: expected '$', got '+'")
      , ("*1\r\n$3\r\nGETxx", "ERR Protocol error: expected CRLF after the bulk string")
      , ("*1\r\n$101\r\n", "ERR Protocol error: invalid bulk length")
      , ("*1\n", "ERR Protocol error: expected CRLF after the multibulk length") ]

------------------------------------------------------------------------------
-- The server

-- | Run a server with this bulk limit on a free loopback port.
withKv :: Int -> (SockAddr -> IO a) -> IO a
withKv bulkLimit = withKvConfig defaultServerConfig { serverLimits = defaultLimits { maxBulk = bulkLimit } }

-- | Run a server with this configuration on a free loopback port.
withKvConfig :: ServerConfig -> (SockAddr -> IO a) -> IO a
withKvConfig cfg0 body = do
  ready <- newEmptyMVar
  let cfg = cfg0 { serverOnReady = putMVar ready }
      addr = SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1))
  bracket (forkIO (runServer cfg addr)) killThread $ \_ ->
    body =<< within 5 "server start" (takeMVar ready)

-- | A client connection with its unread input.
data Client = Client N.Socket (MVar ByteString)

withClient :: SockAddr -> (Client -> IO a) -> IO a
withClient addr act = bracket (connectClient addr) N.close $ \s -> do
  buf <- newMVar B.empty
  act (Client s buf)

sendRaw :: Client -> ByteString -> IO ()
sendRaw (Client s _) = NB.sendAll s

-- | Wait (up to 3 s) until INFO counts this many blocked clients.
waitBlocked :: Client -> Int -> IO ()
waitBlocked c n = within 3 ("INFO to count " ++ show n ++ " blocked clients") loop
  where
    loop = do
      info <- cmd c ["INFO"]
      case info of
        RBulk text | C.pack ("blocked_clients:" ++ show n ++ "\r\n") `B.isInfixOf` text -> return ()
        _ -> threadDelay 2000 >> loop

-- | No reply comes within 100 ms.
nothingYet :: Client -> IO ()
nothingYet c = GHC.timeout 100000 (replies c 1) >>= \r -> r `shouldBe` Nothing

-- | The next n replies (failing the test after 15 s, so that a loaded
-- machine's stalls do not count as a hung server).
replies :: Client -> Int -> IO [Reply]
replies (Client s buf) n = within 15 ("replies from the server") $ modifyMVar buf (go n [])
  where
    go 0 acc unread = return (unread, reverse acc)
    go k acc unread = case decodeReply unread of
      Left e -> fail ("undecodable reply: " ++ e)
      Right (Just (r, rest)) -> go (k - 1) (r : acc) rest
      Right Nothing -> do
        more <- NB.recv s 65536
        when (B.null more) $ fail ("connection closed with " ++ show k ++ " replies missing")
        go k acc (unread <> more)

-- | Send commands in one write and read their replies.
run :: Client -> [[ByteString]] -> IO [Reply]
run c cmds = sendRaw c (B.concat (map encodeCommand cmds)) >> replies c (length cmds)

-- | One command's reply.
cmd :: Client -> [ByteString] -> IO Reply
cmd c args = do
  got <- run c [args]
  case got of
    reply : _ -> return reply
    [] -> throwIO (userError "no reply")

-- | Everything the server still sends, until it closes.
untilClosed :: Client -> IO ByteString
untilClosed (Client s buf) = within 3 "the server to close the connection" $ do
  unread <- takeMVar buf
  let go acc = do
        more <- NB.recv s 65536
        if B.null more then return (B.concat (reverse acc)) else go (more : acc)
  go [unread]

bulk :: ByteString -> Reply
bulk = RBulk

ok :: Reply
ok = RSimple "OK"

wrongType :: Reply
wrongType = RError "WRONGTYPE Operation against a key holding the wrong kind of value"

-- | Start a real redis-server (persistence off) on a free loopback port
-- for the body; why not if there is no redis-server to run, or one of
-- another major version than the 7 weft-kv follows (redis 8 formats
-- doubles differently, for one).
withRedis :: (Either String SockAddr -> IO a) -> IO a
withRedis body = do
  exe <- findExecutable "redis-server"
  version <- maybe (return "") (\path -> (\(_, out, _) -> out) <$> readProcessWithExitCode path ["--version"] "") exe
  case exe of
    Nothing -> body (Left "no redis-server here (Debian package redis-server)")
    Just _ | not ("v=7." `B.isInfixOf` C.pack version) ->
      body (Left ("weft-kv follows redis 7; this redis-server is another: " ++ takeWhile (/= '\n') version))
    Just path -> do
      port <- bracket (N.socket N.AF_INET N.Stream N.defaultProtocol) N.close $ \s -> do
        N.bind s (SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
        N.socketPort s
      let addr = SockAddrInet port (N.tupleToHostAddress (127, 0, 0, 1))
          args = [ "--port", show port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"
                 , "--daemonize", "no", "--logfile", "", "--databases", "1" ]
      bracket (createProcess (proc path args) { std_out = NoStream, std_err = NoStream })
              (\(_, _, _, ph) -> terminateProcess ph >> void (waitForProcess ph)) $ \_ -> do
        let ready (0 :: Int) = fail "redis-server did not start"
            ready k = do
              r <- try (bracket (connectClient addr) N.close (\_ -> return ()))
              either (\(_ :: IOException) -> threadDelay 20000 >> ready (k - 1)) return r
        ready 250
        body (Right addr)

-- | Integers as clients send them: the 64-bit edges, one past them, 18
-- to 20 digits, leading zeros, signs, spaces, exponents.
integerEdges :: [ByteString]
integerEdges =
  [ "0", "-0", "01", "-01", "1", "-1", "+1", " 1", "1 ", "1e3", "", "-"
  , "123456789012345678", "-123456789012345678", "1234567890123456789", "-1234567890123456789"
  , "9223372036854775806", "9223372036854775807", "9223372036854775808"
  , "-9223372036854775807", "-9223372036854775808", "-9223372036854775809"
  , "18446744073709551615", "18446744073709551616", "99999999999999999999", "100000000000000000000" ]

-- | The same commands on weft-kv and redis-server; replies compared one
-- by one.
differential :: SockAddr -> SockAddr -> [[ByteString]] -> IO ()
differential kv redis cmds = withClient kv $ \a -> withClient redis $ \b ->
  mapM_ (pipelined a b . (: [])) cmds

-- | Generated cases, each from an empty store: up to @pipes@ pipelines
-- of up to @cmds@ commands, each sent with @send@ to weft-kv and redis
-- and compared. The failure's report, if any.
--
-- These run QuickCheck themselves, so hspec's @--seed@ does not reach
-- them: a failure names the seed and size of its case, and with
-- @WEFT_TEST_REPLAY@ set to them that case is the first one generated.
generatedPipelines :: Int -> Int -> Int -> (Client -> Client -> [[ByteString]] -> IO ()) -> Client -> Client -> IO (Maybe String)
generatedPipelines cases pipes cmds send a b = do
  let step = frequency [(15, (: []) <$> genCommand), (1, genTransaction)]
      pipelines = resize pipes (listOf1 (concat <$> resize cmds (listOf1 step)))
  replaying <- lookupEnv "WEFT_TEST_REPLAY"
  let replayed = replaying >>= readMaybe
  case (replaying, replayed) of
    (Just r, Nothing) -> fail ("WEFT_TEST_REPLAY=" ++ show r ++ " is not a seed and size a failure named")
    _ -> return ()
  result <- quickCheckWithResult stdArgs { maxSuccess = cases, chatty = False, replay = replayed } $
    forAll pipelines $ \ps -> ioProperty $ do
      pipelined a b [["FLUSHALL"]]
      mapM_ (send a b) ps
  return $ case result of
    Failure { usedSeed = failedSeed, usedSize = failedSize } ->
      Just (output result ++ "\nTo generate this case first: WEFT_TEST_REPLAY='" ++ show (failedSeed, failedSize) ++ "'")
    _ | isSuccess result -> Nothing
      | otherwise -> Just (output result)

-- | Send commands in one write to both servers, and compare the replies
-- one by one: byte for byte, but for the replies whose order redis leaves
-- unspecified (KEYS, HGETALL, and the members of sets), which are
-- compared as sets.
pipelined :: Client -> Client -> [[ByteString]] -> IO ()
pipelined = pipelinedWith sendRaw

-- | As 'pipelined', but weft-kv gets the pipeline one byte per send with
-- a pause after each, so that its commands are split across reads at
-- every byte boundary.
pipelinedBytewise :: Client -> Client -> [[ByteString]] -> IO ()
pipelinedBytewise = pipelinedWith $ \c bytes ->
  forM_ [0 .. B.length bytes - 1] $ \i -> sendRaw c (B.take 1 (B.drop i bytes)) >> threadDelay 50

pipelinedWith :: (Client -> ByteString -> IO ()) -> Client -> Client -> [[ByteString]] -> IO ()
pipelinedWith sendToKv a b cmds = do
  let sent who c = handle (\(e :: SomeException) -> fail (who ++ " on " ++ show cmds ++ ": " ++ show e)) c
  ras <- sent "weft-kv" (sendToKv a (B.concat (map encodeCommand cmds)) >> replies a (length cmds))
  rbs <- sent "redis-server" (run b cmds)
  forM_ (zip4 cmds (inOrder cmds) ras rbs) $ \(c, norm, ra, rb) -> (c, norm ra) `shouldBe` (c, norm rb)
  where
    -- How to compare each command's reply: an EXEC's as its queued
    -- commands' replies (a transaction opens and closes in one pipeline).
    inOrder = go Nothing
      where
        go _ [] = []
        go queued (c : rest) = case (map upper (take 1 c), queued) of
          (["MULTI"], Nothing) -> id : go (Just []) rest
          (["EXEC"], Just q) -> execReply (reverse q) : go Nothing rest
          (["DISCARD"], Just _) -> id : go Nothing rest
          ([name], Just q) | name `notElem` ["MULTI", "WATCH"] -> id : go (Just (c : q)) rest
          _ -> unordered c : go queued rest
        execReply q (RArray rs) | length rs == length q = RArray (zipWith unordered q rs)
        execReply _ r = r
    unordered (name : _) r = case (upper name, r) of
      ("KEYS", RArray xs) -> RArray (sortOn show xs)
      (set, RArray xs) | set `elem` ["SMEMBERS", "SINTER", "SUNION", "SDIFF"] -> RArray (sortOn show xs)
      ("HGETALL", RArray xs) -> RArray (concat (sortOn show (pairs xs)))
      _ -> r
    unordered [] r = r
    pairs (x : y : rest) = [x, y] : pairs rest
    pairs _ = []
    upper = C.map toUpper

------------------------------------------------------------------------------
-- Commands as clients send them, for the differential test

-- | A transaction: MULTI, a few commands, and EXEC or DISCARD; the
-- commands may include WATCH (refused inside MULTI), and commands that
-- are refused when queued (unknown, bad arity: EXEC then aborts).
genTransaction :: Gen [[ByteString]]
genTransaction = do
  body <- resize 5 (listOf genCommand)
  end <- frequency [(4, pure "EXEC"), (1, pure "DISCARD")]
  return ([["MULTI"]] ++ body ++ [[end]])

-- | A command on the few keys of a test, with arguments drawn from what
-- trips servers up: integers at the 64-bit edges, floats redis reads
-- and refuses, options in any case and in conflicting combinations,
-- wrong types, wrong arities. Left out, because redis's answers depend
-- on its clock or hash table: SPOP, PTTL, sub-second TTLs, ZRANGE BYLEX
-- over unequal scores (the fixed cases cover the rest).
genCommand :: Gen [ByteString]
genCommand = frequency
  [ (6, args [word "SET", key, value, setOptions])
  , (4, args [word "GET", key])
  , (1, args [word "MGET", keys])
  , (1, args [word "MSET", keyValues])
  , (1, args [word "SETNX", key, value])
  , (1, args [word "GETSET", key, value])
  , (1, args [word "APPEND", key, value])
  , (1, args [word "STRLEN", key])
  , (1, args [elements' ["SETEX", "PSETEX"], key, expireTime, value])
  , (1, args [word "GETDEL", key])
  , (1, args [word "GETEX", key, oneof [pure [], (: []) <$> caseOf "PERSIST", setOptions]])
  , (1, args [word "GETRANGE", key, index, index])
    -- Offsets that stay far below the 512 MiB limit, or pass it (an
    -- error): no server builds a string of half a gigabyte.
  , (1, args [word "SETRANGE", key, (: []) <$> elements ["0", "1", "3", "20", "-1", "x", "536870912", "9223372036854775807"], value])
  , (1, args [word "GETBIT", key, bitOffset])
  , (1, args [word "SETBIT", key, bitOffset, (: []) <$> elements ["0", "1", "2", "-1", "x", ""]])
  , (2, args [elements' ["INCR", "DECR"], key])
  , (2, args [elements' ["INCRBY", "DECRBY"], key, integer])
  , (2, args [word "INCRBYFLOAT", key, value])
  , (1, args [word "HINCRBYFLOAT", key, field, value])
  , (2, args [elements' ["DEL", "EXISTS"], keys])
  , (2, args [elements' ["EXPIRE", "PEXPIRE"], key, expireTime, expireOptions])
  , (1, args [elements' ["EXPIREAT", "PEXPIREAT"], key, pastTime, expireOptions])
  , (2, args [elements' ["TTL", "PERSIST", "TYPE"], key])
  , (3, args [elements' ["LPUSH", "RPUSH"], key, values])
  , (2, args [elements' ["LPOP", "RPOP"], key, optional count])
  , (2, args [word "LRANGE", key, index, index])
  , (1, args [word "LLEN", key])
  , (1, args [elements' ["LPUSHX", "RPUSHX"], key, values])
  , (1, args [word "LINDEX", key, index])
  , (1, args [word "LSET", key, index, value])
  , (1, args [word "LTRIM", key, index, index])
  , (1, args [word "LREM", key, index, value])
  , (1, args [word "LINSERT", key, elements' ["BEFORE", "AFTER", "MIDDLE"], value, value])
  , (1, args [word "LPOS", key, value, lposOptions])
  , (2, args [word "LMOVE", key, key, ends, ends])
  , (1, args [word "RPOPLPUSH", key, key])
  , (1, args [word "LMPOP", count, keys, ends, optional (sequence [caseOf "COUNT", countText])])
  , (3, args [word "SADD", key, values])
  , (1, args [word "SREM", key, values])
  , (2, args [elements' ["SCARD", "SMEMBERS"], key])
  , (1, args [word "SISMEMBER", key, value])
  , (1, args [word "SMISMEMBER", key, values])
  , (3, args [elements' ["SINTER", "SUNION", "SDIFF"], keys])
  , (2, args [elements' ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"], key, keys])
  , (1, args [word "SINTERCARD", count, keys, optional (sequence [caseOf "LIMIT", countText])])
  , (2, args [word "SMOVE", key, key, value])
  , (3, args [word "HSET", key, fieldValues])
  , (1, args [word "HGET", key, field])
  , (1, args [word "HDEL", key, fields])
  , (1, args [word "HMSET", key, fieldValues])
  , (1, args [word "HSETNX", key, field, value])
  , (1, args [word "HMGET", key, fields])
  , (1, args [elements' ["HEXISTS", "HSTRLEN"], key, field])
  , (1, args [word "HINCRBY", key, field, integer])
  , (2, args [elements' ["HLEN", "HGETALL"], key])
  , (4, args [word "ZADD", key, zaddOptions, scoreMembers])
  , (1, args [elements' ["ZPOPMIN", "ZPOPMAX"], key, optional count])
  , (1, args [word "ZREM", key, fields])
  , (1, args [word "ZINCRBY", key, (: []) <$> scoreText, member])
  , (1, args [word "ZMSCORE", key, fields])
  , (2, args [elements' ["ZRANK", "ZREVRANK"], key, member])
  , (1, args [word "ZCOUNT", key, scoreBound, scoreBound])
  , (1, args [word "ZLEXCOUNT", key, lexBound, lexBound])
  , (1, args [word "ZREMRANGEBYSCORE", key, scoreBound, scoreBound])
  , (1, args [word "ZREMRANGEBYLEX", key, lexBound, lexBound])
  , (1, args [word "ZREMRANGEBYRANK", key, index, index])
  , (1, args [word "ZREVRANGE", key, index, index, zrangeOptions])
  , (1, args [elements' ["ZRANGEBYSCORE", "ZREVRANGEBYSCORE"], key, scoreBound, scoreBound, zrangeOptions])
  , (1, args [elements' ["ZRANGEBYLEX", "ZREVRANGEBYLEX"], key, lexBound, lexBound, zrangeOptions])
  , (1, args [word "ZCARD", key])
  , (2, args [word "ZSCORE", key, member])
  , (3, args [word "ZRANGE", key, index, index, zrangeOptions])
  , (2, args [word "ZRANGE", key, scoreBound, scoreBound, word "BYSCORE", zrangeOptions])
  , (2, args [elements' ["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"], key, counted, combineOptions])
  , (2, args [elements' ["ZUNION", "ZINTER", "ZDIFF"], counted, combineOptions])
  , (1, args [word "ZINTERCARD", counted, optional (sequence [caseOf "LIMIT", countText])])
  , (1, args [word "ZRANGESTORE", key, key, index, index, zrangeOptions])
  , (1, args [word "ZRANGESTORE", key, key, scoreBound, scoreBound, word "BYSCORE", zrangeOptions])
  , (1, args [word "ZMPOP", counted, ends', optional (sequence [caseOf "COUNT", countText])])
    -- Only the counts whose answer is not random: none, all, or an error.
  , (1, args [word "ZRANDMEMBER", key, (: []) <$> elements ["0", "x", "-9223372036854775808", "9223372036854775807", "100", "4611686018427387904"]
             , optional (elements' ["WITHSCORES", "FOO"])])
  , (1, args [word "HRANDFIELD", key, (: []) <$> elements ["0", "x", "-9223372036854775808"], optional (elements' ["WITHVALUES", "FOO"])])
  , (1, args [elements' ["RENAME", "RENAMENX"], key, key])
  , (1, args [word "COPY", key, key, optional (word "REPLACE"), optional (sequence [caseOf "DB", elements ["0", "1", "x"]])])
  , (1, args [word "DBSIZE"])
  , (1, args [word "KEYS", pattern])
  , (1, args [word "SELECT", integer])
  , (1, args [elements' ["PING", "ECHO", "FOO", "GET", "ZADD", "SET"]])
  , (1, args [word "WATCH", keys])
  , (1, args [word "UNWATCH"])
  ]
  where
    args gs = concat <$> sequence gs
    word w = (: []) <$> caseOf w
    elements' ws = elements ws >>= word
    optional g = oneof [pure [], g]
    several g = resize 4 (listOf1 g)
    key = (: []) <$> keyName
    keyName = elements ["k0", "k1", "k2", "k3", "", "a b", "k*"]
    keys = several keyName
    member = (: []) <$> memberName
    memberName = elements ["a", "b", "c", "", "m1"]
    field = member
    fields = several memberName
    value = (: []) <$> valueText
    values = several valueText
    valueText = oneof [elements integerEdges, elements floats, elements ["", "v", "hello world", "k1"]]
    keyValues = concat <$> several (sequence [keyName, valueText])
    fieldValues = concat <$> several (sequence [memberName, valueText])
    scoreMembers = concat <$> several (sequence [scoreText, memberName])
    scoreText = frequency [(3, C.pack . show <$> (choose (-5, 5) :: Gen Int)), (2, elements floats), (1, elements integerEdges)]
    integer = (: []) <$> frequency [(3, elements integerEdges), (2, C.pack . show <$> (choose (-10, 10) :: Gen Int))]
    index = (: []) <$> indexText
    indexText = frequency [(4, C.pack . show <$> (choose (-6, 6) :: Gen Int)), (1, elements integerEdges)]
    count = (: []) <$> countText
    bitOffset = (: []) <$> elements ["0", "7", "8", "13", "100", "-1", "x", "4294967296", "18446744073709551616"]
    countText = frequency [(4, C.pack . show <$> (choose (0, 5) :: Gen Int)), (1, elements integerEdges)]
    -- Far enough from now that no answer depends on the milliseconds a
    -- command takes: whole seconds of 1000 or more, or none at all.
    expireTime = (: []) <$> frequency
      [ (3, C.pack . show . (* 1000) <$> (choose (1000, 1000000000) :: Gen Int))
      , (2, elements ["0", "-1", "-5"]), (1, elements (filter (/= "1") integerEdges)) ]
    pastTime = (: []) <$> elements ["0", "1", "-1", "1000", "x", "9223372036854775808", "9223372036854776"]
    setOptions = concat <$> resize 3 (listOf (oneof
      [ word "NX", word "XX", word "GET", word "KEEPTTL"
      , sequence [caseOf "EX", C.pack . show <$> (choose (1000, 1000000) :: Gen Int)]
      , sequence [caseOf "PX", C.pack . show . (* 1000) <$> (choose (1000, 1000000) :: Gen Int)]
      -- Refused times only: a valid absolute time is either past (and
      -- redis's DBSIZE counts such a key until its expiry cycle samples
      -- it) or a TTL whose rounding depends on the clock's milliseconds.
      , sequence [elements ["EX", "PX"], elements ["0", "-1", "x", "9223372036854775807"]]
      , sequence [elements ["EXAT", "PXAT"], elements ["0", "-1", "x"]]
      , sequence [caseOf "EX", pure "9223372036854776"]
      , sequence [caseOf "EX"] ]))
    ends = (: []) <$> elements ["LEFT", "RIGHT", "left", "Right", "UP"]
    ends' = (: []) <$> elements ["MIN", "MAX", "min", "Max", "LEFT"]
    -- numkeys and the keys: mostly as many as it says.
    counted = do
      ks <- several keyName
      n <- frequency [(5, pure (length ks)), (1, choose (-1, 5))]
      return (C.pack (show n) : ks)
    combineOptions = concat <$> resize 3 (listOf (oneof
      [ (:) <$> caseOf "WEIGHTS" <*> resize 4 (listOf1 scoreText)
      , sequence [caseOf "AGGREGATE", elements ["SUM", "MIN", "MAX", "max", "AVG"]]
      , word "WITHSCORES" ]))
    lposOptions = concat <$> resize 3 (listOf (oneof
      [ sequence [caseOf "RANK", indexText], sequence [caseOf "COUNT", countText]
      , sequence [caseOf "MAXLEN", countText], word "RANK" ]))
    expireOptions = resize 2 (listOf (elements ["NX", "XX", "GT", "LT", "gt", "FOO"]))
    zaddOptions = resize 3 (listOf (elements ["NX", "XX", "GT", "LT", "CH", "INCR", "ch", "incr"]))
    zrangeOptions = concat <$> resize 3 (listOf (oneof
      [ word "WITHSCORES", word "REV", sequence [caseOf "LIMIT", C.pack . show <$> (choose (-1, 3) :: Gen Int), C.pack . show <$> (choose (-1, 3) :: Gen Int)] ]))
    scoreBound = (: []) <$> oneof [elements ["-inf", "+inf", "(1", "(-1", "2.5", "(2.5", "", "x", "(", "1e400"], C.pack . show <$> (choose (-5, 5) :: Gen Int)]
    lexBound = (: []) <$> elements ["-", "+", "[a", "(b", "[", "(", "a", "[m1", "(c"]
    pattern = (: []) <$> elements ["*", "k*", "k?", "[k]*", "*[0-1]", "[^k]*", "?", "*k*", "\\k*", "[a-z]?", ""]
    floats = [ "1.5", "-2.25", "0.1", "1e3", "inf", "-inf", "+inf", "nan", "1e400", "-1e400", " 1", "1 ", "0x10", "-0"
             , "1e-320", "2.5e-5", ".5", "5.", "1e17", "123456789.123456789", "0.3", "1e-400", "infinity", "1,5" ]

-- | The word in a random mix of cases (commands and options are
-- case-insensitive).
caseOf :: ByteString -> Gen ByteString
caseOf w = B.pack <$> mapM (\c -> elements [c, toLowerW c]) (B.unpack w)
  where toLowerW c = if c >= 65 && c <= 90 then c + 32 else c

serverSpec :: Spec
serverSpec = do
 it "answers integer commands at the 64-bit edges exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> do
      let key i = C.pack ("int:" ++ show (i :: Int))
          perValue i v =
            [ ["SET", key i, v], ["GET", key i], ["INCR", key i], ["GET", key i]
            , ["SET", key i, v], ["DECR", key i], ["GET", key i]
            , ["SET", key i, "5"], ["INCRBY", key i, v], ["DECRBY", key i, v]
            , ["SET", key i, v], ["INCRBY", key i, "1"], ["DECRBY", key i, "1"], ["INCRBY", key i, "-9223372036854775808"]
            , ["LRANGE", "list", v, v], ["LRANGE", "list", "0", v] ]
      differential kv redis (["RPUSH", "list", "a", "b", "c"] : concat (zipWith perValue [0 ..] integerEdges))
 it "answers MGET across types and unknown commands exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis
      [ ["SET", "m:s", "v"], ["RPUSH", "m:l", "x"], ["SADD", "m:t", "y"]
      , ["MGET", "m:s", "m:l", "m:missing", "m:t", "m:s"]
      , ["FOO"], ["FOO", "a", "b"], ["foo", "a b", "c\r\nd"]
      , ["NOSUCH", B.replicate 100 120, B.replicate 100 121, "z"]
      , [B.replicate 200 110, "x"] ]
 it "answers MULTI, EXEC, DISCARD, WATCH and UNWATCH exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis
      [ ["EXEC"], ["DISCARD"], ["UNWATCH"], ["MULTI", "x"], ["EXEC", "x"], ["WATCH"]
      , ["MULTI"], ["SET", "t:a", "1"], ["INCR", "t:a"], ["LPUSH", "t:a", "x"], ["GET", "t:a"], ["MULTI"], ["WATCH", "t:a"]
      , ["BLPOP", "t:none", "0"], ["BLMOVE", "t:none", "t:d", "LEFT", "LEFT", "0"], ["BZPOPMIN", "t:none", "0"]
      , ["MGET", "t:a", "t:b"], ["DBSIZE"], ["KEYS", "t:*"], ["UNWATCH"], ["PING"], ["EXEC"]
      , ["MULTI"], ["SET", "t:b", "1"], ["NOSUCH", "x"], ["GET"], ["SET", "t:c", "1"], ["EXEC"], ["EXISTS", "t:b", "t:c"]
      , ["MULTI"], ["SET", "t:b", "1"], ["DISCARD"], ["EXISTS", "t:b"], ["EXEC"]
      , ["MULTI"], ["EXEC"]
      , ["WATCH", "t:a", "t:w"], ["SET", "t:a", "2"], ["MULTI"], ["SET", "t:b", "1"], ["EXEC"], ["EXISTS", "t:b"]
      , ["WATCH", "t:w"], ["MULTI"], ["SET", "t:b", "2"], ["EXEC"], ["GET", "t:b"]
      , ["WATCH", "t:a"], ["UNWATCH"], ["SET", "t:a", "3"], ["MULTI"], ["GET", "t:a"], ["EXEC"]
      , ["WATCH", "t:a"], ["SET", "t:a", "4"], ["MULTI"], ["DISCARD"], ["MULTI"], ["GET", "t:a"], ["EXEC"]
      , ["WATCH", "t:a"], ["EXPIRE", "t:a", "100"], ["MULTI"], ["PING"], ["EXEC"]
      , ["WATCH", "t:a", "t:none"], ["FLUSHALL"], ["MULTI"], ["PING"], ["EXEC"]
      , ["WATCH", "t:none"], ["FLUSHALL"], ["MULTI"], ["PING"], ["EXEC"]
      , ["MULTI"], ["SET", "t:a", "1"], ["FLUSHDB"], ["SET", "t:b", "2"], ["DBSIZE"], ["EXEC"]
      , ["MULTI"], ["MULTI", "x"], ["SET", "t:z", "1"], ["EXEC"], ["EXISTS", "t:z"]
      , ["MULTI"], ["SET", "t:z", "1"], ["EXEC", "x"], ["EXEC"], ["EXISTS", "t:z"] ]
 it "counts a WATCHed key as changed by exactly the commands redis-server counts" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> do
      -- Each command on a key of each type (or none), between WATCH and
      -- EXEC: EXEC runs, or answers a null array, as redis's does.
      let setups =
            [ [["SET", "k", "abc"]]
            , [["SET", "k", "abc", "EX", "1000"]]
            , [["RPUSH", "k", "a", "b", "c"]]
            , [["SADD", "k", "a", "b"]]
            , [["HSET", "k", "f", "1"]]
            , [["ZADD", "k", "1", "a", "2", "b"]]
            , [] ]
          commands =
            [ ["SETRANGE", "k", "0", ""], ["SETRANGE", "k", "1", "x"], ["APPEND", "k", ""], ["PERSIST", "k"]
            , ["EXPIRE", "k", "1000"], ["EXPIRE", "k", "1000", "NX"], ["EXPIRE", "k", "1000", "XX"]
            , ["EXPIRE", "k", "2000", "GT"], ["EXPIRE", "k", "10", "LT"], ["EXPIRE", "k", "0"]
            , ["PEXPIRE", "k", "-1"], ["GETEX", "k"], ["GETEX", "k", "PERSIST"], ["SETNX", "k", "v"]
            , ["SET", "k", "v", "NX"], ["SET", "k", "v", "XX"], ["SET", "k", "abc"], ["GETSET", "k", "abc"]
            , ["GETDEL", "k"], ["DEL", "k"], ["RENAME", "k", "k"], ["RENAMENX", "k", "k"], ["RENAME", "k", "k2"]
            , ["COPY", "k", "k"], ["COPY", "k2", "k"], ["COPY", "k", "k2"], ["SMOVE", "k", "k", "a"]
            , ["SMOVE", "k", "k", "zz"], ["SMOVE", "k2", "k", "a"], ["SMOVE", "k", "k2", "zz"]
            , ["LMOVE", "k", "k", "LEFT", "RIGHT"], ["LMOVE", "k", "k", "LEFT", "LEFT"], ["RPOPLPUSH", "k", "k"]
            , ["LSET", "k", "0", "a"], ["LTRIM", "k", "0", "-1"], ["LTRIM", "k", "5", "9"]
            , ["LINSERT", "k", "BEFORE", "zz", "x"], ["LINSERT", "k", "BEFORE", "a", "x"]
            , ["LREM", "k", "0", "zz"], ["LPUSHX", "k", "x"], ["RPUSHX", "k2", "x"], ["LPOP", "k", "0"]
            , ["RPOP", "k2"], ["LMPOP", "1", "k", "LEFT", "COUNT", "1"], ["SADD", "k", "a"], ["SREM", "k", "zz"]
            , ["SPOP", "k", "0"], ["SINTERSTORE", "k", "nokey"], ["SUNIONSTORE", "k", "k"]
            , ["SDIFFSTORE", "k", "k", "k"], ["SINTERSTORE", "k2", "k"], ["HSET", "k", "f", "1"]
            , ["HSETNX", "k", "f", "2"], ["HDEL", "k", "zz"], ["HINCRBY", "k", "f", "0"]
            , ["HINCRBYFLOAT", "k", "f", "0"], ["ZADD", "k", "1", "a"], ["ZADD", "k", "NX", "5", "a"]
            , ["ZADD", "k", "XX", "1", "zz"], ["ZADD", "k", "GT", "0", "b"], ["ZINCRBY", "k", "0", "a"]
            , ["ZREM", "k", "zz"], ["ZPOPMIN", "k", "0"], ["ZREMRANGEBYSCORE", "k", "10", "20"]
            , ["ZREMRANGEBYRANK", "k", "5", "9"], ["ZREMRANGEBYLEX", "k", "[x", "[z"]
            , ["ZUNIONSTORE", "k", "1", "nokey"], ["ZUNIONSTORE", "k", "1", "k"]
            , ["ZRANGESTORE", "k", "k", "5", "9"], ["ZRANGESTORE", "k2", "k", "0", "-1"]
            , ["ZMPOP", "1", "k", "MIN", "COUNT", "1"], ["INCRBY", "k", "0"], ["INCRBYFLOAT", "k", "0"]
            , ["SETBIT", "k", "0", "0"], ["SETBIT", "k", "100", "0"], ["MSET", "k", "abc"], ["MSETNX", "k", "x"]
            , ["MSETNX", "k3", "x"], ["BLPOP", "k", "0.01"], ["LLEN", "k"], ["TYPE", "k"], ["EXISTS", "k"] ]
      forM_ setups $ \setup -> forM_ commands $ \command ->
        differential kv redis ([["FLUSHALL"]] ++ setup ++ [["WATCH", "k", "k2"], command, ["MULTI"], ["PING"], ["EXEC"], ["UNWATCH"]])
 it "moves a list onto itself as redis-server does, keeping the key's expiry when it holds one element" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis $
      [ ["RPUSH", "r:l", "x"], ["EXPIRE", "r:l", "1000"] ]
      ++ concat [ [move, ["TTL", "r:l"], ["LRANGE", "r:l", "0", "-1"]]
                | move <- [ ["LMOVE", "r:l", "r:l", "LEFT", "RIGHT"], ["RPOPLPUSH", "r:l", "r:l"]
                          , ["BLMOVE", "r:l", "r:l", "RIGHT", "LEFT", "0"], ["BRPOPLPUSH", "r:l", "r:l", "0"] ] ]
      ++ [ ["MULTI"], ["LMOVE", "r:l", "r:l", "LEFT", "LEFT"], ["RPOPLPUSH", "r:l", "r:l"], ["EXEC"], ["TTL", "r:l"]
         , ["RPUSH", "r:l", "y", "z"] ]
      ++ concat [ [["LMOVE", "r:l", "r:l", a, b], ["LRANGE", "r:l", "0", "-1"]] | a <- ["LEFT", "RIGHT"], b <- ["LEFT", "RIGHT"] ]
      ++ [ ["TTL", "r:l"], ["LMOVE", "r:none", "r:none", "LEFT", "LEFT"], ["SET", "r:s", "v"], ["RPOPLPUSH", "r:s", "r:s"] ]
 it "answers SETNX, GETSET, APPEND, STRLEN, PERSIST, SREM and HDEL exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis
      [ ["SETNX", "c:a", "1"], ["SETNX", "c:a", "2"], ["GET", "c:a"]
      , ["GETSET", "c:a", "3"], ["GETSET", "c:new", "x"], ["GET", "c:new"]
      , ["APPEND", "c:b", "hello"], ["APPEND", "c:b", " world"], ["GET", "c:b"], ["STRLEN", "c:b"], ["STRLEN", "c:none"]
      , ["SET", "c:t", "v", "EX", "100"], ["PERSIST", "c:t"], ["TTL", "c:t"], ["PERSIST", "c:t"], ["PERSIST", "c:none"]
      , ["SET", "c:g", "v", "EX", "100"], ["GETSET", "c:g", "w"], ["TTL", "c:g"]
      , ["SADD", "c:s", "a", "b", "c"], ["SREM", "c:s", "a", "z", "b"], ["SCARD", "c:s"], ["SREM", "c:s", "c"], ["EXISTS", "c:s"]
      , ["HSET", "c:h", "f", "1", "g", "2"], ["HDEL", "c:h", "f", "x"], ["HLEN", "c:h"], ["HDEL", "c:h", "g"], ["EXISTS", "c:h"]
      , ["RPUSH", "c:l", "x"], ["SETNX", "c:l", "v"], ["GETSET", "c:l", "v"], ["APPEND", "c:l", "v"], ["STRLEN", "c:l"]
      , ["SREM", "c:l", "x"], ["HDEL", "c:l", "x"], ["SREM", "c:none", "x"], ["HDEL", "c:none", "x"] ]
 it "answers ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD, ZRANGESTORE and ZMPOP exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> do
      -- Sorted sets and a set sharing members, with scores whose weighted
      -- sums and products reach infinities of both signs and NaN.
      let setup = [ ["FLUSHALL"], ["ZADD", "z:a", "1", "x", "2", "y", "3", "z", "0.1", "w"]
                  , ["ZADD", "z:b", "10", "x", "0.2", "w", "5", "q", "-inf", "z"], ["SADD", "z:s", "x", "q", "r"]
                  , ["ZADD", "z:c", "0.3", "w", "+inf", "y", "-2", "x"], ["SET", "z:str", "v"] ]
          keySets = [["z:a", "z:b"], ["z:a", "z:b", "z:s", "z:c"], ["z:c", "z:s"], ["z:b", "z:none", "z:a"], ["z:a", "z:a"]]
          counted ks = B.pack (map (fromIntegral . fromEnum) (show (length ks))) : ks
          weightsFor ks = [ [] , "WEIGHTS" : take (length ks) (cycle ["2", "0.5", "inf", "-1", "0"]) ]
          combos = [ [name] ++ counted ks ++ w ++ agg ++ ["WITHSCORES"]
                   | name <- ["ZUNION", "ZINTER"], ks <- keySets, w <- weightsFor ks
                   , agg <- [[], ["AGGREGATE", "MIN"], ["AGGREGATE", "MAX"], ["AGGREGATE", "SUM"]] ]
          stores = concat [ [[name, "z:d"] ++ counted ks, ["ZRANGE", "z:d", "0", "-1", "WITHSCORES"], ["EXISTS", "z:d"]]
                          | name <- ["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"], ks <- keySets ]
          others =
            [ ["ZDIFF", "3", "z:a", "z:b", "z:s", "WITHSCORES"], ["ZDIFF", "2", "z:a", "z:a"], ["ZDIFF", "2", "z:a", "z:b", "WEIGHTS", "1", "2"]
            , ["ZINTERCARD", "2", "z:a", "z:b"], ["ZINTERCARD", "2", "z:a", "z:b", "LIMIT", "1"], ["ZINTERCARD", "1", "z:a", "LIMIT", "-1"]
            , ["ZUNION", "2", "z:a", "z:str"], ["ZUNION", "2", "z:a", "z:str", "WEIGHTS", "x"], ["ZUNION", "2", "z:a", "z:b", "WEIGHTS", "1", "nan"]
            , ["ZUNION", "0", "z:a"], ["ZUNION", "3", "z:a"], ["ZUNIONSTORE", "z:d", "2", "z:a", "z:b", "WITHSCORES"]
            , ["ZRANGESTORE", "z:e", "z:a", "(0.1", "+inf", "BYSCORE", "REV", "LIMIT", "1", "2"], ["ZRANGE", "z:e", "0", "-1", "WITHSCORES"]
            , ["ZRANGESTORE", "z:e", "z:a", "[a", "[x", "BYLEX"], ["ZRANGESTORE", "z:e", "z:none", "0", "-1"], ["EXISTS", "z:e"]
            , ["ZRANGESTORE", "z:e", "z:a", "0", "-1", "WITHSCORES"], ["ZRANGESTORE", "z:e", "z:str", "0", "-1"]
            , ["ZMPOP", "3", "z:none", "z:a", "z:b", "MAX", "COUNT", "2"], ["ZMPOP", "2", "z:none", "z:s", "MIN"]
            , ["ZMPOP", "1", "z:none", "MIN"], ["ZMPOP", "2", "z:str", "z:a", "MIN"], ["ZMPOP", "1", "z:a", "MIN", "COUNT", "0"]
            , ["ZMPOP", "0", "z:a", "MIN"], ["ZMPOP", "1", "z:a", "LEFT"], ["ZMPOP", "1", "z:a", "MIN", "COUNT", "1", "COUNT", "2"]
            , ["ZRANDMEMBER", "z:b", "10", "WITHSCORES"], ["ZRANDMEMBER", "z:b", "0"], ["ZRANDMEMBER", "z:str", "1"]
            , ["ZRANDMEMBER", "z:b", "-9223372036854775808"], ["ZRANDMEMBER", "z:b", "4611686018427387904", "WITHSCORES"] ]
      differential kv redis (setup ++ combos ++ stores ++ setup ++ others)
 it "answers RENAME, RENAMENX and COPY of every type, with expiry, exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> do
      let fill k = [ ["DEL", k <> ":s", k <> ":l", k <> ":t", k <> ":h", k <> ":z"]
                   , ["SET", k <> ":s", "v"], ["RPUSH", k <> ":l", "a", "b", "a"], ["SADD", k <> ":t", "x", "y"]
                   , ["HSET", k <> ":h", "f", "1", "g", "2"], ["ZADD", k <> ":z", "0.1", "m", "-inf", "n", "2", "o"]
                   , ["EXPIRE", k <> ":l", "5000"] ]
          shown k = [ ["GET", k <> ":s"], ["LRANGE", k <> ":l", "0", "-1"], ["SMEMBERS", k <> ":t"]
                    , ["HGETALL", k <> ":h"], ["ZRANGE", k <> ":z", "0", "-1", "WITHSCORES"]
                    , ["TTL", k <> ":l"], ["TTL", k <> ":s"], ["TYPE", k <> ":z"] ]
          suffixes = [":s", ":l", ":t", ":h", ":z"]
      differential kv redis $ concat
        [ fill "a", fill "b"
        , [ ["RENAME", "a" <> x, "c" <> x] | x <- suffixes ], shown "a", shown "c"
        , [ ["RENAME", "c" <> x, "b" <> x] | x <- take 2 suffixes ], shown "b"
        , [ ["RENAMENX", "c" <> x, "b" <> x] | x <- suffixes ], shown "b", shown "c"
        , [ ["COPY", "b" <> x, "d" <> x] | x <- suffixes ], shown "d"
        , [ ["RPUSH", "b:l", "z"], ["SADD", "b:t", "w"], ["HSET", "b:h", "f", "9"], ["ZADD", "b:z", "5", "m"], ["APPEND", "b:s", "w"] ]
        , shown "d"
        , [ ["COPY", "b" <> x, "d" <> x] | x <- suffixes ], [ ["COPY", "b" <> x, "d" <> x, "REPLACE"] | x <- suffixes ], shown "d"
        , [ ["RENAME", "none", "e"], ["RENAMENX", "none", "e"], ["RENAME", "b:s", "b:s"], ["RENAMENX", "b:s", "b:s"], ["RENAME", "none", "none"]
          , ["COPY", "none", "e"], ["COPY", "b:s", "b:s"], ["COPY", "b:s", "e", "DB", "1"], ["COPY", "b:s", "e", "DB", "x"]
          , ["COPY", "b:s", "e", "DB", "0", "REPLACE"], ["COPY", "b:s", "e", "FOO"], ["GET", "e"], ["DBSIZE"] ] ]
 it "answers INCRBYFLOAT and HINCRBYFLOAT exactly as redis-server does, in C's long double" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis $ concat
      [ [ ["SET", "f:a", start], ["INCRBYFLOAT", "f:a", incr], ["GET", "f:a"]
        , ["HSET", "f:h", "f", start], ["HINCRBYFLOAT", "f:h", "f", incr], ["HGET", "f:h", "f"] ]
      | (start, incr) <-
          [ ("10.5", "0.1"), ("0", "-0"), ("-0.5", "0.5"), ("1", "-1.5"), ("5.0e3", "2.0e2"), ("17179869184", "1.5")
          , ("0.1", "0.2"), ("1e300", "1e300"), ("1.7976931348623157e308", "1.7976931348623157e308"), ("3", "inf")
          , ("3", "nan"), ("3", " 1"), ("3", "1 "), (" 3", "1"), ("3\0x", "1"), ("1e-5", "1e-20"), ("abc", "1"), ("0x10", "1")
          , ("1", "-inf"), ("123456789012345678901234567890", "1"), ("0", "-1e-20"), ("", "1") ] ]
      ++ [ ["DEL", "f:n"], ["INCRBYFLOAT", "f:n", "2.5"], ["HINCRBYFLOAT", "f:m", "g", "-3"], ["HGETALL", "f:m"]
         , ["RPUSH", "f:l", "x"], ["INCRBYFLOAT", "f:l", "1"], ["HINCRBYFLOAT", "f:l", "g", "1"], ["HINCRBYFLOAT", "f:l", "g", "x"]
         , ["SET", "f:t", "1", "EX", "5000"], ["INCRBYFLOAT", "f:t", "1"], ["TTL", "f:t"] ]
 it "answers GETRANGE, SETRANGE, GETBIT, SETBIT and APPEND at the size limit exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis
      [ ["SETRANGE", "b:a", "0", ""], ["EXISTS", "b:a"], ["SETRANGE", "b:a", "5", "xy"], ["GET", "b:a"], ["STRLEN", "b:a"]
      , ["SETRANGE", "b:a", "1", "hello world"], ["GET", "b:a"], ["SETRANGE", "b:a", "3", ""], ["SETRANGE", "b:a", "-1", "x"]
      , ["SETRANGE", "b:a", "x", "y"], ["SETRANGE", "b:a", "536870908", "world"], ["SETRANGE", "b:a", "9223372036854775807", "A"]
      , ["SET", "b:i", "1234"], ["SETRANGE", "b:i", "2", "9"], ["GET", "b:i"], ["INCR", "b:i"]
      , ["GETBIT", "b:none", "0"], ["SETBIT", "b:none", "20", "0"], ["GET", "b:none"], ["STRLEN", "b:none"]
      , ["SETBIT", "b:bits", "1", "1"], ["SETBIT", "b:bits", "7", "1"], ["GET", "b:bits"], ["SETBIT", "b:bits", "1", "0"]
      , ["GETBIT", "b:bits", "7"], ["GETBIT", "b:bits", "6"], ["GETBIT", "b:bits", "800"], ["GETRANGE", "b:bits", "0", "-1"]
      , ["SETBIT", "b:bits", "-1", "1"], ["SETBIT", "b:bits", "4294967296", "1"], ["SETBIT", "b:bits", "0", "2"], ["SETBIT", "b:bits", "0", "x"]
      , ["GETBIT", "b:bits", "x"], ["GETBIT", "b:i", "2"], ["SETBIT", "b:i", "0", "1"], ["GET", "b:i"]
      , ["RPUSH", "b:l", "x"], ["SETRANGE", "b:l", "0", "x"], ["SETRANGE", "b:l", "0", ""], ["GETBIT", "b:l", "0"], ["SETBIT", "b:l", "0", "1"]
      , ["GETRANGE", "b:a", "-3", "-1"], ["GETRANGE", "b:a", "5", "2"], ["GETRANGE", "b:none2", "0", "-1"]
        -- A string of exactly 512 MiB takes no more.
      , ["SETRANGE", "b:big", "536870911", "x"], ["APPEND", "b:big", "yz"], ["APPEND", "b:big", ""], ["STRLEN", "b:big"], ["DEL", "b:big"] ]
 it "answers SRANDMEMBER, ZRANDMEMBER and HRANDFIELD where their answer is not random exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> differential kv redis $
      -- One item in each: every count's answer is fixed.
      [ ["SADD", "r:s", "a"], ["ZADD", "r:z", "1.5", "a"], ["HSET", "r:h", "f", "1"], ["SET", "r:str", "v"] ]
      ++ concat
      [ [ [name, k], [name, k, n], [name, k, n, "FOO"], [name, k, n, opt, "FOO"] ]
        ++ [ [name, k, n', opt] | n' <- n : ["4611686018427387904", "-4611686018427387904", "9223372036854775807"] ]
      | (name, opt) <- [("SRANDMEMBER", "WITHSCORES"), ("ZRANDMEMBER", "WITHSCORES"), ("HRANDFIELD", "WITHVALUES")]
      , k <- ["r:s", "r:z", "r:h", "r:str", "r:none"]
      , n <- ["0", "1", "-1", "-3", "5", "x", "-9223372036854775808"] ]
 it "answers LCS, EXPIRETIME and PEXPIRETIME exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> do
      -- Strings over four letters, so that they share long runs and many
      -- subsequences tie: the one redis picks must be the one returned.
      let lcg x = (x * 6364136223846793005 + 1442695040888963407) :: Word64
          strings = take 24 (go (7 :: Word64))
          go x = let len = fromIntegral (x `div` 7 `mod` 41)
                     xs = take len (drop 1 (iterate lcg x))
                 in B.pack [ B.index "ACGT" (fromIntegral (y `div` 9973 `mod` 4)) | y <- xs ] : go (lcg (lcg x))
          pairs = zip strings (drop 1 strings)
          optionSets = [[], ["LEN"], ["IDX"], ["IDX", "WITHMATCHLEN"], ["idx", "minmatchlen", "2", "withmatchlen"], ["IDX", "MINMATCHLEN", "-5"]]
          lcsCases = concat
            [ [["SET", "l:a", a], ["SET", "l:b", b]] ++ [ "LCS" : "l:a" : "l:b" : o | o <- optionSets ] ++ [["LCS", "l:b", "l:a", "IDX"]]
            | (a, b) <- pairs ]
      differential kv redis $
        [ ["FLUSHALL"], ["RPUSH", "l:list", "x"] ] ++ lcsCases ++
        [ ["LCS", "l:a", "l:none"], ["LCS", "l:none", "l:none2", "IDX"], ["LCS", "l:a", "l:a", "IDX", "WITHMATCHLEN"]
        , ["LCS", "l:a", "l:b", "LEN", "IDX"], ["LCS", "l:a", "l:b", "FOO"], ["LCS", "l:a", "l:b", "MINMATCHLEN"]
        , ["LCS", "l:a", "l:b", "MINMATCHLEN", "x"], ["LCS", "l:a", "l:list"], ["LCS", "l:list", "l:b", "FOO"], ["LCS", "l:a"]
        , ["SET", "e:s", "v", "EXAT", "1900000000"], ["EXPIRETIME", "e:s"], ["PEXPIRETIME", "e:s"]
        , ["SET", "e:p", "v", "PXAT", "1900000000999"], ["EXPIRETIME", "e:p"], ["PEXPIRETIME", "e:p"]
        , ["RPUSH", "e:l", "x"], ["PEXPIREAT", "e:l", "2000000000001"], ["EXPIRETIME", "e:l"], ["PEXPIRETIME", "e:l"]
        , ["SET", "e:n", "v"], ["EXPIRETIME", "e:n"], ["PEXPIRETIME", "e:n"], ["EXPIRETIME", "e:none"], ["PEXPIRETIME", "e:none"]
        , ["SET", "e:gone", "v", "PXAT", "1000"], ["EXPIRETIME", "e:gone"], ["EXPIRETIME"], ["PEXPIRETIME", "a", "b"] ]
 it "answers generated command sequences, pipelined, exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> withClient kv $ \a -> withClient redis $ \b -> do
      -- Each case starts from an empty store and sends up to 30
      -- pipelines of up to 8 commands each.
      generatedPipelines 150 30 8 pipelined a b >>= mapM_ expectationFailure
 it "answers generated pipelines sent to it a byte at a time exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> withClient kv $ \a -> withClient redis $ \b -> do
      let Client s _ = a
      N.setSocketOption s N.NoDelay 1
      generatedPipelines 10 5 6 pipelinedBytewise a b >>= mapM_ expectationFailure
 it "answers generated pipelines exactly as redis-server does with every key on one color, and with 65536 colors" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> forM_ [1, 65536] $ \colors ->
      withKvConfig defaultServerConfig { serverKeyColors = colors } $ \kv -> withClient kv $ \a -> withClient redis $ \b -> do
        generatedPipelines 40 20 8 pipelined a b >>= mapM_ (expectationFailure . (("key colors " ++ show colors ++ ": ") ++))
 it "answers integer commands on random 64-bit values exactly as redis-server does" $
  withRedis $ \found -> case found of
    Left why -> pendingWith why
    Right redis -> withKv 65536 $ \kv -> do
      values <- generate (vectorOf 200 (oneof
        [ show <$> (arbitrary :: Gen Int), show <$> choose (maxBound - 100, maxBound :: Int)
        , show <$> choose (minBound, minBound + 100 :: Int), listOf1 (elements "0123456789-") ]))
      let cmds i v = let k = C.pack ("rnd:" ++ show (i :: Int)) in
            [ ["SET", k, C.pack v], ["INCR", k], ["INCRBY", k, C.pack v], ["DECRBY", k, "7"] ]
      differential kv redis (concat (zipWith cmds [0 ..] values))
 it "out of fds, keeps its idle clients (a connection pool) and tells newcomers the limit is reached" $
  withKv 65536 $ \addr -> keepsClientsWhenFull True addr "-ERR max number of clients reached\r\n" $ \c -> do
    NB.sendAll c (encodeCommand ["PING"])
    recvExactly c 7 `shouldReturn` "+PONG\r\n"
 it "at --max-clients, keeps its idle clients and tells newcomers the limit is reached" $
  withKvConfig defaultServerConfig { serverMaxClients = 8 } $ \addr ->
    keepsClientsWhenFull False addr "-ERR max number of clients reached\r\n" $ \c -> do
      NB.sendAll c (encodeCommand ["SET", "pool", "x"])
      recvExactly c 5 `shouldReturn` "+OK\r\n"
 it "with --evict stalled, at --max-clients closes a client stalled mid-command for a newcomer, never an idle one" $
  withKvConfig defaultServerConfig { serverMaxClients = 2, serverEviction = EvictStalled } $ \addr ->
    withClient addr $ \idle -> withClient addr $ \stalled -> do
      cmd idle ["PING"] `shouldReturn` RSimple "PONG"
      cmd stalled ["PING"] `shouldReturn` RSimple "PONG"
      -- Half a command, then nothing: stalled past the grace.
      sendRaw stalled (B.take 9 (encodeCommand ["GET", "key"]))
      threadDelay 400000
      withClient addr $ \newcomer -> within 2 "the newcomer's answer" $
        cmd newcomer ["PING"] `shouldReturn` RSimple "PONG"
      closed <- try (untilClosed stalled)
      either (\(_ :: IOException) -> return ()) (`shouldBe` B.empty) closed
      cmd idle ["PING"] `shouldReturn` RSimple "PONG"
 it "with --timeout, closes a client that trickles a command, and keeps one that talks" $
  withKvConfig defaultServerConfig { serverTimeout = 300000, serverMinReceive = 64 } $ \addr ->
    withClient addr $ \slow -> withClient addr $ \steady -> do
      -- The trickler sends one byte of a PING every 50 ms for 2 s; the
      -- steady client pings every 100 ms.
      trickler <- async $ do
        let bytes = B.unpack (B.concat (replicate 10 (encodeCommand ["PING"])))
            go [] = return False
            go (b : rest) = do
              r <- try (sendRaw slow (B.singleton b))
              case r of
                Left (_ :: IOException) -> return True
                Right () -> threadDelay 50000 >> go rest
        go (take 40 bytes)
      forM_ [1 .. 10 :: Int] $ \_ -> (cmd steady ["PING"] `shouldReturn` RSimple "PONG") >> threadDelay 100000
      untilClosed slow `shouldReturn` B.empty
      within 5 "the trickler" (wait trickler) `shouldReturn` True
 it "with --timeout, keeps a client blocked longer than the timeout, and times it out once answered" $
  withKvConfig defaultServerConfig { serverTimeout = 300000 } $ \addr ->
    withClient addr $ \blocked -> do
      sendRaw blocked (encodeCommand ["BLPOP", "idle:q", "0"])
      threadDelay 800000
      withClient addr $ \other -> cmd other ["RPUSH", "idle:q", "x"] `shouldReturn` RInt 1
      replies blocked 1 `shouldReturn` [RArray [bulk "idle:q", bulk "x"]]
      -- Idle again, and not blocked: closed after the timeout.
      untilClosed blocked `shouldReturn` B.empty
 it "closes a client whose waiting replies pass the output limit, and serves the others" $
  withKvConfig defaultServerConfig { serverOutputLimit = 2 * 1048576 } $ \addr ->
    withClient addr $ \greedy -> withClient addr $ \other -> do
      let big = B.replicate 60000 98
          n = 200   -- 12 MB of replies, asked for in one read, never read
      cmd greedy ["SET", "big", big] `shouldReturn` ok
      sendRaw greedy (B.concat (replicate n (encodeCommand ["GET", "big"])))
      threadDelay 200000
      cmd other ["PING"] `shouldReturn` RSimple "PONG"
      got <- either (\(_ :: IOException) -> 0) B.length <$> try (untilClosed greedy)
      got `shouldSatisfy` (< n * 60010)
      cmd other ["GET", "big"] `shouldReturn` bulk big
 it "keeps a client that pipelines large GETs without reading: it stops executing and reading, then answers them all" $
  withKv 65536 $ \addr -> withClient addr $ \c@(Client s _) -> withClient addr $ \other -> do
    let big = B.replicate 60000 98
        n = 2000   -- 120 MB of replies, asked for in one send: far over the 64 MiB output limit
        reply = 60010 -- "$60000\r\n", the value, "\r\n"
    cmd c ["SET", "big", big] `shouldReturn` ok
    sendRaw c (B.concat (replicate n (encodeCommand ["GET", "big"])))
    threadDelay 300000
    cmd other ["PING"] `shouldReturn` RSimple "PONG"
    -- Every reply arrives, and the connection is still open after them.
    let count !k
          | k >= n * reply = return k
          | otherwise = do
              d <- NB.recv s (min 1048576 (n * reply - k))
              if B.null d then return k else count (k + B.length d)
    within 30 "the replies" (count 0) `shouldReturn` n * reply
    cmd c ["PING"] `shouldReturn` RSimple "PONG"
 it "closes a client that takes none of its waiting replies for the send-stall time, and serves the others" $
  withKvConfig defaultServerConfig { serverSendStall = 300000 } $ \addr ->
    withClient addr $ \stuck -> withClient addr $ \other -> do
      let big = B.replicate 60000 98
          n = 400   -- 24 MB of replies: more than the socket buffers take, under the output limit
      cmd stuck ["SET", "big", big] `shouldReturn` ok
      sendRaw stuck (B.concat (replicate n (encodeCommand ["GET", "big"])))
      forM_ [1 .. 8 :: Int] $ \_ -> (cmd other ["PING"] `shouldReturn` RSimple "PONG") >> threadDelay 100000
      got <- either (\(_ :: IOException) -> 0) B.length <$> try (untilClosed stuck)
      got `shouldSatisfy` (< n * 60010)
 around (withKv 65536) $ describe "server" $ do
  it "answers PING, ECHO, CONFIG GET and COMMAND" $ \addr -> withClient addr $ \c -> do
    cmd c ["PING"] `shouldReturn` RSimple "PONG"
    cmd c ["ping", "hi"] `shouldReturn` bulk "hi"
    cmd c ["ECHO", "a\r\nb"] `shouldReturn` bulk "a\r\nb"
    cmd c ["CONFIG", "GET", "save"] `shouldReturn` RArray [bulk "save", bulk ""]
    cmd c ["CONFIG", "GET", "appendonly"] `shouldReturn` RArray [bulk "appendonly", bulk "no"]
    cmd c ["CONFIG", "GET", "nothing"] `shouldReturn` RArray []
    sendRaw c "PING\r\n"
    replies c 1 `shouldReturn` [RSimple "PONG"]

  it "reports the collector's counts and weft's polls in INFO's runtime section, growing as the store does and as requests come" $ \addr -> withClient addr $ \c -> do
    let runtime = do
          info <- cmd c ["INFO"]
          case info of
            RBulk text -> return [ (k, v) | l <- C.lines (C.filter (/= '\r') text), let (k, v) = C.break (== ':') l, not (B.null v) ]
            other -> fail ("INFO answered " ++ show other)
        count fields name = maybe (-1) fst (lookup name fields >>= C.readInt . B.drop 1)
        names = ["gc_collections", "gc_major_collections", "gc_cpu_us", "mutator_cpu_us", "gc_allocated_bytes", "gc_copied_bytes", "gc_max_live_bytes"]
    start <- runtime
    lookup "gc_stats" start `shouldBe` Just ":on"
    forM_ names $ \name -> count start name `shouldSatisfy` (>= 0)
    -- 400 values of 50 kB: the server copies 20 MB into its store.
    let value = B.replicate 50000 0x61
    forM_ [1 .. 40 :: Int] $ \i ->
      run c [ ["SET", C.pack ("gc:" ++ show (i * 10 + j)), value] | j <- [0 .. 9 :: Int] ] >>= (`shouldBe` replicate 10 ok)
    grown <- runtime
    count grown "gc_allocated_bytes" - count start "gc_allocated_bytes" `shouldSatisfy` (>= 20000000)
    count grown "gc_collections" `shouldSatisfy` (> count start "gc_collections")
    forM_ names $ \name -> count grown name `shouldSatisfy` (>= count start name)
    cmd c ("DEL" : [ C.pack ("gc:" ++ show k) | k <- [10 .. 409 :: Int] ]) `shouldReturn` RInt 400
    -- weft's polls: each of 200 requests in turn is a read the server
    -- learns of from a poll.
    quiet <- runtime
    forM_ [1 .. 200 :: Int] $ \_ -> cmd c ["PING"] `shouldReturn` RSimple "PONG"
    pinged <- runtime
    let grew name = count pinged name - count quiet name
    grew "weft_poll_events" `shouldSatisfy` (>= 200)
    grew "weft_polls_blocking" + grew "weft_polls_nonblocking" `shouldSatisfy` (>= 200)
    count pinged "weft_spin_us" `shouldSatisfy` (>= 0)

  it "runs the string and key commands" $ \addr -> withClient addr $ \c -> do
    run c [ ["GET", "s"], ["SET", "s", "v1"], ["GET", "s"], ["SET", "s", "v2"], ["GET", "s"]
          , ["INCR", "n"], ["INCR", "n"], ["INCRBY", "n", "40"], ["DECR", "n"], ["GET", "n"]
          , ["INCR", "s"], ["EXISTS", "s", "n", "none"], ["DEL", "s", "none"], ["GET", "s"]
          , ["SET", "x", "1", "NX"], ["SET", "x", "2", "NX"], ["GET", "x"], ["TYPE", "x"] ]
      `shouldReturn`
        [ RNil, ok, bulk "v1", ok, bulk "v2"
        , RInt 1, RInt 2, RInt 42, RInt 41, bulk "41"
        , RError "ERR value is not an integer or out of range", RInt 2, RInt 1, RNil
        , ok, RNil, bulk "1", RSimple "string" ]

  -- Writes of a string of the stored one's length go over its bytes in
  -- place (Note [Stored strings] in Kv.Str): what was read before must
  -- keep what it read.
  it "answers each read with what it read when the key is written over right after, in one pipeline" $ \addr ->
    withClient addr $ \c -> do
      run c [ ["SET", "w", "aaa"], ["GET", "w"], ["SET", "w", "bbb"], ["GET", "w"], ["SET", "w", "ccc", "GET"], ["GET", "w"]
            , ["SET", "n", "10"], ["GET", "n"], ["INCR", "n"], ["GET", "n"]
            , ["SET", "a", "xxx"], ["COPY", "a", "b"], ["SET", "a", "yyy"], ["GET", "b"], ["MGET", "a", "b", "w"] ]
        `shouldReturn`
          [ ok, bulk "aaa", ok, bulk "bbb", bulk "bbb", bulk "ccc"
          , ok, bulk "10", RInt 11, bulk "11"
          , ok, RInt 1, ok, bulk "xxx", RArray [bulk "yyy", bulk "xxx", bulk "ccc"] ]

  it "keeps small strings, lists, hashes, sets and sorted sets in records, a value that grows or gets an expiry on the heap, all intact" $ \addr ->
   withClient addr $ \c -> do
    let records = do
          info <- cmd c ["INFO"]
          case info of
            RBulk text -> return $ maybe (-1) fst $
              lookup "kv_records" [ (k, B.drop 1 v) | l <- C.lines (C.filter (/= '\r') text), let (k, v) = C.break (== ':') l ] >>= C.readInt
            other -> fail ("INFO answered " ++ show other)
        many = [ C.pack (show i) | i <- [1 .. 20 :: Int] ]
    -- A table dropped by an earlier test frees its records at a collection
    -- (Note [Tables the collector frees]): have that happen first, until
    -- the count holds still (a bounded while).
    let settled :: Int -> Int -> IO Int
        settled n previous = do
          performMajorGC >> threadDelay 20000
          now <- records
          if now == previous || n == 0 then return now else settled (n - 1) now
    r0 <- records >>= settled 50
    let held n = (subtract r0 <$> records) `shouldReturn` n
    run c [["SET", "rec:s", "v"], ["RPUSH", "rec:l", "a", "b"], ["HSET", "rec:h", "f", "v"], ["SADD", "rec:t", "m"], ["ZADD", "rec:z", "1.5", "m", "2", "n"]]
      `shouldReturn` [ok, RInt 2, RInt 1, RInt 1, RInt 2]
    held 5
    run c [ "RPUSH" : "rec:l" : many, "HSET" : "rec:h" : concat [ [f, f] | f <- many ], "ZADD" : "rec:z" : concat [ [f, f] | f <- many ] ]
      `shouldReturn` [RInt 22, RInt 20, RInt 20]
    held 2
    cmd c ["EXPIRE", "rec:t", "100"] `shouldReturn` RInt 1
    held 1
    run c [ ["LRANGE", "rec:l", "0", "-1"], ["HLEN", "rec:h"], ["HGET", "rec:h", "f"], ["SMEMBERS", "rec:t"], ["GET", "rec:s"], ["ZCARD", "rec:z"], ["ZSCORE", "rec:z", "m"] ]
      `shouldReturn` [RArray (map bulk ("a" : "b" : many)), RInt 21, bulk "v", RArray [bulk "m"], bulk "v", RInt 22, bulk "1.5"]
    run c [ ["TYPE", k] | k <- ["rec:s", "rec:l", "rec:h", "rec:t", "rec:z"] ] `shouldReturn` map RSimple ["string", "list", "hash", "set", "zset"]
    -- Shrunk back, a list is a record again.
    run c [ ["LTRIM", "rec:l", "0", "1"], ["LRANGE", "rec:l", "0", "-1"], ["PERSIST", "rec:t"], ["SISMEMBER", "rec:t", "m"] ]
      `shouldReturn` [ok, RArray [bulk "a", bulk "b"], RInt 1, RInt 1]
    held 3
    run c [ ["ZREMRANGEBYRANK", "rec:z", "2", "-1"], ["ZRANGE", "rec:z", "0", "-1", "WITHSCORES"] ]
      `shouldReturn` [RInt 20, RArray (map bulk ["1", "1", "m", "1.5"])]
    held 4
    cmd c ["DEL", "rec:s", "rec:l", "rec:h", "rec:t", "rec:z"] `shouldReturn` RInt 5
    held 0

  it "picks members of a large set and hash at random for a count: distinct ones, or with repeats, all members" $ \addr ->
   withClient addr $ \c -> do
    -- 200 members: a table, and counts under a quarter of it are drawn
    -- pick by pick, where repeats are likely.
    let members = [ C.pack ("m" ++ show i) | i <- [1 .. 200 :: Int] ]
        inSet x = x `elem` members
        bulks r = case r of RArray xs -> [ b | RBulk b <- xs ]; _ -> []
    cmd c ("SADD" : "pick:s" : members) `shouldReturn` RInt 200
    cmd c ("HSET" : "pick:h" : concat [ [m, m] | m <- members ]) `shouldReturn` RInt 200
    forM_ [1 .. 20 :: Int] $ \_ -> do
      distinct <- bulks <$> cmd c ["SRANDMEMBER", "pick:s", "49"]
      length distinct `shouldBe` 49
      length (nubOrd distinct) `shouldBe` 49
      distinct `shouldSatisfy` all inSet
      repeated <- bulks <$> cmd c ["SRANDMEMBER", "pick:s", "-30"]
      length repeated `shouldBe` 30
      repeated `shouldSatisfy` all inSet
      fields <- bulks <$> cmd c ["HRANDFIELD", "pick:h", "40", "WITHVALUES"]
      length fields `shouldBe` 80
      [ f | (f, i) <- zip fields [0 :: Int ..], even i ] `shouldBe` [ v | (v, i) <- zip fields [0 :: Int ..], odd i ]
      length (nubOrd fields) `shouldBe` 40
    popped <- bulks <$> cmd c ["SPOP", "pick:s", "40"]
    length popped `shouldBe` 40
    length (nubOrd popped) `shouldBe` 40
    popped `shouldSatisfy` all inSet
    cmd c ["SCARD", "pick:s"] `shouldReturn` RInt 160
    cmd c ("SMISMEMBER" : "pick:s" : take 5 popped) `shouldReturn` RArray (replicate 5 (RInt 0))
    cmd c ["DEL", "pick:s", "pick:h"] `shouldReturn` RInt 2

  it "runs the list, set, hash and sorted-set commands" $ \addr -> withClient addr $ \c -> do
    run c [ ["LPUSH", "l", "a", "b"], ["RPUSH", "l", "c"], ["LRANGE", "l", "0", "-1"]
          , ["LRANGE", "l", "1", "1"], ["LRANGE", "l", "5", "9"], ["LPOP", "l"], ["RPOP", "l"]
          , ["LLEN", "l"], ["RPOP", "l"], ["RPOP", "l"], ["EXISTS", "l"] ]
      `shouldReturn`
        [ RInt 2, RInt 3, RArray (map bulk ["b", "a", "c"]), RArray [bulk "a"], RArray []
        , bulk "b", bulk "c", RInt 1, bulk "a", RNil, RInt 0 ]
    run c [ ["SADD", "set", "x", "y", "x"], ["SADD", "set", "y", "z"], ["SCARD", "set"] ]
      `shouldReturn` [RInt 2, RInt 1, RInt 3]
    popped <- run c [["SPOP", "set"], ["SPOP", "set"], ["SPOP", "set"], ["SPOP", "set"]]
    sort [ m | RBulk m <- popped ] `shouldBe` ["x", "y", "z"]
    last popped `shouldBe` RNil
    run c [ ["HSET", "h", "f", "1", "g", "2"], ["HSET", "h", "f", "3"], ["HGET", "h", "f"], ["HLEN", "h"] ]
      `shouldReturn` [RInt 2, RInt 0, bulk "3", RInt 2]
    run c [ ["ZADD", "z", "2", "b", "1.5", "a", "-inf", "c"], ["ZADD", "z", "0", "c"], ["ZCARD", "z"]
          , ["ZPOPMIN", "z"], ["ZPOPMIN", "z", "5"], ["ZPOPMIN", "z"], ["ZADD", "z", "x", "a"] ]
      `shouldReturn`
        [ RInt 3, RInt 0, RInt 3, RArray [bulk "c", bulk "0"]
        , RArray [bulk "a", bulk "1.5", bulk "b", bulk "2"], RArray []
        , RError "ERR value is not a valid float" ]

  it "answers WRONGTYPE for an operation on a key of another type" $ \addr -> withClient addr $ \c ->
    run c [ ["LPUSH", "k", "a"], ["GET", "k"], ["SADD", "k", "m"], ["HSET", "k", "f", "v"]
          , ["ZADD", "k", "1", "m"], ["INCR", "k"], ["SET", "k", "s"], ["LPOP", "k"], ["LRANGE", "k", "0", "1"] ]
      `shouldReturn` [RInt 1, wrongType, wrongType, wrongType, wrongType, wrongType, ok, wrongType, wrongType]

  it "runs multi-key commands with each key on its own color, results joined in order" $ \addr ->
    withClient addr $ \c -> do
      let keys = [ C.pack ("mk" ++ show i) | i <- [1 .. 40 :: Int] ]
      cmd c ("MSET" : concat [ [k, k <> "-v"] | k <- keys ]) `shouldReturn` ok
      cmd c ("MGET" : "missing" : keys) `shouldReturn` RArray (RNil : [ bulk (k <> "-v") | k <- keys ])
      cmd c ("EXISTS" : "missing" : keys ++ take 5 keys) `shouldReturn` RInt 45
      cmd c ("DEL" : take 10 keys ++ ["missing"] ++ take 10 keys) `shouldReturn` RInt 10
      cmd c ("EXISTS" : keys) `shouldReturn` RInt 30
      cmd c ["DEL", "mk40", "mk40"] `shouldReturn` RInt 1
      -- Parts on one key run in argument order: the last value wins.
      cmd c ["MSET", "same", "1", "other", "x", "same", "2", "same", "3"] `shouldReturn` ok
      cmd c ["MGET", "same", "other"] `shouldReturn` RArray [bulk "3", bulk "x"]
      -- All keys of one color (redis-benchmark's MSET names one key ten
      -- times): one event runs the parts in order and joins them.
      run c [ ["MSET", "one", "1", "one", "2", "one", "3"], ["MGET", "one", "nope", "one"]
            , ["DEL", "one", "one", "one"], ["EXISTS", "one", "one"], ["MGET", "one"] ]
        `shouldReturn` [ok, RArray [bulk "3", RNil, bulk "3"], RInt 1, RInt 0, RArray [RNil]]
      cmd c ["MSET", "a"] `shouldReturn` RError "ERR wrong number of arguments for 'mset' command"

  it "keeps replies in request order when one pipeline hits many colors" $ \addr ->
    withClients addr 4 $ \cs -> forConcurrently_ (zip [0 :: Int ..] cs) $ \(ci, c) -> do
      -- Same-key commands must see each other; replies must not reorder.
      let key i = C.pack ("order" ++ show ci ++ ":" ++ show (i `mod` 37))
          cmds = concat [ [ ["INCR", key i], ["GET", key i], ["PING"] ] | i <- [0 .. 399 :: Int] ]
          expected = concat [ [RInt n, bulk (C.pack (show n)), RSimple "PONG"]
                            | i <- [0 .. 399 :: Int], let n = i `div` 37 + 1 ]
      run c cmds `shouldReturn` expected

  it "serves a client that pipelines 20000 commands before reading" $ \addr -> withClient addr $ \c -> do
    let n = 20000
    sendRaw c (B.concat (replicate n (encodeCommand ["INCR", "many"])))
    rs <- replies c n
    rs `shouldBe` map RInt [1 .. fromIntegral n]

  it "stores and returns values larger than a read, alone and in arrays" $ \addr -> withClient addr $ \c -> do
    -- At the 65536-byte limit of this server: several reads to receive,
    -- and sent from the store without copies (Note [Replies in place] in Kv.Out).
    let big = B.pack (take 65536 (cycle [0 .. 250]))
    cmd c ["SET", "big", big] `shouldReturn` ok
    run c [["GET", "big"], ["MGET", "big", "none", "big"], ["PING"]]
      `shouldReturn` [bulk big, RArray [bulk big, RNil, bulk big], RSimple "PONG"]

  it "gets every reply, in order, to a client that reads slowly (output paused, then resumed)" $ \addr ->
    withClient addr $ \c -> do
      let big = B.replicate 60000 98
          n = 200   -- 12 MB of replies: far more than the socket buffers and the output limit
      cmd c ["SET", "big", big] `shouldReturn` ok
      sender <- async (sendRaw c (B.concat (concat (replicate n [encodeCommand ["GET", "big"], encodeCommand ["INCR", "i"]]))))
      threadDelay 100000   -- let the server fill the socket and stop reading
      rs <- replies c (2 * n)
      wait sender
      rs `shouldBe` concat [ [bulk big, RInt i] | i <- [1 .. fromIntegral n] ]

  it "answers everything sent before a half-close, then closes" $ \addr -> withClient addr $ \c@(Client s _) -> do
    sendRaw c (B.concat (map encodeCommand [["SET", "h", "1"], ["INCR", "h"], ["GET", "h"]]))
    N.shutdown s N.ShutdownSend
    untilClosed c `shouldReturn` "+OK\r\n:2\r\n$1\r\n2\r\n"

  it "answers unknown commands and bad arity with an error and keeps the connection" $ \addr ->
    withClient addr $ \c -> do
      cmd c ["NOSUCH", "x"] `shouldReturn` RError "ERR unknown command 'NOSUCH', with args beginning with: 'x' "
      cmd c ["GET"] `shouldReturn` RError "ERR wrong number of arguments for 'get' command"
      cmd c ["GET", "a", "b"] `shouldReturn` RError "ERR wrong number of arguments for 'get' command"
      cmd c ["PING"] `shouldReturn` RSimple "PONG"

  forM_ [ ("a non-numeric bulk length", "*2\r\n$3\r\nGET\r\n$x\r\n", "-ERR Protocol error: invalid bulk length\r\n")
        , ("a bad multibulk length", "*-x\r\n", "-ERR Protocol error: invalid multibulk length\r\n")
        , ("a bulk string over --max-bulk", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$65537\r\nxxxx"
          , "-ERR Protocol error: invalid bulk length\r\n") ] $
    \(what, bad, answer) ->
      it ("answers " ++ what ++ " with an error, closes, and serves others") $ \addr ->
        withClient addr $ \other -> do
          cmd other ["SET", "still", "here"] `shouldReturn` ok
          withClient addr $ \c -> do
            -- A command before the bad input in the same write still runs.
            sendRaw c (encodeCommand ["INCR", "before"] <> bad)
            untilClosed c `shouldReturn` (":1\r\n" <> answer)
          cmd other ["GET", "still"] `shouldReturn` bulk "here"
          withClient addr $ \c -> cmd c ["GET", "before"] `shouldReturn` bulk "1"

  it "closes after QUIT, answering what came before" $ \addr -> withClient addr $ \c -> do
    sendRaw c (B.concat (map encodeCommand [["SET", "q", "1"], ["QUIT"], ["SET", "q", "2"]]))
    untilClosed c `shouldReturn` "+OK\r\n+OK\r\n"
    withClient addr $ \c' -> cmd c' ["GET", "q"] `shouldReturn` bulk "1"

  it "answers TIME from the wall clock, and RANDOMKEY with each live key and no other" $ \addr -> withClient addr $ \c -> do
    t0 <- getPOSIXTime
    t <- cmd c ["TIME"]
    t1 <- getPOSIXTime
    case t of
      RArray [RBulk secs, RBulk micros] -> do
        let at = fromIntegral (read (C.unpack secs) :: Integer) + fromIntegral (read (C.unpack micros) :: Integer) / 1e6
        (read (C.unpack micros) :: Integer) `shouldSatisfy` (< 1000000)
        at `shouldSatisfy` (\x -> x >= t0 - 1 && x <= t1 + 1)
      other -> expectationFailure ("TIME answered " ++ show other)
    _ <- cmd c ["FLUSHALL"]
    cmd c ["RANDOMKEY"] `shouldReturn` RNil
    -- Keys on every color, several on each; one expired, one deleted.
    let keys = [ C.pack ("rk:" ++ show i) | i <- [1 .. 40 :: Int] ]
    _ <- run c ([ ["SET", k, "v"] | k <- keys ] ++ [["SET", "rk:expired", "v", "PX", "1"], ["SET", "rk:deleted", "v"], ["DEL", "rk:deleted"]])
    threadDelay 20000
    picks <- run c (replicate 2000 ["RANDOMKEY"])
    sort (foldr (\r acc -> case r of RBulk k | k `notElem` acc -> k : acc; _ -> acc) [] picks) `shouldBe` sort keys
    length [ () | RBulk _ <- picks ] `shouldBe` 2000
    _ <- run c [ ["DEL", k] | k <- keys ]
    cmd c ["RANDOMKEY"] `shouldReturn` RNil

  it "blocks BLPOP until a push on any of its keys, holding the client's later commands back" $ \addr ->
    withClient addr $ \a -> withClient addr $ \b -> do
      _ <- run b [["DEL", "bk:1", "bk:2", "bk:3"]]
      sendRaw a (B.concat (map encodeCommand [["BLPOP", "bk:1", "bk:2", "bk:3", "0"], ["PING"]]))
      waitBlocked b 1
      nothingYet a
      cmd b ["RPUSH", "bk:3", "x", "y"] `shouldReturn` RInt 2
      replies a 2 `shouldReturn` [RArray [bulk "bk:3", bulk "x"], RSimple "PONG"]
      run b [["LRANGE", "bk:3", "0", "-1"], ["INFO"]] >>= \rs -> take 1 rs `shouldBe` [RArray [bulk "y"]]
      waitBlocked b 0
      -- A list there already: answered at once; BRPOP and BLMPOP too.
      run a [["BLPOP", "bk:3", "0"], ["RPUSH", "bk:1", "p", "q", "r"], ["BRPOP", "bk:2", "bk:1", "0"], ["BLMPOP", "0", "1", "bk:1", "LEFT", "COUNT", "5"]]
        `shouldReturn` [RArray [bulk "bk:3", bulk "y"], RInt 3, RArray [bulk "bk:1", bulk "r"], RArray [bulk "bk:1", RArray [bulk "p", bulk "q"]]]

  it "blocks BZPOPMIN, BZPOPMAX and BZMPOP until a sorted set is there" $ \addr ->
    withClient addr $ \a -> withClient addr $ \b -> do
      _ <- run b [["DEL", "bz:1", "bz:2"]]
      sendRaw a (encodeCommand ["BZPOPMIN", "bz:1", "bz:2", "0"])
      waitBlocked b 1
      cmd b ["ZADD", "bz:2", "2", "m2", "1", "m1", "3", "m3"] `shouldReturn` RInt 3
      replies a 1 `shouldReturn` [RArray [bulk "bz:2", bulk "m1", bulk "1"]]
      waitBlocked b 0
      run a [["BZPOPMAX", "bz:1", "bz:2", "0"], ["BZMPOP", "0", "2", "bz:1", "bz:2", "MIN", "COUNT", "5"], ["BZPOPMIN", "bz:2", "0.05"]]
        `shouldReturn` [ RArray [bulk "bz:2", bulk "m3", bulk "3"], RArray [bulk "bz:2", RArray [RArray [bulk "m2", bulk "2"]]], RNilArray ]

  it "times blocking commands out with their empty replies, and counts blocked clients in INFO" $ \addr ->
    withClient addr $ \a -> withClient addr $ \b -> do
      sendRaw a (encodeCommand ["BLPOP", "bt:none", "0.3"])
      waitBlocked b 1
      -- Its own later commands, sent after it blocked, wait for it.
      sendRaw a (encodeCommand ["RPUSH", "bt:none", "x"])
      replies a 2 `shouldReturn` [RNilArray, RInt 1]
      waitBlocked b 0
      _ <- cmd a ["DEL", "bt:none"]
      run a [["BRPOPLPUSH", "bt:none", "bt:dst", "0.05"], ["BLMOVE", "bt:none", "bt:dst", "LEFT", "RIGHT", "0.05"], ["BLMPOP", "0.05", "2", "bt:none", "bt:x", "RIGHT"]]
        `shouldReturn` [RNil, RNil, RNilArray]
      run a [["BLPOP", "bt:none", "-1"], ["BLPOP", "bt:none", "x"], ["SET", "bt:s", "v"], ["BLPOP", "bt:none", "bt:s", "0"], ["BLMOVE", "bt:none", "bt:dst", "UP", "LEFT", "0"]]
        `shouldReturn` [ RError "ERR timeout is negative", RError "ERR timeout is not a float or out of range", ok, wrongType, RError "ERR syntax error" ]

  it "names a connection with CLIENT SETNAME, its own name only, and refuses names with spaces" $ \addr ->
    withClient addr $ \a -> withClient addr $ \b -> do
      run a [["CLIENT", "GETNAME"], ["CLIENT", "SETNAME", "worker-1"], ["CLIENT", "GETNAME"]]
        `shouldReturn` [RNil, ok, bulk "worker-1"]
      cmd b ["CLIENT", "GETNAME"] `shouldReturn` RNil
      run a [["CLIENT", "SETNAME", "two words"], ["CLIENT", "SETNAME", "new\nline"], ["CLIENT", "GETNAME"]]
        `shouldReturn` replicate 2 (RError "ERR Client names cannot contain spaces, newlines or special characters.") ++ [bulk "worker-1"]
      run a [["CLIENT", "SETNAME", ""], ["CLIENT", "GETNAME"], ["CLIENT", "GETNAME", "x"]]
        `shouldReturn` [ok, RNil, RError "ERR wrong number of arguments for 'client|getname' command"]

  it "ends a blocked command from another client with CLIENT UNBLOCK (its empty reply, or an error), and only a blocked one" $ \addr ->
    withClient addr $ \a -> withClient addr $ \b -> do
      _ <- cmd b ["DEL", "bu:q"]
      RInt aId <- cmd a ["CLIENT", "ID"]
      RInt bId <- cmd b ["CLIENT", "ID"]
      aId `shouldNotBe` bId
      forM_ [ ([], RNilArray, ["BLPOP", "bu:q", "0"]), (["TIMEOUT"], RNil, ["BLMOVE", "bu:q", "bu:d", "LEFT", "RIGHT", "0"])
            , (["ERROR"], RError "UNBLOCKED client unblocked via CLIENT UNBLOCK", ["BLPOP", "bu:q", "0"]) ] $ \(how, answered, blocking) -> do
        -- With a later command of its own behind it, which then runs.
        sendRaw a (B.concat (map encodeCommand [blocking, ["PING"]]))
        waitBlocked b 1
        cmd b (["CLIENT", "UNBLOCK", C.pack (show aId)] ++ how) `shouldReturn` RInt 1
        replies a 2 `shouldReturn` [answered, RSimple "PONG"]
        waitBlocked b 0
      -- Not blocked (itself, the other, or no such client): 0.
      run b [["CLIENT", "UNBLOCK", C.pack (show bId)], ["CLIENT", "UNBLOCK", C.pack (show aId)], ["CLIENT", "UNBLOCK", "999999"]]
        `shouldReturn` [RInt 0, RInt 0, RInt 0]
      run b [["CLIENT", "UNBLOCK", "asd"], ["CLIENT", "UNBLOCK", C.pack (show aId), "LATER"], ["CLIENT", "NOSUCH"]]
        `shouldReturn` [RError "ERR value is not an integer or out of range", RError "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR", RError "ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP."]
      -- Still blocks, and is served by a push.
      sendRaw a (encodeCommand ["BLPOP", "bu:q", "0"])
      waitBlocked b 1
      cmd b ["RPUSH", "bu:q", "x"] `shouldReturn` RInt 1
      replies a 1 `shouldReturn` [RArray [bulk "bu:q", bulk "x"]]

  it "wakes blocked clients one per element, in order, passes on what one leaves, and forgets a client that closes" $ \addr ->
    withClient addr $ \b -> do
      _ <- run b [["DEL", "bw:q", "bw:t1", "bw:t2"], ["SET", "bw:t1", "not a list"]]
      withClient addr $ \a1 -> withClient addr $ \a2 -> withClient addr $ \a3 -> do
        sendRaw a1 (encodeCommand ["BLPOP", "bw:q", "0"])
        waitBlocked b 1
        sendRaw a2 (encodeCommand ["BLPOP", "bw:q", "0"])
        waitBlocked b 2
        cmd b ["RPUSH", "bw:q", "one"] `shouldReturn` RInt 1
        replies a1 1 `shouldReturn` [RArray [bulk "bw:q", bulk "one"]]
        nothingYet a2
        cmd b ["RPUSH", "bw:q", "two"] `shouldReturn` RInt 1
        replies a2 1 `shouldReturn` [RArray [bulk "bw:q", bulk "two"]]
        -- The first cannot move what it was woken for (its destination is
        -- a string): the second gets it.
        sendRaw a1 (encodeCommand ["BRPOPLPUSH", "bw:q", "bw:t1", "0"])
        waitBlocked b 1
        sendRaw a3 (encodeCommand ["BRPOPLPUSH", "bw:q", "bw:t2", "0"])
        waitBlocked b 2
        cmd b ["LPUSH", "bw:q", "three"] `shouldReturn` RInt 1
        replies a1 1 `shouldReturn` [wrongType]
        replies a3 1 `shouldReturn` [bulk "three"]
        run b [["LLEN", "bw:q"], ["LRANGE", "bw:t2", "0", "-1"]] `shouldReturn` [RInt 0, RArray [bulk "three"]]
      -- A client that closed while blocked takes nothing, with commands
      -- held behind the blocking one or not.
      withClient addr $ \a4 -> withClient addr $ \a5 -> do
        sendRaw a4 (encodeCommand ["BLPOP", "bw:q", "0"])
        sendRaw a5 (B.concat (map encodeCommand [["BLPOP", "bw:q", "0"], ["PING"], ["GET", "x"]]))
        waitBlocked b 2
      waitBlocked b 0
      cmd b ["RPUSH", "bw:q", "four"] `shouldReturn` RInt 1
      cmd b ["LRANGE", "bw:q", "0", "-1"] `shouldReturn` RArray [bulk "four"]

  it "serves a blocked client the element it was woken for, before a blocking command that comes with the push" $ \addr ->
    blockedRounds addr "bo:q" $ \b a1 a2 x y -> do
        sendRaw a1 (encodeCommand ["BLPOP", "bo:q", "0"])
        waitBlocked b 1
        -- The push and a second client's BLPOP, at once: the element is
        -- the first client's, which blocked first.
        sendRaw b (encodeCommand ["RPUSH", "bo:q", x])
        sendRaw a2 (encodeCommand ["BLPOP", "bo:q", "0"])
        replies b 1 `shouldReturn` [RInt 1]
        replies a1 1 `shouldReturn` [RArray [bulk "bo:q", bulk x]]
        waitBlocked b 1
        cmd b ["RPUSH", "bo:q", y] `shouldReturn` RInt 1
        replies a2 1 `shouldReturn` [RArray [bulk "bo:q", bulk y]]
        waitBlocked b 0

  it "serves two blocked clients from one push of two elements, in the order they blocked" $ \addr ->
    blockedRounds addr "b2:q" $ \b a1 a2 x y -> do
        sendRaw a1 (encodeCommand ["BLPOP", "b2:q", "0"])
        waitBlocked b 1
        sendRaw a2 (encodeCommand ["BLPOP", "b2:q", "0"])
        waitBlocked b 2
        cmd b ["RPUSH", "b2:q", x, y] `shouldReturn` RInt 2
        within 3 "the first client's element" (replies a1 1) `shouldReturn` [RArray [bulk "b2:q", bulk x]]
        within 3 "the second client's element" (replies a2 1) `shouldReturn` [RArray [bulk "b2:q", bulk y]]
        waitBlocked b 0

  it "passes on an element a blocked BRPOPLPUSH cannot move, to the client blocked after it, pushed with no pause" $ \addr ->
    withClient addr $ \b -> forM_ [1 .. 40 :: Int] $ \_ -> withClient addr $ \a1 -> withClient addr $ \a2 -> do
      _ <- run b [["DEL", "bm:q", "bm:t1", "bm:t2"], ["SET", "bm:t1", "nolist"]]
      sendRaw a1 (encodeCommand ["BRPOPLPUSH", "bm:q", "bm:t1", "0"])
      -- The first client must be first in line: commands on different
      -- connections are not ordered by arrival, so a pause alone could
      -- let the second block first and take the element. Then, as
      -- redis's own test sends them, no wait between the second's
      -- command and the push.
      waitBlocked b 1
      sendRaw a2 (encodeCommand ["BRPOPLPUSH", "bm:q", "bm:t2", "0"])
      sendRaw b (encodeCommand ["LPUSH", "bm:q", "foo"])
      replies b 1 `shouldReturn` [RInt 1]
      within 3 "the first client's WRONGTYPE" (replies a1 1) `shouldReturn` [wrongType]
      within 3 "the second client's element" (replies a2 1) `shouldReturn` [bulk "foo"]
      cmd b ["LRANGE", "bm:t2", "0", "-1"] `shouldReturn` RArray [bulk "foo"]

  it "serves a blocked client inside the push that wakes it, before the pusher's next command" $ \addr ->
    withClient addr $ \b -> forM_ [1 .. 20 :: Int] $ \_ -> withClient addr $ \a -> do
      _ <- cmd b ["DEL", "bi:q"]
      sendRaw a (encodeCommand ["BLPOP", "bi:q", "0"])
      waitBlocked b 1
      -- One write: the length is read after the push, in the same batch.
      run b [["RPUSH", "bi:q", "x"], ["LLEN", "bi:q"]] `shouldReturn` [RInt 1, RInt 0]
      replies a 1 `shouldReturn` [RArray [bulk "bi:q", bulk "x"]]
      waitBlocked b 0

  it "serves linked BLMOVEs and a circular BRPOPLPUSH inside the push, on keys that share a hash tag" $ \addr ->
    withClient addr $ \b -> forM_ [1 .. 10 :: Int] $ \_ -> do
      withClient addr $ \a1 -> withClient addr $ \a2 -> do
        _ <- cmd b ["DEL", "l1{t}", "l2{t}", "l3{t}"]
        sendRaw a1 (encodeCommand ["BLMOVE", "l1{t}", "l2{t}", "RIGHT", "LEFT", "0"])
        waitBlocked b 1
        sendRaw a2 (encodeCommand ["BLMOVE", "l2{t}", "l3{t}", "LEFT", "RIGHT", "0"])
        waitBlocked b 2
        run b [["RPUSH", "l1{t}", "foo"], ["LRANGE", "l1{t}", "0", "-1"], ["LRANGE", "l2{t}", "0", "-1"], ["LRANGE", "l3{t}", "0", "-1"]]
          `shouldReturn` [RInt 1, RArray [], RArray [], RArray [bulk "foo"]]
        replies a1 1 `shouldReturn` [bulk "foo"]
        replies a2 1 `shouldReturn` [bulk "foo"]
      withClient addr $ \a1 -> withClient addr $ \a2 -> do
        _ <- cmd b ["DEL", "c1{u}", "c2{u}"]
        sendRaw a1 (encodeCommand ["BRPOPLPUSH", "c1{u}", "c2{u}", "0"])
        waitBlocked b 1
        sendRaw a2 (encodeCommand ["BRPOPLPUSH", "c2{u}", "c1{u}", "0"])
        waitBlocked b 2
        run b [["RPUSH", "c1{u}", "foo"], ["LRANGE", "c1{u}", "0", "-1"], ["LRANGE", "c2{u}", "0", "-1"]]
          `shouldReturn` [RInt 1, RArray [bulk "foo"], RArray []]
        replies a1 1 `shouldReturn` [bulk "foo"]
        replies a2 1 `shouldReturn` [bulk "foo"]
      waitBlocked b 0

  it "loses no element and answers each blocked command once while timeouts race the pushes that serve them" $ \addr ->
    withClient addr $ \b -> do
      _ <- cmd b ["DEL", "br:q"]
      let pushed = [ C.pack ("e" ++ show i) | i <- [1 .. 800 :: Int] ]
          -- Each client blocks 150 times, 2 ms each: some are served, the
          -- rest time out, often as a push arrives.
          client = withClient addr $ \a -> do
            got <- forM [1 .. 150 :: Int] $ \_ -> do
              sendRaw a (encodeCommand ["BLPOP", "br:q", "0.002"])
              r <- replies a 1
              case r of
                [RArray [_, RBulk x]] -> return [x]
                [RNilArray] -> return []
                other -> fail ("unexpected reply " ++ show other)
            -- A command answered twice leaves a reply over.
            nothingYet a
            return (concat got)
      takers <- mapM (const (async client)) [1 .. 4 :: Int]
      forM_ pushed $ \x -> cmd b ["RPUSH", "br:q", x] >> threadDelay 300
      taken <- concat <$> mapM wait takers
      RArray left <- cmd b ["LRANGE", "br:q", "0", "-1"]
      let got = taken ++ [ x | RBulk x <- left ]
      -- Lost, and taken twice.
      (sort pushed \\ sort got, sort got \\ sort pushed) `shouldBe` ([], [])
      waitBlocked b 0

  it "expires keys with EXPIRE and PEXPIRE on weft timers" $ \addr -> withClient addr $ \c -> do
    run c [ ["SET", "e1", "v"], ["EXPIRE", "e1", "1"], ["TTL", "e1"], ["EXPIRE", "nokey", "1"]
          , ["SET", "e2", "v"], ["PEXPIRE", "e2", "60"], ["SET", "e3", "v", "PX", "60"]
          , ["SET", "e4", "v"], ["PEXPIRE", "e4", "60"], ["SET", "e4", "w"], ["TTL", "e4"]
          , ["SET", "e5", "v"], ["EXPIRE", "e5", "0"], ["EXISTS", "e5"] ]
      `shouldReturn` [ ok, RInt 1, RInt 1, RInt 0, ok, RInt 1, ok, ok, RInt 1, ok, RInt (-1), ok, RInt 1, RInt 0 ]
    threadDelay 200000
    run c [["GET", "e2"], ["EXISTS", "e3"], ["GET", "e4"], ["GET", "e1"], ["TTL", "e2"]]
      `shouldReturn` [RNil, RInt 0, bulk "w", bulk "v", RInt (-2)]
    threadDelay 900000
    run c [["GET", "e1"], ["EXISTS", "e1"]] `shouldReturn` [RNil, RInt 0]
  where
    -- Forty rounds of a test of two blocked clients (and one that pushes)
    -- on one key, with two fresh elements per round.
    blockedRounds addr key body = withClient addr $ \b -> withClient addr $ \a1 -> withClient addr $ \a2 -> do
      _ <- cmd b ["DEL", key]
      forM_ [1 .. 40 :: Int] $ \i -> body b a1 a2 (C.pack ("x" ++ show i)) (C.pack ("y" ++ show i))
    withClients addr n act = go n []
      where go 0 cs = act (reverse cs)
            go k cs = withClient addr (\c -> go (k - 1 :: Int) (c : cs))
