{-# LANGUAGE BangPatterns #-}
-- | Reading and writing Ethernet, IPv4 and UDP headers in place, and the
-- Internet checksum.
-- Internal and unstable: import "Weft.Packet", which re-exports what users need.
--
-- Everything works on a 'Ptr' to the first byte of an Ethernet frame (for
-- a buffer, 'Weft.Packet.Internal.MemPool.bufferData'); multi-byte fields are in
-- network byte order on the wire and host values here. Nothing checks
-- bounds: the caller knows the frame is long enough ('udpPayloadOffset'
-- bytes for the headers).
module Weft.Packet.Internal.Headers
  ( -- * Addresses
    MacAddress (..)
  , showMac
  , parseMac
  , IPv4 (..)
  , ipv4
  , showIPv4
    -- * Offsets
  , ethHeaderLength
  , ipv4Offset
  , udpOffset
  , udpPayloadOffset
  , minFrameLength
    -- * Ethernet
  , EthHeader (..)
  , readEth
  , writeEth
  , etherTypeIPv4
    -- * IPv4
  , Ipv4Header (..)
  , readIpv4
  , writeIpv4
  , ipProtoUdp
    -- * UDP
  , UdpHeader (..)
  , readUdp
  , writeUdp
  , udpChecksum
    -- * Checksums
  , internetChecksum
  , ipv4HeaderChecksumOk
    -- * Byte order
  , peekBE16
  , pokeBE16
  , peekBE32
  , pokeBE32
    -- * ixy's test packet
  , testPacketSrcPort
  , testPacketDstPort
  , writeTestPacket
  ) where

import Data.Bits
import Data.Char (intToDigit)
import Data.List (intercalate)
import Data.Word
import Foreign.Marshal.Utils (fillBytes)
import Foreign.Ptr
import Foreign.Storable
import Numeric (readHex)

-- | A 48-bit Ethernet address in the low bits, first byte most significant.
newtype MacAddress = MacAddress Word64
  deriving (Eq, Ord)

instance Show MacAddress where
  show = showMac

-- | @aa:bb:cc:dd:ee:ff@.
showMac :: MacAddress -> String
showMac (MacAddress w) = intercalate ":"
  [ [intToDigit (fromIntegral (b `shiftR` 4)), intToDigit (fromIntegral (b .&. 15))]
  | i <- [5, 4 .. 0], let b = (w `shiftR` (8 * i)) .&. 0xff ]

-- | Parses @aa:bb:cc:dd:ee:ff@ (hex, any case).
parseMac :: String -> Maybe MacAddress
parseMac s = case splitOn ':' s of
  parts | length parts == 6, Just bs <- mapM hexByte parts ->
    Just (MacAddress (foldl (\acc b -> acc `shiftL` 8 .|. b) 0 bs))
  _ -> Nothing
 where
  hexByte p | length p `elem` [1, 2], [(v, "")] <- readHex p = Just v
            | otherwise = Nothing
  splitOn c str = case break (== c) str of
    (a, []) -> [a]
    (a, _ : rest) -> a : splitOn c rest

-- | An IPv4 address, first octet most significant.
newtype IPv4 = IPv4 Word32
  deriving (Eq, Ord)

instance Show IPv4 where
  show = showIPv4

-- | An address from its four octets.
ipv4 :: Word8 -> Word8 -> Word8 -> Word8 -> IPv4
ipv4 a b c d = IPv4 (fromIntegral a `shiftL` 24 .|. fromIntegral b `shiftL` 16
                     .|. fromIntegral c `shiftL` 8 .|. fromIntegral d)

-- | Dotted quad.
showIPv4 :: IPv4 -> String
showIPv4 (IPv4 w) = intercalate "." [show ((w `shiftR` (8 * i)) .&. 0xff) | i <- [3, 2, 1, 0]]

-- | 14 bytes: no VLAN tag.
ethHeaderLength :: Int
ethHeaderLength = 14

-- | Where the IPv4 header starts (14).
ipv4Offset :: Int
ipv4Offset = ethHeaderLength

-- | Where the UDP header starts, for an IPv4 header without options (34).
udpOffset :: Int
udpOffset = ipv4Offset + 20

-- | Where the UDP payload starts (42).
udpPayloadOffset :: Int
udpPayloadOffset = udpOffset + 8

-- | The shortest Ethernet frame without its CRC: 60 bytes.
minFrameLength :: Int
minFrameLength = 60

-- | An Ethernet II header.
data EthHeader = EthHeader
  { ethDst  :: !MacAddress
  , ethSrc  :: !MacAddress
  , ethType :: !Word16
  } deriving (Eq, Show)

-- | 0x0800.
etherTypeIPv4 :: Word16
etherTypeIPv4 = 0x0800

readEth :: Ptr Word8 -> IO EthHeader
readEth p = EthHeader <$> peekMac p <*> peekMac (p `plusPtr` 6) <*> peekBE16 p 12

writeEth :: Ptr Word8 -> EthHeader -> IO ()
writeEth p h = do
  pokeMac p (ethDst h)
  pokeMac (p `plusPtr` 6) (ethSrc h)
  pokeBE16 p 12 (ethType h)

peekMac :: Ptr Word8 -> IO MacAddress
peekMac p = do
  bs <- mapM (peekByteOff p) [0 .. 5] :: IO [Word8]
  pure (MacAddress (foldl (\acc b -> acc `shiftL` 8 .|. fromIntegral b) 0 bs))

pokeMac :: Ptr Word8 -> MacAddress -> IO ()
pokeMac p (MacAddress w) =
  mapM_ (\i -> pokeByteOff p i (fromIntegral (w `shiftR` (8 * (5 - i))) :: Word8)) [0 .. 5]

-- | The fields of an IPv4 header without options that weft reads and
-- writes. 'writeIpv4' fills in version 4, IHL 5, no fragmentation, and the
-- header checksum.
data Ipv4Header = Ipv4Header
  { ipTos         :: !Word8
  , ipTotalLength :: !Word16  -- ^ header and payload, in bytes
  , ipIdent       :: !Word16
  , ipTtl         :: !Word8
  , ipProto       :: !Word8
  , ipChecksum    :: !Word16  -- ^ as read; 'writeIpv4' computes it
  , ipSrc         :: !IPv4
  , ipDst         :: !IPv4
  } deriving (Eq, Show)

-- | 17.
ipProtoUdp :: Word8
ipProtoUdp = 17

-- | Reads the IPv4 header of a frame (at 'ipv4Offset').
readIpv4 :: Ptr Word8 -> IO Ipv4Header
readIpv4 frame = do
  let p = frame `plusPtr` ipv4Offset
  Ipv4Header <$> peekByteOff p 1 <*> peekBE16 p 2 <*> peekBE16 p 4 <*> peekByteOff p 8
             <*> peekByteOff p 9 <*> peekBE16 p 10 <*> (IPv4 <$> peekBE32 p 12)
             <*> (IPv4 <$> peekBE32 p 16)

-- | Writes the IPv4 header of a frame (at 'ipv4Offset') with a correct
-- checksum ('ipChecksum' is ignored).
writeIpv4 :: Ptr Word8 -> Ipv4Header -> IO ()
writeIpv4 frame h = do
  let p = frame `plusPtr` ipv4Offset
  pokeByteOff p 0 (0x45 :: Word8)
  pokeByteOff p 1 (ipTos h)
  pokeBE16 p 2 (ipTotalLength h)
  pokeBE16 p 4 (ipIdent h)
  pokeBE16 p 6 0
  pokeByteOff p 8 (ipTtl h)
  pokeByteOff p 9 (ipProto h)
  pokeBE16 p 10 0
  let IPv4 s = ipSrc h
      IPv4 d = ipDst h
  pokeBE32 p 12 s
  pokeBE32 p 16 d
  c <- internetChecksum p 20 0
  pokeBE16 p 10 c

-- | Whether the IPv4 header at 'ipv4Offset' sums to zero, as a received
-- header with a correct checksum does.
ipv4HeaderChecksumOk :: Ptr Word8 -> IO Bool
ipv4HeaderChecksumOk frame = (== 0) <$> internetChecksum (frame `plusPtr` ipv4Offset) 20 0

-- | A UDP header.
data UdpHeader = UdpHeader
  { udpSrcPort  :: !Word16
  , udpDstPort  :: !Word16
  , udpLength   :: !Word16  -- ^ header and payload, in bytes
  , udpChecksumField :: !Word16  -- ^ 0 means "not computed" (allowed over IPv4)
  } deriving (Eq, Show)

-- | Reads the UDP header (at 'udpOffset').
readUdp :: Ptr Word8 -> IO UdpHeader
readUdp frame = do
  let p = frame `plusPtr` udpOffset
  UdpHeader <$> peekBE16 p 0 <*> peekBE16 p 2 <*> peekBE16 p 4 <*> peekBE16 p 6

-- | Writes the UDP header (at 'udpOffset') as given.
writeUdp :: Ptr Word8 -> UdpHeader -> IO ()
writeUdp frame h = do
  let p = frame `plusPtr` udpOffset
  pokeBE16 p 0 (udpSrcPort h)
  pokeBE16 p 2 (udpDstPort h)
  pokeBE16 p 4 (udpLength h)
  pokeBE16 p 6 (udpChecksumField h)

-- | The UDP checksum of a frame's datagram, over the IPv4 pseudo-header,
-- the UDP header (its checksum field counted as zero) and 'udpLength'
-- bytes. A computed 0 is sent as 0xffff, as RFC 768 says.
udpChecksum :: Ptr Word8 -> IO Word16
udpChecksum frame = do
  ip <- readIpv4 frame
  udp <- readUdp frame
  let IPv4 s = ipSrc ip
      IPv4 d = ipDst ip
      len = udpLength udp
      -- Adding the complement of the checksum field cancels it in
      -- one's-complement arithmetic: the sum is as if the field were 0.
      pseudo = (s `shiftR` 16) + (s .&. 0xffff) + (d `shiftR` 16) + (d .&. 0xffff)
             + fromIntegral ipProtoUdp + fromIntegral len
             + fromIntegral (complement (udpChecksumField udp))
  c <- internetChecksum (frame `plusPtr` udpOffset) (fromIntegral len) pseudo
  pure (if c == 0 then 0xffff else c)

-- | The Internet checksum (RFC 1071) of @n@ bytes, folded with an initial
-- 32-bit partial sum. A region whose checksum field holds the right value
-- sums to 0.
internetChecksum :: Ptr Word8 -> Int -> Word32 -> IO Word16
internetChecksum p n initial = go 0 (fromIntegral initial :: Word64)
 where
  go !i !acc
    | i + 1 < n = do
        w <- peekBE16 p i
        go (i + 2) (acc + fromIntegral w)
    | i < n = do
        b <- peekByteOff p i :: IO Word8
        pure (finish (acc + fromIntegral b `shiftL` 8))
    | otherwise = pure (finish acc)
  finish acc =
    let fold1 x = (x .&. 0xffff) + (x `shiftR` 16)
    in complement (fromIntegral (fold1 (fold1 (fold1 acc))))

-- | A big-endian 16-bit value at a byte offset.
peekBE16 :: Ptr Word8 -> Int -> IO Word16
peekBE16 p o = do
  a <- peekByteOff p o :: IO Word8
  b <- peekByteOff p (o + 1) :: IO Word8
  pure (fromIntegral a `shiftL` 8 .|. fromIntegral b)
{-# INLINE peekBE16 #-}

pokeBE16 :: Ptr Word8 -> Int -> Word16 -> IO ()
pokeBE16 p o w = do
  pokeByteOff p o (fromIntegral (w `shiftR` 8) :: Word8)
  pokeByteOff p (o + 1) (fromIntegral w :: Word8)
{-# INLINE pokeBE16 #-}

-- | A big-endian 32-bit value at a byte offset.
peekBE32 :: Ptr Word8 -> Int -> IO Word32
peekBE32 p o = do
  hi <- peekBE16 p o
  lo <- peekBE16 p (o + 2)
  pure (fromIntegral hi `shiftL` 16 .|. fromIntegral lo)
{-# INLINE peekBE32 #-}

pokeBE32 :: Ptr Word8 -> Int -> Word32 -> IO ()
pokeBE32 p o w = do
  pokeBE16 p o (fromIntegral (w `shiftR` 16))
  pokeBE16 p (o + 2) (fromIntegral w)
{-# INLINE pokeBE32 #-}

------------------------------------------------------------------------------
-- ixy's test packet

-- | ixy's test packet goes from UDP port 42 to port 1337.
testPacketSrcPort, testPacketDstPort :: Word16
testPacketSrcPort = 42
testPacketDstPort = 1337

-- | Writes ixy's test packet of @size@ bytes (at least 'minFrameLength',
-- at most 'maxDataLength'): Ethernet from 10:10:10:10:10:10 to
-- 01:02:03:04:05:06, IPv4 10.0.0.1 to 10.0.0.2 with its checksum, UDP 42
-- to 1337 without a checksum, a zero payload whose last 4 bytes will hold
-- the sequence number.
writeTestPacket :: Ptr Word8 -> Int -> IO ()
writeTestPacket p size = do
  fillBytes p 0 size
  writeEth p EthHeader { ethDst = MacAddress 0x010203040506, ethSrc = MacAddress 0x101010101010
                       , ethType = etherTypeIPv4 }
  writeIpv4 p Ipv4Header { ipTos = 0, ipTotalLength = fromIntegral (size - ethHeaderLength)
                         , ipIdent = 0, ipTtl = 64, ipProto = ipProtoUdp, ipChecksum = 0
                         , ipSrc = ipv4 10 0 0 1, ipDst = ipv4 10 0 0 2 }
  writeUdp p UdpHeader { udpSrcPort = testPacketSrcPort, udpDstPort = testPacketDstPort
                       , udpLength = fromIntegral (size - udpOffset), udpChecksumField = 0 }
