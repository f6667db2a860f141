package rnic

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestCheckProcMemFD: only a /proc/PID/mem open for reading and writing is
// taken at hello; anything else is refused with what to hand over.
func TestCheckProcMemFD(t *testing.T) {
	open := func(path string, flags int) int {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	mfd, err := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	for _, c := range []struct {
		name string
		fd   int
		want string // "" = accepted
	}{
		{"/proc/self/mem O_RDWR", open("/proc/self/mem", unix.O_RDWR), ""},
		{"/proc/thread-self/mem O_RDWR", open("/proc/thread-self/mem", unix.O_RDWR), ""},
		{"/proc/self/mem O_RDONLY", open("/proc/self/mem", unix.O_RDONLY), "not open for reading and writing"},
		{"/proc/self/status", open("/proc/self/status", unix.O_RDONLY), "not a /proc/PID/mem"},
		{"/proc/self", open("/proc/self", unix.O_RDONLY|unix.O_DIRECTORY), "not a /proc/PID/mem"},
		{"a memfd", mfd, "not on procfs"},
		{"/dev/null", open("/dev/null", unix.O_RDWR), "not on procfs"},
	} {
		err := CheckProcMemFD(c.fd)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/proc/self/mem")):
			t.Errorf("%s: %v, want an error saying %q and what to hand over", c.name, err, c.want)
		}
	}
}

// TestProcMemAccess: reads and writes through the copier reach this
// process's memory; an unmapped page part way is EFAULT, and so is the
// probe of a range whose last octet is unmapped.
func TestProcMemAccess(t *testing.T) {
	fd, err := unix.Open("/proc/self/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProcMem(fd, time.Second, func(string) { t.Error("stalled") })
	defer func() { <-p.Close() }()
	mem, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	copy(mem[100:], "hello")
	r := &ProcRegion{Mem: p, Addr: base, Length: 2 * 4096}
	b := make([]byte, 5)
	if err := r.ReadAt(b, 100); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := r.WriteAt([]byte("world"), 4094); err != nil || string(mem[4094:4099]) != "world" {
		t.Fatalf("write across pages: %q, %v", mem[4094:4099], err)
	}
	if err := r.probe(0, 2*4096); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(base+4096), 4096, 0); errno != 0 {
		t.Fatal(errno)
	}
	if err := r.ReadAt(make([]byte, 200), 4000); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("a read running into an unmapped page: %v, want EFAULT", err)
	}
	if err := r.WriteAt(make([]byte, 200), 4000); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("a write running into an unmapped page: %v, want EFAULT", err)
	}
	if err := r.probe(0, 2*4096); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("probe of a range whose last page is gone: %v, want EFAULT", err)
	}
	if err := ProbeProcessRange(p, base+4096, 10); !errors.Is(err, unix.EFAULT) || !strings.Contains(err.Error(), "not all mapped") {
		t.Fatalf("registration probe of an unmapped range: %v", err)
	}
	if p.Stalled() {
		t.Fatal("stalled without a stall")
	}
}

// TestStrikeTable: three strikes within the window refuse the user for
// StrikeBan after the last; strikes older than the window do not count.
func TestStrikeTable(t *testing.T) {
	var st StrikeTable
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if st.Refused(7, t0) != nil {
		t.Fatal("refused without strikes")
	}
	st.Strike(7, t0)
	st.Strike(7, t0.Add(10*time.Minute))
	if st.Refused(7, t0.Add(11*time.Minute)) != nil {
		t.Fatal("refused after two strikes")
	}
	// The first strike leaves the window: a third one later is the second.
	if n := st.Strike(7, t0.Add(61*time.Minute)); n != 2 {
		t.Fatalf("%d strikes within the window, want 2", n)
	}
	if n := st.Strike(7, t0.Add(62*time.Minute)); n != 3 {
		t.Fatalf("%d strikes, want 3", n)
	}
	err := st.Refused(7, t0.Add(63*time.Minute))
	if err == nil || !strings.Contains(err.Error(), "refused until 2026-01-01T02:02:00Z") {
		t.Fatalf("after three strikes: %v", err)
	}
	if st.Refused(8, t0.Add(63*time.Minute)) != nil {
		t.Fatal("another user refused")
	}
	if st.Refused(7, t0.Add(62*time.Minute+StrikeBan)) != nil {
		t.Fatal("still refused after the ban")
	}
}
