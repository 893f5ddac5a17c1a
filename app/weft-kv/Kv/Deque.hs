{-# LANGUAGE BangPatterns, MagicHash, UnboxedTuples #-}
-- | A list value as weft-kv keeps it: a mutable deque of strings packed
-- into nodes that the garbage collector neither copies nor looks inside
-- (Note [Lists in nodes]). The test suite checks every operation against
-- a plain list.
module Kv.Deque
  ( Deque
  , newDeque
  , dequeLength
  , dequeFromList
  , dequeToList
  , pushHead
  , pushTail
  , popHead
  , popTail
  , dropHead
  , dropTail
  , dequeIndex
  , dequeFoldRange
  , dequeBytes
  , dequeFromBytes
  , sameDeque
  , dequeNodes
  , nodeBytes
  , copyIn
  ) where

import Control.Monad (when)
import Control.Monad.Primitive (RealWorld)
import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Primitive.Array
import Data.Primitive.ByteArray
import Data.Primitive.PrimArray
import GHC.Exts (Int (..), Ptr (..), copyAddrToByteArray#, readWord8ArrayAsWord32#, writeWord8ArrayAsWord32#)
import GHC.IO (IO (..), unsafePerformIO)
import GHC.Word (Word32 (..))

import Kv.Record (joinStrings, recordedItems, splitStrings)

-- Note [Lists in nodes]
-- ~~~~~~~~~~~~~~~~~~~~~
-- A list that grows with the workload (LPUSH/RPUSH onto one key) must not
-- cost the collector in proportion to its length, nor a push an object
-- per element. As redis's quicklist, a list is a sequence of nodes, each
-- a byte array holding elements back to back; unlike its nodes, these
-- are mutable and written in place, so a push copies the element's bytes
-- into the end node and allocates nothing else. A node of 'nodeBytes' is
-- a large object to GHC's collector (a block of its own, at least 80% of
-- it used): never copied, only relinked, and never scanned, having no
-- pointers. The nodes sit in a ring (a mutable array, doubled when full),
-- so a node is added or removed at either end in constant time.
--
-- An element is its length (4 bytes), its bytes, and its length again,
-- so that a node is walked from either end. A node's elements lie at
-- bytes @lo@ to @hi@ of it; a push at the head writes below @lo@, one at
-- the tail from @hi@. A list's first node starts just large enough for
-- its first element and doubles as it fills, up to 'nodeBytes', so that a
-- short list costs bytes near its elements'; a node that has reached
-- 'nodeBytes' (or is not the end's only room) is followed by a new node
-- of 'nodeBytes'. An element too large for a node gets a node of its
-- own, exactly its size. No node is empty: a node that a pop or a drop
-- empties leaves the ring. So the length is the sum of the nodes' counts.
--
-- The list is mutable, so only the key's color touches it, and only in
-- IO; the commands on lists answer 'Kv.Store.InPlace' (Note [Values
-- changed in place] in "Kv.Store"). An element read out is a copy; a
-- pushed element is copied in, so the caller may pass a slice of a
-- request. A key holds its own list; a list carried to another key
-- (RENAME, COPY) is rebuilt there from its elements.

-- | A list: its counts ('mLength', 'mFirst', 'mNodes') and its ring.
data Deque = Deque !(MutablePrimArray RealWorld Int) !(IORef Ring)

-- | The nodes, node k of the list at slot (first + k) modulo the ring's
-- size, and for each slot its node's @lo@, @hi@ and count.
data Ring = Ring !(MutableArray RealWorld Node) !(MutablePrimArray RealWorld Int)

type Node = MutableByteArray RealWorld

mLength, mFirst, mNodes :: Int
mLength = 0
mFirst = 1
mNodes = 2

-- | The size of a full node: with its array's header (two words), one
-- 4 KiB block.
nodeBytes :: Int
nodeBytes = 4096 - 16

-- | The size of a list's first node: its first element's, rounded up.
firstNodeBytes :: Int -> Int
firstNodeBytes need = min nodeBytes (max 64 (roundUp need))
  where roundUp n = (n + 63) `div` 64 * 64

-- | What an element takes in a node beyond its bytes.
itemOverhead :: Int
itemOverhead = 8

-- | The node of an emptied slot: nothing refers to a node that left.
noNode :: Node
noNode = unsafePerformIO (newByteArray 0)
{-# NOINLINE noNode #-}

newDeque :: IO Deque
newDeque = do
  counts <- newPrimArray 3
  setPrimArray counts 0 3 0
  Deque counts <$> (newRing 2 >>= newIORef)

newRing :: Int -> IO Ring
newRing n = do
  info <- newPrimArray (3 * n)
  setPrimArray info 0 (3 * n) 0
  Ring <$> newArray n noNode <*> pure info

-- | Are these the same list (not merely equal ones)?
sameDeque :: Deque -> Deque -> Bool
sameDeque (Deque a _) (Deque b _) = sameMutablePrimArray a b

meta :: Deque -> Int -> IO Int
meta (Deque m _) = readPrimArray m
{-# INLINE meta #-}

setMeta :: Deque -> Int -> Int -> IO ()
setMeta (Deque m _) = writePrimArray m
{-# INLINE setMeta #-}

dequeLength :: Deque -> IO Int
dequeLength d = meta d mLength

-- | How many nodes the list has, and their sizes: for the tests of Note
-- [Lists in nodes].
dequeNodes :: Deque -> IO [(Int, Int)]
dequeNodes d = do
  n <- meta d mNodes
  mapM (\k -> slotOf d k >>= \(Ring nodes info, s) -> do
           node <- readArray nodes s
           count <- readPrimArray info (3 * s + 2)
           size <- getSizeofMutableByteArray node
           return (size, count)) [0 .. n - 1]

-- | The ring and the slot of node k (0: the first).
slotOf :: Deque -> Int -> IO (Ring, Int)
slotOf d@(Deque _ ref) k = do
  ring@(Ring nodes _) <- readIORef ref
  first <- meta d mFirst
  return (ring, (first + k) `rem` sizeofMutableArray nodes)
{-# INLINE slotOf #-}

-- | The elements, pushed at the tail in order.
dequeFromList :: [ByteString] -> IO Deque
dequeFromList xs = do
  d <- newDeque
  mapM_ (pushTail d) xs
  return d

-- | The elements, in order, each a copy.
dequeToList :: Deque -> IO [ByteString]
dequeToList d = do
  n <- dequeLength d
  reverse <$> dequeFoldRange (\acc node off len -> (: acc) <$> copyOut node off len) [] 0 (n - 1) d

-- | A short list's elements as bytes for a record of its key (Note
-- [Small values in records] in "Kv.Store"): at most 'recordedItems'
-- elements, else 'Nothing'.
dequeBytes :: Deque -> IO (Maybe ByteString)
dequeBytes d = do
  n <- dequeLength d
  if n <= recordedItems then Just . joinStrings <$> dequeToList d else return Nothing

-- | The list 'dequeBytes' wrote.
dequeFromBytes :: ByteString -> IO Deque
dequeFromBytes = dequeFromList . splitStrings

------------------------------------------------------------------------------
-- Pushes

-- | Push a copy of the element at the head.
pushHead :: Deque -> ByteString -> IO ()
pushHead d x = do
  let need = B.length x + itemOverhead
  withRoom d True need $ \nodes info s -> do
    node <- readArray nodes s
    lo <- readPrimArray info (3 * s)
    let start = lo - need
    writeItem node start x
    writePrimArray info (3 * s) start
    bumpCount info s 1
  setMeta d mLength . (+ 1) =<< meta d mLength

-- | Push a copy of the element at the tail.
pushTail :: Deque -> ByteString -> IO ()
pushTail d x = do
  let need = B.length x + itemOverhead
  withRoom d False need $ \nodes info s -> do
    node <- readArray nodes s
    hi <- readPrimArray info (3 * s + 1)
    writeItem node hi x
    writePrimArray info (3 * s + 1) (hi + need)
    bumpCount info s 1
  setMeta d mLength . (+ 1) =<< meta d mLength

-- | Run the writer with the slot of the node at the head or tail once it
-- has @need@ bytes free at that side: the end node as it is, grown if it
-- is the list's only one and below 'nodeBytes', or a new node.
withRoom :: Deque -> Bool -> Int -> (MutableArray RealWorld Node -> MutablePrimArray RealWorld Int -> Int -> IO ()) -> IO ()
withRoom d@(Deque _ ref) atHead need write = do
  n <- meta d mNodes
  if n == 0 then fresh else do
    Ring nodes info <- readIORef ref
    first <- meta d mFirst
    let s = if atHead then first else (first + n - 1) `rem` sizeofMutableArray nodes
    node <- readArray nodes s
    lo <- readPrimArray info (3 * s)
    hi <- readPrimArray info (3 * s + 1)
    size <- getSizeofMutableByteArray node
    let used = hi - lo
    if (if atHead then lo else size - hi) >= need then write nodes info s
    else if n == 1 && size < nodeBytes && used + need <= nodeBytes then do
      grow nodes info s node lo used (min nodeBytes (max (2 * size) (used + need))) atHead
      write nodes info s
    else fresh
  where
    fresh = do
      s <- addNode d atHead need
      Ring nodes info <- readIORef ref
      write nodes info s
{-# INLINE withRoom #-}

-- | Move a node's elements into a larger array: at its end for pushes at
-- the head, at its start for pushes at the tail.
grow :: MutableArray RealWorld Node -> MutablePrimArray RealWorld Int -> Int -> Node -> Int -> Int -> Int -> Bool -> IO ()
grow nodes info s node lo used size atHead = do
  node' <- newByteArray size
  let lo' = if atHead then size - used else 0
  copyMutableByteArray node' lo' node lo used
  writeArray nodes s node'
  writePrimArray info (3 * s) lo'
  writePrimArray info (3 * s + 1) (lo' + used)

-- | A new empty node at the head or tail with room for an element taking
-- @need@ bytes; its slot.
addNode :: Deque -> Bool -> Int -> IO Int
addNode d@(Deque _ ref) atHead need = do
  n <- meta d mNodes
  Ring nodes0 _ <- readIORef ref
  when (n == sizeofMutableArray nodes0) (widen d)
  Ring nodes info <- readIORef ref
  first <- meta d mFirst
  let cap = sizeofMutableArray nodes
      size | need > nodeBytes = need
           | n == 0 = firstNodeBytes need
           | otherwise = nodeBytes
      s = if atHead then (first + cap - 1) `rem` cap else (first + n) `rem` cap
      edge = if atHead then size else 0
  node <- newByteArray size
  writeArray nodes s node
  writePrimArray info (3 * s) edge
  writePrimArray info (3 * s + 1) edge
  writePrimArray info (3 * s + 2) 0
  when atHead (setMeta d mFirst s)
  setMeta d mNodes (n + 1)
  return s

-- | Double the ring, its nodes from slot 0 on.
widen :: Deque -> IO ()
widen d@(Deque _ ref) = do
  Ring nodes info <- readIORef ref
  n <- meta d mNodes
  first <- meta d mFirst
  let cap = sizeofMutableArray nodes
  ring'@(Ring nodes' info') <- newRing (2 * cap)
  let move :: Int -> IO ()
      move k = when (k < n) $ do
        let s = (first + k) `rem` cap
        readArray nodes s >>= writeArray nodes' k
        copyMutablePrimArray info' (3 * k) info (3 * s) 3
        move (k + 1)
  move 0
  writeIORef ref ring'
  setMeta d mFirst 0

bumpCount :: MutablePrimArray RealWorld Int -> Int -> Int -> IO ()
bumpCount info s k = readPrimArray info (3 * s + 2) >>= writePrimArray info (3 * s + 2) . (+ k)
{-# INLINE bumpCount #-}

------------------------------------------------------------------------------
-- Pops and drops

-- | Remove the first element and give a copy of it.
popHead :: Deque -> IO (Maybe ByteString)
popHead d = do
  n <- meta d mNodes
  if n == 0 then return Nothing else do
    (Ring nodes info, s) <- slotOf d 0
    node <- readArray nodes s
    lo <- readPrimArray info (3 * s)
    len <- readLength node lo
    x <- copyOut node (lo + 4) len
    dropHead 1 d
    return (Just x)

-- | Remove the last element and give a copy of it.
popTail :: Deque -> IO (Maybe ByteString)
popTail d = do
  n <- meta d mNodes
  if n == 0 then return Nothing else do
    (Ring nodes info, s) <- slotOf d (n - 1)
    node <- readArray nodes s
    hi <- readPrimArray info (3 * s + 1)
    len <- readLength node (hi - 4)
    x <- copyOut node (hi - 4 - len) len
    dropTail 1 d
    return (Just x)

-- | Remove the first k elements (all of them if k is the length or more).
dropHead :: Int -> Deque -> IO ()
dropHead k d = when (k > 0) $ do
  n <- meta d mNodes
  when (n > 0) $ do
    (Ring nodes info, s) <- slotOf d 0
    count <- readPrimArray info (3 * s + 2)
    if count <= k
      then do
        writeArray nodes s noNode
        setMeta d mFirst ((s + 1) `rem` sizeofMutableArray nodes)
        setMeta d mNodes (n - 1)
        setMeta d mLength . subtract count =<< meta d mLength
        dropHead (k - count) d
      else do
        node <- readArray nodes s
        lo <- readPrimArray info (3 * s)
        let skip !j !at | j == 0 = return at
                        | otherwise = readLength node at >>= \len -> skip (j - 1) (at + len + itemOverhead)
        lo' <- skip k lo
        writePrimArray info (3 * s) lo'
        bumpCount info s (negate k)
        setMeta d mLength . subtract k =<< meta d mLength

-- | Remove the last k elements (all of them if k is the length or more).
dropTail :: Int -> Deque -> IO ()
dropTail k d = when (k > 0) $ do
  n <- meta d mNodes
  when (n > 0) $ do
    (Ring nodes info, s) <- slotOf d (n - 1)
    count <- readPrimArray info (3 * s + 2)
    if count <= k
      then do
        writeArray nodes s noNode
        setMeta d mNodes (n - 1)
        setMeta d mLength . subtract count =<< meta d mLength
        dropTail (k - count) d
      else do
        node <- readArray nodes s
        hi <- readPrimArray info (3 * s + 1)
        let skip !j !at | j == 0 = return at
                        | otherwise = readLength node (at - 4) >>= \len -> skip (j - 1) (at - len - itemOverhead)
        hi' <- skip k hi
        writePrimArray info (3 * s + 1) hi'
        bumpCount info s (negate k)
        setMeta d mLength . subtract k =<< meta d mLength

------------------------------------------------------------------------------
-- Reads

-- | A copy of the element at an index from the head (0 based), if there
-- is one. Walks from the nearer end.
dequeIndex :: Int -> Deque -> IO (Maybe ByteString)
dequeIndex i d = do
  len <- dequeLength d
  if i < 0 || i >= len then return Nothing else
    if i < len `div` 2
      then dequeFoldRange (\_ node off n -> Just <$> copyOut node off n) Nothing i i d
      else do
        -- From the tail: the node holding it, then back within that node.
        n <- meta d mNodes
        let go !k !j = do
              (Ring nodes info, s) <- slotOf d k
              count <- readPrimArray info (3 * s + 2)
              if j < count
                then do
                  node <- readArray nodes s
                  hi <- readPrimArray info (3 * s + 1)
                  let back !m !at = do
                        l <- readLength node (at - 4)
                        if m == 0 then Just <$> copyOut node (at - 4 - l) l else back (m - 1) (at - l - itemOverhead)
                  back j hi
                else go (k - 1) (j - count)
        go (n - 1) (len - 1 - i)

-- | A strict fold over the elements at indices a to b (both included, 0
-- based, within the list), in order, none of them copied: each is passed
-- as its node, where its bytes start and its length, for the function to
-- copy out at once what it keeps. No more elements are visited than those.
dequeFoldRange :: (acc -> Node -> Int -> Int -> IO acc) -> acc -> Int -> Int -> Deque -> IO acc
dequeFoldRange f acc0 a b d
  | a > b = return acc0
  | otherwise = seekNode 0 a
  where
    -- Node k holds index j of the rest, or a later node does.
    seekNode !k !j = do
      (Ring _ info, s) <- slotOf d k
      count <- readPrimArray info (3 * s + 2)
      if j < count then seekItem k s j else seekNode (k + 1) (j - count)
    seekItem k s j = do
      (Ring nodes info, _) <- slotOf d k
      node <- readArray nodes s
      lo <- readPrimArray info (3 * s)
      let skip !m !at | m == 0 = return at
                      | otherwise = readLength node at >>= \l -> skip (m - 1) (at + l + itemOverhead)
      at <- skip j lo
      count <- readPrimArray info (3 * s + 2)
      items k node at (count - j) (b - a + 1) acc0
    -- @left@ elements of node k from @at@, @want@ still wanted.
    items !k node !at !left !want !acc
      | want == 0 = return acc
      | left == 0 = do
          (Ring nodes info, s) <- slotOf d (k + 1)
          node' <- readArray nodes s
          lo <- readPrimArray info (3 * s)
          count <- readPrimArray info (3 * s + 2)
          items (k + 1) node' lo count want acc
      | otherwise = do
          l <- readLength node at
          acc' <- f acc node (at + 4) l
          items k node (at + l + itemOverhead) (left - 1) (want - 1) acc'
{-# INLINE dequeFoldRange #-}

------------------------------------------------------------------------------
-- Elements in nodes

-- | Write an element (length, bytes, length) at an offset of a node.
writeItem :: Node -> Int -> ByteString -> IO ()
writeItem node at x = do
  let len = B.length x
  writeLength node at len
  BU.unsafeUseAsCString x $ \p -> copyIn p node (at + 4) len
  writeLength node (at + 4 + len) len

writeLength :: Node -> Int -> Int -> IO ()
writeLength (MutableByteArray m) (I# at) len = case fromIntegral len of
  W32# w -> IO (\s -> (# writeWord8ArrayAsWord32# m at w s, () #))
{-# INLINE writeLength #-}

readLength :: Node -> Int -> IO Int
readLength (MutableByteArray m) (I# at) =
  IO (\s -> case readWord8ArrayAsWord32# m at s of (# s', w #) -> (# s', fromIntegral (W32# w) #))
{-# INLINE readLength #-}

-- | A copy of bytes of a node, as a string of its own.
copyOut :: Node -> Int -> Int -> IO ByteString
copyOut node off len = BI.create len (\p -> copyMutableByteArrayToPtr p node off len)

-- | Copy bytes from memory into a byte array, at an offset.
copyIn :: Ptr a -> MutableByteArray RealWorld -> Int -> Int -> IO ()
copyIn (Ptr addr) (MutableByteArray arr) (I# off) (I# len) =
  IO (\s -> (# copyAddrToByteArray# addr arr off len s, () #))
