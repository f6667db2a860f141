package ofverbs

import (
	"sync"

	"github.com/iwarpd/iwarpd/internal/shm"
	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// Posting: each work request is encoded straight into its ring slot
// (proto.SQE/RQE header, then the SGEs or the inline bytes), the batch is
// published with one atomic store of the producer index, and the doorbell is
// rung only when the engine says it sleeps. No system call per work request
// while the daemon polls; no allocation.

// sendQueue is a QP's SQ producer side.
type sendQueue struct {
	qp    *QP
	mu    sync.Mutex
	prod  *shm.Producer // nil once closed
	depth uint32
}

// recvQueue is the producer side of a QP's RQ or of an SRQ.
type recvQueue struct {
	ctx    *Context
	mu     sync.Mutex
	prod   *shm.Producer // nil once closed
	depth  uint32
	maxSGE uint32
	what   string
}

// PostSend posts send work requests in order and returns how many were
// posted. It stops at the first request it cannot post: a full send queue
// gives an error wrapping unix.ENOMEM, a request exceeding the QP's
// capabilities (SGEs, inline size) one wrapping unix.EINVAL; the requests
// before it are posted (like ibv_post_send's bad_wr). Everything else
// (keys, bounds, opcode for the QP type, state) is checked by the daemon and
// reported in the completion.
func (q *QP) PostSend(wrs []SendWR) (int, error) {
	const op = "post-send"
	sq := &q.sq
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if sq.prod == nil {
		return 0, closedError(op, "queue pair")
	}
	n := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		inlineLen, verr := q.checkSend(wr)
		if verr != nil {
			err = verr
			break
		}
		slot, perr := sq.prod.Next()
		if perr != nil {
			err = &Error{Op: op, Errno: unix.EIO, Msg: perr.Error()}
			break
		}
		if slot == nil {
			err = newError(op, unix.ENOMEM, "send queue full (%d entries): posted %d of %d work requests", sq.depth, n, len(wrs))
			break
		}
		q.encodeSend(slot, wr, inlineLen)
		n++
	}
	if n > 0 {
		sq.prod.Publish()
		q.ctx.ringDoorbell()
	}
	return n, err
}

// checkSend checks what the SQ slot layout depends on, and the address
// handle of a datagram QP's work request (open, of the QP's PD; without
// one the daemon completes the request with an error), and returns the
// inline length.
func (q *QP) checkSend(wr *SendWR) (uint32, error) {
	const op = "post-send"
	if q.typ != QPTypeRC && wr.AH != nil {
		if err := wr.AH.usable(q.pd); err != nil {
			return 0, err
		}
		if wr.RemoteQKey == 0 && wr.AH.qkey == 0 {
			return 0, newError(op, unix.EINVAL, "work request %d names no Q_Key for %v: create the AH with CreateAHTo(the peer QP's Endpoint) or set SendWR.RemoteQKey", wr.ID, wr.AH)
		}
	}
	if wr.Opcode.Atomic() {
		// One 8-byte result SGE after the operands (proto.SQEStride leaves room).
		if wr.Inline || len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return 0, newError(op, unix.EINVAL, "work request %d: an atomic takes one 8-byte result SGE and no inline data", wr.ID)
		}
		return 0, nil
	}
	if !wr.Inline {
		if len(wr.SGL) > int(q.cap.MaxSendSGE) {
			return 0, newError(op, unix.EINVAL, "work request %d has %d SGEs, the QP allows %d", wr.ID, len(wr.SGL), q.cap.MaxSendSGE)
		}
		return 0, nil
	}
	var total uint64
	if wr.InlineData != nil {
		total = uint64(len(wr.InlineData))
	} else {
		for _, s := range wr.SGL {
			total += uint64(s.Length)
			if _, _, ok := q.ctx.findBuffer(s.Addr, uint64(s.Length)); !ok && s.Length > 0 && q.ctx.findProcessMR(s.Addr, uint64(s.Length)) == nil {
				return 0, newError(op, unix.EINVAL, "work request %d: inline SGE at %#x (%d bytes) is neither inside a Buffer nor a process-memory MR of this context", wr.ID, s.Addr, s.Length)
			}
		}
	}
	if total > uint64(q.cap.MaxInline) {
		return 0, newError(op, unix.EINVAL, "work request %d has %d inline bytes, the QP allows %d", wr.ID, total, q.cap.MaxInline)
	}
	return uint32(total), nil
}

// encodeSend writes wr into slot (stride checked by checkSend).
func (q *QP) encodeSend(slot []byte, wr *SendWR, inlineLen uint32) {
	e := proto.SQE{WRID: wr.ID, Opcode: wr.Opcode, RKey: wr.RKey, RemoteAddr: wr.RemoteAddr, InvStag: wr.InvStag, Imm: wr.Imm}
	if wr.Signaled {
		e.Flags |= proto.SendSignaled
	}
	if wr.Solicited {
		e.Flags |= proto.SendSolicited
	}
	if wr.Fence {
		e.Flags |= proto.SendFence
	}
	if wr.AH != nil && q.typ != QPTypeRC {
		e.AH = wr.AH.av // the destination travels in the SQE (proto.AddressVector)
		e.QKey = wr.RemoteQKey
		if e.QKey == 0 {
			e.QKey = wr.AH.qkey
		}
	}
	body := slot[proto.SQEHeaderLen:]
	if wr.Inline {
		e.Flags |= proto.SendInline
		e.InlineLen = inlineLen
		if wr.InlineData != nil {
			copy(body, wr.InlineData)
		} else {
			off := 0
			for _, s := range wr.SGL {
				off += q.ctx.copyFromBuffer(body[off:off+int(s.Length)], s.Addr)
			}
		}
	} else if wr.Opcode.Atomic() {
		// Operands first, then the result SGE (proto.AtomicOperands).
		proto.AtomicOperands{CompareAdd: wr.CompareAdd, Swap: wr.Swap}.Put(body)
		e.NumSGE = uint16(len(wr.SGL))
		for i, s := range wr.SGL {
			proto.SGE(s).Put(body[proto.AtomicOperandsLen+i*proto.SGELen:])
		}
	} else {
		e.NumSGE = uint16(len(wr.SGL))
		for i, s := range wr.SGL {
			proto.SGE(s).Put(body[i*proto.SGELen:])
		}
	}
	e.Put(slot)
}

// copyFromBuffer copies len(dst) bytes at addr (inside a Buffer) to dst. A
// buffer closed since checkSend leaves zeros.
func (c *Context) copyFromBuffer(dst []byte, addr uint64) int {
	if len(dst) == 0 {
		return 0
	}
	b, off, ok := c.findBuffer(addr, uint64(len(dst)))
	if !ok {
		if src := c.findProcessMR(addr, uint64(len(dst))); src != nil {
			copy(dst, src) // this process's own memory, registered (RegMR keeps it reachable)
		} else {
			clear(dst)
		}
		return len(dst)
	}
	b.mu.Lock()
	if b.mem != nil {
		copy(dst, b.mem[off:])
	} else {
		clear(dst)
	}
	b.mu.Unlock()
	return len(dst)
}

// PostRecv posts receive work requests in order and returns how many were
// posted; a full receive queue gives an error wrapping unix.ENOMEM after
// posting what fit, too many SGEs one wrapping unix.EINVAL. A QP using an
// SRQ has no receive queue (EINVAL): post to the SRQ.
func (q *QP) PostRecv(wrs []RecvWR) (int, error) {
	if q.rq == nil {
		return 0, newError("post-recv", unix.EINVAL, "the QP receives from a shared receive queue")
	}
	return q.rq.post(wrs, "post-recv")
}

func (rq *recvQueue) post(wrs []RecvWR, op string) (int, error) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	if rq.prod == nil {
		return 0, closedError(op, rq.what)
	}
	n := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGL) > int(rq.maxSGE) {
			err = newError(op, unix.EINVAL, "work request %d has %d SGEs, the %s allows %d", wr.ID, len(wr.SGL), rq.what, rq.maxSGE)
			break
		}
		slot, perr := rq.prod.Next()
		if perr != nil {
			err = &Error{Op: op, Errno: unix.EIO, Msg: perr.Error()}
			break
		}
		if slot == nil {
			err = newError(op, unix.ENOMEM, "%s full (%d entries): posted %d of %d work requests", rq.what, rq.depth, n, len(wrs))
			break
		}
		e := proto.RQE{WRID: wr.ID, NumSGE: uint16(len(wr.SGL))}
		e.Put(slot)
		for j, s := range wr.SGL {
			proto.SGE(s).Put(slot[proto.RQEHeaderLen+j*proto.SGELen:])
		}
		n++
	}
	if n > 0 {
		rq.prod.Publish()
		rq.ctx.ringDoorbell()
	}
	return n, err
}
