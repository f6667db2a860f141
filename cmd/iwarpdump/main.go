// Command iwarpdump decodes iWARP traffic in pcap and pcapng captures: MPA
// over TCP (found by its Request/Reply frames, as Wireshark does) and the
// datagram profile on UDP ports. See docs/iwarpdump.md.
//
//	iwarpdump [-strict] [-json] [-abs] [-ud-ports A-B] [-rd-ports A-B] [-crc=false] FILE...
//
// Exit status: 0 success; 1 with -strict when any violation was seen; 2 on
// usage or I/O errors.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/iwarpd/iwarpd/dissect"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type portsFlag struct{ r *dissect.PortRange }

func (p portsFlag) String() string {
	if p.r == nil {
		return ""
	}
	return fmt.Sprintf("%d-%d", p.r.First, p.r.Last)
}

func (p portsFlag) Set(s string) error {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	first, err1 := strconv.ParseUint(a, 10, 16)
	last, err2 := strconv.ParseUint(b, 10, 16)
	if err := errors.Join(err1, err2); err != nil || first > last {
		return fmt.Errorf("want PORT or FIRST-LAST, got %q", s)
	}
	p.r.First, p.r.Last = uint16(first), uint16(last)
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg := dissect.DefaultConfig()
	fs := flag.NewFlagSet("iwarpdump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	strict := fs.Bool("strict", false, "exit with status 1 if any violation (CRC error, malformed frame, RFC violation) is seen")
	asJSON := fs.Bool("json", false, "print one JSON object per line (JSON Lines)")
	abs := fs.Bool("abs", false, "print absolute UTC times instead of seconds since the first packet")
	quiet := fs.Bool("q", false, "print only violations (and a summary)")
	fs.Var(portsFlag{&cfg.UDPorts}, "ud-ports", "UDP port range of the UD datagram profile")
	fs.Var(portsFlag{&cfg.RDPorts}, "rd-ports", "UDP port range of the RD datagram profile")
	fs.BoolVar(&cfg.DatagramCRC, "crc", true, "check datagram CRC32c trailers")
	mulpdu := fs.Bool("mulpdu", true, "check that every FPDU fits the MULPDU derived from the peer's SYN MSS; -mulpdu=false for captures behind something that rewrites the MSS (qemu user networking, TCP proxies)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: iwarpdump [-strict] [-json] [-abs] [-q] [-ud-ports A-B] [-rd-ports A-B] [-crc=false] FILE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cfg.SkipMULPDU = !*mulpdu
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	total, status := 0, 0
	for _, path := range fs.Args() {
		if fs.NArg() > 1 && !*asJSON && !*quiet {
			fmt.Fprintf(w, "# %s\n", path)
		}
		n, err := dissect.DecodeFile(path, cfg, func(e *dissect.Event) {
			if *quiet && e.Kind != dissect.KindViolation {
				return
			}
			if *asJSON {
				if err := enc.Encode(e); err != nil {
					fmt.Fprintf(stderr, "iwarpdump: %v\n", err)
				}
				return
			}
			fmt.Fprintln(w, dissect.FormatText(e, *abs))
		})
		total += n
		if err != nil {
			w.Flush()
			fmt.Fprintf(stderr, "iwarpdump: %v\n", err)
			status = 2
		}
	}
	w.Flush()
	if total > 0 {
		fmt.Fprintf(stderr, "iwarpdump: %d violation(s)\n", total)
		if *strict && status == 0 {
			status = 1
		}
	}
	return status
}
