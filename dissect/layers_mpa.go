package dissect

import (
	"errors"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/mpa"
)

// MPAFrame is an MPA Request or Reply frame (RFC 5044 §7.1; RFC 6581 §5 adds
// the S bit and, for Rev 2 with S set, the IRD/ORD block that opens the
// private data):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+         Key (16 bytes containing "MPA ID Req Frame")          +
//	|       (4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65)       |
//	+         Or  (16 bytes containing "MPA ID Rep Frame")          +
//	|       (4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|S| Res   |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~   Private Data (PD_Length octets; Rev 2 + S: IRD/ORD first)   ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Contents is the whole frame; there is no payload.
type MPAFrame struct {
	layers.BaseLayer
	Frame mpa.Frame
	// HasEnhanced is set for Rev 2 frames with S=1 whose private data
	// holds a valid IRD/ORD block; Enhanced is that block and
	// ULPPrivateData the rest.
	HasEnhanced    bool
	Enhanced       mpa.Enhanced
	ULPPrivateData []byte
}

// LayerType returns LayerTypeMPAFrame.
func (m *MPAFrame) LayerType() gopacket.LayerType { return LayerTypeMPAFrame }

// CanDecode returns LayerTypeMPAFrame.
func (m *MPAFrame) CanDecode() gopacket.LayerClass { return LayerTypeMPAFrame }

// NextLayerType returns LayerTypeZero: nothing follows a frame inside it.
func (m *MPAFrame) NextLayerType() gopacket.LayerType { return gopacket.LayerTypeZero }

// DecodeFromBytes parses one frame at the start of data with mpa.ParseFrame.
// An IRD/ORD block that does not parse leaves HasEnhanced false (the
// checker reports it).
func (m *MPAFrame) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	f, n, err := mpa.ParseFrame(data)
	if err != nil {
		return fmt.Errorf("dissect: mpa frame: %w", err)
	}
	*m = MPAFrame{BaseLayer: layers.BaseLayer{Contents: data[:n]}, Frame: f, ULPPrivateData: f.PrivateData}
	if f.Revision == 2 && f.Enhanced {
		if e, rest, err := mpa.ParseEnhanced(f.PrivateData); err == nil {
			m.HasEnhanced, m.Enhanced, m.ULPPrivateData = true, e, rest
		}
	}
	return nil
}

// SerializeTo writes the frame (mpa.Frame.Append).
func (m *MPAFrame) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	return serializeFrame(b, &m.Frame)
}

func decodeMPAFrame(data []byte, p gopacket.PacketBuilder) error {
	return decodeInto(&MPAFrame{}, data, p, nil)
}

// MPAFPDU is one MPA FPDU (RFC 5044 §4, §5, §6):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          ULPDU_Length         |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~                 ULPDU (one DDP segment)                       ~
//	|                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |          PAD (0-3 octets)     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     CRC32c (little-endian)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// with 4-octet markers every 512 octets of stream when the receiver asked
// for them. Set CRCEnabled, MarkersEnabled and StreamPos (octets from the
// marker origin to data[0]) before DecodeFromBytes. Contents is the FPDU's
// wire bytes; Payload is the ULPDU with markers removed.
type MPAFPDU struct {
	layers.BaseLayer
	CRCEnabled     bool
	MarkersEnabled bool
	StreamPos      uint64
	FPDU           mpa.FPDU
}

// LayerType returns LayerTypeMPAFPDU.
func (m *MPAFPDU) LayerType() gopacket.LayerType { return LayerTypeMPAFPDU }

// CanDecode returns LayerTypeMPAFPDU.
func (m *MPAFPDU) CanDecode() gopacket.LayerClass { return LayerTypeMPAFPDU }

// NextLayerType returns LayerTypeDDP.
func (m *MPAFPDU) NextLayerType() gopacket.LayerType { return LayerTypeDDP }

// DecodeFromBytes parses the FPDU at the start of data with mpa.ParseFPDU.
// A bad CRC is not an error here: it shows in FPDU.CRCValid.
func (m *MPAFPDU) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	f, err := mpa.ParseFPDU(data, m.StreamPos, m.CRCEnabled, m.MarkersEnabled)
	if err != nil {
		return fmt.Errorf("dissect: fpdu: %w", err)
	}
	m.FPDU = f
	m.Contents, m.Payload = data[:f.WireLen], f.ULPDU
	return nil
}

// SerializeTo frames the already serialized payload (the DDP segment) as one
// FPDU with mpa.Sender (CRC per CRCEnabled). Markers are not supported here.
func (m *MPAFPDU) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if m.MarkersEnabled {
		return errors.New("dissect: fpdu: serializing with markers is not supported")
	}
	return serializeFPDU(b, m.CRCEnabled)
}

// FPDUDecoder decodes an FPDU with given MPA settings: gopacket.NewPacket(b,
// FPDUDecoder{CRC: true}, gopacket.Default) yields MPAFPDU, DDP, RDMAP.
type FPDUDecoder struct {
	CRC, Markers bool
	StreamPos    uint64
}

// Decode implements gopacket.Decoder.
func (d FPDUDecoder) Decode(data []byte, p gopacket.PacketBuilder) error {
	return decodeInto(&MPAFPDU{CRCEnabled: d.CRC, MarkersEnabled: d.Markers, StreamPos: d.StreamPos}, data, p, nil)
}
