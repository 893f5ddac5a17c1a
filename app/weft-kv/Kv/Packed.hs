{-# LANGUAGE BangPatterns #-}
-- | A sorted set's contents as weft-kv keeps them (two of these: Note
-- [Sorted sets packed] in "Kv.Sorted"): a persistent map from strings to
-- strings, in byte order, whose bulk the garbage collector does not walk
-- (Note [Packed maps]). Pure; the test suite checks every operation
-- against "Data.Map".
module Kv.Packed
  ( Packed
  , packedEmpty
  , packedNull
  , packedSize
  , packedLookup
  , packedFind
  , Slice (..)
  , packedInsert
  , packedDelete
  , packedIndex
  , packedAt
  , packedDeleteAt
  , packedToAscList
  , packedToDescList
  , packedAscFrom
  , packedDescFrom
  , packedFromAscList
  , packedFlatSize
  , packedWriteFlat
  , packedReadFlat
  , packedLeafSizes
  , packedBalanced
  ) where

import Data.ByteString (ByteString)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.Primitive.ByteArray
import Data.Primitive.PrimArray
import Control.Monad.Primitive (RealWorld)
import Data.Word (Word8)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (peekElemOff, pokeElemOff)
import GHC.ForeignPtr (unsafeWithForeignPtr)
import GHC.IO (unsafeDupablePerformIO)

import Kv.Deque (copyIn)
import Kv.Str (unpinnedCopy)

-- Note [Packed maps]
-- ~~~~~~~~~~~~~~~~~~
-- A sorted set that grows with the workload (ZADD of new members onto one
-- key) would, as a "Data.Map" of strings, be several heap objects per
-- member: a tree node, and for each string its constructor and its
-- buffer. Every major collection copies them all, a cost that grows with
-- the members. (A hash's or set's members, which need no order, are a
-- mutable table instead: Note [Members in tables] in "Kv.Members".)
-- So members live in leaves: one unpinned byte array holding up to
-- 'leafMaxItems' members and their values back to back, in byte order of
-- the members, and an unboxed array of where each member and value ends.
-- The collector copies a leaf as two flat arrays and never looks inside.
--
-- The leaves hang in a weight-balanced tree (balanced by its leaves, as
-- "Data.Map" balances by its keys), each node knowing how many leaves and
-- how many members are below it, so that a member's rank and the member
-- at a rank (ZRANK, ZRANGE by rank, a random pick) cost a walk down the
-- tree. In order, every member of a node's left subtree sorts before the
-- node's leaf's, and every one of the right subtree after them. A member
-- that falls between two leaves goes into the upper of the two, found by
-- walking down: the node's leaf takes a member outside its own range
-- only when the subtree on that side is empty.
--
-- A write copies the leaf it touches and the path above it, as a
-- persistent tree does, so a value stays immutable and an old version can
-- be read while a new one is made. A leaf that would pass 'leafMaxItems'
-- members or 'leafMaxBytes' bytes (with at least two members) splits in
-- two halves; one emptied by deletes leaves the tree. Leaves are not
-- merged: a map whose members were mostly deleted keeps small leaves,
-- at worst one per member, which is no worse than "Data.Map".
--
-- Strings read out of a leaf are copied into strings of their own, so no
-- reply or part retains a leaf; only 'packedFind' points into one, for a
-- caller that reads the bytes at once (a sorted set's score).

-- | The members and their values.
newtype Packed = Packed Tree

data Tree
  = Tip
  | Bin {-# UNPACK #-} !Int   -- leaves in the tree
        {-# UNPACK #-} !Int   -- members in the tree
        {-# UNPACK #-} !Leaf
        !Tree !Tree

-- | Members and values: the bytes, and where each member and each value
-- ends (element 0 is 0; member i spans elements 2i to 2i+1, its value
-- 2i+1 to 2i+2).
data Leaf = Leaf {-# UNPACK #-} !ByteArray {-# UNPACK #-} !(PrimArray Int)

-- | Most members a leaf holds.
leafMaxItems :: Int
leafMaxItems = 32

-- | Most bytes a leaf of more than one member holds, so that a write
-- copies at most this much besides its own member and value.
leafMaxBytes :: Int
leafMaxBytes = 4096

packedEmpty :: Packed
packedEmpty = Packed Tip

packedNull :: Packed -> Bool
packedNull (Packed Tip) = True
packedNull _ = False

packedSize :: Packed -> Int
packedSize (Packed t) = treeItems t

------------------------------------------------------------------------------
-- Leaves

leafItems :: Leaf -> Int
leafItems (Leaf _ o) = (sizeofPrimArray o - 1) `quot` 2
{-# INLINE leafItems #-}

leafBytes :: Leaf -> Int
leafBytes (Leaf _ o) = indexPrimArray o (sizeofPrimArray o - 1)
{-# INLINE leafBytes #-}

-- | A string looked for, copied into a byte array so that it is compared
-- with a leaf's members by 'compareByteArrays' (memcmp), which is faster
-- than reading the string's bytes one by one.
newtype Probe = Probe ByteArray

-- | Look for a string.
withProbe :: ByteString -> (Probe -> a) -> a
withProbe k f = f (Probe (unsafeDupablePerformIO (unpinnedCopy k)))
{-# INLINE withProbe #-}

-- | A member of the leaf against a string: the string's order with it.
compareAt :: Probe -> Leaf -> Int -> Ordering
compareAt (Probe k) (Leaf b o) i =
  let !s = indexPrimArray o (2 * i)
      !n = indexPrimArray o (2 * i + 1) - s
      !m = sizeofByteArray k
  in case compareByteArrays k 0 b s (min m n) of
       EQ -> compare m n
       r -> r
{-# INLINE compareAt #-}

-- | Where the string is among the leaf's members: its index if it is one
-- (at least 0), else minus one less the index it would be inserted at.
search :: Probe -> Leaf -> Int
search k l = go 0 (leafItems l)
  where
    go !lo !hi
      | lo >= hi = -1 - lo
      | otherwise =
          let mid = (lo + hi) `quot` 2
          in case compareAt k l mid of
               LT -> go lo mid
               GT -> go (mid + 1) hi
               EQ -> mid

-- | Bytes of a leaf, copied into a string of their own.
sliceOut :: ByteArray -> Int -> Int -> ByteString
sliceOut b s e
  | e == s = B.empty
  | otherwise = BI.unsafeCreate (e - s) (\p -> copyByteArrayToAddr p b s (e - s))

memberOf, valueOf :: Leaf -> Int -> ByteString
memberOf (Leaf b o) i = sliceOut b (indexPrimArray o (2 * i)) (indexPrimArray o (2 * i + 1))
valueOf (Leaf b o) i = sliceOut b (indexPrimArray o (2 * i + 1)) (indexPrimArray o (2 * i + 2))

itemOf :: Leaf -> Int -> (ByteString, ByteString)
itemOf l i = (memberOf l i, valueOf l i)

-- | Copy a string into a new leaf's bytes.
putString :: MutableByteArray RealWorld -> Int -> ByteString -> IO ()
putString mb at (BI.PS fp off n)
  | n == 0 = return ()
  | otherwise = unsafeWithForeignPtr fp (\p -> copyIn (p `plusPtr` off) mb at n)

-- | A leaf of the given members and values, in order.
leafFromList :: [(ByteString, ByteString)] -> Leaf
leafFromList kvs = unsafeDupablePerformIO $ do
  let n = length kvs
      total = sum [ B.length k + B.length v | (k, v) <- kvs ]
  mb <- newByteArray total
  mo <- newPrimArray (2 * n + 1)
  writePrimArray mo 0 0
  let go !_ !_ [] = return ()
      go i at ((k, v) : rest) = do
        putString mb at k
        let !ke = at + B.length k
        putString mb ke v
        let !ve = ke + B.length v
        writePrimArray mo (2 * i + 1) ke
        writePrimArray mo (2 * i + 2) ve
        go (i + 1) ve rest
  go (0 :: Int) 0 kvs
  Leaf <$> unsafeFreezeByteArray mb <*> unsafeFreezePrimArray mo

-- | The leaf with a new member and value at index i.
leafInsert :: Int -> ByteString -> ByteString -> Leaf -> Leaf
leafInsert i k v (Leaf b o) = unsafeDupablePerformIO $ do
  let !n = (sizeofPrimArray o - 1) `quot` 2
      !total = indexPrimArray o (2 * n)
      !at = indexPrimArray o (2 * i)
      !kl = B.length k
      !d = kl + B.length v
  mb <- newByteArray (total + d)
  copyByteArray mb 0 b 0 at
  putString mb at k
  putString mb (at + kl) v
  copyByteArray mb (at + d) b at (total - at)
  mo <- newPrimArray (2 * n + 3)
  copyPrimArray mo 0 o 0 (2 * i + 1)
  writePrimArray mo (2 * i + 1) (at + kl)
  let shift !j | j > 2 * n = return ()
               | otherwise = writePrimArray mo (j + 2) (indexPrimArray o j + d) >> shift (j + 1)
  writePrimArray mo (2 * i + 2) (at + d)
  shift (2 * i + 1)
  Leaf <$> unsafeFreezeByteArray mb <*> unsafeFreezePrimArray mo

-- | The leaf with member i's value replaced.
leafSetValue :: Int -> ByteString -> Leaf -> Leaf
leafSetValue i v (Leaf b o) = unsafeDupablePerformIO $ do
  let !n = (sizeofPrimArray o - 1) `quot` 2
      !total = indexPrimArray o (2 * n)
      !vs = indexPrimArray o (2 * i + 1)
      !ve = indexPrimArray o (2 * i + 2)
      !d = B.length v - (ve - vs)
  mb <- newByteArray (total + d)
  copyByteArray mb 0 b 0 vs
  putString mb vs v
  copyByteArray mb (vs + B.length v) b ve (total - ve)
  mo <- newPrimArray (2 * n + 1)
  copyPrimArray mo 0 o 0 (2 * i + 2)
  let shift !j | j > 2 * n = return ()
               | otherwise = writePrimArray mo j (indexPrimArray o j + d) >> shift (j + 1)
  shift (2 * i + 2)
  Leaf <$> unsafeFreezeByteArray mb <*> unsafeFreezePrimArray mo

-- | Members a to b - 1 of the leaf, as a leaf of their own.
leafSlice :: Int -> Int -> Leaf -> Leaf
leafSlice a z (Leaf b o) = unsafeDupablePerformIO $ do
  let !s = indexPrimArray o (2 * a)
      !e = indexPrimArray o (2 * z)
  mb <- newByteArray (e - s)
  copyByteArray mb 0 b s (e - s)
  mo <- newPrimArray (2 * (z - a) + 1)
  let fill !j | j > 2 * (z - a) = return ()
              | otherwise = writePrimArray mo j (indexPrimArray o (2 * a + j) - s) >> fill (j + 1)
  fill 0
  Leaf <$> unsafeFreezeByteArray mb <*> unsafeFreezePrimArray mo

-- | The leaf without member i ('Nothing' if that was its only one).
leafDelete :: Int -> Leaf -> Maybe Leaf
leafDelete i l@(Leaf b o)
  | n == 1 = Nothing
  | otherwise = Just $ unsafeDupablePerformIO $ do
      let !total = indexPrimArray o (2 * n)
          !s = indexPrimArray o (2 * i)
          !e = indexPrimArray o (2 * i + 2)
          !d = e - s
      mb <- newByteArray (total - d)
      copyByteArray mb 0 b 0 s
      copyByteArray mb s b e (total - e)
      mo <- newPrimArray (2 * n - 1)
      copyPrimArray mo 0 o 0 (2 * i + 1)
      let shift !j | j > 2 * n - 2 = return ()
                   | otherwise = writePrimArray mo j (indexPrimArray o (j + 2) - d) >> shift (j + 1)
      shift (2 * i + 1)
      Leaf <$> unsafeFreezeByteArray mb <*> unsafeFreezePrimArray mo
  where n = leafItems l

-- | What a write did to a leaf.
data Change
  = Same             -- ^ nothing
  | One !Leaf        -- ^ replaced it
  | Two !Leaf !Leaf  -- ^ split it in two, in order
  | Gone             -- ^ emptied it

-- | A grown leaf, split in halves if it holds too much (Note [Packed maps]).
settle :: Leaf -> Change
settle l
  | n > leafMaxItems || (n > 1 && leafBytes l > leafMaxBytes) =
      let h = n `quot` 2 in Two (leafSlice 0 h l) (leafSlice h n l)
  | otherwise = One l
  where n = leafItems l

------------------------------------------------------------------------------
-- The tree of leaves

treeLeaves, treeItems :: Tree -> Int
treeLeaves Tip = 0
treeLeaves (Bin n _ _ _ _) = n
treeItems Tip = 0
treeItems (Bin _ n _ _ _) = n

node :: Leaf -> Tree -> Tree -> Tree
node x l r = Bin (treeLeaves l + treeLeaves r + 1) (treeItems l + treeItems r + leafItems x) x l r

-- | A node whose subtrees were balanced, but for one leaf added to or
-- taken from one side, made balanced: "Data.Map"'s rotations, with its
-- parameters (a side at most 3 times the other, a single rotation while
-- the inner grandchild is under twice the outer).
balance :: Leaf -> Tree -> Tree -> Tree
balance x l r
  | sl + sr <= 1 = node x l r
  | sr > 3 * sl = rotateL
  | sl > 3 * sr = rotateR
  | otherwise = node x l r
  where
    sl = treeLeaves l
    sr = treeLeaves r
    rotateL = case r of
      Bin _ _ y rl rr
        | treeLeaves rl < 2 * treeLeaves rr -> node y (node x l rl) rr
        | Bin _ _ z rll rlr <- rl -> node z (node x l rll) (node y rlr rr)
      _ -> node x l r
    rotateR = case l of
      Bin _ _ y ll lr
        | treeLeaves lr < 2 * treeLeaves ll -> node y ll (node x lr r)
        | Bin _ _ z lrl lrr <- lr -> node z (node y ll lrl) (node x lrr r)
      _ -> node x l r

insertMin :: Leaf -> Tree -> Tree
insertMin x Tip = node x Tip Tip
insertMin x (Bin _ _ y l r) = balance y (insertMin x l) r

-- | Two trees, every member of the first before the second's, joined.
glue :: Tree -> Tree -> Tree
glue Tip r = r
glue l Tip = l
glue l r
  | treeLeaves l > treeLeaves r = let (m, l') = takeMax l in balance m l' r
  | otherwise = let (m, r') = takeMin r in balance m l r'
  where
    takeMin (Bin _ _ x Tip b) = (x, b)
    takeMin (Bin _ _ x a b) = let (m, a') = takeMin a in (m, balance x a' b)
    takeMin Tip = error "Kv.Packed.glue: empty tree"
    takeMax (Bin _ _ x a Tip) = (x, a)
    takeMax (Bin _ _ x a b) = let (m, b') = takeMax b in (m, balance x a b')
    takeMax Tip = error "Kv.Packed.glue: empty tree"

-- | A node after its leaf's change.
rebuild :: Change -> Tree -> Tree -> Maybe Tree
rebuild c l r = case c of
  Same -> Nothing
  One x -> Just (node x l r)
  Two x y -> Just (balance x l (insertMin y r))
  Gone -> Just (glue l r)

-- | Change the leaf that holds, or would take, the string ('Nothing':
-- nothing changed). An empty tree offers an empty leaf's change no leaf:
-- the caller deals with it.
atMember :: Probe -> (Leaf -> Change) -> Tree -> Maybe Tree
atMember k f = go
  where
    go Tip = Nothing
    go (Bin _ _ x l r)
      | notTip l, compareAt k x 0 == LT = (\l' -> balance x l' r) <$> go l
      | notTip r, compareAt k x (leafItems x - 1) == GT = balance x l <$> go r
      | otherwise = rebuild (f x) l r
    notTip Tip = False
    notTip _ = True

-- | Change the leaf that holds the member at a rank (in range).
atRank :: Int -> (Int -> Leaf -> Change) -> Tree -> Maybe Tree
atRank i0 f = go i0
  where
    go _ Tip = Nothing
    go i (Bin _ _ x l r)
      | i < nl = (\l' -> balance x l' r) <$> go i l
      | i < nl + leafItems x = rebuild (f (i - nl) x) l r
      | otherwise = balance x l <$> go (i - nl - leafItems x) r
      where nl = treeItems l

------------------------------------------------------------------------------
-- Operations

-- | A member's value.
packedLookup :: ByteString -> Packed -> Maybe ByteString
packedLookup k p = case packedFind k p of
  Just (Slice b s e) -> Just (sliceOut b s e)
  Nothing -> Nothing

-- | Bytes in a leaf: the array, where they start and where they end.
data Slice = Slice !ByteArray {-# UNPACK #-} !Int {-# UNPACK #-} !Int

-- | Where a member's value is, to be read without a copy (it stays as
-- long as the map that holds it).
packedFind :: ByteString -> Packed -> Maybe Slice
packedFind k0 (Packed t0) = withProbe k0 (\k -> go k t0)
  where
    go _ Tip = Nothing
    go k (Bin _ _ x@(Leaf b o) l r) = case search k x of
      i | i >= 0 -> Just $! Slice b (indexPrimArray o (2 * i + 1)) (indexPrimArray o (2 * i + 2))
        | i == -1, notTip l -> go k l
        | i == -1 - leafItems x, notTip r -> go k r
        | otherwise -> Nothing
    notTip Tip = False
    notTip _ = True

-- | Give a member a value (replacing its old one). The bytes are copied
-- in: the strings may be slices of a request.
packedInsert :: ByteString -> ByteString -> Packed -> Packed
packedInsert k v (Packed Tip) = Packed (node (leafFromList [(k, v)]) Tip Tip)
packedInsert k v p@(Packed t) = maybe p Packed (withProbe k (\pk -> atMember pk (put pk) t))
  where
    put pk x = case search pk x of
      i | i >= 0 -> One (leafSetValue i v x)
        | otherwise -> settle (leafInsert (-1 - i) k v x)

-- | The map without the member.
packedDelete :: ByteString -> Packed -> Packed
packedDelete k0 p@(Packed t) = maybe p Packed (withProbe k0 (\k -> atMember k (remove k) t))
  where
    remove k x = case search k x of
      i | i >= 0 -> maybe Gone One (leafDelete i x)
        | otherwise -> Same

-- | A member's rank: how many members sort before it.
packedIndex :: ByteString -> Packed -> Maybe Int
packedIndex k0 (Packed t0) = withProbe k0 (\k -> go k 0 t0)
  where
    go _ !_ Tip = Nothing
    go k acc (Bin _ _ x l r) = case search k x of
      i | i >= 0 -> Just (acc + treeItems l + i)
        | i == -1, notTip l -> go k acc l
        | i == -1 - leafItems x, notTip r -> go k (acc + treeItems l + leafItems x) r
        | otherwise -> Nothing
    notTip Tip = False
    notTip _ = True

-- | The member and value at a rank, from 0 (which must be in range).
packedAt :: Int -> Packed -> (ByteString, ByteString)
packedAt i0 (Packed t0) = go i0 t0
  where
    go _ Tip = error "Kv.Packed.packedAt: out of range"
    go i (Bin _ _ x l r)
      | i < nl = go i l
      | i < nl + leafItems x = itemOf x (i - nl)
      | otherwise = go (i - nl - leafItems x) r
      where nl = treeItems l

-- | The map without the member at a rank (none if out of range).
packedDeleteAt :: Int -> Packed -> Packed
packedDeleteAt i p@(Packed t)
  | i < 0 || i >= treeItems t = p
  | otherwise = maybe p Packed (atRank i (\j x -> maybe Gone One (leafDelete j x)) t)

-- | Members and values, lowest first, read out as the list is.
packedToAscList :: Packed -> [(ByteString, ByteString)]
packedToAscList = packedAscFrom 0

-- | Members and values, highest first.
packedToDescList :: Packed -> [(ByteString, ByteString)]
packedToDescList = packedDescFrom 0

-- | Members and values from a rank on, lowest first: a walk down to the
-- rank, then along.
packedAscFrom :: Int -> Packed -> [(ByteString, ByteString)]
packedAscFrom i0 (Packed t0) = go i0 t0 []
  where
    go _ Tip rest = rest
    go i (Bin _ _ x l r) rest
      | i >= nl + nx = go (i - nl - nx) r rest
      | i >= nl = leafAsc x (i - nl) (go 0 r rest)
      | otherwise = go i l (leafAsc x 0 (go 0 r rest))
      where
        nl = treeItems l
        nx = leafItems x
    leafAsc x i rest
      | i >= leafItems x = rest
      | otherwise = itemOf x i : leafAsc x (i + 1) rest

-- | Members and values from a rank counted from the highest on, highest
-- first.
packedDescFrom :: Int -> Packed -> [(ByteString, ByteString)]
packedDescFrom i0 (Packed t0) = go i0 t0 []
  where
    go _ Tip rest = rest
    go i (Bin _ _ x l r) rest
      | i >= nr + nx = go (i - nr - nx) l rest
      | i >= nr = leafDesc x (nx - 1 - (i - nr)) (go 0 l rest)
      | otherwise = go i r (leafDesc x (nx - 1) (go 0 l rest))
      where
        nr = treeItems r
        nx = leafItems x
    leafDesc x i rest
      | i < 0 = rest
      | otherwise = itemOf x i : leafDesc x (i - 1) rest

-- | The map of members in strictly ascending order, with their values.
packedFromAscList :: [(ByteString, ByteString)] -> Packed
packedFromAscList kvs = Packed (build (length leaves) leaves)
  where
    leaves = map leafFromList (groups kvs)
    -- as many members to a leaf as fit, half its room, so that the
    -- first writes do not split them all
    groups [] = []
    groups xs = let (g, rest) = fill (0 :: Int) 0 xs in g : groups rest
    fill n b (x@(k, v) : rest)
      | n == 0 || (n < leafMaxItems `quot` 2 && b + size <= leafMaxBytes `quot` 2) =
          let (g, rest') = fill (n + 1) (b + size) rest in (x : g, rest')
      where size = B.length k + B.length v
    fill _ _ rest = ([], rest)
    build _ [] = Tip
    build n xs =
      let h = n `quot` 2
      in case splitAt h xs of
           (left, x : right) -> node x (build h left) (build (n - h - 1) right)
           (_, []) -> Tip

-- | How many members each leaf holds, in order (for the tests).
packedLeafSizes :: Packed -> [Int]
packedLeafSizes (Packed t0) = go t0 []
  where
    go Tip rest = rest
    go (Bin _ _ x l r) rest = go l (leafItems x : go r rest)

-- | Is the tree balanced and are its counts right (for the tests)?
packedBalanced :: Packed -> Bool
packedBalanced (Packed t0) = ok t0
  where
    ok Tip = True
    ok (Bin n m x l r) =
      n == treeLeaves l + treeLeaves r + 1
        && m == treeItems l + treeItems r + leafItems x
        && (treeLeaves l + treeLeaves r <= 1 || (treeLeaves l <= 3 * treeLeaves r && treeLeaves r <= 3 * treeLeaves l))
        && ok l && ok r

------------------------------------------------------------------------------
-- Flat copies

-- Note [Packed maps flat]
-- ~~~~~~~~~~~~~~~~~~~~~~~~
-- A map of one leaf can be kept outside the heap (Note [Small values in
-- records] in "Kv.Store") as its leaf's two arrays one after the other:
-- the number of ends, the ends, one word each, then the bytes. Writing
-- it out and reading it back are two copies each, with no walk over the
-- members.

-- | The bytes a flat copy of the map takes, if it has at most one leaf.
packedFlatSize :: Packed -> Maybe Int
packedFlatSize (Packed Tip) = Just 8
packedFlatSize (Packed (Bin 1 _ (Leaf b o) _ _)) = Just (8 + 8 * sizeofPrimArray o + sizeofByteArray b)
packedFlatSize _ = Nothing

-- | Write the flat copy of a map of at most one leaf ('packedFlatSize').
packedWriteFlat :: Packed -> Ptr Word8 -> IO ()
packedWriteFlat (Packed (Bin _ _ (Leaf b o) _ _)) d = do
  let n = sizeofPrimArray o
  pokeElemOff (castPtr d) 0 n
  copyPrimArrayToPtr (castPtr d `plusPtr` 8) o 0 n
  copyByteArrayToPtr (d `plusPtr` (8 + 8 * n) :: Ptr Word8) b 0 (sizeofByteArray b)
packedWriteFlat _ d = pokeElemOff (castPtr d) 0 (0 :: Int)

-- | The map whose flat copy of the given length is at the address.
packedReadFlat :: Ptr Word8 -> Int -> IO Packed
packedReadFlat p len = do
  n <- peekElemOff (castPtr p) 0 :: IO Int
  if n <= 1 then return packedEmpty else do
    mo <- newByteArray (8 * n)
    copyIn (p `plusPtr` 8) mo 0 (8 * n)
    let nbytes = len - 8 - 8 * n
    mb <- newByteArray nbytes
    copyIn (p `plusPtr` (8 + 8 * n)) mb 0 nbytes
    ByteArray o <- unsafeFreezeByteArray mo
    x <- (\b -> Leaf b (PrimArray o)) <$> unsafeFreezeByteArray mb
    return (Packed (node x Tip Tip))
