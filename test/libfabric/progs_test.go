package libfabric

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/iwarpd/iwarpd/test/daemontest"
)

// provProgramFlags are the link flags a program needs beyond -lfabric.
var provProgramFlags = map[string][]string{
	"fi_emptypoll": {"-rdynamic", "-ldl"}, // its poll(2) takes the provider's calls
	"fi_idle":      {"-rdynamic", "-ldl"}, // its sched_yield(2) and nanosleep(2) take the provider's
}

// buildProvProgram builds c/prov/tests/<name>.c with -Wall -Wextra -Werror,
// AddressSanitizer and UBSan against the installed libfabric, and returns
// the binary (in the test's temporary directory). The one place the
// provider's C test programs are compiled.
func buildProvProgram(t *testing.T, name string) string {
	t.Helper()
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	cc := []string{"-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
		"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I", filepath.Join(root, "c", "prov"), "-o", bin,
		filepath.Join(root, "c", "prov", "tests", name+".c"), "-lfabric"}
	out, err := exec.Command("cc", append(cc, provProgramFlags[name]...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("cc %s.c: %v\n%s", name, err, out)
	}
	return bin
}
