package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The batched raw UDP baseline (-raw-batch): what a datagram stack can do
// with the kernel's batching, so that the daemons' CPU per message is
// compared with the cheapest raw sockets doing the same traffic
// (docs/benchmarks.md, "CPU per message"):
//   - a stream's messages leave in sendmmsg(2) batches where each msghdr
//     carries up to gsoMaxSegs same-size datagrams as one UDP GSO send
//     (UDP_SEGMENT control message, udp(7)): one trip through the stack
//     per 64 datagrams (the kernel cuts them apart);
//   - the receiver turns on UDP_GRO (udp(7)) and reads with recvmmsg(2),
//     up to rxSlots buffers per call, each possibly holding several
//     datagrams of one flow (split at the size the UDP_GRO control message
//     gives).
// A GSO send the kernel refuses (EIO, EINVAL: no GSO on the route) turns
// GSO off for the rest of the run, and the batch goes as plain sendmmsg.

const (
	gsoMaxSegs  = 64    // datagrams per GSO send (UDP_MAX_SEGMENTS)
	gsoMaxBytes = 65507 // payload octets per GSO send (one IPv4 UDP datagram)
	rxSlots     = 16    // recvmmsg buffers
	rxSlotLen   = 65536 // one buffer: a whole GRO batch, or any datagram (+1 to see a too-long one)
	cmsgUDPLen  = 24    // CMSG_SPACE(sizeof(uint16 or int)) on 64-bit Linux
)

// rxBatch is the receive side: recvmmsg slots and the datagrams not yet
// handed out.
type rxBatch struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	bufs  []byte
	cmsgs []uint64 // cmsgUDPLen/8 words per slot
	queue [][]byte // datagrams received, not yet returned (views of bufs)
}

// enableBatch turns on the batched paths of t.
func (t *udpTransport) enableBatch() error {
	if err := unix.SetsockoptInt(t.fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		return fmt.Errorf("raw udp: UDP_GRO: %w", err)
	}
	rx := &rxBatch{hdrs: make([]mmsghdr, rxSlots), iovs: make([]unix.Iovec, rxSlots),
		bufs: make([]byte, rxSlots*rxSlotLen), cmsgs: make([]uint64, rxSlots*cmsgUDPLen/8)}
	t.rx, t.gso = rx, true
	return nil
}

// sendGSO sends n messages of size octets (first, first+1, ...) in GSO
// batches.
func (t *udpTransport) sendGSO(first uint64, n, size int) error {
	per := min(gsoMaxSegs, max(gsoMaxBytes/max(size, 1), 1))
	msgs := (n + per - 1) / per
	if cap(t.hdrs) < msgs || cap(t.iovs) < n {
		t.hdrs = make([]mmsghdr, max(msgs, n))
		t.iovs = make([]unix.Iovec, n)
		t.cmsgs = make([]uint64, max(msgs, n)*cmsgUDPLen/8)
	}
	hdrs := t.hdrs[:msgs]
	for m := range hdrs {
		lo, hi := m*per, min((m+1)*per, n)
		for i := lo; i < hi; i++ {
			msg := t.pat.message(first+uint64(i), size)
			t.iovs[i] = unix.Iovec{Base: &msg[0]}
			t.iovs[i].SetLen(size)
		}
		hdrs[m] = mmsghdr{}
		hdrs[m].hdr.Iov = &t.iovs[lo]
		hdrs[m].hdr.SetIovlen(hi - lo)
		if hi-lo > 1 {
			w := t.cmsgs[m*cmsgUDPLen/8 : (m+1)*cmsgUDPLen/8]
			cm := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), cmsgUDPLen)
			h := (*unix.Cmsghdr)(unsafe.Pointer(&cm[0]))
			h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(cm[unix.CmsgLen(0):], uint16(size))
			hdrs[m].hdr.Control = &cm[0]
			hdrs[m].hdr.SetControllen(unix.CmsgSpace(2))
		}
	}
	for len(hdrs) > 0 {
		var sent int
		err := t.w.wait(func() (bool, error) {
			r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(t.fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
			switch {
			case errno == 0:
				sent = int(r)
				return true, nil
			case errno == unix.EAGAIN || errno == unix.ENOBUFS:
				return false, nil
			case errno == unix.EIO || errno == unix.EINVAL:
				return false, errGSORefused
			}
			return false, fmt.Errorf("raw udp: sendmmsg: %w", errno)
		}, t.blockOut)
		if errors.Is(err, errGSORefused) {
			// What is left goes without GSO, one datagram per msghdr.
			t.gso = false
			done := 0
			for _, h := range t.hdrs[:msgs][:msgs-len(hdrs)] {
				done += int(h.hdr.Iovlen)
			}
			return t.send(first+uint64(done), n-done, size)
		}
		if err != nil {
			return err
		}
		hdrs = hdrs[sent:]
	}
	return nil
}

var errGSORefused = errors.New("raw udp: the kernel refused a GSO send")

// fill reads what recvmmsg returns into rx.queue; block says whether to
// wait (with the waiter) for the first datagram.
func (t *udpTransport) fill(block bool) error {
	rx := t.rx
	for i := range rx.hdrs {
		rx.iovs[i] = unix.Iovec{Base: &rx.bufs[i*rxSlotLen]}
		rx.iovs[i].SetLen(rxSlotLen)
		w := rx.cmsgs[i*cmsgUDPLen/8 : (i+1)*cmsgUDPLen/8]
		rx.hdrs[i] = mmsghdr{}
		rx.hdrs[i].hdr.Iov = &rx.iovs[i]
		rx.hdrs[i].hdr.SetIovlen(1)
		rx.hdrs[i].hdr.Control = (*byte)(unsafe.Pointer(&w[0]))
		rx.hdrs[i].hdr.SetControllen(cmsgUDPLen)
	}
	var got int
	try := func() (bool, error) {
		r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(t.fd), uintptr(unsafe.Pointer(&rx.hdrs[0])), uintptr(len(rx.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == 0:
			got = int(r)
			return true, nil
		case errno == unix.EAGAIN:
			return false, nil
		case errno == unix.ECONNREFUSED:
			return false, errors.New("raw udp: the peer's socket is gone (connection refused)")
		}
		return false, fmt.Errorf("raw udp: recvmmsg: %w", errno)
	}
	if block {
		if err := t.w.wait(try, t.blockIn); err != nil {
			return err
		}
	} else if _, err := try(); err != nil {
		return err
	}
	rx.queue = rx.queue[:0]
	for i := range got {
		h := &rx.hdrs[i]
		b := rx.bufs[i*rxSlotLen : i*rxSlotLen+int(h.len)]
		seg := groSize(rx.cmsgs[i*cmsgUDPLen/8:(i+1)*cmsgUDPLen/8], int(h.hdr.Controllen))
		if seg <= 0 || h.hdr.Flags&unix.MSG_TRUNC != 0 {
			rx.queue = append(rx.queue, b)
			continue
		}
		for len(b) > seg {
			rx.queue = append(rx.queue, b[:seg])
			b = b[seg:]
		}
		rx.queue = append(rx.queue, b)
	}
	return nil
}

// groSize returns the UDP_GRO segment size of a received control message
// (0: one datagram).
func groSize(w []uint64, n int) int {
	cm := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), cmsgUDPLen)[:min(n, cmsgUDPLen)]
	for len(cm) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&cm[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(cm) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.SizeofCmsghdr+4 {
			return int(binary.NativeEndian.Uint32(cm[unix.SizeofCmsghdr:]))
		}
		cm = cm[min(len(cm), (l+7)&^7):]
	}
	return 0
}

// readBatched returns the next datagram, reading a batch when none is left.
func (t *udpTransport) readBatched() ([]byte, error) {
	rx := t.rx
	for len(rx.queue) == 0 {
		if err := t.fill(true); err != nil {
			return nil, err
		}
	}
	b := rx.queue[0]
	rx.queue = rx.queue[1:]
	return b, nil
}

// pollBatched returns a datagram already received or readable now (nil:
// none).
func (t *udpTransport) pollBatched() ([]byte, error) {
	rx := t.rx
	if len(rx.queue) == 0 {
		if err := t.fill(false); err != nil {
			return nil, err
		}
	}
	if len(rx.queue) == 0 {
		return nil, nil
	}
	b := rx.queue[0]
	rx.queue = rx.queue[1:]
	return b, nil
}
