// Command iwarpctl inspects a running iwarpd: its device, client sessions,
// queue pairs, completion queues, memory regions and counters.
//
//	iwarpctl [-socket PATH] [-json] [status|device|sessions|qps|cqs|mrs|engines|counters]
//
// It opens a read-only inspect session on the daemon's control socket
// (HelloRequest{Inspect: true}, then OpInspect) and prints the answer as
// text for people or, with -json, as JSON for scripts. Exit status: 0 on
// success, 1 when the daemon answered with an error or the exchange failed,
// 2 on a usage error, 3 when no daemon answers at the socket, 4 when the
// socket refuses this user (permission denied). See
// docs/iwarpctl.md.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Exit statuses.
const (
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitNotRunning = 3
	exitPermission = 4
)

var subcommands = []string{"status", "device", "sessions", "qps", "cqs", "mrs", "engines", "counters"}

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("iwarpctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", defaultSocket(getenv), "control socket `path` of the daemon (env IWARPD_SOCKET)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: iwarpctl [-socket PATH] [-json] [command]\n\n"+
			"iwarpctl inspects a running iwarpd. Commands:\n"+
			"  status    summary of everything (default)\n"+
			"  device    device attributes and port\n"+
			"  sessions  client sessions (pid, uid, objects)\n"+
			"  qps       queue pairs (type, state, address, counters)\n"+
			"  cqs       completion queues\n"+
			"  mrs       memory regions\n"+
			"  engines   the daemon's engines (CPU, QPs, load, passes, wake-ups)\n"+
			"  counters  global counters (datagrams, bytes, CRC errors, drops)\n\n"+
			"Exit status: 0 ok, 1 daemon error, 2 usage, 3 daemon not running, 4 permission denied.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	cmd := "status"
	switch fs.NArg() {
	case 0:
	case 1:
		cmd = fs.Arg(0)
	default:
		fmt.Fprintf(stderr, "iwarpctl: one command at most, got %q\n", fs.Args())
		return exitUsage
	}
	if !validCommand(cmd) {
		fmt.Fprintf(stderr, "iwarpctl: unknown command %q (want one of %v; see iwarpctl -h)\n", cmd, subcommands)
		return exitUsage
	}

	in, err := inspect(*socket)
	if err != nil {
		fmt.Fprintf(stderr, "iwarpctl: %v\n", err)
		var nr *errNotRunning
		if errors.As(err, &nr) {
			return exitNotRunning
		}
		var pe *errPermission
		if errors.As(err, &pe) {
			return exitPermission
		}
		return exitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(selectJSON(in, cmd))
	} else {
		err = renderText(stdout, in, cmd)
	}
	if err != nil {
		fmt.Fprintf(stderr, "iwarpctl: writing output: %v\n", err)
		return exitFailed
	}
	return exitOK
}

func validCommand(cmd string) bool {
	for _, c := range subcommands {
		if c == cmd {
			return true
		}
	}
	return false
}

func closeFD(fd int) { unix.Close(fd) }
