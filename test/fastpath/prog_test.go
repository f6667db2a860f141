package fastpath

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// buildProgram compiles c/tests/t_fastpath.c with the codec's sources
// (c/core/fastpath*.c) into dir, with the project's warnings as errors
// and opt (sanitizers or optimization).
func buildProgram(t testing.TB, dir string, opt ...string) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("cc not found; run scripts/install-build-deps.sh")
	}
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := filepath.Glob(filepath.Join(root, "c", "core", "fastpath*.c"))
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no c/core/fastpath*.c under %s (%v)", root, err)
	}
	bin := filepath.Join(dir, "t_fastpath")
	args := []string{"-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wstrict-prototypes",
		"-Wmissing-prototypes", "-D_GNU_SOURCE", "-I", filepath.Join(root, "c", "core"), "-o", bin}
	args = append(args, opt...)
	args = append(args, filepath.Join(root, "c", "tests", "t_fastpath.c"))
	args = append(args, srcs...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %v: %v\n%s", args, err, out)
	}
	return bin
}

var sanitized = []string{"-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"}

// prog is one running t_fastpath: a command per line in, an answer per
// line out.
type prog struct {
	t   testing.TB
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	err strings.Builder
}

var (
	buildOnce sync.Once
	builtBin  string
	buildDir  string
)

// sanitizedProgram builds the ASan/UBSan program once per test binary.
func sanitizedProgram(t *testing.T) string {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("cc not found; run scripts/install-build-deps.sh")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fastpath")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
		builtBin = buildProgram(t, dir, sanitized...)
	})
	if builtBin == "" {
		t.Fatal("t_fastpath was not built (see the first test's failure)")
	}
	return builtBin
}

// TestMain builds the daemon for the live tests (daemontest.Main).
func TestMain(m *testing.M) {
	code := daemontest.Main(m, nil)
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func start(t *testing.T, bin string) *prog {
	t.Helper()
	p := &prog{t: t, cmd: exec.Command(bin)}
	p.cmd.Stderr = &p.err
	in, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.in, p.out = in, bufio.NewReaderSize(out, 1<<20)
	t.Cleanup(p.close)
	return p
}

// ask sends one command and returns its answer line. A program that
// stops answering fails the test (a guard against hangs, not a timing
// assertion).
func (p *prog) ask(format string, args ...any) string {
	p.t.Helper()
	if _, err := fmt.Fprintf(p.in, format+"\n", args...); err != nil {
		p.t.Fatalf("t_fastpath: write: %v (stderr: %s)", err, p.err.String())
	}
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			p.t.Fatalf("t_fastpath: %v (stderr: %s)", r.err, p.err.String())
		}
		return strings.TrimSuffix(r.s, "\n")
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		p.t.Fatalf("t_fastpath did not answer %q", fmt.Sprintf(format, args...))
	}
	return ""
}

// close ends the program and fails the test if it did not exit 0 (a
// sanitizer report exits non-zero).
func (p *prog) close() {
	p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Errorf("t_fastpath: %v\n%s", err, p.err.String())
		}
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		p.t.Errorf("t_fastpath did not exit")
	}
}

// hexOr renders b for the program: hex, or "-" when empty.
func hexOr(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%x", b)
}
