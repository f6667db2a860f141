package main

import (
	"bytes"
	"fmt"
)

// patternPeriod is the period of the data pattern: byte i of the message of
// iteration k is (k + i) mod patternPeriod. A prime period makes a message
// shifted by a few bytes, or one of another iteration, never match.
const patternPeriod = 251

// pattern holds patternPeriod+max octets of the sequence 0, 1, ... 250, 0, 1...
// so that the message of any iteration is one slice of it: senders send
// straight from it (no per-message fill) and receivers compare with it.
type pattern []byte

func newPattern(max int) pattern {
	p := make(pattern, patternPeriod+max)
	for i := range p {
		p[i] = byte(i % patternPeriod)
	}
	return p
}

// offset is where the message of iteration iter starts in the pattern.
func patternOffset(iter uint64) int { return int(iter % patternPeriod) }

// message returns the expected content of the size-octet message of
// iteration iter.
func (p pattern) message(iter uint64, size int) []byte {
	off := patternOffset(iter)
	return p[off : off+size]
}

// verify checks that got is the size-octet message of iteration iter. It
// returns nil or an error naming the first differing octet.
func (p pattern) verify(got []byte, iter uint64, size int) error {
	if len(got) != size {
		return fmt.Errorf("iteration %d: received %d bytes, want %d", iter, len(got), size)
	}
	want := p.message(iter, size)
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("iteration %d: byte %d of %d is %#02x, want %#02x", iter, i, size, got[i], want[i])
		}
	}
	return fmt.Errorf("iteration %d: data mismatch", iter) // unreachable: lengths are equal
}

// fillPattern writes the message of iteration iter into b (used where a
// sender cannot send from the pattern directly).
func fillPattern(b []byte, iter uint64) {
	v := byte(iter % patternPeriod)
	for i := range b {
		b[i] = v
		v++
		if v == patternPeriod {
			v = 0
		}
	}
}
