package dissect

import (
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/llp/dgram"
)

// DatagramUD is a UDP payload of the datagram profile's UD framing
// (docs/wire-format.md):
//
//	+-----------+----------------------------------+--------------------+
//	| keys (8): | DDP segment (DDP hdr, RDMAP hdr, | CRC32c (4 octets,  |
//	| Q_Key,    | payload); no MPA, no pad         | little-endian)     |
//	| src Q_Key |                                  |                    |
//	+-----------+----------------------------------+--------------------+
//
// Contents is the key header (dgram.Keys); Payload is the DDP segment. Set
// CheckCRC before DecodeFromBytes; Datagram.CRCValid is always true
// without it.
type DatagramUD struct {
	layers.BaseLayer
	CheckCRC bool
	Datagram dgram.Datagram
}

// LayerType returns LayerTypeDatagramUD.
func (d *DatagramUD) LayerType() gopacket.LayerType { return LayerTypeDatagramUD }

// CanDecode returns LayerTypeDatagramUD.
func (d *DatagramUD) CanDecode() gopacket.LayerClass { return LayerTypeDatagramUD }

// NextLayerType returns LayerTypeDDP.
func (d *DatagramUD) NextLayerType() gopacket.LayerType { return LayerTypeDDP }

// DecodeFromBytes parses data with dgram.ParseUD. A bad CRC is reported in
// Datagram.CRCValid, not as an error.
func (d *DatagramUD) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	g, err := parseUD(data, d.CheckCRC)
	if err != nil {
		return fmt.Errorf("dissect: ud: %w", err)
	}
	d.Datagram = g
	d.Contents, d.Payload = data[:dgram.KeyHeaderLen], g.Segment
	return nil
}

// SerializeTo prepends Datagram.Keys and appends the CRC trailer over the
// serialized DDP segment.
func (d *DatagramUD) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	return serializeDatagram(b, &d.Datagram, false, d.CheckCRC)
}

// DatagramRD is a UDP payload of the RD framing: the 8-octet key header,
// the 24-octet RD header, then (DATA only) a DDP segment, then the CRC32c
// trailer, which covers both headers too (docs/wire-format.md; the header
// diagrams are on dgram.Keys and dgram.RDHeader). Contents is the key and
// RD headers; Payload is the DDP segment, empty for an ACK.
type DatagramRD struct {
	layers.BaseLayer
	CheckCRC bool
	Datagram dgram.Datagram
}

// LayerType returns LayerTypeDatagramRD.
func (d *DatagramRD) LayerType() gopacket.LayerType { return LayerTypeDatagramRD }

// CanDecode returns LayerTypeDatagramRD.
func (d *DatagramRD) CanDecode() gopacket.LayerClass { return LayerTypeDatagramRD }

// NextLayerType returns LayerTypeDDP for DATA, LayerTypeZero for an ACK.
func (d *DatagramRD) NextLayerType() gopacket.LayerType {
	if len(d.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return LayerTypeDDP
}

// DecodeFromBytes parses data with dgram.ParseRD.
func (d *DatagramRD) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	g, err := parseRD(data, d.CheckCRC)
	if err != nil {
		return fmt.Errorf("dissect: rd: %w", err)
	}
	d.Datagram = g
	d.Contents, d.Payload = data[:len(data)-4-len(g.Segment)], g.Segment
	return nil
}

// SerializeTo prepends the key and RD headers and appends the CRC trailer.
func (d *DatagramRD) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	return serializeDatagram(b, &d.Datagram, true, d.CheckCRC)
}

// DatagramDecoder decodes a UDP payload of the datagram profile:
// gopacket.NewPacket(payload, DatagramDecoder{CheckCRC: true}, opts) yields
// DatagramUD (or DatagramRD with RD set), DDP and RDMAP.
type DatagramDecoder struct {
	RD       bool
	CheckCRC bool
}

// Decode implements gopacket.Decoder.
func (d DatagramDecoder) Decode(data []byte, p gopacket.PacketBuilder) error {
	if d.RD {
		return decodeInto(&DatagramRD{CheckCRC: d.CheckCRC}, data, p, nil)
	}
	return decodeInto(&DatagramUD{CheckCRC: d.CheckCRC}, data, p, nil)
}
