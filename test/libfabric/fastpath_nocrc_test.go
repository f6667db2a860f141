package libfabric

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// TestFastpathNoCRC: the fast paths with FI_IWARPD_DGRAM_CRC=off (QPs
// created with no_crc; docs/wire-format.md §6 "CRC rules" 4): t_fi_fastpath
// over DGRAM (UD) and over RDM (RD) between two loopback daemons. The
// ranks still send and take their datagrams themselves (the engines read
// and send fewer datagrams than the messages), and every datagram of the
// two QPs on the wire — the ranks' and the daemons', Sends and ACKs —
// carries a trailer of 0: the rank's codec follows the QP's setting (a
// rank that wrote CRCs, or checked them, would show here: its peer's
// zero trailers would make it give every datagram to its daemon).
func TestFastpathNoCRC(t *testing.T) {
	needProvider(t)
	for _, c := range []struct {
		name, typ string
		flags     []string
		env       []string
	}{
		{"dgram", "UD", nil, nil},
		{"rdm", "RD", []string{"-rdm"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := daemontest.Options{Extra: []string{"-fastpath-lease", "1ms", "-datagram-size", "1472"}}
			da := daemon(t, "fpnocrc-a", o)
			db := daemon(t, "fpnocrc-b", o)
			capt := captureUDP(t, "lo")
			srv, cli := runFPPingPong(t, da, db, c.typ, c.flags, append(c.env, "FI_IWARPD_DGRAM_CRC=0")...)
			pkts := capt.end()
			for _, q := range []struct {
				who     string
				qp      proto.QPInfo
				in, out int64
			}{{"server", srv, fpToServer, fpToClient}, {"client", cli, fpToClient, fpToServer}} {
				cs := q.qp.Counters
				if q.qp.Fastpath == "" {
					t.Errorf("%s: QP %+v has no fast-path page with CRC off", q.who, q.qp)
					continue
				}
				if cs["datagrams_in"] >= q.in || cs["datagrams_out"] >= q.out {
					t.Errorf("%s: the engine read %d and sent %d datagrams for %d and %d messages: the rank took or sent none itself",
						q.who, cs["datagrams_in"], cs["datagrams_out"], q.in, q.out)
				}
				t.Logf("%s: engine read %d and sent %d datagrams for %d and %d messages", q.who, cs["datagrams_in"], cs["datagrams_out"], q.in, q.out)
			}
			a, err1 := netip.ParseAddrPort(srv.Addr)
			b, err2 := netip.ParseAddrPort(cli.Addr)
			if err1 != nil || err2 != nil {
				t.Fatalf("QP addresses %q, %q: %v %v", srv.Addr, cli.Addr, err1, err2)
			}
			var seen, big, nonzero int
			for _, p := range pkts {
				if !(p.src == a && p.dst == b || p.src == b && p.dst == a) {
					continue
				}
				if len(p.payload) > 1472 { // a GSO batch the loopback did not split: its segments' ends are unknown
					big++
					continue
				}
				seen++
				if len(p.payload) < 4 || binary.BigEndian.Uint32(p.payload[len(p.payload)-4:]) != 0 {
					nonzero++
					if nonzero <= 3 {
						t.Errorf("a datagram %v -> %v of %d octets with a trailer other than 0: % x", p.src, p.dst,
							len(p.payload), p.payload[max(0, len(p.payload)-8):])
					}
				}
			}
			t.Logf("captured %d datagrams between %v and %v (%d GSO batches left out), %d with a trailer other than 0", seen, a, b, big, nonzero)
			if seen < fpToServer {
				t.Errorf("captured %d datagrams between the QPs, want at least %d (the messages to the server)", seen, fpToServer)
			}
			if nonzero > 0 {
				t.Errorf("%d of %d datagrams carry a CRC trailer with CRC off", nonzero, seen)
			}
			da.CheckAlive(t)
			db.CheckAlive(t)
		})
	}
}
