package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/iwarpd/iwarpd/proto"
	"golang.org/x/sys/unix"
)

// The test binary doubles as a producer process for the cross-process test.
func TestMain(m *testing.M) {
	if os.Getenv("SHM_TEST_PRODUCER") == "1" {
		os.Exit(runProducer())
	}
	os.Exit(m.Run())
}

const (
	testDepth  = 64
	testStride = 32
	testCount  = 20000
)

// runProducer maps the ring passed as fd 3 and produces testCount entries
// numbered 0..testCount-1, yielding while the ring is full.
func runProducer() int {
	reg, err := Map(3, proto.RingBytes(testDepth, testStride), unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := NewRing(reg.Mem, proto.RingSQ, testDepth, testStride, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p := NewProducer(r)
	deadline := time.Now().Add(60 * time.Second)
	for i := uint64(0); i < testCount; {
		s, err := p.Next()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if s == nil {
			p.Publish()
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "producer: consumer stalled")
				return 1
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		binary.LittleEndian.PutUint64(s, i)
		binary.LittleEndian.PutUint64(s[8:], ^i)
		i++
		if i%7 == 0 {
			p.Publish()
		}
	}
	p.Publish()
	return 0
}

func TestRingAcrossProcesses(t *testing.T) {
	reg, err := Create("test-ring", proto.RingBytes(testDepth, testStride))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	r, err := NewRing(reg.Mem, proto.RingSQ, testDepth, testStride, true)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SHM_TEST_PRODUCER=1")
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(reg.FD()), "ring")}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := NewConsumer(r)
	deadline := time.Now().Add(60 * time.Second)
	for want := uint64(0); want < testCount; {
		s, err := c.Peek()
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			if time.Now().After(deadline) {
				t.Fatalf("consumer stalled at entry %d", want)
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		got, check := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		if got != want || check != ^want {
			t.Fatalf("entry %d: got %d/%x", want, got, check)
		}
		c.Advance()
		want++
		if want%5 == 0 {
			c.Release()
		}
	}
	c.Release()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("producer process: %v", err)
	}
}

func TestRingFullAndCorruptIndices(t *testing.T) {
	reg, err := Create("test", proto.RingBytes(4, 16))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	r, err := NewRing(reg.Mem, proto.RingCQ, 4, 16, true)
	if err != nil {
		t.Fatal(err)
	}
	p, c := NewProducer(r), NewConsumer(r)
	for i := range 4 {
		s, err := p.Next()
		if err != nil || s == nil {
			t.Fatalf("slot %d: %v %v", i, s, err)
		}
	}
	if s, err := p.Next(); s != nil || err != nil {
		t.Fatalf("full ring returned a slot: %v %v", s, err)
	}
	if n, _ := c.Available(); n != 0 {
		t.Fatalf("unpublished entries visible: %d", n)
	}
	p.Publish()
	if n, _ := c.Available(); n != 4 {
		t.Fatalf("available = %d", n)
	}
	// A hostile consumer index (ahead of the producer) is detected.
	r.consumer.Store(100)
	if _, err := p.Next(); !errors.Is(err, ErrRingCorrupt) {
		t.Fatalf("corrupt consumer index: %v", err)
	}
	if p.Free() != 0 {
		t.Fatal("Free on corrupt ring")
	}
	// A hostile producer index is detected too.
	r.producer.Store(c.tail + 5)
	if _, err := c.Peek(); !errors.Is(err, ErrRingCorrupt) {
		t.Fatalf("corrupt producer index: %v", err)
	}
}

func TestMapRefusesUnsealedAndShortRegions(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, 8192)
	if _, err := Map(fd, 4096, unix.PROT_READ); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("unsealed region: %v", err)
	}
	reg, err := Create("short", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	dup, _ := unix.Dup(reg.FD())
	if _, err := Map(dup, 8192, unix.PROT_READ); err == nil {
		t.Fatal("short region accepted")
	}
	// A sealed region cannot be shrunk by its creator either.
	if err := unix.Ftruncate(reg.FD(), 0); err == nil {
		t.Fatal("sealed region was shrunk")
	}
	// A regular file is not a memfd with seals.
	f, _ := os.CreateTemp(t.TempDir(), "x")
	f.Truncate(8192)
	fd2, _ := unix.Dup(int(f.Fd()))
	f.Close()
	if _, err := Map(fd2, 4096, unix.PROT_READ); err == nil {
		t.Fatal("regular file accepted")
	}
}

// TestConsumerAdopt: a consumer takes another consumer's published index
// (the fast path's rank consuming a UD QP's receive queue) only within
// [its own, producer]; anything else leaves it unchanged.
func TestConsumerAdopt(t *testing.T) {
	reg, err := Create("test", proto.RingBytes(8, 16))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	r, err := NewRing(reg.Mem, proto.RingRQ, 8, 16, true)
	if err != nil {
		t.Fatal(err)
	}
	p, c := NewProducer(r), NewConsumer(r)
	for range 5 {
		if s, err := p.Next(); s == nil || err != nil {
			t.Fatal(s, err)
		}
	}
	p.Publish()
	c.Advance()
	c.Release() // the engine consumed one
	for _, bad := range []uint32{0, 6, 100, 0xffffffff} {
		r.consumer.Store(bad)
		if err := c.Adopt(); !errors.Is(err, ErrRingCorrupt) {
			t.Fatalf("consumer %d adopted: %v", bad, err)
		}
		if c.tail != 1 || c.rel != 1 {
			t.Fatalf("consumer %d moved the tail to %d/%d", bad, c.tail, c.rel)
		}
	}
	r.consumer.Store(4) // the rank consumed three more
	if err := c.Adopt(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Available(); n != 1 || c.tail != 4 {
		t.Fatalf("after adopting 4: tail %d, available %d", c.tail, n)
	}
	r.consumer.Store(5)
	if err := c.Adopt(); err != nil || c.tail != 5 {
		t.Fatalf("adopting the producer's index: %v, tail %d", err, c.tail)
	}
}
