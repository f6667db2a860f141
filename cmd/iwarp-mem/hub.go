package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// The hub client runs in a process of its own (this program with -role
// hub), so that its memory is measured apart from the peers'. It talks
// with the parent over stdin/stdout, one line each:
//
//	parent → hub: N peer endpoints, ip:port/qkey (UD, RD), or the listener address (RC), then "end"
//	hub → parent: "ready ENDPOINT RSS PSS" (base objects made, nothing per peer yet; ENDPOINT "-" for RC)
//	parent → hub: "go"
//	hub → parent: "done REPLIES RSS PSS" (one message sent to and received from every peer)
//	parent → hub: "exit" (or stdin closes)

// hubMain is the hub client's main. What it keeps per peer is what an
// application would: an address handle (UD, RD) or a connected QP (RC).
// It reads its own memory after a garbage collection that returns freed
// pages to the kernel (settledMem), before and after the exchange, so that
// garbage of the exchange itself is not counted as per-peer state (the
// daemons cannot be made to collect: their figures include such garbage,
// which the -gogc 10 run bounds).
func hubMain(sock, typName string, n int) error {
	typ := qpTypes[typName]
	in := bufio.NewScanner(os.Stdin)
	var addrs []netip.AddrPort // RC: the listener
	var eps []ofverbs.Endpoint // UD, RD: the peers' QPs (address and Q_Key)
	for in.Scan() && in.Text() != "end" {
		if typ == ofverbs.QPTypeRC {
			a, err := netip.ParseAddrPort(in.Text())
			if err != nil {
				return err
			}
			addrs = append(addrs, a)
			continue
		}
		ep, err := ofverbs.ParseEndpoint(in.Text())
		if err != nil {
			return err
		}
		eps = append(eps, ep)
	}
	ctx, err := ofverbs.Open(ofverbs.WithSocket(sock), ofverbs.WithClientName("iwarp-mem-hub"))
	if err != nil {
		return err
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		return err
	}
	buf, err := ctx.AllocBuffer((n + 1) * msgSize)
	if err != nil {
		return err
	}
	mem := buf.Bytes()
	mr, err := pd.RegMR(mem, ofverbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	scq, err := ctx.CreateCQ(cqDepth(n), nil)
	if err != nil {
		return err
	}
	rcq, err := ctx.CreateCQ(cqDepth(n), nil)
	if err != nil {
		return err
	}
	slot := func(i int) []ofverbs.SGE { return []ofverbs.SGE{mr.SGE(mem[(i+1)*msgSize : (i+2)*msgSize])} }
	var qp *ofverbs.QP // the datagram QP
	if typ != ofverbs.QPTypeRC {
		if len(eps) != n {
			return fmt.Errorf("hub: %d peer endpoints, want %d", len(eps), n)
		}
		qp, err = pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: scq, RecvCQ: rcq,
			Cap: ofverbs.QPCap{MaxSendWR: 256, MaxRecvWR: uint32(max(n, 1)), MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return err
		}
		if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			return err
		}
		for i := range n {
			if k, err := qp.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: slot(i)}}); k != 1 {
				return fmt.Errorf("hub: post receive %d: %w", i, err)
			}
		}
	} else if len(addrs) != 1 {
		return fmt.Errorf("hub: %d listener addresses, want 1", len(addrs))
	}
	m, err := settledMem()
	if err != nil {
		return err
	}
	self := "-"
	if qp != nil {
		self = qp.Endpoint().String()
	}
	fmt.Printf("ready %s %d %d\n", self, m.RSS, m.PSS)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("hub: no go")
	}

	deadline := time.Now().Add(time.Duration(n/10+30) * time.Second)
	// Per peer: its AH (UD, RD) or its QP (RC), kept until the reading.
	var ahs []*ofverbs.AH
	var rcQPs []*ofverbs.QP
	if typ == ofverbs.QPTypeRC {
		// One RC QP per peer, connected one after the other.
		depth := rcDepth[typName]
		for i := range n {
			q, err := pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: scq, RecvCQ: rcq,
				Cap: ofverbs.QPCap{MaxSendWR: depth[0], MaxRecvWR: depth[1], MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return fmt.Errorf("hub: QP %d: %w", i, err)
			}
			if err := q.ModifyState(ofverbs.QPStateInit); err != nil {
				return err
			}
			if k, err := q.PostRecv([]ofverbs.RecvWR{{ID: uint64(i), SGL: slot(i)}}); k != 1 {
				return fmt.Errorf("hub: post receive %d: %w", i, err)
			}
			if err := q.Connect(addrs[0], ofverbs.ConnParam{Timeout: 20 * time.Second}); err != nil {
				return fmt.Errorf("hub: connect %d: %w", i, err)
			}
			rcQPs = append(rcQPs, q)
		}
	} else {
		ahs = make([]*ofverbs.AH, 0, n)
		for i, ep := range eps {
			ah, err := pd.CreateAHTo(ep)
			if err != nil {
				return fmt.Errorf("hub: AH %d: %w", i, err)
			}
			ahs = append(ahs, ah)
		}
	}
	target := func(i int) (*ofverbs.QP, *ofverbs.AH) {
		if qp != nil {
			return qp, ahs[i]
		}
		return rcQPs[i], nil
	}
	replies, err := exchange(n, target, typ == ofverbs.QPTypeUD, mr.SGE(mem[:msgSize]), scq, rcq, deadline)
	if err != nil {
		return err
	}
	if m, err = settledMem(); err != nil {
		return err
	}
	fmt.Printf("done %d %d %d\n", replies, m.RSS, m.PSS)
	in.Scan() // "exit", or EOF
	io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(ahs)
	runtime.KeepAlive(rcQPs)
	return nil
}

// settledMem collects garbage, returns free pages to the kernel, and reads
// this process's memory.
func settledMem() (procMem, error) {
	runtime.GC()
	debug.FreeOSMemory()
	return readProcMem("self")
}

// exchange sends one message to each of the n peers (at most 128
// outstanding; target names the QP and AH of peer i) and waits until all
// completed and one reply per peer came back, or the deadline (UD may lose
// messages: the replies are counted, not required). It allocates nothing
// per message.
func exchange(n int, target func(int) (*ofverbs.QP, *ofverbs.AH), lossy bool, sge ofverbs.SGE, scq, rcq *ofverbs.CQ, deadline time.Time) (int, error) {
	wcs := make([]ofverbs.WC, 256)
	wr := []ofverbs.SendWR{{Opcode: ofverbs.WRSend, Signaled: true, SGL: []ofverbs.SGE{sge}}}
	posted, completed, replies := 0, 0, 0
	progress := time.Now()
	for completed < n || replies < n {
		if lossy && completed == n && time.Since(progress) > 2*time.Second {
			return replies, nil // UD: the rest were lost
		}
		if time.Now().After(deadline) {
			if completed == n && lossy {
				return replies, nil // UD: the rest were lost
			}
			return replies, fmt.Errorf("hub: %d of %d sends completed, %d replies", completed, n, replies)
		}
		for posted < n && posted-completed < 128 {
			q, ah := target(posted)
			wr[0].ID, wr[0].AH = uint64(posted), ah
			if k, err := q.PostSend(wr); k != 1 {
				return replies, fmt.Errorf("hub: send %d: %w", posted, err)
			}
			posted++
		}
		idle := true
		n, err := scq.Poll(wcs)
		if err != nil {
			return replies, err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != ofverbs.WCSuccess {
				return replies, fmt.Errorf("hub: send completion %+v: %v", wc, wc.Err())
			}
			completed++
			idle = false
		}
		if n, err = rcq.Poll(wcs); err != nil {
			return replies, err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != ofverbs.WCSuccess {
				return replies, fmt.Errorf("hub: receive %+v: %v", wc, wc.Err())
			}
			replies++
			idle = false
		}
		if idle {
			time.Sleep(200 * time.Microsecond)
		} else {
			progress = time.Now()
		}
	}
	return replies, nil
}
