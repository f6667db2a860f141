// Command fake stands in for iwarpd and iwarp-perf in iwarp-bench's tests
// (chosen by the name it is started as), so that the whole benchmark
// pipeline runs with known figures in milliseconds.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "iwarpd":
		os.Exit(fakeDaemon(os.Args[1:]))
	case "iwarp-perf":
		os.Exit(fakePerf(os.Args[1:]))
	}
	fmt.Fprintln(os.Stderr, "fake: start me as iwarpd or iwarp-perf")
	os.Exit(2)
}

// fakeDaemon answers on its -socket until SIGTERM.
func fakeDaemon(args []string) int {
	var sock string
	for i, a := range args {
		if a == "-socket" && i+1 < len(args) {
			sock = args[i+1]
		}
	}
	l, err := net.Listen("unixpacket", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	<-sig
	l.Close()
	return 0
}

// Fake figures: latency one way in µs, bandwidth in Gb/s.
var fakeFigures = map[string]float64{
	"lat raw-udp": 5, "lat ud": 7.5,
	"bw raw-udp": 40, "bw ud": 30, "bw raw-tcp": 20,
	"lat raw-tcp": 6, "lat rc send": 10, "lat rc write": 9,
	"bw rc write": 16, "bw rc read": 18,
	"bw rc send": 12, "lat rd": 8, "bw rd": 25,
	"lat rc fetchadd": 7, "lat rc send-fetchadd": 10,
}

// fakePerf prints an iwarp-perf -json report for its flags; a file named
// MISMATCH beside it makes the client report a data mismatch.
func fakePerf(args []string) int {
	flags := map[string]string{}
	client := false
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") && args[i] != "-json" && i+1 < len(args) {
			flags[args[i]] = args[i+1]
			i++
		} else if !strings.HasPrefix(args[i], "-") {
			client = true
		}
	}
	transport, op := "ud", "send"
	if flags["-t"] != "" {
		transport = flags["-t"]
	}
	if flags["-o"] != "" {
		op = flags["-o"]
	}
	if flags["-raw"] != "" {
		transport = "raw-" + flags["-raw"]
	}
	size, _ := strconv.Atoi(flags["-s"])
	iters, _ := strconv.Atoi(flags["-n"])
	test := flags["-m"]
	key := test + " " + transport
	if transport == "rc" {
		key += " " + op
	}
	v := fakeFigures[key]
	if qps, _ := strconv.Atoi(flags["-qps"]); qps > 1 && test == "lat" {
		v *= 0.5 + 0.5/float64(qps) // normalized latency falls with the QPs: 4 QPs, 0.625 of 1
	}
	res := map[string]any{"bytes": size, "iterations": iters, "verified": iters, "mismatches": 0}
	if test == "lat" {
		if op != "read" && op != "fetchadd" && op != "send-fetchadd" {
			res["verified"] = 2 * iters
		}
		res["latency"] = map[string]float64{"min_us": v, "median_us": v, "avg_us": v * 2, "p99_us": v * 3, "max_us": v * 4}
	} else {
		res["bandwidth"] = map[string]float64{"peak_gbps": v, "avg_gbps": v, "msg_rate_mpps": 0.01, "seconds": 1}
	}
	ok := true
	if _, err := os.Stat(filepath.Join(filepath.Dir(os.Args[0]), "MISMATCH")); err == nil && client {
		ok = false
		res["mismatches"] = 1
		res["first_error"] = "server: iteration 3: byte 17 of 64 is 0x00, want 0x14"
	}
	role := "server"
	if client {
		role = "client"
	}
	rep := map[string]any{"role": role, "test": test, "op": op, "transport": transport, "iterations": iters,
		"ok": ok, "results": []any{res}}
	json.NewEncoder(os.Stdout).Encode(rep)
	if !ok {
		return 1
	}
	return 0
}
