package dgram

import (
	"encoding/binary"
	"fmt"
)

// KeyHeaderLen is the size of the key header that opens every datagram of
// the profile, UD and RD, DATA and ACK alike (docs/wire-format.md §5.1).
const KeyHeaderLen = 8

// Keys is the key header, the datagram profile's counterpart of
// InfiniBand's DETH (IBTA vol. 1 §9.6.1.3, §10.2.5 Q_Keys):
//
//	0  Q_Key         u32  the destination QP's Q_Key
//	4  Source Q_Key  u32  the sending QP's own Q_Key
//
// A receiving QP drops, silently and counted, every datagram whose Q_Key is
// not its own (ErrQKey), before any other octet of it is acted upon. The
// Source Q_Key tells the receiver the key to put on whatever it sends back
// to that QP: error messages, Read Responses, RD acknowledgements.
//
// A Q_Key is a 32-bit value a QP is given at creation (random unless the
// application chooses one, as for a multicast group all of whose members
// share it) and that its peers learn out of band, as they learn its address.
// It is a capability against off-path senders, not a secret against an
// observer of the traffic: it travels in clear text, as InfiniBand's does.
type Keys struct {
	QKey    uint32 // the destination's Q_Key
	SrcQKey uint32 // the sender's Q_Key
}

// Append appends the 8-octet key header to b.
func (k Keys) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, k.QKey)
	return binary.BigEndian.AppendUint32(b, k.SrcQKey)
}

// Put writes the key header into b (at least KeyHeaderLen octets).
func (k Keys) Put(b []byte) {
	_ = b[KeyHeaderLen-1]
	binary.BigEndian.PutUint32(b, k.QKey)
	binary.BigEndian.PutUint32(b[4:], k.SrcQKey)
}

// ParseKeys decodes the key header at the start of b.
func ParseKeys(b []byte) (Keys, error) {
	if len(b) < KeyHeaderLen {
		return Keys{}, fmt.Errorf("%w: key header of %d octets, need %d", ErrTruncated, len(b), KeyHeaderLen)
	}
	return Keys{QKey: binary.BigEndian.Uint32(b), SrcQKey: binary.BigEndian.Uint32(b[4:])}, nil
}
