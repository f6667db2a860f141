package mpi

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
	"github.com/iwarpd/iwarpd/test/mpi/mpilaunch"
	"github.com/iwarpd/iwarpd/test/netns"
)

// The namespaces' addresses (link-local, owned by this package).
var nsAddrs = [2]netip.Prefix{netip.MustParsePrefix("169.254.82.1/24"), netip.MustParsePrefix("169.254.82.2/24")}

const nsSubnet = "169.254.82.0/24"

// knownBad are runs that fail for reasons outside iwarpd, by transport and
// program: they are skipped with the reason (never counted as passes).
var knownBad = map[string]map[string]string{
	mpilaunch.BTLOFI: {"trunc": obTrunc},
	mpilaunch.OB1TCP: {"trunc": obTrunc},
	mpilaunch.TCP: {
		"trunc": "libfabric 1.17's tcp provider corrupts its stream after a truncated receive " +
			"(ofiwg/libfabric#8974, #9136: fixed in 1.18.x); the next MPI_Send fails with MPI_ERR_INTERN",
		"wildunexp": "its first message between two namespaces fails in MPI_Send with MPI_ERR_OTHER in about 1 run in 5 " +
			"(tcp;ofi_rxm connection set-up, cf. ofiwg/libfabric#7396)",
	},
}

// obTrunc: Open MPI 4.1.4's pml ob1 itself writes past a truncated
// receive's buffer once the message takes its rendezvous protocols (over
// btl tcp without libfabric too: 64 KiB into 1024 octets, measured; over
// btl ofi from 4 KiB, its eager limit): MPI_ERR_TRUNCATE is returned, but
// octets after the buffer are overwritten (docs/mpi.md).
const obTrunc = "Open MPI 4.1.4's pml ob1 writes past a truncated receive's buffer once the message is sent " +
	"with its rendezvous protocols (over btl tcp, no libfabric, as well: docs/mpi.md)"

// passiveOnly: the passive-target progress program runs where the target's
// daemon can complete one-sided operations alone (osc rdma over btl ofi);
// IWARPD_MPI_PASSIVE_ALL=1 runs it everywhere (to see the others fail).
const passiveOnly = "osc pt2pt carries one-sided operations as messages the target's MPI library must receive, " +
	"so a target computing without MPI calls makes no passive progress (docs/mpi.md)"

// btlVerified are the runs of the iwarpd+btl transport (ob1, btl ofi, osc
// rdma) that every test run makes: those seen passing on both topologies
// (docs/mpi.md, "One-sided MPI", Status), and those acceptance needs:
// rma (both window kinds) with 2 and 4 ranks, passive with 2; the rest
// are left out to keep the suite short. IWARPD_MPI_BTL_ALL=1 runs them:
// seen passing (2026-11-28, once) with 4 ranks on loopback p2p, anysrc,
// coll, unexpected, wildunexp, intercomm, and wildunexp with 2 and 4 on
// both topologies; trunc is knownBad.
var btlVerified = map[string]bool{"p2p/np2": true, "anysrc/np2": true, "coll/np2": true, "unexpected/np2": true,
	"rma/np2": true, "rma/np4": true, "passive/np2": true}

// topology is where a job's two nodes are.
type topology struct {
	name  string
	nodes []mpilaunch.Node
	iface string // oob_tcp_if_include / btl_tcp_if_include
	check func(t *testing.T)
}

// setupNetns makes two namespaces, and in each a daemon when daemons is set.
func setupNetns(t *testing.T, daemons bool) topology {
	if ok, why := netns.Available(); !ok {
		t.Skip(why)
	}
	prefix := fmt.Sprintf("iwmpi%d", os.Getpid())
	if err := netns.RemoveStale("iwmpi"); err != nil {
		t.Logf("removing stale namespaces: %v", err)
	}
	p, err := netns.NewPair(prefix, nsAddrs, 1500)
	if err != nil {
		t.Skipf("cannot create network namespaces: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	top := topology{name: "netns", iface: nsSubnet}
	var ds []*daemontest.Daemon
	for i := range 2 {
		n := mpilaunch.Node{NS: p.Names[i], Addr: nsAddrs[i].Addr().String(),
			Env: []string{"FI_TCP_IFACE=" + p.Links[i], "FI_UDP_IFACE=" + p.Links[i]}}
		if daemons {
			ud, rd := ports()
			d := daemontest.Start(t, fmt.Sprintf("iwarpd-%c", 'a'+i), daemontest.Options{Ports: ud, Addr: n.Addr, NS: p, NSIdx: i,
				Extra: []string{"-rd-ports", rd}})
			n.Env = append(n.Env, "FI_IWARPD_SOCKET="+d.Sock)
			ds = append(ds, d)
		}
		top.nodes = append(top.nodes, n)
	}
	top.check = func(t *testing.T) {
		for _, d := range ds {
			d.CheckAlive(t)
		}
	}
	return top
}

// setupLoopback starts two daemons on 127.0.0.1 (one per "node").
func setupLoopback(t *testing.T, daemons bool) topology {
	top := topology{name: "loopback", iface: "lo"}
	var ds []*daemontest.Daemon
	for i := range 2 {
		n := mpilaunch.Node{Addr: "127.0.0.1", Env: []string{"FI_TCP_IFACE=lo", "FI_UDP_IFACE=lo"}}
		if daemons {
			ud, rd := ports()
			d := daemontest.Start(t, fmt.Sprintf("iwarpd-%c", 'a'+i), daemontest.Options{Ports: ud, Extra: []string{"-rd-ports", rd}})
			n.Env = append(n.Env, "FI_IWARPD_SOCKET="+d.Sock)
			ds = append(ds, d)
		}
		top.nodes = append(top.nodes, n)
	}
	top.check = func(t *testing.T) {
		for _, d := range ds {
			d.CheckAlive(t)
		}
	}
	return top
}

// TestMPIPrograms runs every program with 2 and 4 ranks, for each transport
// of IWARPD_MPI_TRANSPORTS, across two namespaces and on loopback.
func TestMPIPrograms(t *testing.T) {
	needMPI(t)
	for _, tr := range transports() {
		t.Run(strings.ReplaceAll(tr, ";", "+"), func(t *testing.T) {
			daemons := strings.HasPrefix(tr, "iwarpd")
			if daemons {
				needProvider(t)
			}
			for _, tp := range []struct {
				name  string
				setup func(*testing.T, bool) topology
			}{{"netns", setupNetns}, {"loopback", setupLoopback}} {
				t.Run(tp.name, func(t *testing.T) {
					top := tp.setup(t, daemons)
					transport, err := mpilaunch.NewTransport(tr, provDir, top.iface)
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range progs {
						for _, np := range []int{2, 4} {
							t.Run(fmt.Sprintf("%s/np%d", p, np), func(t *testing.T) {
								if p == "passive" && (tr != mpilaunch.BTLOFI || np != 2) && os.Getenv("IWARPD_MPI_PASSIVE_ALL") == "" {
									t.Skip("passive-target progress is run with 2 ranks over iwarpd+btl only: " + passiveOnly)
								}
								if why := knownBad[tr][p]; why != "" {
									t.Skip("known failure of the transport, not of iwarpd: " + why)
								}
								if tr == mpilaunch.BTLOFI && !btlVerified[fmt.Sprintf("%s/np%d", p, np)] &&
									os.Getenv("IWARPD_MPI_BTL_ALL") == "" {
									t.Skip("not among the iwarpd+btl runs verified so far (docs/mpi.md, One-sided MPI): IWARPD_MPI_BTL_ALL=1 runs it")
								}
								runProg(t, top, transport, p, np)
							})
						}
					}
				})
			}
		})
	}
}

// runProg runs one program and fails t unless it exited 0 after rank 0
// printed its PASS line.
func runProg(t *testing.T, top topology, tr mpilaunch.Transport, prog string, np int) {
	j := &mpilaunch.Job{Nodes: top.nodes, Ranks: np, Transport: tr, Prog: filepath.Join(progDir, prog),
		Dir: t.TempDir(), NSRsh: nsrsh,
		// IWARPD_MPI_BTL_SHARED_NODES=1: several ranks per node over
		// iwarpd+btl too (docs/mpi.md "One rank per node": fails).
		OneRankPerHost: tr.Name == mpilaunch.BTLOFI && os.Getenv("IWARPD_MPI_BTL_SHARED_NODES") == "",
		Env:            strings.Fields(os.Getenv("IWARPD_MPI_ENV"))} // e.g. FI_LOG_LEVEL=info (docs/mpi.md)
	timeout := daemontest.Scaled(60 * time.Second) // the slowest passing run took 12 s here
	r := mpilaunch.Run(j, timeout)
	if dir := os.Getenv("IWARPD_MPI_LOG"); dir != "" { // every run's whole output (docs/mpi.md)
		f := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".log")
		if err := os.WriteFile(f, []byte(r.CommandLine+"\n"+r.Output), 0o644); err != nil {
			t.Logf("IWARPD_MPI_LOG: %v", err)
		}
	}
	pass := fmt.Sprintf("PASS %s (%d ranks)", prog, np)
	if r.Err != nil || !strings.Contains(r.Output, pass) {
		why := "exit status 0 but no line " + pass
		if r.Err != nil {
			why = r.Err.Error()
		}
		t.Errorf("%s with %d ranks over %s (%s): %s\ncommand: %s\noutput (last 150 lines):\n%s",
			prog, np, tr.Name, top.name, why, r.CommandLine, lastLines(r.Output, 150))
	}
	top.check(t)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
