package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/iwarpd/iwarpd/internal/testwait"
)

// Timeout bounds every external command (tshark, iwarpdump; go build gets
// three times as long): 60 s, stretched by IWARPD_TEST_TIMEOUT_SCALE. It
// only stops a hang — tshark takes a second or two even on a loaded
// machine.
var Timeout = testwait.Scaled(60 * time.Second)

// DefaultTshark is where Debian installs tshark.
const DefaultTshark = "/usr/bin/tshark"

// ErrNoTshark is returned by FindTshark when tshark is not installed.
var ErrNoTshark = errors.New("tshark not installed: run scripts/install-test-deps.sh")

// Expert severities as tshark prints them in _ws.expert.severity
// (epan/proto.h PI_CHAT, PI_NOTE, PI_WARN, PI_ERROR).
const (
	SeverityChat  = 0x00200000
	SeverityNote  = 0x00400000
	SeverityWarn  = 0x00600000
	SeverityError = 0x00800000
)

// aggregator separates the occurrences of one field in -T fields output; a
// control character cannot occur in any value we look at.
const aggregator = "\x1f"

// FindTshark returns the path of tshark, or ErrNoTshark.
func FindTshark() (string, error) {
	if p, err := exec.LookPath("tshark"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(DefaultTshark); err == nil {
		return DefaultTshark, nil
	}
	return "", ErrNoTshark
}

// DecodeArgs are the options every tshark run uses (protocol-notes.md §D):
// the MPA heuristic before port dissectors, the Send-payload heuristics that
// report false "Malformed" disabled, and IPv4/TCP/UDP checksum validation on
// so that tshark also checks what pcapgen wrote.
var DecodeArgs = []string{
	"-o", "tcp.try_heuristic_first:TRUE",
	"--disable-protocol", "rpcordma",
	"--disable-protocol", "smb_direct",
	"-o", "ip.check_checksum:TRUE",
	"-o", "tcp.check_checksum:TRUE",
	"-o", "udp.check_checksum:TRUE",
}

// run executes a command with Timeout and returns its stdout; stderr is
// included in the error.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\nstderr:\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// Row is one frame of -T fields output: every requested field with all its
// occurrences in the frame, in dissection order (absent fields map to nil).
type Row map[string][]string

// Fields runs tshark -T fields on pcap and returns one Row per frame. With
// twoPass tshark runs its two-pass analysis (-2).
func Fields(ctx context.Context, tshark, pcap string, twoPass bool, fields []string) ([]Row, error) {
	args := []string{"-r", pcap}
	if twoPass {
		args = append(args, "-2")
	}
	args = append(args, DecodeArgs...)
	args = append(args, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a",
		"-E", "aggregator="+aggregator, "-E", "quote=n")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := run(ctx, tshark, args...)
	if err != nil {
		return nil, err
	}
	var rows []Row
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != len(fields) {
			return nil, fmt.Errorf("tshark fields: %d columns, want %d: %q", len(cols), len(fields), sc.Text())
		}
		r := make(Row, len(fields))
		for i, f := range fields {
			if cols[i] != "" {
				r[f] = strings.Split(cols[i], aggregator)
			}
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tshark fields: %w", err)
	}
	return rows, nil
}

// Shownames runs tshark -T pdml on pcap and returns, for every frame in
// order, the "showname" attribute of each occurrence of the named field (the
// text Wireshark displays, e.g. "CRC check: 0x… (Good CRC32)", which -T
// fields cannot print).
func Shownames(ctx context.Context, tshark, pcap string, twoPass bool, field string) ([][]string, error) {
	args := []string{"-r", pcap}
	if twoPass {
		args = append(args, "-2")
	}
	args = append(args, DecodeArgs...)
	args = append(args, "-T", "pdml")
	out, err := run(ctx, tshark, args...)
	if err != nil {
		return nil, err
	}
	var frames [][]string
	dec := xml.NewDecoder(bytes.NewReader(out))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tshark pdml: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "packet":
			frames = append(frames, nil)
		case "field":
			if len(frames) == 0 || attr(se, "name") != field {
				continue
			}
			frames[len(frames)-1] = append(frames[len(frames)-1], attr(se, "showname"))
		}
	}
}

func attr(se xml.StartElement, name string) string {
	for _, a := range se.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// ExpertEntry is one line of `tshark -z expert`.
type ExpertEntry struct {
	Severity string // "Errors", "Warns", "Notes", "Chats"
	Count    int
	Group    string
	Protocol string
	Summary  string
}

var (
	expertSection = regexp.MustCompile(`^(Errors|Warns|Notes|Chats) \((\d+)\)$`)
	expertLine    = regexp.MustCompile(`^\s*(\d+)\s+(\S+)\s+(\S+)\s+(.+?)\s*$`)
)

// Expert runs `tshark -q -z expert` (single pass) on pcap and returns its
// entries and the raw report.
func Expert(ctx context.Context, tshark, pcap string) ([]ExpertEntry, string, error) {
	args := append([]string{"-r", pcap}, DecodeArgs...)
	args = append(args, "-q", "-z", "expert")
	out, err := run(ctx, tshark, args...)
	if err != nil {
		return nil, string(out), err
	}
	var entries []ExpertEntry
	section := ""
	for _, line := range strings.Split(string(out), "\n") {
		if m := expertSection.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			section = m[1]
			continue
		}
		if section == "" || strings.Contains(line, "Frequency") {
			continue
		}
		if m := expertLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			entries = append(entries, ExpertEntry{Severity: section, Count: n, Group: m[2], Protocol: m[3], Summary: m[4]})
		}
	}
	return entries, string(out), nil
}

// ModuleRoot walks up from the working directory to the directory holding
// go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("conformance: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// BuildIwarpdump builds ./cmd/iwarpdump of the module into dir and returns the
// binary's path.
func BuildIwarpdump(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "iwarpdump")
	ctx, cancel := context.WithTimeout(ctx, 3*Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/iwarpdump")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/iwarpdump: %w\n%s", err, out)
	}
	return bin, nil
}

// RunIwarpdump runs the iwarpdump binary with args and returns its stdout,
// stderr and exit status (-1 if it did not exit normally).
func RunIwarpdump(ctx context.Context, bin string, args ...string) (stdout, stderr string, status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return o.String(), e.String(), 0, nil
	case errors.As(err, &ee) && ee.Exited():
		return o.String(), e.String(), ee.ExitCode(), nil
	default:
		return o.String(), e.String(), -1, fmt.Errorf("iwarpdump: %w", err)
	}
}
