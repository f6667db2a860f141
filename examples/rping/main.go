package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"github.com/iwarpd/iwarpd/proto"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

const defaultPort = 7174

// config is what the command line says.
type config struct {
	server   bool
	addr     string // -a: host or IP; "" = the device address (server only)
	port     int
	count    int // -C: 0 = forever (client; the server serves until the client leaves)
	size     int
	verbose  bool
	validate bool
	debug    bool
	socket   string
	timeout  time.Duration // per step (connect, each completion); 0 = none
	ird, ord uint16
	mpa      ofverbs.MPAOptions
}

// usageError is a problem with the command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// toggleFlag is a boolean flag with a third state, "not given" (the
// device's default): -p2p, -p2p=false.
type toggleFlag struct{ t *proto.Toggle }

func (f toggleFlag) String() string {
	if f.t == nil || *f.t == proto.ToggleDefault {
		return ""
	}
	return strconv.FormatBool(*f.t == proto.ToggleOn)
}

func (f toggleFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.t = proto.ToggleOff
	if v {
		*f.t = proto.ToggleOn
	}
	return nil
}

func (f toggleFlag) IsBoolFlag() bool { return true }

// shortBools are rping's one-letter switches that getopt lets one cluster
// ("-vV"); expandArgs splits such clusters for the flag package.
const shortBools = "scvVd"

func expandArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !strings.Contains(a, "=") &&
			strings.Trim(a[1:], shortBools) == "" {
			for _, c := range a[1:] {
				out = append(out, "-"+string(c))
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// parseFlags reads the command line.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{port: defaultPort, size: defaultSize}
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var client bool
	var ird, ord uint
	var rev uint
	var crc, rtr string
	fs.BoolVar(&cfg.server, "s", false, "server side")
	fs.BoolVar(&client, "c", false, "client side")
	fs.StringVar(&cfg.addr, "a", "", "`address`: the server's (client), the one to listen on (server; default the device address)")
	fs.IntVar(&cfg.port, "p", defaultPort, "TCP `port`")
	fs.IntVar(&cfg.count, "C", 0, "ping `count` (client; 0: forever)")
	fs.IntVar(&cfg.size, "S", defaultSize, fmt.Sprintf("ping data `size` (%d to %d)", minSize, maxSize))
	fs.BoolVar(&cfg.verbose, "v", false, "display ping data on stdout")
	fs.BoolVar(&cfg.validate, "V", false, "validate ping data (client)")
	fs.BoolVar(&cfg.debug, "d", false, "debug messages on stderr")
	fs.StringVar(&cfg.socket, "socket", "", "iwarpd control socket `path` (default $IWARPD_SOCKET or the daemon's default)")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "bound on the connection set-up and on each step of a ping (0: none)")
	fs.UintVar(&ird, "ird", 0, "inbound RDMA Read depth offered (0: the device's, 16)")
	fs.UintVar(&ord, "ord", 0, "outbound RDMA Read depth offered (0: the device's, 16)")
	fs.UintVar(&rev, "mpa-rev", 0, "MPA `revision` asked for, 1 or 2 (client; 0: iwarpd -mpa-rev)")
	fs.StringVar(&crc, "crc", "", "MPA CRC `policy`: preferred, required or off (client; default iwarpd -mpa-crc)")
	fs.Var(toggleFlag{&cfg.mpa.PeerToPeer}, "p2p", "ask for RFC 6581 peer-to-peer mode (client; default iwarpd -mpa-p2p)")
	fs.Var(toggleFlag{&cfg.mpa.Markers}, "markers", "ask the server to insert MPA markers (client; default iwarpd -mpa-markers)")
	fs.StringVar(&rtr, "rtr", "", "peer-to-peer RTR `types` offered, comma separated: write, read, send (client; default the device's)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rping -s [-vVd] [-S size] [-a addr] [-p port] [iwarpd flags]\n"+
			"       rping -c [-vVd] [-S size] [-C count] -a addr [-p port] [iwarpd flags]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(expandArgs(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, &usageError{err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return cfg, &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case cfg.server == client:
		return cfg, &usageError{"give exactly one of -s (server) and -c (client)"}
	case !cfg.server && cfg.addr == "":
		return cfg, &usageError{"the client needs the server's address (-a)"}
	case cfg.size < minSize || cfg.size > maxSize:
		return cfg, &usageError{fmt.Sprintf("invalid size %d (valid range is %d to %d)", cfg.size, minSize, maxSize)}
	case cfg.count < 0:
		return cfg, &usageError{fmt.Sprintf("invalid count %d", cfg.count)}
	case cfg.port < 0 || cfg.port > 65535 || (!cfg.server && cfg.port == 0):
		return cfg, &usageError{fmt.Sprintf("invalid port %d", cfg.port)}
	case cfg.timeout < 0:
		return cfg, &usageError{"negative -timeout"}
	case ird > 128 || ord > 128:
		return cfg, &usageError{"-ird and -ord are at most 128"}
	case rev > 2:
		return cfg, &usageError{fmt.Sprintf("-mpa-rev %d: want 1 or 2", rev)}
	}
	cfg.ird, cfg.ord = uint16(ird), uint16(ord)
	cfg.mpa.Revision = uint8(rev)
	if crc != "" {
		c, err := proto.ParseMPACRC(crc)
		if err != nil {
			return cfg, &usageError{err.Error()}
		}
		cfg.mpa.CRC = c
	}
	if rtr != "" {
		for _, name := range strings.Split(rtr, ",") {
			switch strings.TrimSpace(name) {
			case "write":
				cfg.mpa.RTR |= proto.RTRWrite
			case "read":
				cfg.mpa.RTR |= proto.RTRRead
			case "send":
				cfg.mpa.RTR |= proto.RTRSend
			default:
				return cfg, &usageError{fmt.Sprintf("-rtr: unknown type %q (want write, read, send)", name)}
			}
		}
	}
	return cfg, nil
}

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "rping:", err)
		}
		return exitUsage
	}
	r := &rping{cfg: cfg, out: stdout, errOut: stderr}
	if cfg.server {
		err = r.runServer()
	} else {
		err = r.runClient()
	}
	if err != nil {
		fmt.Fprintf(stderr, "rping %s failed: %v\n", r.role(), err)
		return exitFailed
	}
	return exitOK
}

// resolve turns the -a host and -p port into an address (rping's
// getaddrinfo: the first answer).
func resolve(host string, port int) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("resolving %q: %w", host, err)
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("resolving %q: no address", host)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(port)), nil
}
