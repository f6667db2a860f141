package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
)

// The hub client runs in a process of its own (this program with -role
// hub), so that its memory is measured apart from the peers'. It talks
// with the parent over stdin/stdout, one line each:
//
//	parent → hub: N peer addresses (UD, RD) or the listener address (RC), then "end"
//	hub → parent: "ready ADDR RSS PSS" (base objects made, nothing per peer yet)
//	parent → hub: "go"
//	hub → parent: "done REPLIES RSS PSS" (one message sent to and received from every peer)
//	parent → hub: "exit" (or stdin closes)

// hubMain is the hub client's main.
func hubMain(sock string, typ ofverbs.QPType, n int) error {
	in := bufio.NewScanner(os.Stdin)
	var addrs []netip.AddrPort
	for in.Scan() && in.Text() != "end" {
		a, err := netip.ParseAddrPort(in.Text())
		if err != nil {
			return err
		}
		addrs = append(addrs, a)
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
		if len(addrs) != n {
			return fmt.Errorf("hub: %d peer addresses, want %d", len(addrs), n)
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
	m, err := readProcMem("self")
	if err != nil {
		return err
	}
	self := "-"
	if qp != nil {
		self = qp.Addr().String()
	}
	fmt.Printf("ready %s %d %d\n", self, m.RSS, m.PSS)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("hub: no go")
	}

	deadline := time.Now().Add(time.Duration(n/10+30) * time.Second)
	var sends []ofverbs.SendWR
	var rcQPs []*ofverbs.QP
	if typ == ofverbs.QPTypeRC {
		// One RC QP per peer, connected one after the other.
		for i := range n {
			q, err := pd.CreateQP(ofverbs.QPInitAttr{Type: typ, SendCQ: scq, RecvCQ: rcq,
				Cap: ofverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
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
			sends = append(sends, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, Signaled: true})
			rcQPs = append(rcQPs, q)
		}
	} else {
		for i, a := range addrs {
			ah, err := pd.CreateAH(a)
			if err != nil {
				return fmt.Errorf("hub: AH %d: %w", i, err)
			}
			sends = append(sends, ofverbs.SendWR{ID: uint64(i), Opcode: ofverbs.WRSend, Signaled: true, AH: ah})
		}
	}
	qpFor := func(i int) *ofverbs.QP {
		if qp != nil {
			return qp
		}
		return rcQPs[i]
	}
	replies, err := exchange(sends, qpFor, typ == ofverbs.QPTypeUD, mr.SGE(mem[:msgSize]), scq, rcq, deadline)
	if err != nil {
		return err
	}
	if m, err = readProcMem("self"); err != nil {
		return err
	}
	fmt.Printf("done %d %d %d\n", replies, m.RSS, m.PSS)
	in.Scan() // "exit", or EOF
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// exchange posts every send (at most 128 outstanding) and waits until all
// completed and one reply per peer came back, or the deadline (UD may lose
// messages: the replies are counted, not required).
func exchange(sends []ofverbs.SendWR, qpFor func(int) *ofverbs.QP, lossy bool, sge ofverbs.SGE, scq, rcq *ofverbs.CQ, deadline time.Time) (int, error) {
	wcs := make([]ofverbs.WC, 256)
	posted, completed, replies := 0, 0, 0
	progress := time.Now()
	for completed < len(sends) || replies < len(sends) {
		if lossy && completed == len(sends) && time.Since(progress) > 2*time.Second {
			return replies, nil // UD: the rest were lost
		}
		if time.Now().After(deadline) {
			if completed == len(sends) && lossy {
				return replies, nil // UD: the rest were lost
			}
			return replies, fmt.Errorf("hub: %d of %d sends completed, %d replies", completed, len(sends), replies)
		}
		for posted < len(sends) && posted-completed < 128 {
			wr := sends[posted]
			wr.SGL = []ofverbs.SGE{sge}
			if k, err := qpFor(posted).PostSend([]ofverbs.SendWR{wr}); k != 1 {
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
