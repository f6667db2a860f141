package dissect

import (
	"errors"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/iwarpd/iwarpd/ddp"
	"github.com/iwarpd/iwarpd/rdmap"
)

// DDP is a DDP segment header (RFC 5041 §4.2 tagged, §4.3 untagged; the
// diagrams are on ddp.Header). Contents is the 14- or 18-octet header;
// Payload is what follows (RDMAP header, if any, and the ULP payload).
type DDP struct {
	layers.BaseLayer
	Header ddp.Header
}

// LayerType returns LayerTypeDDP.
func (d *DDP) LayerType() gopacket.LayerType { return LayerTypeDDP }

// CanDecode returns LayerTypeDDP.
func (d *DDP) CanDecode() gopacket.LayerClass { return LayerTypeDDP }

// NextLayerType returns LayerTypeRDMAP: DDP's only ULP here is RDMAP.
func (d *DDP) NextLayerType() gopacket.LayerType { return LayerTypeRDMAP }

// DecodeFromBytes parses the header with ddp.Parse.
func (d *DDP) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, n, err := ddp.Parse(data)
	if err != nil {
		return fmt.Errorf("dissect: %w", err)
	}
	d.Header, d.Contents, d.Payload = h, data[:n], data[n:]
	return nil
}

// SerializeTo prepends the header (ddp.Header.Append).
func (d *DDP) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	buf, err := b.PrependBytes(d.Header.Len())
	if err != nil {
		return err
	}
	d.Header.Append(buf[:0])
	return nil
}

func decodeDDP(data []byte, p gopacket.PacketBuilder) error {
	d := &DDP{}
	if err := d.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(d)
	next := rdmapDecoder{control: rdmap.Control(d.Header.ULPControl), tagged: d.Header.Tagged}
	if len(d.Payload) == 0 {
		return next.Decode(d.Payload, p) // a zero-length message still has its RDMAP control
	}
	return p.NextDecoder(next)
}

// RDMAP is the RDMAP part of a DDP segment (RFC 5040 §4): the control octet,
// which travels in DDP's RsvdULP[0:7] (see rdmap.Control), and the
// opcode's header, if it has one — Read Request (§4.4, 28 octets),
// Terminate (§4.8), RFC 7306's Atomic Request (52), Atomic Response (12)
// and Immediate Data (8), or the datagram profile's Write-Record (12 octets)
// and Write-Record with Immediate (its header then Immediate Data: both
// HasWriteRecord and HasImmediate).
// Contents is that header; Payload is the ULP payload.
//
// RDMAP cannot be decoded without its DDP header: set Control and Tagged
// from the DDP layer before DecodeFromBytes (the DDP decoder does this).
type RDMAP struct {
	layers.BaseLayer
	Control rdmap.Control
	Tagged  bool // the DDP T bit, copied from the DDP layer

	HasReadRequest bool
	ReadRequest    rdmap.ReadRequest
	HasTerminate   bool
	Terminate      rdmap.Terminate
	HasWriteRecord bool
	WriteRecord    rdmap.WriteRecord

	HasAtomicRequest  bool
	AtomicRequest     rdmap.AtomicRequest
	HasAtomicResponse bool
	AtomicResponse    rdmap.AtomicResponse
	HasImmediate      bool
	Immediate         rdmap.ImmediateData
}

// Opcode returns the opcode from the control octet.
func (r *RDMAP) Opcode() rdmap.Opcode { return r.Control.Opcode() }

// LayerType returns LayerTypeRDMAP.
func (r *RDMAP) LayerType() gopacket.LayerType { return LayerTypeRDMAP }

// CanDecode returns LayerTypeRDMAP.
func (r *RDMAP) CanDecode() gopacket.LayerClass { return LayerTypeRDMAP }

// NextLayerType returns gopacket.LayerTypePayload when there is payload.
func (r *RDMAP) NextLayerType() gopacket.LayerType {
	if len(r.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// DecodeFromBytes decodes the opcode's header from data (the DDP payload)
// with the rdmap parsers. Unknown opcodes decode as header-less.
func (r *RDMAP) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*r = RDMAP{Control: r.Control, Tagged: r.Tagged}
	n := 0
	var err error
	switch r.Control.Opcode() {
	case rdmap.OpReadRequest:
		r.ReadRequest, n, err = rdmap.ParseReadRequest(data)
		r.HasReadRequest = err == nil
	case rdmap.OpTerminate:
		r.Terminate, n, err = rdmap.ParseTerminate(data)
		r.HasTerminate = err == nil
	case rdmap.OpWriteRecord:
		r.WriteRecord, n, err = rdmap.ParseWriteRecord(data)
		r.HasWriteRecord = err == nil
	case rdmap.OpWriteRecordImm:
		var w rdmap.WriteRecordImm
		w, n, err = rdmap.ParseWriteRecordImm(data)
		r.WriteRecord, r.Immediate = w.WriteRecord, w.Imm
		r.HasWriteRecord, r.HasImmediate = err == nil, err == nil
	case rdmap.OpAtomicRequest:
		r.AtomicRequest, n, err = rdmap.ParseAtomicRequest(data)
		r.HasAtomicRequest = err == nil
	case rdmap.OpAtomicResponse:
		r.AtomicResponse, n, err = rdmap.ParseAtomicResponse(data)
		r.HasAtomicResponse = err == nil
	case rdmap.OpImmediateData, rdmap.OpImmediateDataSE:
		r.Immediate, n, err = rdmap.ParseImmediateData(data)
		r.HasImmediate = err == nil
	}
	if err != nil {
		return fmt.Errorf("dissect: %v: %w", r.Control.Opcode(), err)
	}
	r.Contents, r.Payload = data[:n], data[n:]
	return nil
}

// SerializeTo prepends the opcode's header (the rdmap Append methods). The
// control octet itself is DDP's: serialize the DDP layer with it.
func (r *RDMAP) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	var hdr []byte
	switch {
	case r.HasReadRequest:
		hdr = appendReadRequest(nil, &r.ReadRequest)
	case r.HasTerminate:
		hdr = appendTerminate(nil, &r.Terminate)
	case r.HasWriteRecord && r.HasImmediate:
		hdr = (&rdmap.WriteRecordImm{WriteRecord: r.WriteRecord, Imm: r.Immediate}).Append(nil)
	case r.HasWriteRecord:
		hdr = appendWriteRecord(nil, &r.WriteRecord)
	case r.HasAtomicRequest:
		hdr = r.AtomicRequest.Append(nil)
	case r.HasAtomicResponse:
		hdr = r.AtomicResponse.Append(nil)
	case r.HasImmediate:
		hdr = r.Immediate.Append(nil)
	}
	buf, err := b.PrependBytes(len(hdr))
	if err != nil {
		return err
	}
	copy(buf, hdr)
	return nil
}

type rdmapDecoder struct {
	control rdmap.Control
	tagged  bool
}

func (d rdmapDecoder) Decode(data []byte, p gopacket.PacketBuilder) error {
	return decodeInto(&RDMAP{Control: d.control, Tagged: d.tagged}, data, p, nil)
}

var errRDMAPAlone = errors.New("dissect: RDMAP needs its DDP header: decode from LayerTypeDDP")

func decodeRDMAPAlone(data []byte, p gopacket.PacketBuilder) error { return errRDMAPAlone }
