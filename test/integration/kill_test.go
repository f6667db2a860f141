package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/internal/pinfork"
	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/test/daemontest"
	"golang.org/x/sys/unix"
)

// perfProc is a running iwarp-perf.
type perfProc struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error
}

func startPerf(t *testing.T, args ...string) *perfProc {
	t.Helper()
	p := &perfProc{cmd: exec.Command(bins.perf, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pinfork.Start(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("iwarp-perf %v:\n%s", args, p.out)
		}
	})
	return p
}

// TCP listening ports of this package: 29800-29899 (daemontest.TCPPorts:
// a capture filtering on a port the kernel handed out could record a
// stranger's connection, a listener on it could fail with EADDRINUSE).
var tcpPorts = daemontest.TCPPorts{Base: 29800, Count: 100}

// freeTCPPort returns a port of the package's TCP block that was free on
// every address a moment ago.
func freeTCPPort(t *testing.T) int { return tcpPorts.Free(t) }

// drainFrom consumes receive completions of e whose source is in from
// (re-posting their slots), until none came for quiet; it returns how many.
// Any other completion fails.
//
// With a positive limit it stops after that long whether or not the source
// went quiet (for a sender that is still alive).
func drainFrom(t *testing.T, e *endpoint, from []netip.AddrPort, quiet, limit time.Duration) int {
	t.Helper()
	n := 0
	start, last := time.Now(), time.Now()
	deadline := time.Now().Add(scaled(20 * time.Second))
	wcs := make([]ofverbs.WC, 16)
	for time.Since(last) < quiet {
		if limit > 0 && time.Since(start) >= limit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: completions kept coming for %v", e.name, scaled(20*time.Second))
		}
		got, err := e.rcq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:got] {
			if wc.Err() != nil || !slices.Contains(from, wc.Src) || wc.ID != uint64(e.nextSlot) {
				t.Fatalf("%s: unexpected completion %+v (%v), expected slot %d from %v", e.name, wc, wc.Err(), e.nextSlot, from)
			}
			e.nextSlot = (e.nextSlot + 1) % e.nslots
			if err := e.postSlot(int(wc.ID)); err != nil {
				t.Fatal(err)
			}
			n++
			last = time.Now()
		}
		if got == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return n
}

// TestKilledClientReclaimed: two client processes die by SIGKILL in the
// middle of their traffic — the test binary in victim mode (one of every
// object, sending to a survivor) and an iwarp-perf bandwidth server
// streaming from an iwarp-perf client on the other daemon. The daemon
// reclaims everything they held (iwarpctl shows their sessions and QPs
// gone), the orphaned iwarp-perf client fails instead of hanging and is
// reclaimed in turn, and the survivors keep exchanging verified messages.
func TestKilledClientReclaimed(t *testing.T) {
	da := startDaemon(t, "kill-a", daemontest.Options{})
	db := startDaemon(t, "kill-b", daemontest.Options{})
	sa := newEndpoint(t, "survivor-a", da.Open(t, "survivor-a"), endpointOpts{maxMsg: 1 << 16, nslots: 8})
	sb := newEndpoint(t, "survivor-b", db.Open(t, "survivor-b"), endpointOpts{maxMsg: 1 << 16, nslots: 8})
	sched := sizeSchedule{cycle: []int{0, 1, 1000, 1450, 1451, 20000, 65536}}
	if _, err := pingPong(sa, sb, 50, sched, t.Logf); err != nil {
		t.Fatal(err)
	}

	victim := startVictim(t, da.Sock, sa.qp.Endpoint())
	port := fmt.Sprint(freeTCPPort(t))
	perfArgs := []string{"-m", "bw", "-s", "1024", "-n", "10000000", "-timeout", scaled(2 * time.Second).String(), "-p", port}
	server := startPerf(t, append([]string{"-socket", da.Sock}, perfArgs...)...)
	client := startPerf(t, append([]string{"-socket", db.Sock, "127.0.0.1"}, perfArgs...)...)

	// Wait until A serves both victims with their QPs, and the stream runs.
	victimPID, serverPID := int32(victim.cmd.Process.Pid), int32(server.cmd.Process.Pid)
	var qpsBefore int64
	eventually(t, "both victims' sessions with their QPs on daemon A", 20*time.Second, func() bool {
		var v, s bool
		for _, si := range da.sessions(t) {
			v = v || si.PID == victimPID && len(si.QPs) == 2 && si.PDs == 1 && len(si.MRs) == 2 && len(si.CQs) == 2 && si.SRQs == 1
			s = s || si.PID == serverPID && si.Client == "iwarp-perf" && len(si.QPs) == 1 && si.QPs[0].Counters["messages_in"] > 100
		}
		return v && s
	})
	// The victim is still sending (every 2 ms): take what came for a while.
	if n := drainFrom(t, sa, victim.addrs[:1], 20*time.Millisecond, 200*time.Millisecond); n == 0 {
		t.Log("the survivor received nothing from the victim yet (drops without receives are fine)")
	}
	qpsBefore = da.counters(t)["qps"]
	var gone []string
	for _, si := range da.sessions(t) {
		if si.PID == victimPID || si.PID == serverPID {
			for _, q := range si.QPs {
				gone = append(gone, q.Addr)
			}
		}
	}
	if len(gone) != 3 {
		t.Fatalf("victims' QPs %v, want 3", gone)
	}

	victim.kill(t)
	server.cmd.Process.Signal(syscall.SIGKILL)
	<-server.done

	eventually(t, "daemon A to reclaim the killed clients", 15*time.Second, func() bool {
		for _, si := range da.sessions(t) {
			if si.PID == victimPID || si.PID == serverPID {
				return false
			}
		}
		return da.counters(t)["qps"] == qpsBefore-3
	})
	for _, q := range da.qps(t) {
		if slices.Contains(gone, q.Addr) {
			t.Errorf("QP %s of a killed client still listed: %+v", q.Addr, q)
		}
	}
	// The orphaned iwarp-perf client gives up (no credit comes) and exits
	// with an error; daemon B then reclaims it too.
	select {
	case <-client.done:
		if client.err == nil {
			t.Errorf("iwarp-perf client succeeded although its server was killed:\n%s", client.out)
		}
	case <-time.After(scaled(30 * time.Second)):
		t.Fatalf("iwarp-perf client still running %v after its server was killed:\n%s", scaled(30*time.Second), client.out)
	}
	eventually(t, "daemon B to reclaim the orphaned iwarp-perf client", 15*time.Second, func() bool {
		for _, si := range db.sessions(t) {
			if si.Client == "iwarp-perf" {
				return false
			}
		}
		return true
	})

	// The survivors: take what the victim sent before it died, then talk.
	drainFrom(t, sa, victim.addrs[:1], 100*time.Millisecond, 0)
	st, err := pingPong(sa, sb, 200, sched, t.Logf)
	if err != nil {
		t.Fatalf("survivors after the kill: %v", err)
	}
	if st.messages != 400 {
		t.Fatalf("%d messages", st.messages)
	}
	// A reclaimed port can be taken again: a new QP on A works.
	sa2 := newEndpoint(t, "newcomer-a", da.Open(t, "newcomer"), endpointOpts{maxMsg: 4096, nslots: 2})
	if _, err := pingPong(sa2, sb, 20, sizeSchedule{cycle: []int{10, 4000}}, t.Logf); err != nil {
		t.Fatal(err)
	}
	da.CheckAlive(t)
	db.CheckAlive(t)
}

// TestDaemonKilledUnderClient: SIGKILL of the daemon while a client streams
// and another goroutine blocks in GetEvent. The stream loop and GetEvent
// end with errors, every later control call fails with ENODEV promptly,
// the session reports device-fatal, and nothing hangs.
func TestDaemonKilledUnderClient(t *testing.T) {
	d := startDaemon(t, "doomed", daemontest.Options{})
	ctx := d.Open(t, "orphan")
	attr, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	a := newEndpoint(t, "a", ctx, endpointOpts{maxMsg: 1 << 16, nslots: 16})
	b := newEndpoint(t, "b", ctx, endpointOpts{maxMsg: 1 << 16, nslots: 16})
	// An armed CQ nobody will complete on, and a waiter blocked on it.
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(8, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	eventErr := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent()
		eventErr <- err
	}()
	// A stream that would run for a long while; kill the daemon in its
	// middle (iwarpctl shows messages moving).
	streamErr := make(chan error, 1)
	go func() {
		sched := newSchedule(attr, 0)
		sched.cycle = []int{64, 1450, 5000}
		_, err := stream(a, b, 10_000_000, sched, t.Logf)
		streamErr <- err
	}()
	eventually(t, "the stream to run", 30*time.Second, func() bool {
		select {
		case err := <-streamErr:
			t.Fatalf("stream before the kill: %v", err)
		default:
		}
		return d.qpCounters(t, a.qp.Addr().String())["messages_out"] > 1000
	})

	d.Kill(t)

	select {
	case err := <-eventErr:
		if !errors.Is(err, unix.ENODEV) {
			t.Errorf("GetEvent after the daemon died: %v, want ENODEV", err)
		}
	case <-time.After(scaled(10 * time.Second)):
		t.Fatal("GetEvent still blocked after the daemon died")
	}
	select {
	case err := <-streamErr:
		if err == nil {
			t.Error("stream ended without error although the daemon died")
		}
		t.Logf("stream ended: %v", err)
	case <-time.After(scaled(20 * time.Second)):
		t.Fatal("stream loop still running after the daemon died")
	}

	// Every control verb fails, promptly.
	calls := []struct {
		name string
		f    func() error
	}{
		{"QueryDevice", func() error { _, err := ctx.QueryDevice(); return err }},
		{"QueryPort", func() error { _, err := ctx.QueryPort(); return err }},
		{"AllocPD", func() error { _, err := ctx.AllocPD(); return err }},
		{"CreateCQ", func() error { _, err := ctx.CreateCQ(8, nil); return err }},
		{"CreateCompChannel", func() error { _, err := ctx.CreateCompChannel(); return err }},
		{"RegMR", func() error { _, err := a.pd.RegMR(a.slot(0), ofverbs.AccessLocalWrite); return err }},
		{"CreateAH", func() error { _, err := a.pd.CreateAHTo(b.qp.Endpoint()); return err }},
		{"CreateQP", func() error {
			_, err := a.pd.CreateQP(ofverbs.QPInitAttr{Type: ofverbs.QPTypeUD, SendCQ: a.scq, RecvCQ: a.rcq,
				Cap: ofverbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		}},
		{"ModifyQP", func() error { return a.qp.ModifyState(ofverbs.QPStateError) }},
		{"QueryQP", func() error { _, err := a.qp.Query(); return err }},
		{"GetEventTimeout", func() error { _, err := ch.GetEventTimeout(scaled(5 * time.Second)); return err }},
	}
	for _, c := range calls {
		done := make(chan error, 1)
		go func() { done <- c.f() }()
		select {
		case err := <-done:
			if !errors.Is(err, unix.ENODEV) {
				t.Errorf("%s after the daemon died: %v, want ENODEV", c.name, err)
			}
		case <-time.After(scaled(10 * time.Second)):
			t.Fatalf("%s hangs after the daemon died", c.name)
		}
	}
	if !errors.Is(ctx.Err(), unix.ENODEV) {
		t.Errorf("Context.Err() = %v", ctx.Err())
	}
	fatal := false
	timeout := time.After(scaled(10 * time.Second))
events:
	for {
		select {
		case ev, ok := <-ctx.AsyncEvents():
			if !ok {
				break events
			}
			fatal = fatal || ev.Type == ofverbs.EventDeviceFatal
		case <-timeout:
			t.Fatal("AsyncEvents not closed after the daemon died")
		}
	}
	if !fatal {
		t.Error("no device-fatal event")
	}
	// A new session finds nobody (the socket is stale), promptly; so does
	// iwarpctl.
	if _, err := ofverbs.Open(ofverbs.WithSocket(d.Sock), ofverbs.WithHelloTimeout(scaled(5*time.Second))); err == nil {
		t.Error("Open succeeded on a dead daemon's socket")
	}
	if out, code := d.ctl(t, "status"); code != 3 {
		t.Errorf("iwarpctl against a dead daemon: exit %d, want 3: %s", code, out)
	}
	closed := make(chan error, 1)
	go func() { closed <- ctx.Close() }()
	select {
	case <-closed:
	case <-time.After(scaled(10 * time.Second)):
		t.Fatal("Context.Close hangs after the daemon died")
	}
}
