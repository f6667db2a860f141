package iwarpd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuzzTargetsHaveSeeds: `go test` (so `make test`) runs every Fuzz
// target on its seed corpus — the f.Add calls and the files in
// testdata/fuzz/<Name>/ (cmd/go "Fuzzing"; a crasher found once is written
// there and stays) — but only if there is a seed. Every target must have
// one, and `make test` must not filter the targets out with -run.
func TestFuzzTargetsHaveSeeds(t *testing.T) {
	fset := token.NewFileSet()
	targets := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Fuzz") || fn.Body == nil {
				continue
			}
			targets++
			adds := 0
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Add" {
						if id, ok := sel.X.(*ast.Ident); ok && len(fn.Type.Params.List) > 0 &&
							len(fn.Type.Params.List[0].Names) > 0 && id.Name == fn.Type.Params.List[0].Names[0].Name {
							adds++
						}
					}
				}
				return true
			})
			corpus, _ := os.ReadDir(filepath.Join(filepath.Dir(path), "testdata", "fuzz", fn.Name.Name))
			if adds == 0 && len(corpus) == 0 {
				t.Errorf("%s: %s has no seed (no f.Add, no testdata/fuzz/%s/): go test runs nothing of it",
					path, fn.Name.Name, fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if targets == 0 {
		t.Fatal("no Fuzz targets found: is the test running at the module root?")
	}
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	recipe := ""
	for i, line := range strings.Split(string(mk), "\n") {
		if strings.HasPrefix(line, "test:") {
			lines := strings.Split(string(mk), "\n")
			for _, l := range lines[i+1:] {
				if !strings.HasPrefix(l, "\t") {
					break
				}
				recipe += l + "\n"
			}
			break
		}
	}
	if !strings.Contains(recipe, "test") || strings.Contains(recipe, "-run") || strings.Contains(recipe, "-short") {
		t.Errorf("make test's recipe %q must run go test on every test and fuzz target (no -run, no -short)", recipe)
	}
}
