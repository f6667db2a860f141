package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// msgSize is the size of the one message exchanged each way with a peer.
const msgSize = 64

// peers are the N far ends, all in one session of the peer daemon (this
// process): one QP per peer, one receive posted on each; every message
// received is answered with one message back to its sender.
type peers struct {
	typ    ofverbs.QPType
	ctx    *ofverbs.Context
	pd     *ofverbs.PD
	mr     *ofverbs.MR
	mem    []byte
	scq    *ofverbs.CQ
	rcq    *ofverbs.CQ
	mu     sync.Mutex
	byQPN  map[uint32]*ofverbs.QP
	addrs  []ofverbs.Endpoint // datagram peers' endpoints (address and Q_Key)
	hubKey atomic.Uint32      // the hub QP's Q_Key (from its "ready" line), for the replies
	hubAH  *ofverbs.AH        // datagram replies go there
	ln     *ofverbs.Listener
	served atomic.Int64 // replies posted
}

func cqDepth(n int) int { return min(2*n+64, 65536) }

// newPeers makes the session and n datagram QPs (UD or RD) or, for RC, a
// listener (QPs come with the connections, see acceptRC).
func newPeers(sock string, typ ofverbs.QPType, n int) (*peers, error) {
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("iwarp-mem-peers"))
	if err != nil {
		return nil, err
	}
	p := &peers{typ: typ, ctx: ctx, byQPN: make(map[uint32]*ofverbs.QP, n)}
	fail := func(err error) (*peers, error) {
		ctx.Close()
		return nil, fmt.Errorf("peers: %w", err)
	}
	if p.pd, err = ctx.AllocPD(); err != nil {
		return fail(err)
	}
	buf, err := ctx.AllocBuffer((n + 1) * msgSize)
	if err != nil {
		return fail(err)
	}
	p.mem = buf.Bytes()
	if p.mr, err = p.pd.RegMR(p.mem, ofverbs.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if p.scq, err = ctx.CreateCQ(cqDepth(n), nil); err != nil {
		return fail(err)
	}
	if p.rcq, err = ctx.CreateCQ(cqDepth(n), nil); err != nil {
		return fail(err)
	}
	if typ == ofverbs.QPTypeRC {
		if p.ln, err = ctx.ListenBacklog("127.0.0.1:0", 128); err != nil {
			return fail(err)
		}
		return p, nil
	}
	for i := range n {
		qp, err := p.newQP(i)
		if err != nil {
			return fail(fmt.Errorf("QP %d of %d: %w", i, n, err))
		}
		if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			return fail(err)
		}
		p.addrs = append(p.addrs, qp.Endpoint())
	}
	return p, nil
}

// newQP makes peer i's QP with its receive posted (RC: in INIT).
func (p *peers) newQP(i int) (*ofverbs.QP, error) {
	qp, err := p.pd.CreateQP(ofverbs.QPInitAttr{Type: p.typ, SendCQ: p.scq, RecvCQ: p.rcq,
		Cap: ofverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if p.typ == ofverbs.QPTypeRC {
		if err := qp.ModifyState(ofverbs.QPStateInit); err != nil {
			return nil, err
		}
	}
	slot := p.mem[(i+1)*msgSize : (i+2)*msgSize]
	if n, err := qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: []ofverbs.SGE{p.mr.SGE(slot)}}}); n != 1 {
		return nil, fmt.Errorf("post receive: %w", err)
	}
	p.mu.Lock()
	p.byQPN[qp.QPN()] = qp
	p.mu.Unlock()
	return qp, nil
}

// acceptRC accepts n connections, each on a new QP (run in a goroutine).
func (p *peers) acceptRC(n int) error {
	for i := range n {
		req, err := p.ln.GetRequest(60 * time.Second)
		if err != nil {
			return fmt.Errorf("peers: connection %d: %w", i, err)
		}
		qp, err := p.newQP(i)
		if err != nil {
			req.Reject(nil)
			return fmt.Errorf("peers: connection %d: %w", i, err)
		}
		if err := req.Accept(qp, ofverbs.ConnParam{}); err != nil {
			return fmt.Errorf("peers: accept %d: %w", i, err)
		}
	}
	return nil
}

// serve answers every message received until stop closes.
func (p *peers) serve(stop <-chan struct{}) error {
	wcs := make([]ofverbs.WC, 256)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		idle := true
		n, err := p.rcq.Poll(wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			idle = false
			if wc.Status != ofverbs.WCSuccess {
				return fmt.Errorf("peers: receive %+v: %v", wc, wc.Err())
			}
			p.mu.Lock()
			qp := p.byQPN[wc.QPN]
			p.mu.Unlock()
			if qp == nil {
				return fmt.Errorf("peers: receive on unknown QPN %d", wc.QPN)
			}
			wr := ofverbs.SendWR{ID: wc.ID, Opcode: ofverbs.WRSend, Signaled: true, SGL: []ofverbs.SGE{p.mr.SGE(p.mem[:msgSize])}}
			if p.typ != ofverbs.QPTypeRC {
				if p.hubAH == nil {
					if p.hubAH, err = p.pd.CreateAHTo(ofverbs.Endpoint{Addr: wc.Src, QKey: p.hubKey.Load()}); err != nil {
						return err
					}
				}
				wr.AH = p.hubAH
			}
			if k, err := qp.PostSend([]ofverbs.SendWR{wr}); k != 1 {
				return fmt.Errorf("peers: reply: %w", err)
			}
			p.served.Add(1)
		}
		m, err := p.scq.Poll(wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:m] {
			idle = false
			if wc.Status != ofverbs.WCSuccess {
				return fmt.Errorf("peers: reply completion %+v: %v", wc, wc.Err())
			}
		}
		if idle {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

func (p *peers) close() { p.ctx.Close() }
