package dissect

import (
	"fmt"
	"strings"
	"time"
)

// Event kinds (Event.Kind). The JSON field names of Event and its parts are
// stable; docs/iwarpdump.md documents them.
const (
	KindMPARequest = "mpa-request" // an MPA Request frame
	KindMPAReply   = "mpa-reply"   // an MPA Reply frame
	KindSegment    = "segment"     // one DDP segment (in an FPDU or a datagram)
	KindRDAck      = "rd-ack"      // an RD ACK-only datagram
	KindViolation  = "violation"   // an error -strict fails on
	KindNote       = "note"        // worth knowing, not an error
)

// LLP names (Event.LLP).
const (
	LLPMPA = "mpa"
	LLPUD  = "ud"
	LLPRD  = "rd"
)

// Event is one decoded item: a frame, a segment, a violation or a note.
type Event struct {
	Kind      string    `json:"kind"`
	File      string    `json:"file,omitempty"`
	Frame     int       `json:"frame"` // 1-based packet index in the file
	Time      float64   `json:"time"`  // seconds since the file's first packet
	Timestamp time.Time `json:"timestamp"`
	Src       string    `json:"src,omitempty"`
	Dst       string    `json:"dst,omitempty"`
	LLP       string    `json:"llp,omitempty"`
	CRC       string    `json:"crc,omitempty"` // ok, bad, off (not negotiated), unchecked
	// QKey and SrcQKey are a datagram's key header (dgram.Keys).
	QKey    *uint32 `json:"qkey,omitempty"`
	SrcQKey *uint32 `json:"src_qkey,omitempty"`
	Message string  `json:"message,omitempty"`
	// GSO is set on a datagram captured inside a UDP GSO super-packet
	// (gso.go).
	GSO *GSOInfo `json:"gso,omitempty"`

	MPA   *MPAInfo   `json:"mpa,omitempty"`
	FPDU  *FPDUInfo  `json:"fpdu,omitempty"`
	RD    *RDInfo    `json:"rd,omitempty"`
	DDP   *DDPInfo   `json:"ddp,omitempty"`
	RDMAP *RDMAPInfo `json:"rdmap,omitempty"`
}

// MPAInfo describes an MPA Request or Reply.
type MPAInfo struct {
	Revision       uint8 `json:"rev"`
	Markers        bool  `json:"m"`
	CRC            bool  `json:"c"`
	Reject         bool  `json:"r"`
	Enhanced       bool  `json:"s"`
	ReservedFlags  uint8 `json:"res"`
	PrivateDataLen int   `json:"pd_len"`
	// The RFC 6581 IRD/ORD block (Rev 2 with S).
	IRD        *uint16 `json:"ird,omitempty"`
	ORD        *uint16 `json:"ord,omitempty"`
	PeerToPeer bool    `json:"p2p,omitempty"`
	SendRTR    bool    `json:"send_rtr,omitempty"`
	WriteRTR   bool    `json:"write_rtr,omitempty"`
	ReadRTR    bool    `json:"read_rtr,omitempty"`
}

// FPDUInfo describes the MPA framing of a segment.
type FPDUInfo struct {
	ULPDULen  int    `json:"ulpdu_len"`
	WireLen   int    `json:"wire_len"`
	PadLen    int    `json:"pad_len"`
	Markers   int    `json:"markers"`
	StreamPos uint64 `json:"stream_pos"` // octets from the marker origin
	CRC       uint32 `json:"crc_wire"`
}

// RDInfo is the RD header of a datagram.
type RDInfo struct {
	Type            uint8  `json:"type"`
	Flags           uint8  `json:"flags"`
	Window          uint16 `json:"window"`
	Incarnation     uint32 `json:"incarnation"`
	EchoIncarnation uint32 `json:"echo_incarnation"`
	Seq             uint32 `json:"seq"`
	CumAck          uint32 `json:"cum_ack"`
	SACK            uint32 `json:"sack"`
}

// DDPInfo is a DDP header; STag/TO are set for tagged segments and
// QN/MSN/MO for untagged ones.
type DDPInfo struct {
	Tagged     bool    `json:"tagged"`
	Last       bool    `json:"last"`
	Version    uint8   `json:"dv"`
	Reserved   uint8   `json:"rsvd"`
	STag       *uint32 `json:"stag,omitempty"`
	TO         *uint64 `json:"to,omitempty"`
	QN         *uint32 `json:"qn,omitempty"`
	MSN        *uint32 `json:"msn,omitempty"`
	MO         *uint32 `json:"mo,omitempty"`
	InvStag    uint32  `json:"inv_stag,omitempty"`
	SegmentLen int     `json:"segment_len"` // DDP header + everything after it
	PayloadLen int     `json:"len"`         // ULP payload octets (after the RDMAP header)
}

// RDMAPInfo is the RDMAP part of a segment.
type RDMAPInfo struct {
	Opcode      uint8            `json:"opcode"`
	Name        string           `json:"name"`
	Version     uint8            `json:"rv"`
	Reserved    uint8            `json:"rsv"`
	RTR         bool             `json:"rtr,omitempty"` // the RFC 6581 ready-to-receive message
	ReadRequest *ReadRequestInfo `json:"read_request,omitempty"`
	Terminate   *TerminateInfo   `json:"terminate,omitempty"`
	WriteRecord *WriteRecordInfo `json:"write_record,omitempty"`
	Atomic      *AtomicInfo      `json:"atomic,omitempty"`
	Immediate   *ImmediateInfo   `json:"immediate,omitempty"`
}

// AtomicInfo is an RFC 7306 Atomic Request (Request true) or Atomic
// Response header.
type AtomicInfo struct {
	Request     bool   `json:"request"`
	Op          string `json:"op,omitempty"`
	ReqID       uint32 `json:"req_id"`
	Stag        uint32 `json:"stag,omitempty"`
	TO          uint64 `json:"to,omitempty"`
	AddSwap     uint64 `json:"add_swap,omitempty"`
	AddSwapMask uint64 `json:"add_swap_mask,omitempty"`
	Compare     uint64 `json:"compare,omitempty"`
	CompareMask uint64 `json:"compare_mask,omitempty"`
	Original    uint64 `json:"original,omitempty"`
}

// ImmediateInfo is RFC 7306 Immediate Data: the 8 octets and the 32-bit
// verbs value in the first four; Merged when octets 4–7 carry iwarpd's
// merge tag (the immediate of the Send that follows, docs/atomics.md
// "Send with Immediate, merged").
type ImmediateInfo struct {
	Raw    string `json:"raw"`
	Value  uint32 `json:"value"`
	Merged bool   `json:"merged,omitempty"`
}

// ReadRequestInfo is an RDMA Read Request header.
type ReadRequestInfo struct {
	SinkStag   uint32 `json:"sink_stag"`
	SinkTO     uint64 `json:"sink_to"`
	Size       uint32 `json:"size"`
	SourceStag uint32 `json:"src_stag"`
	SourceTO   uint64 `json:"src_to"`
}

// TerminateInfo is a Terminate header.
type TerminateInfo struct {
	Layer      uint8  `json:"layer"`
	EType      uint8  `json:"etype"`
	ECode      uint8  `json:"ecode"`
	Error      string `json:"error"`
	M          bool   `json:"m"`
	D          bool   `json:"d"`
	R          bool   `json:"r"`
	SiwLayout  bool   `json:"siw_layout"`
	DDPSegLen  uint16 `json:"ddp_seg_len"`
	DDPHeader  string `json:"ddp_header,omitempty"` // hex
	RDMAHeader string `json:"rdma_header,omitempty"`
}

// WriteRecordInfo is a Write-Record header.
type WriteRecordInfo struct {
	RecordID      uint32 `json:"record_id"`
	MessageLength uint32 `json:"msg_len"`
	MessageOffset uint32 `json:"msg_off"`
}

// FormatText renders e as one line. abs selects absolute time.
func FormatText(e *Event, abs bool) string {
	switch e.Kind {
	case KindViolation:
		return fmt.Sprintf("VIOLATION frame %d: %s", e.Frame, e.Message)
	case KindNote:
		return fmt.Sprintf("NOTE frame %d: %s", e.Frame, e.Message)
	}
	var b strings.Builder
	if abs {
		b.WriteString(e.Timestamp.UTC().Format("2006-01-02T15:04:05.000000Z"))
	} else {
		fmt.Fprintf(&b, "%.6f", e.Time)
	}
	fmt.Fprintf(&b, " %s > %s ", e.Src, e.Dst)
	switch e.Kind {
	case KindMPARequest, KindMPAReply:
		m := e.MPA
		name := "MPA-Request"
		if e.Kind == KindMPAReply {
			name = "MPA-Reply"
		}
		fmt.Fprintf(&b, "%s rev=%d", name, m.Revision)
		for _, f := range []struct {
			on bool
			s  string
		}{{m.Markers, "M"}, {m.CRC, "C"}, {m.Reject, "R"}, {m.Enhanced, "S"}} {
			if f.on {
				b.WriteString(" " + f.s)
			}
		}
		if m.ReservedFlags != 0 {
			fmt.Fprintf(&b, " res=0x%x", m.ReservedFlags)
		}
		if m.IRD != nil {
			fmt.Fprintf(&b, " ird=%d ord=%d", *m.IRD, *m.ORD)
			for _, f := range []struct {
				on bool
				s  string
			}{{m.PeerToPeer, "p2p"}, {m.SendRTR, "send-rtr"}, {m.WriteRTR, "write-rtr"}, {m.ReadRTR, "read-rtr"}} {
				if f.on {
					b.WriteString(" " + f.s)
				}
			}
		}
		fmt.Fprintf(&b, " pd_len=%d", m.PrivateDataLen)
		return b.String()
	case KindRDAck:
		b.WriteString("RD-ACK")
		writeRD(&b, e.RD)
		fmt.Fprintf(&b, " crc=%s", e.CRC)
		writeGSO(&b, e.GSO)
		return b.String()
	}
	switch e.LLP {
	case LLPMPA:
		b.WriteString("MPA-FPDU")
	case LLPUD:
		b.WriteString("UD")
	case LLPRD:
		b.WriteString("RD")
		writeRD(&b, e.RD)
	}
	if r := e.RDMAP; r != nil {
		fmt.Fprintf(&b, " %s", strings.ReplaceAll(r.Name, " ", "-"))
		if r.RTR {
			b.WriteString(" RTR")
		}
	}
	if d := e.DDP; d != nil {
		if d.Tagged {
			fmt.Fprintf(&b, " stag=0x%08x to=0x%x", *d.STag, *d.TO)
		} else {
			fmt.Fprintf(&b, " qn=%d msn=%d mo=%d", *d.QN, *d.MSN, *d.MO)
			if d.InvStag != 0 {
				fmt.Fprintf(&b, " inv_stag=0x%08x", d.InvStag)
			}
		}
		if d.Last {
			b.WriteString(" L")
		}
		fmt.Fprintf(&b, " len=%d", d.PayloadLen)
	}
	if r := e.RDMAP; r != nil {
		if q := r.ReadRequest; q != nil {
			fmt.Fprintf(&b, " sink=0x%08x/0x%x size=%d src=0x%08x/0x%x", q.SinkStag, q.SinkTO, q.Size, q.SourceStag, q.SourceTO)
		}
		if t := r.Terminate; t != nil {
			fmt.Fprintf(&b, " term=[%s] layer=%d etype=%d ecode=0x%02x", t.Error, t.Layer, t.EType, t.ECode)
			if t.SiwLayout {
				b.WriteString(" siw-layout")
			}
		}
		if w := r.WriteRecord; w != nil {
			fmt.Fprintf(&b, " record=%d msg_len=%d msg_off=%d", w.RecordID, w.MessageLength, w.MessageOffset)
		}
		if a := r.Atomic; a != nil && a.Request {
			fmt.Fprintf(&b, " %s req=%d target=0x%08x/0x%x add_swap=0x%x/0x%x compare=0x%x/0x%x", a.Op, a.ReqID, a.Stag, a.TO,
				a.AddSwap, a.AddSwapMask, a.Compare, a.CompareMask)
		} else if a != nil {
			fmt.Fprintf(&b, " req=%d original=0x%x", a.ReqID, a.Original)
		}
		if m := r.Immediate; m != nil {
			fmt.Fprintf(&b, " imm=0x%08x (%s)", m.Value, m.Raw)
			if m.Merged {
				b.WriteString(" merged-into-next-send")
			}
		}
	}
	fmt.Fprintf(&b, " crc=%s", e.CRC)
	writeGSO(&b, e.GSO)
	return b.String()
}

// writeGSO marks a datagram cut from a GSO super-packet: its place in it
// and the inferred segment size.
func writeGSO(b *strings.Builder, g *GSOInfo) {
	if g != nil {
		fmt.Fprintf(b, " gso=%d/%d seg=%d", g.Index, g.Count, g.SegSize)
	}
}

func writeRD(b *strings.Builder, r *RDInfo) {
	if r == nil {
		return
	}
	fmt.Fprintf(b, " seq=%d ack=%d sack=0x%x win=%d flags=0x%02x inc=0x%x", r.Seq, r.CumAck, r.SACK, r.Window, r.Flags, r.Incarnation)
}
