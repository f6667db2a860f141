package cclient

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// Port blocks of this package (see doc.go): UD 27600-27699, RD
// 27700-27799, in blocks of 25 handed out in turn.
var (
	udBlocks = daemontest.Blocks{Base: 27600, Size: 25, Count: 4}
	rdBlocks = daemontest.Blocks{Base: 27700, Size: 25, Count: 4}
)

// ports returns the next private UD and RD port blocks, "first-last".
func ports() (ud, rd string) { return udBlocks.Next(), rdBlocks.Next() }

// cBuild is where the sanitized C programs are ("" when they could not be
// built: cSkip says why).
var cBuild, cSkip string

func TestMain(m *testing.M) {
	os.Exit(daemontest.Main(m, func(string) { buildC() }))
}

// buildC builds libiwverbs and c/tests with ASan+UBSan, and with
// ThreadSanitizer, in the checkout's shared C builds (daemontest.SharedC).
func buildC() {
	for _, tool := range []string{"cc", "make", "pkg-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			cSkip = fmt.Sprintf("%s not found; run scripts/install-build-deps.sh", tool)
			return
		}
	}
	if err := exec.Command("pkg-config", "--exists", "jansson").Run(); err != nil {
		cSkip = "libjansson-dev not installed; run scripts/install-build-deps.sh"
		return
	}
	dir, err := daemontest.SharedC("1", "core", "tests")
	if err != nil {
		// A build failure is a failure, not a skip: report it from every test.
		cSkip = ""
		cBuild = ""
		buildErr = fmt.Sprintf("make -C c SAN=1 core tests: %v", err)
		return
	}
	cBuild = dir
	// The multi-threaded tests again under ThreadSanitizer (make -C c
	// tsan): a toolchain without TSan is a skip of those tests only.
	tdir, err := daemontest.SharedC("tsan", "core", "tests")
	if err != nil {
		tsanSkip = fmt.Sprintf("make -C c SAN=tsan core tests failed (no ThreadSanitizer?): %v", err)
		return
	}
	tsanBuild = tdir
}

// tsanBuild holds the ThreadSanitizer build of the C tests, or tsanSkip
// says why there is none.
var tsanBuild, tsanSkip string

var buildErr string

// needC skips or fails t when the C programs are not available.
func needC(t *testing.T) {
	t.Helper()
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	if cBuild == "" {
		t.Skip(cSkip)
	}
}

// pair starts two daemons with private port blocks.
func pair(t *testing.T) (a, b *daemontest.Daemon) {
	t.Helper()
	udA, rdA := ports()
	udB, rdB := ports()
	a = daemontest.Start(t, "a", daemontest.Options{Ports: udA, Extra: []string{"-rd-ports", rdA}})
	b = daemontest.Start(t, "b", daemontest.Options{Ports: udB, Extra: []string{"-rd-ports", rdB}})
	return a, b
}

// cmdC prepares C test program name against daemons a and b.
func cmdC(ctx context.Context, t *testing.T, name string, a, b *daemontest.Daemon) *exec.Cmd {
	return cmdCIn(ctx, t, cBuild, name, a, b)
}

// cmdCIn prepares program name of the C build in dir (ASan+UBSan or TSan).
func cmdCIn(ctx context.Context, t *testing.T, dir, name string, a, b *daemontest.Daemon) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "tests", name))
	env := append(daemontest.CleanEnv(), "IWV_TEST_SOCK_A="+a.Sock,
		"ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=66",
		"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1",
		"TSAN_OPTIONS=halt_on_error=1:exitcode=66")
	if b != nil {
		env = append(env, "IWV_TEST_SOCK_B="+b.Sock)
	}
	if s := os.Getenv("IWARPD_TEST_TIMEOUT_SCALE"); s != "" {
		env = append(env, "IWARPD_TEST_TIMEOUT_SCALE="+s)
	}
	cmd.Env = env
	return cmd
}

// runC runs a C test program to completion (bounded) and returns its
// standard output; a non-zero exit fails the test with its output.
func runC(t *testing.T, name string, a, b *daemontest.Daemon) string {
	t.Helper()
	return runCIn(t, cBuild, name, a, b)
}

// runCIn is runC for the C build in dir.
func runCIn(t *testing.T, dir, name string, a, b *daemontest.Daemon) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.Scaled(180*time.Second))
	defer cancel()
	cmd := cmdCIn(ctx, t, dir, name, a, b)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", name, err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "runtime error") || strings.Contains(stderr.String(), "Sanitizer") {
		t.Fatalf("%s: sanitizer report:\n%s", name, stderr.String())
	}
	return stdout.String()
}
