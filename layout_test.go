package iwarpd_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/iwarpd/iwarpd"

// importRule says which project packages and third-party modules a package
// (or a package tree, when the key ends in "/...") may import in non-test
// code. The standard library is always allowed. Test files are not checked:
// tests may use whatever they need to drive the real code.
type importRule struct {
	project    []string // project packages (relative to the module), "x/..." for a tree
	thirdParty []string // module path prefixes
}

// The layering of STYLE.md: arrows point down only; wire packages know
// nothing of clients, shared memory or the daemon; ofverbs and verbsd meet
// only in proto; only dissect (and programs) import gopacket; only programs
// import logrus; only internal/benchreport imports gonum.org/v1/plot.
var importRules = map[string]importRule{
	"iwerr":           {},
	"internal/crc32c": {thirdParty: []string{"golang.org/x/sys"}},
	"llp":             {},
	"llp/dgram":       {project: []string{"iwerr", "internal/crc32c", "llp"}},
	"llp/rd":          {project: []string{"iwerr", "llp/dgram"}},
	"llp/rd/rdtest":   {project: []string{"llp/rd", "llp/dgram"}},
	"mpa":             {project: []string{"iwerr", "internal/crc32c", "llp"}},
	"ddp":             {project: []string{"iwerr", "llp"}},
	"rdmap":           {project: []string{"iwerr", "ddp", "llp"}},
	"proto":           {thirdParty: []string{"golang.org/x/sys"}},
	"ofverbs":         {project: []string{"proto", "internal/..."}, thirdParty: []string{"golang.org/x/sys"}},
	// verbsd by layer: the configuration is a leaf; the
	// engine core (rnic) knows no transport and no control protocol; the
	// transports build on it; verbsd (control) on all of them.
	"verbsd/config": {project: []string{"proto", "llp/..."}},
	"verbsd/rnic": {
		project:    []string{"verbsd/config", "proto", "rdmap", "iwerr", "internal/crc32c", "internal/eventfd", "internal/shm"},
		thirdParty: []string{"golang.org/x/sys"},
	},
	"verbsd/rc": {
		project:    []string{"verbsd/rnic", "verbsd/config", "proto", "rdmap", "ddp", "mpa", "llp", "iwerr", "internal/crc32c", "internal/shm"},
		thirdParty: []string{"golang.org/x/sys"},
	},
	"verbsd/ud": {
		project:    []string{"verbsd/rnic", "verbsd/config", "proto", "rdmap", "ddp", "llp/...", "llp", "iwerr", "internal/crc32c", "internal/shm"},
		thirdParty: []string{"golang.org/x/sys"},
	},
	"verbsd/rd": {
		project:    []string{"verbsd/ud", "verbsd/rnic", "verbsd/config", "proto", "rdmap", "ddp", "llp/...", "llp", "iwerr", "internal/crc32c", "internal/shm"},
		thirdParty: []string{"golang.org/x/sys"},
	},
	"verbsd/...": {
		project:    []string{"verbsd/...", "proto", "rdmap", "ddp", "mpa", "llp/...", "llp", "iwerr", "internal/..."},
		thirdParty: []string{"golang.org/x/sys", "golang.org/x/net"},
	},
	"dissect": {
		project:    []string{"iwerr", "internal/crc32c", "mpa", "ddp", "rdmap", "llp", "llp/dgram"},
		thirdParty: []string{"github.com/google/gopacket"},
	},
	"internal/pcapgen":  {thirdParty: []string{"github.com/google/gopacket"}},
	"internal/shm":      {project: []string{"proto"}, thirdParty: []string{"golang.org/x/sys"}},
	"internal/eventfd":  {thirdParty: []string{"golang.org/x/sys"}},
	"internal/sockdir":  {thirdParty: []string{"golang.org/x/sys"}},
	"internal/testwait": {},
	"internal/pinfork":  {},
	"internal/captures": {},
	// The only importer of gonum.org/v1/plot: the benchmark report's PNGs.
	"internal/benchreport": {thirdParty: []string{"gonum.org/v1/plot"}},
	"cmd/...": {
		project:    []string{"..."},
		thirdParty: []string{"github.com/google/gopacket", "github.com/sirupsen/logrus", "golang.org/x/sys", "golang.org/x/net"},
	},
	"test/...":     {project: []string{"..."}, thirdParty: []string{"github.com/google/gopacket", "golang.org/x/sys", "golang.org/x/net"}},
	"examples/...": {project: []string{"ofverbs", "proto"}, thirdParty: []string{"golang.org/x/sys"}},
	"":             {}, // the root package: documentation only
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

func matchTree(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == tree || strings.HasPrefix(rel, tree+"/")
	}
	return pattern == rel
}

func ruleFor(rel string) (importRule, string, bool) {
	if r, ok := importRules[rel]; ok {
		return r, rel, true
	}
	best := ""
	var rule importRule
	found := false
	for pattern, r := range importRules {
		if strings.HasSuffix(pattern, "/...") && matchTree(pattern, rel) && len(pattern) > len(best) {
			best, rule, found = pattern, r, true
		}
	}
	return rule, best, found
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	checked := 0
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		rule, pattern, ok := ruleFor(rel)
		if !ok {
			t.Errorf("package %q has no import rule: add it to importRules in layout_test.go (and docs/architecture.md)", rel)
			continue
		}
		checked++
		for _, imp := range p.Imports {
			if !strings.Contains(strings.Split(imp, "/")[0], ".") {
				continue // standard library
			}
			if dep, ok := strings.CutPrefix(imp, module+"/"); ok {
				if !allowed(rule.project, dep) {
					t.Errorf("%s imports %s: not allowed by rule %q (STYLE.md layering)", rel, dep, pattern)
				}
				continue
			}
			okThird := false
			for _, m := range rule.thirdParty {
				if imp == m || strings.HasPrefix(imp, m+"/") {
					okThird = true
				}
			}
			if !okThird {
				t.Errorf("%s imports %s: third-party module not allowed by rule %q", rel, imp, pattern)
			}
		}
	}
	if checked == 0 {
		t.Fatal("go list returned no packages")
	}
}

func allowed(patterns []string, dep string) bool {
	for _, p := range patterns {
		if matchTree(p, dep) {
			return true
		}
	}
	return false
}

func TestGofmt(t *testing.T) {
	var files []string
	out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.go").Output()
	if err == nil && len(bytes.TrimSpace(out)) > 0 {
		files = strings.Fields(string(out))
	} else {
		// Not a git checkout: every Go file under the module.
		walk, werr := exec.Command("find", ".", "-name", "*.go", "-not", "-path", "./.git/*").Output()
		if werr != nil {
			t.Fatalf("listing Go files: %v", werr)
		}
		files = strings.Fields(string(walk))
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	args := append([]string{"-l"}, files...)
	res, err := exec.Command("gofmt", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gofmt: %v\n%s", err, res)
	}
	if s := strings.TrimSpace(string(res)); s != "" {
		t.Errorf("files need gofmt:\n%s", s)
	}
}

func TestEveryPackageHasDocGo(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		if strings.Contains(dir, string(filepath.Separator)+"cmd"+string(filepath.Separator)) {
			continue // programs document themselves in their main.go and docs/
		}
		if _, err := exec.Command("test", "-f", filepath.Join(dir, "doc.go")).Output(); err != nil {
			t.Errorf("%s has no doc.go (STYLE.md: purpose, RFC sections, what it may import)", dir)
		}
	}
}
