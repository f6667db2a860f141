package daemontest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SharedC builds targets of c/Makefile (make -C c BUILD=dir SAN=san
// targets...: "core", "prov", "tests", or a program's path under the
// returned directory) into a directory shared by every test binary of this
// checkout whose C sources are the same, and returns that directory. san
// is c/Makefile's SAN: "" (optimized), "1" (ASan+UBSan) or "tsan".
//
// Before, each suite built its own copy in its temporary directory: in one
// run of the whole suite the provider three times and the sanitized core
// four. The directory is os.TempDir()/iwarpd-c-HASH/VARIANT, HASH covering
// the checkout's path, every file under c/ (but build directories), the
// compiler's version and CC and CFLAGS: a change of any source is a new
// directory, never a stale object. A lock file beside it (flock) makes
// suites running at once wait for one build instead of building twice;
// make rebuilds nothing that is up to date. Directories of that form
// unused for a day are removed.
func SharedC(san string, targets ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	key, err := cSourceKey(root)
	if err != nil {
		return "", fmt.Errorf("daemontest: hashing c/ for its shared build: %w", err)
	}
	variant := map[string]string{"": "plain", "1": "san", "tsan": "tsan"}[san]
	if variant == "" {
		return "", fmt.Errorf("daemontest: SharedC: SAN %q: want \"\", \"1\" or \"tsan\"", san)
	}
	top := filepath.Join(os.TempDir(), "iwarpd-c-"+key)
	if err := os.MkdirAll(top, 0o755); err != nil {
		return "", err
	}
	removeStaleC(top)
	dir := filepath.Join(top, variant)
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("daemontest: locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	args := []string{"-C", filepath.Join(root, "c"), "-s", "BUILD=" + dir}
	if san != "" {
		args = append(args, "SAN="+san)
	}
	args = append(args, targets...)
	if out, err := exec.Command("make", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	now := time.Now()
	os.Chtimes(top, now, now) // in use: removeStaleC keeps it
	return dir, nil
}

// cSourceKey hashes what a build of c/ depends on (SharedC).
func cSourceKey(root string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "root %s\nCC %s\nCFLAGS %s\n", root, os.Getenv("CC"), os.Getenv("CFLAGS"))
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "--version").Output(); err == nil {
		h.Write(out)
	}
	c := filepath.Join(root, "c")
	err := filepath.WalkDir(c, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != c && strings.HasPrefix(d.Name(), "build") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(c, p)
		fmt.Fprintf(h, "\x00%s\x00", rel)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// removeStaleC removes the shared C builds (iwarpd-c-*) beside keep that
// no suite used for a day.
func removeStaleC(keep string) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(keep), "iwarpd-c-*"))
	for _, d := range old {
		if fi, err := os.Stat(d); err == nil && d != keep && fi.IsDir() && time.Since(fi.ModTime()) > 24*time.Hour {
			os.RemoveAll(d)
		}
	}
}
