package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"golang.org/x/sys/unix"
)

// Queue sizes, as rping.c: RPING_SQ_DEPTH send work requests, two receives
// (one is posted at a time), a CQ of twice the send depth.
const (
	sqDepth = 16
	rqDepth = 2
	cqDepth = 2 * sqDepth
)

// serverBufSize is the least the server registers for its RDMA buffer, so
// that it can read whatever size a client uses (rping's server registers
// exactly -S and fails a larger client's Read).
const serverBufSize = maxSize

// Bounds on the goodbye: how long each side waits for its disconnect to
// complete, and how often a wait for completions looks at CM events.
const (
	goodbyeWait = 2 * time.Second
	eventSlice  = 200 * time.Millisecond
)

// errDisconnected is matched when the peer (or the daemon) ended the
// connection while rping waited.
var errDisconnected = errors.New("the connection was closed")

// rping is one side's resources and state.
type rping struct {
	cfg         config
	out, errOut io.Writer

	ctx *ofverbs.Context
	pd  *ofverbs.PD
	ch  *ofverbs.CompChannel
	cq  *ofverbs.CQ
	qp  *ofverbs.QP

	// One shared-memory Buffer holds the four areas of rping_cb: recv_buf
	// and send_buf (16 octets each), rdma_buf (the RDMA sink, and the
	// server's RDMA Read destination) and, on the client, start_buf (the
	// RDMA Read source). Each is its own memory region, as in rping.
	recv, send, rdma, start         []byte
	recvMR, sendMR, rdmaMR, startMR *ofverbs.MR

	wcs  [1]ofverbs.WC
	gone *ofverbs.CMEvent // the CMDisconnected seen while waiting
}

func (r *rping) role() string {
	if r.cfg.server {
		return "server"
	}
	return "client"
}

func (r *rping) debugf(format string, args ...any) {
	if r.cfg.debug {
		fmt.Fprintf(r.errOut, "rping %s: "+format+"\n", append([]any{r.role()}, args...)...)
	}
}

// open connects to iwarpd.
func (r *rping) open() error {
	opts := []ofverbs.Option{ofverbs.WithClientName("rping-" + r.role())}
	if r.cfg.socket != "" {
		opts = append(opts, ofverbs.WithSocket(r.cfg.socket))
	}
	ctx, err := ofverbs.Open(opts...)
	if err != nil {
		return fmt.Errorf("opening the iwarpd device: %w", err)
	}
	r.ctx = ctx
	r.debugf("device %s (iwarpd %s) at %s", ctx.DeviceName(), ctx.DaemonVersion(), ctx.Socket())
	return nil
}

// setup creates the PD, channel, CQ and RC QP (in INIT), registers the
// buffers (rdmaSize octets of RDMA buffer; a start buffer of size octets on
// the client) and posts the first receive.
func (r *rping) setup(rdmaSize int) error {
	var err error
	if r.pd, err = r.ctx.AllocPD(); err != nil {
		return fmt.Errorf("allocating a PD: %w", err)
	}
	if r.ch, err = r.ctx.CreateCompChannel(); err != nil {
		return fmt.Errorf("creating a completion channel: %w", err)
	}
	if r.cq, err = r.ctx.CreateCQ(cqDepth, r.ch); err != nil {
		return fmt.Errorf("creating a CQ: %w", err)
	}
	r.qp, err = r.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: ofverbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("creating the RC QP: %w", err)
	}
	if err := r.qp.ModifyState(ofverbs.QPStateInit); err != nil {
		return fmt.Errorf("moving the QP to INIT: %w", err)
	}
	const rdmaOff = 128
	startOff := rdmaOff + (rdmaSize+63)&^63
	total := startOff
	if !r.cfg.server {
		total += r.cfg.size
	}
	buf, err := r.ctx.AllocBuffer(total)
	if err != nil {
		return fmt.Errorf("allocating %d octets of shared memory: %w", total, err)
	}
	mem := buf.Bytes()
	remote := ofverbs.AccessLocalWrite | ofverbs.AccessRemoteRead | ofverbs.AccessRemoteWrite
	r.recv, r.send, r.rdma = mem[0:rdmaInfoLen], mem[64:64+rdmaInfoLen], mem[rdmaOff:rdmaOff+rdmaSize]
	if r.recvMR, err = r.pd.RegMR(r.recv, ofverbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("registering recv_buf: %w", err)
	}
	if r.sendMR, err = r.pd.RegMR(r.send, 0); err != nil {
		return fmt.Errorf("registering send_buf: %w", err)
	}
	if r.rdmaMR, err = r.pd.RegMR(r.rdma, remote); err != nil {
		return fmt.Errorf("registering rdma_buf: %w", err)
	}
	if !r.cfg.server {
		r.start = mem[startOff : startOff+r.cfg.size]
		if r.startMR, err = r.pd.RegMR(r.start, remote); err != nil {
			return fmt.Errorf("registering start_buf: %w", err)
		}
	}
	if err := r.cq.ReqNotify(false); err != nil {
		return fmt.Errorf("arming the CQ: %w", err)
	}
	return r.postRecv()
}

func (r *rping) postRecv() error {
	if _, err := r.qp.PostRecv([]ofverbs.RecvWR{{ID: 1, SGL: []ofverbs.SGE{r.recvMR.SGE(r.recv)}}}); err != nil {
		return fmt.Errorf("posting a receive: %w", err)
	}
	return nil
}

// postInfo sends m (nil: the server's "go ahead", send_buf as it is).
func (r *rping) postInfo(m *rdmaInfo) error {
	if m != nil {
		m.Append(r.send[:0])
		r.debugf("RDMA addr %x rkey %x len %d", m.Buf, m.RKey, m.Size)
	}
	wr := ofverbs.SendWR{ID: 2, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{r.sendMR.SGE(r.send)}, Signaled: true}
	if _, err := r.qp.PostSend([]ofverbs.SendWR{wr}); err != nil {
		return fmt.Errorf("posting a Send: %w", err)
	}
	return nil
}

// postRDMA posts an RDMA Read or Write between local (in rdma_buf) and the
// peer's buffer m.
func (r *rping) postRDMA(op ofverbs.SendOpcode, local []byte, m rdmaInfo) error {
	wr := ofverbs.SendWR{ID: 3, Opcode: op, SGL: []ofverbs.SGE{r.rdmaMR.SGE(local)}, Signaled: true,
		RemoteAddr: m.Buf, RKey: m.RKey}
	if _, err := r.qp.PostSend([]ofverbs.SendWR{wr}); err != nil {
		return fmt.Errorf("posting an %v: %w", op, err)
	}
	return nil
}

// wait returns the next completion, which must be of opcode want (Send
// completions are skipped unless wanted), within the -timeout. A flushed
// work request or a CMDisconnected event gives errDisconnected.
func (r *rping) wait(want ofverbs.WCOpcode, what string) (ofverbs.WC, error) {
	var deadline time.Time
	if r.cfg.timeout > 0 {
		deadline = time.Now().Add(r.cfg.timeout)
	}
	for {
		n, err := r.cq.Poll(r.wcs[:])
		if err != nil {
			return ofverbs.WC{}, fmt.Errorf("%s: polling the CQ: %w", what, err)
		}
		if n == 1 {
			wc := r.wcs[0]
			switch {
			case wc.Status == ofverbs.WCWRFlushErr:
				return wc, r.disconnected(what)
			case wc.Status != ofverbs.WCSuccess:
				return wc, fmt.Errorf("%s: cq completion failed: %w", what, wc.Err())
			case wc.Opcode == want:
				return wc, nil
			case wc.Opcode == ofverbs.WCSend:
				r.debugf("send completion")
				continue
			}
			return wc, fmt.Errorf("%s: unexpected %v completion", what, wc.Opcode)
		}
		if r.gone != nil {
			return ofverbs.WC{}, r.disconnected(what)
		}
		slice := eventSlice
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return ofverbs.WC{}, fmt.Errorf("%s: no completion within %v", what, r.cfg.timeout)
			}
			slice = min(slice, left)
		}
		if _, err := r.ch.GetEventTimeout(slice); err == nil {
			r.cq.AckEvents(1)
			if err := r.cq.ReqNotify(false); err != nil {
				return ofverbs.WC{}, fmt.Errorf("%s: arming the CQ: %w", what, err)
			}
			continue // the completions that arrived before re-arming are polled first
		} else if !errors.Is(err, unix.ETIMEDOUT) {
			return ofverbs.WC{}, fmt.Errorf("%s: waiting for completions: %w", what, err)
		}
		r.checkEvents()
	}
}

// checkEvents takes the QP's pending CM events; it remembers a
// CMDisconnected in r.gone (wait then polls the CQ once more).
func (r *rping) checkEvents() {
	for {
		select {
		case ev := <-r.qp.CMEvents():
			r.debugf("cma event %v (errno %d) %s", ev.Type, int(ev.Errno), ev.Detail)
			if ev.Type == ofverbs.CMDisconnected {
				r.gone = &ev
			}
		default:
			return
		}
	}
}

// disconnected explains an end of connection seen while waiting for what.
func (r *rping) disconnected(what string) error {
	if r.gone == nil {
		r.checkEvents()
	}
	if r.gone != nil && r.gone.Errno != 0 {
		return fmt.Errorf("%s: %w (%v: %s)", what, errDisconnected, r.gone.Errno, r.gone.Detail)
	}
	return fmt.Errorf("%s: %w", what, errDisconnected)
}

// goodbye disconnects (unless the peer already did) and waits, bounded, for
// the CMDisconnected event.
func (r *rping) goodbye() {
	if r.qp == nil || !r.qp.ConnInfo().Connected {
		return
	}
	if r.gone == nil {
		if err := r.qp.Disconnect(); err != nil {
			r.debugf("disconnect: %v", err)
		}
	}
	t := time.NewTimer(goodbyeWait)
	defer t.Stop()
	for r.gone == nil {
		select {
		case ev := <-r.qp.CMEvents():
			if ev.Type == ofverbs.CMDisconnected {
				r.gone = &ev
			}
		case <-t.C:
			r.debugf("no DISCONNECTED event within %v", goodbyeWait)
			return
		}
	}
	r.debugf("%s DISCONNECT EVENT...", r.role())
}

func (r *rping) close() {
	if r.ctx != nil {
		r.ctx.Close() // closes every object of the session
	}
}

// runClient is rping_run_client and rping_test_client.
func (r *rping) runClient() error {
	dst, err := resolve(r.cfg.addr, r.cfg.port)
	if err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	defer r.close()
	if err := r.setup(r.cfg.size); err != nil {
		return err
	}
	p := ofverbs.ConnParam{IRD: r.cfg.ird, ORD: r.cfg.ord, MPA: r.cfg.mpa, Timeout: r.cfg.timeout}
	if err := r.qp.Connect(dst, p); err != nil {
		return fmt.Errorf("connect to %v: %w", dst, err)
	}
	info := r.qp.ConnInfo()
	r.debugf("connected %v → %v: MPA %+v, IRD %d ORD %d", info.Local, info.Peer, info.MPA, info.IRD, info.ORD)
	err = r.pingLoop()
	r.goodbye()
	return err
}

// pingLoop runs the client's pings.
func (r *rping) pingLoop() error {
	start := byte(patternFirst)
	for ping := 0; r.cfg.count == 0 || ping < r.cfg.count; ping++ {
		start = fillPing(r.start, ping, start)
		if err := r.postInfo(&rdmaInfo{Buf: r.startMR.Addr(), RKey: r.startMR.RKey(), Size: uint32(r.cfg.size)}); err != nil {
			return err
		}
		if err := r.recvInfo(ping, "waiting for the server's go-ahead after its RDMA Read"); err != nil {
			return err
		}
		if err := r.postInfo(&rdmaInfo{Buf: r.rdmaMR.Addr(), RKey: r.rdmaMR.RKey(), Size: uint32(r.cfg.size)}); err != nil {
			return err
		}
		if err := r.recvInfo(ping, "waiting for the server's go-ahead after its RDMA Write"); err != nil {
			return err
		}
		if r.cfg.validate && string(r.start) != string(r.rdma) {
			return fmt.Errorf("ping %d: data mismatch!\n sent:     %q\n received: %q", ping, cString(r.start), cString(r.rdma))
		}
		if r.cfg.verbose {
			fmt.Fprintf(r.out, "ping data: %s\n", cString(r.rdma))
		}
	}
	return nil
}

// recvInfo waits for a 16-octet message and posts the next receive.
func (r *rping) recvInfo(ping int, what string) error {
	what = "ping " + strconv.Itoa(ping) + ": " + what
	wc, err := r.wait(ofverbs.WCRecv, what)
	if err != nil {
		return err
	}
	if wc.ByteLen != rdmaInfoLen {
		return fmt.Errorf("%s: received bogus data, size %d", what, wc.ByteLen)
	}
	return r.postRecv()
}

// runServer is rping_run_server and rping_test_server: one client, served
// until it disconnects.
func (r *rping) runServer() error {
	if err := r.open(); err != nil {
		return err
	}
	defer r.close()
	addr := ":" + strconv.Itoa(r.cfg.port)
	if r.cfg.addr != "" {
		a, err := resolve(r.cfg.addr, r.cfg.port)
		if err != nil {
			return err
		}
		addr = a.String()
	}
	l, err := r.ctx.Listen(addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	r.debugf("listening on %v", l.Addr())
	req, err := l.GetRequest(0)
	if err != nil {
		return fmt.Errorf("waiting for a connection request: %w", err)
	}
	r.debugf("connection request from %v (MPA %+v, IRD %d ORD %d)", req.Peer(), req.MPA(), req.IRD(), req.ORD())
	if err := r.setup(max(r.cfg.size, serverBufSize)); err != nil {
		req.Reject(nil)
		return err
	}
	if err := req.Accept(r.qp, ofverbs.ConnParam{IRD: r.cfg.ird, ORD: r.cfg.ord}); err != nil {
		return fmt.Errorf("accepting %v: %w", req.Peer(), err)
	}
	l.Close() // rping serves one client (no -P)
	info := r.qp.ConnInfo()
	r.debugf("accepted %v → %v: MPA %+v, IRD %d ORD %d", info.Peer, info.Local, info.MPA, info.IRD, info.ORD)
	err = r.serve()
	r.goodbye()
	return err
}

// serve is rping_test_server's loop.
func (r *rping) serve() error {
	for ping := 0; ; ping++ {
		src, err := r.serverRecv(ping, "waiting for the client's source buffer")
		if errors.Is(err, errDisconnected) && ping > 0 {
			r.debugf("the client left after %d pings", ping)
			return nil
		}
		if err != nil {
			return err
		}
		if src.Size == 0 || src.Size > uint32(len(r.rdma)) {
			return fmt.Errorf("ping %d: the client's buffer of %d octets does not fit this server's %d", ping, src.Size, len(r.rdma))
		}
		n := int(src.Size)
		if err := r.postRDMA(ofverbs.WRRDMARead, r.rdma[:n], src); err != nil {
			return err
		}
		if _, err := r.wait(ofverbs.WCRDMARead, fmt.Sprintf("ping %d: RDMA Read", ping)); err != nil {
			return err
		}
		if r.cfg.verbose {
			fmt.Fprintf(r.out, "server ping data: %s\n", cString(r.rdma[:n]))
		}
		if err := r.postInfo(nil); err != nil {
			return err
		}
		sink, err := r.serverRecv(ping, "waiting for the client's sink buffer")
		if err != nil {
			return err
		}
		// rping writes strlen(rdma_buf) + 1 octets.
		w := min(len(cString(r.rdma[:n]))+1, n)
		if uint32(w) > sink.Size {
			return fmt.Errorf("ping %d: the client's sink of %d octets is smaller than the %d to write", ping, sink.Size, w)
		}
		if err := r.postRDMA(ofverbs.WRRDMAWrite, r.rdma[:w], sink); err != nil {
			return err
		}
		if _, err := r.wait(ofverbs.WCRDMAWrite, fmt.Sprintf("ping %d: RDMA Write", ping)); err != nil {
			return err
		}
		if err := r.postInfo(nil); err != nil {
			return err
		}
	}
}

// serverRecv waits for a client's rping_rdma_info and posts the next
// receive.
func (r *rping) serverRecv(ping int, what string) (rdmaInfo, error) {
	what = "ping " + strconv.Itoa(ping) + ": " + what
	wc, err := r.wait(ofverbs.WCRecv, what)
	if err != nil {
		return rdmaInfo{}, err
	}
	m, _, err := parseRDMAInfo(r.recv[:min(int(wc.ByteLen), len(r.recv))])
	if err != nil || wc.ByteLen != rdmaInfoLen {
		return rdmaInfo{}, fmt.Errorf("%s: received bogus data, size %d", what, wc.ByteLen)
	}
	r.debugf("received rkey %x addr %x len %d from peer", m.RKey, m.Buf, m.Size)
	return m, r.postRecv()
}
