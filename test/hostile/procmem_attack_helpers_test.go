package hostile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// Pieces of the process-memory attacks (procmem_attack_test.go): a
// "mapper" process holding a page at a fixed address, and a sender that
// sends from a process-memory MR into a Buffer of the same session and
// reports what arrived.

// pmPage is the size of the pages the attacks map.
const pmPage = 4096

// Fixed addresses of the attacks' pages (far from what Go and libc map).
const (
	pmAddrExec    = 0x6f0000000000
	pmAddrNoDump  = 0x6f1000000000
	pmAddrReuse   = 0x6f2000000000
	pmAddrOracle  = 0x6f3000000000
	pmAddrNowhere = 0x6f4000000000
)

// mapAt maps n octets of private anonymous memory at addr exactly.
func mapAt(addr uintptr, n int) ([]byte, error) {
	p, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if errno != 0 {
		return nil, fmt.Errorf("mmap at %#x: %w", addr, errno)
	}
	if p != addr {
		return nil, fmt.Errorf("mmap at %#x gave %#x", addr, p)
	}
	// The mapping is no Go object: reinterpret the address (vet's
	// uintptr-to-Pointer rule is for Go memory).
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n), nil
}

func init() {
	helpers["pm-mapper"] = helperMapper
}

// helperMapper maps a page at the address IWARPD_HOSTILE_ARG ("ADDR
// BYTE") filled with BYTE, says "ready PID", then obeys stdin: "check"
// answers "intact" or "changed"; "exec PATH" execs PATH with ADDR (the
// setuid helper).
func helperMapper() int {
	var addr uintptr
	var fillByte byte
	if _, err := fmt.Sscanf(os.Getenv(envArg), "%x %d", &addr, &fillByte); err != nil {
		return helperFail("pm-mapper: argument %q: %v", os.Getenv(envArg), err)
	}
	page, err := mapAt(addr, pmPage)
	if err != nil {
		return helperFail("pm-mapper: %v", err)
	}
	for i := range page {
		page[i] = fillByte
	}
	helperReady(strconv.Itoa(os.Getpid()))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "check":
			if bytes.Count(page, []byte{fillByte}) == len(page) {
				fmt.Println("intact")
			} else {
				fmt.Println("changed")
			}
		case "exec":
			err := syscall.Exec(arg, []string{arg, strconv.FormatUint(uint64(addr), 16)}, os.Environ())
			return helperFail("pm-mapper: exec %s: %v", arg, err)
		}
	}
	return 0
}

// mapperProc is a pm-mapper started by a test or a helper.
type mapperProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	pid int
}

// startMapper starts pm-mapper (this binary) with a page at addr filled
// with b and waits for its "ready PID".
func startMapper(addr uintptr, b byte) (*mapperProc, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=pm-mapper", envArg+"="+fmt.Sprintf("%x %d", addr, b))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := pinfork.Start(cmd); err != nil {
		return nil, err
	}
	m := &mapperProc{cmd: cmd, in: in, out: bufio.NewReader(out)}
	l, err := m.line()
	if err != nil {
		m.kill()
		return nil, err
	}
	if _, err := fmt.Sscanf(l, "ready %d", &m.pid); err != nil {
		m.kill()
		return nil, fmt.Errorf("pm-mapper said %q", l)
	}
	return m, nil
}

// line reads the mapper's next line (bounded).
func (m *mapperProc) line() (string, error) {
	type res struct {
		s   string
		err error
	}
	c := make(chan res, 1)
	go func() {
		s, err := m.out.ReadString('\n')
		c <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-c:
		if r.err != nil && r.s == "" {
			return "", fmt.Errorf("pm-mapper: %v", r.err)
		}
		return r.s, nil
	case <-time.After(daemontest.Scaled(20 * time.Second)):
		return "", errors.New("pm-mapper: no answer within 20 s")
	}
}

// say sends a command line to the mapper.
func (m *mapperProc) say(s string) error {
	_, err := io.WriteString(m.in, s+"\n")
	return err
}

func (m *mapperProc) kill() {
	m.cmd.Process.Kill()
	m.cmd.Wait()
}

// pmProbe is a UD pair of one session with a process-memory MR: send
// sends n octets from the MR into a Buffer and reports the completion
// statuses and what arrived; recv sends n octets of a Buffer into the MR.
type pmProbe struct {
	ctx    *ofverbs.Context
	pd     *ofverbs.PD
	buf    *ofverbs.Buffer
	bmr    *ofverbs.MR
	mr     *ofverbs.MR
	cq     *ofverbs.CQ
	qa, qb *ofverbs.QP
	ah     *ofverbs.AH
	id     uint64
}

func newPMProbe(ctx *ofverbs.Context) (*pmProbe, error) {
	p := &pmProbe{ctx: ctx}
	var err error
	if p.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if p.buf, err = ctx.AllocBuffer(1 << 16); err != nil {
		return nil, err
	}
	if p.bmr, err = p.pd.RegMR(p.buf.Bytes(), ofverbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	return p, nil
}

// renew makes a new CQ and UD pair: a failed work request moves a UD QP to
// ERROR, so every operation starts on fresh QPs.
func (p *pmProbe) renew() error {
	for _, q := range []*ofverbs.QP{p.qa, p.qb} {
		if q != nil {
			q.Close()
		}
	}
	if p.cq != nil {
		p.cq.Close()
	}
	var err error
	if p.cq, err = p.ctx.CreateCQ(64, nil); err != nil {
		return err
	}
	for _, q := range []**ofverbs.QP{&p.qa, &p.qb} {
		if *q, err = p.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: p.cq, RecvCQ: p.cq,
			Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return err
		}
		if err = (*q).ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			return err
		}
	}
	p.ah, err = p.pd.CreateAHTo(p.qb.Endpoint())
	return err
}

// reg registers mem (process memory: no Buffer holds it).
func (p *pmProbe) reg(mem []byte) error {
	mr, err := p.pd.RegMR(mem, ofverbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	if !mr.Process() {
		return errors.New("not registered as process memory")
	}
	p.mr = mr
	return nil
}

// send sends mem (inside p.mr) to the Buffer: the send's status, the
// receive's (WCGeneralErr when none came: the send failed) and the octets
// in the receive buffer.
func (p *pmProbe) send(mem []byte) (snd, rcv ofverbs.WCStatus, got []byte, err error) {
	if err := p.renew(); err != nil {
		return 0, 0, nil, err
	}
	dst := p.buf.Bytes()[:len(mem)]
	for i := range dst {
		dst[i] = 0xEE
	}
	p.id++
	if k, err := p.qb.PostRecv([]ofverbs.RecvWR{{ID: p.id, SGL: []ofverbs.SGE{p.bmr.SGE(dst)}}}); k != 1 {
		return 0, 0, nil, fmt.Errorf("post receive: %w", err)
	}
	if k, err := p.qa.PostSend([]ofverbs.SendWR{{ID: p.id, Opcode: ofverbs.WRSend, AH: p.ah, Signaled: true,
		SGL: []ofverbs.SGE{p.mr.SGE(mem)}}}); k != 1 {
		return 0, 0, nil, fmt.Errorf("post send: %w", err)
	}
	sent := false
	rcv = ofverbs.WCGeneralErr
	deadline := time.Now().Add(daemontest.Scaled(20 * time.Second))
	var wcs [2]ofverbs.WC
	for i := 0; !sent || (snd == ofverbs.WCSuccess && rcv == ofverbs.WCGeneralErr); i++ {
		if time.Now().After(deadline) {
			return 0, 0, nil, fmt.Errorf("send: completions: send %v, receive %v within 20 s", snd, rcv)
		}
		n, err := p.cq.Poll(wcs[:])
		if err != nil {
			return 0, 0, nil, err
		}
		for _, wc := range wcs[:n] {
			if wc.QPN == p.qa.QPN() {
				snd, sent = wc.Status, true
			} else {
				rcv = wc.Status
			}
		}
		if n == 0 && i > 1000 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return snd, rcv, append([]byte(nil), dst...), nil
}

// recv posts a receive into mem (inside p.mr) and sends len(mem) octets of
// value b from the Buffer into it: the receive's status (a placement that
// failed is not WCSuccess; WCGeneralErr when no completion came).
func (p *pmProbe) recv(mem []byte, b byte) (ofverbs.WCStatus, error) {
	if err := p.renew(); err != nil {
		return 0, err
	}
	src := p.buf.Bytes()[:len(mem)]
	for i := range src {
		src[i] = b
	}
	p.id++
	if k, err := p.qb.PostRecv([]ofverbs.RecvWR{{ID: p.id, SGL: []ofverbs.SGE{p.mr.SGE(mem)}}}); k != 1 {
		return 0, fmt.Errorf("post receive: %w", err)
	}
	if k, err := p.qa.PostSend([]ofverbs.SendWR{{ID: p.id, Opcode: ofverbs.WRSend, AH: p.ah, Signaled: true,
		SGL: []ofverbs.SGE{p.bmr.SGE(src)}}}); k != 1 {
		return 0, fmt.Errorf("post send: %w", err)
	}
	deadline := time.Now().Add(daemontest.Scaled(5 * time.Second))
	var wcs [2]ofverbs.WC
	for time.Now().Before(deadline) {
		n, err := p.cq.Poll(wcs[:])
		if err != nil {
			return 0, err
		}
		for _, wc := range wcs[:n] {
			if wc.QPN == p.qb.QPN() {
				return wc.Status, nil
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	return ofverbs.WCGeneralErr, nil
}
