package rnic

import (
	"crypto/rand"
	"encoding/binary"
)

// Keys a remote peer must present: memory-region STags and datagram QP
// Q_Keys. Both are drawn from crypto/rand over all 32
// bits, so a peer that was not told a key can only guess it: one chance in
// 2^32 per try and key, with every miss counted and reported to the owner
// (access_report.go).
//
// STags. RFC 5040 §2.1 leaves the STag's value to the RNIC; the low 8 bits
// are by convention (InfiniBand, siw) the consumer key, which a consumer
// may change when it re-binds a key. iwarpd offers no such re-binding, so
// the consumer key is random too and the whole STag is unguessable. An MR
// has two distinct keys: the lkey names it in the owner's work requests,
// the rkey (the STag) in remote requests; neither opens the other's door
// (an lkey in a remote request is an invalid STag). Keys are unique within
// their session, whose table (session.keys) is a hash map: no key says
// where its MR is, and no handle is derived from one.

// RandomU32 returns a random 32-bit value other than 0.
func RandomU32() uint32 {
	var b [4]byte
	for {
		rand.Read(b[:]) // never fails on Linux (getrandom); a short read panics in the runtime
		if v := binary.LittleEndian.Uint32(b[:]); v != 0 {
			return v
		}
	}
}

// NewMRKeys draws an lkey and an rkey, distinct from each other and from
// every key of s's memory regions.
func (s *Session) NewMRKeys() (lkey, rkey uint32) {
	for {
		lkey, rkey = RandomU32(), RandomU32()
		if lkey == rkey || s.Keys[lkey] != nil || s.Keys[rkey] != nil {
			continue
		}
		return lkey, rkey
	}
}

// AddMRKeys enters m's keys in s's key table.
func (s *Session) AddMRKeys(m *MR) {
	s.Keys[m.LKey] = m
	s.Keys[m.RKey] = m
}

// DropMRKeys removes m's keys from s's key table.
func (s *Session) DropMRKeys(m *MR) {
	delete(s.Keys, m.LKey)
	delete(s.Keys, m.RKey)
}

// mrByLKey returns the MR whose local key is k, or nil.
func (s *Session) mrByLKey(k uint32) *MR {
	if m := s.Keys[k]; m != nil && m.LKey == k {
		return m
	}
	return nil
}

// MRByRKey returns the MR whose remote key (STag) is k, or nil.
func (s *Session) MRByRKey(k uint32) *MR {
	if m := s.Keys[k]; m != nil && m.RKey == k {
		return m
	}
	return nil
}
