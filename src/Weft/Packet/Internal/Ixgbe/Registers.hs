-- | The Intel 82599 (ixgbe) registers and descriptor formats weft's
-- driver uses, and the register window it is written against.
-- Internal and unstable: weft's own modules and tests use it.
--
-- Offsets are in bytes from the start of BAR0, as in the 82599
-- datasheet; only queue 0's registers are named, which is all the driver
-- uses. Descriptors are 16 bytes, little-endian (the driver runs on
-- x86-64, so plain peeks and pokes have the device's byte order).
--
-- On real hardware BAR0 is memory-mapped from the device through VFIO
-- (or UIO), and the descriptor rings and buffers must be in memory the
-- IOMMU maps for the device. weft does not set either up: this VM has no
-- VFIO, no UIO and no way to load kernel modules, so the driver runs
-- against the software model of "Weft.Packet.Internal.Ixgbe.Model" only. A
-- 'RegisterWindow' over a mapped BAR0 is all real hardware would add.
module Weft.Packet.Internal.Ixgbe.Registers
  ( -- * The register window
    RegisterWindow (..)
    -- * Registers
  , regCtrl, regStatus, regEimc, regEec, regRdrxctl, regAutoc, regLinks
  , regGprc, regGptc, regGorcl, regGorch, regGotcl, regGotch, regMpc
  , regRxctrl, regFctrl, regHlreg0, regRal, regRah
  , regRdbal, regRdbah, regRdlen, regRdh, regRdt, regRxdctl, regSrrctl
  , regTdbal, regTdbah, regTdlen, regTdh, regTdt, regTxdctl, regDmatxctl
    -- * Bits
  , ctrlRst, ctrlLrst, eecArd, rdrxctlDmaidone
  , autocLmsMask, autocLms10GSerial, autocRestartAn
  , linksUp, linksSpeedMask, linksSpeed10G, linksSpeed1G, linksSpeed100M
  , rxctrlRxen, fctrlMpe, fctrlUpe, fctrlBam, hlreg0TxCrcEn, hlreg0RxCrcStrp
  , rahAv, queueEnable, srrctlDescAdvOneBuf, srrctlDescMask, srrctlBsizeMask
  , dmatxctlTe
    -- * Descriptors
  , descriptorSize
  , rxdPktAddr, rxdHdrAddr, rxdStatus, rxdLength, rxdStatusDd, rxdStatusEop
  , txdBufferAddr, txdCmdTypeLen, txdOlinfoStatus, txdStatusDd
  , txdCmdEop, txdCmdIfcs, txdCmdRs, txdCmdDext, txdTypeData, txdPaylenShift
  , txdCmdBits
  ) where

import Data.Bits (shiftL, (.|.))
import Data.Word (Word32)

-- | Access to a device's registers: 32-bit reads and writes at byte
-- offsets. Reads may have effects (statistics clear on read), so the
-- driver reads each register only where it means to.
data RegisterWindow = RegisterWindow
  { regRead  :: Int -> IO Word32
  , regWrite :: Int -> Word32 -> IO ()
  }

regCtrl, regStatus, regEimc, regEec, regRdrxctl, regAutoc, regLinks :: Int
regCtrl = 0x00000
regStatus = 0x00008
regEimc = 0x00888
regEec = 0x10010
regRdrxctl = 0x02F00
regAutoc = 0x042A0
regLinks = 0x042A4

-- | Statistics, all clear-on-read: good packets and octets received and
-- transmitted (the octet counters are 36 bits, low word first), and
-- packets missed for want of a receive descriptor.
regGprc, regGptc, regGorcl, regGorch, regGotcl, regGotch, regMpc :: Int
regGprc = 0x04074
regGptc = 0x04080
regGorcl = 0x04088
regGorch = 0x0408C
regGotcl = 0x04090
regGotch = 0x04094
regMpc = 0x03FA0

regRxctrl, regFctrl, regHlreg0, regRal, regRah :: Int
regRxctrl = 0x03000
regFctrl = 0x05080
regHlreg0 = 0x04240
regRal = 0x0A200
regRah = 0x0A204

-- | Receive queue 0.
regRdbal, regRdbah, regRdlen, regRdh, regRdt, regRxdctl, regSrrctl :: Int
regRdbal = 0x01000
regRdbah = 0x01004
regRdlen = 0x01008
regRdh = 0x01010
regSrrctl = 0x01014
regRdt = 0x01018
regRxdctl = 0x01028

-- | Transmit queue 0.
regTdbal, regTdbah, regTdlen, regTdh, regTdt, regTxdctl, regDmatxctl :: Int
regTdbal = 0x06000
regTdbah = 0x06004
regTdlen = 0x06008
regTdh = 0x06010
regTdt = 0x06018
regTxdctl = 0x06028
regDmatxctl = 0x04A80

ctrlRst, ctrlLrst, eecArd, rdrxctlDmaidone :: Word32
ctrlRst = 1 `shiftL` 26
ctrlLrst = 1 `shiftL` 3
eecArd = 1 `shiftL` 9
rdrxctlDmaidone = 1 `shiftL` 3

autocLmsMask, autocLms10GSerial, autocRestartAn :: Word32
autocLmsMask = 0x7 `shiftL` 13
autocLms10GSerial = 0x3 `shiftL` 13
autocRestartAn = 1 `shiftL` 12

linksUp, linksSpeedMask, linksSpeed10G, linksSpeed1G, linksSpeed100M :: Word32
linksUp = 1 `shiftL` 30
linksSpeedMask = 0x3 `shiftL` 28
linksSpeed10G = 0x3 `shiftL` 28
linksSpeed1G = 0x2 `shiftL` 28
linksSpeed100M = 0x1 `shiftL` 28

rxctrlRxen, fctrlMpe, fctrlUpe, fctrlBam, hlreg0TxCrcEn, hlreg0RxCrcStrp :: Word32
rxctrlRxen = 1
fctrlMpe = 1 `shiftL` 8
fctrlUpe = 1 `shiftL` 9
fctrlBam = 1 `shiftL` 10
hlreg0TxCrcEn = 1 `shiftL` 1
hlreg0RxCrcStrp = 1 `shiftL` 2

-- | RAH's address-valid bit; RXDCTL's and TXDCTL's queue enable.
rahAv, queueEnable :: Word32
rahAv = 1 `shiftL` 31
queueEnable = 1 `shiftL` 25

-- | SRRCTL: advanced descriptors with one buffer; the descriptor-type
-- field; the packet buffer size field (in KiB).
srrctlDescAdvOneBuf, srrctlDescMask, srrctlBsizeMask :: Word32
srrctlDescAdvOneBuf = 1 `shiftL` 25
srrctlDescMask = 0x7 `shiftL` 25
srrctlBsizeMask = 0x1F

dmatxctlTe :: Word32
dmatxctlTe = 1

-- | Every descriptor is 16 bytes.
descriptorSize :: Int
descriptorSize = 16

-- | Advanced receive descriptor, read format (driver to device): the
-- buffer's address and the header buffer's address (0: none). Write-back
-- format (device to driver): the status and error word, and the length.
rxdPktAddr, rxdHdrAddr, rxdStatus, rxdLength :: Int
rxdPktAddr = 0
rxdHdrAddr = 8
rxdStatus = 8
rxdLength = 12

-- | Descriptor done; end of packet.
rxdStatusDd, rxdStatusEop :: Word32
rxdStatusDd = 1
rxdStatusEop = 2

-- | Advanced transmit descriptor, read format: the buffer's address, the
-- command/type/length word, the offload word (payload length). In the
-- write-back the status word lands where the offload word was.
txdBufferAddr, txdCmdTypeLen, txdOlinfoStatus :: Int
txdBufferAddr = 0
txdCmdTypeLen = 8
txdOlinfoStatus = 12

txdStatusDd :: Word32
txdStatusDd = 1

txdCmdEop, txdCmdIfcs, txdCmdRs, txdCmdDext, txdTypeData :: Word32
txdCmdEop = 1 `shiftL` 24
txdCmdIfcs = 1 `shiftL` 25
txdCmdRs = 1 `shiftL` 27
txdCmdDext = 1 `shiftL` 29
txdTypeData = 0x3 `shiftL` 20

-- | Where the payload length goes in the offload word.
txdPaylenShift :: Int
txdPaylenShift = 14

-- | The command and type bits of a one-descriptor data packet: end of
-- packet, insert the FCS, report status, advanced data descriptor.
txdCmdBits :: Word32
txdCmdBits = txdCmdEop .|. txdCmdIfcs .|. txdCmdRs .|. txdCmdDext .|. txdTypeData
