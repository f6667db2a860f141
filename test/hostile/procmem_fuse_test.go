package hostile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stallFS is a FUSE file system (fuse(4), include/uapi/linux/fuse.h) of
// files "f1" .. "f9" of three pages: pages 0 and 2 read as 'F' at once, a
// read of page 1 is answered only after stallFSLate — a page that does not
// come in time, as a hung FUSE or NFS server gives (late rather than never,
// so that the client, whose address space stays locked while the daemon
// waits in its page, goes on afterwards). Only what the kernel asks for a
// mapped read-only file is served: INIT, LOOKUP, GETATTR, OPEN, READ,
// FLUSH, RELEASE; the rest is ENOSYS.
type stallFS struct {
	dir string
	fd  int
	mu  sync.Mutex // one reply written at a time
}

// FUSE opcodes and sizes used here (include/uapi/linux/fuse.h).
const (
	fuseLookup   = 1
	fuseForget   = 2
	fuseGetattr  = 3
	fuseOpen     = 14
	fuseRead     = 15
	fuseRelease  = 18
	fuseFlush    = 25
	fuseInit     = 26
	fuseInHdrLen = 40
	fuseAttrLen  = 88
	fuseFileNode = 2 // f1; fN is node N+1
	fuseFileSize = 3 * pmPage
	stallFSLate  = 1500 * time.Millisecond
)

func init() { helpers["pm-fuse-server"] = helperFUSEServer }

// helperFUSEServer mounts a stallFS on the directory IWARPD_HOSTILE_ARG,
// says "ready" and serves until killed (its death aborts the connection:
// every unanswered read fails). It runs in a process of its own: a process
// whose page the daemon waits for has its address-space lock held by that
// wait (a /proc/PID/mem access cannot drop it), so its own page faults may
// block behind it — a server inside it could deadlock.
func helperFUSEServer() int {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return helperFail("/dev/fuse: %v", err)
	}
	fs := &stallFS{dir: os.Getenv(envArg), fd: fd}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=%d", fd, pmPage)
	if err := unix.Mount("iwarpd-stall", fs.dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return helperFail("mounting FUSE: %v", err)
	}
	helperReady()
	fs.serve()
	return 0
}

// startStallFS runs pm-fuse-server on a new directory (root only) and
// returns the directory; cleanup kills the server (aborting the
// connection) and unmounts.
func startStallFS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a FUSE file system")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	dir := t.TempDir()
	openDirs(t, dir)
	srv := spawnHostile(t, "pm-fuse-server", "", dir)
	t.Cleanup(func() {
		srv.kill()
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	return dir
}

func (fs *stallFS) serve() {
	buf := make([]byte, 1<<20+pmPage)
	for {
		n, err := unix.Read(fs.fd, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
			continue // an interrupted request
		}
		if err != nil || n < fuseInHdrLen {
			return // ENODEV: unmounted or aborted
		}
		fs.handle(buf[:n])
	}
}

func (fs *stallFS) reply(unique uint64, errno unix.Errno, body []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]byte, 16+len(body))
	binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	binary.LittleEndian.PutUint32(out[4:], uint32(-int32(errno)))
	binary.LittleEndian.PutUint64(out[8:], unique)
	copy(out[16:], body)
	unix.Write(fs.fd, out)
}

// attr is a fuse_attr of the root directory or the file.
func attr(node uint64) []byte {
	a := make([]byte, fuseAttrLen)
	le := binary.LittleEndian
	le.PutUint64(a[0:], node)
	mode, nlink, size := uint32(unix.S_IFDIR|0o755), uint32(2), uint64(0)
	if node >= fuseFileNode {
		mode, nlink, size = unix.S_IFREG|0o644, 1, fuseFileSize
	}
	le.PutUint64(a[8:], size)
	le.PutUint64(a[16:], (size+511)/512)
	le.PutUint32(a[60:], mode)
	le.PutUint32(a[64:], nlink)
	le.PutUint32(a[80:], pmPage) // blksize
	return a
}

func (fs *stallFS) handle(m []byte) {
	le := binary.LittleEndian
	op, unique, node := le.Uint32(m[4:]), le.Uint64(m[8:]), le.Uint64(m[16:])
	in := m[fuseInHdrLen:]
	switch op {
	case fuseInit:
		out := make([]byte, 64)
		le.PutUint32(out[0:], 7)      // major
		le.PutUint32(out[4:], 31)     // minor
		le.PutUint32(out[8:], 0)      // max_readahead: a fault reads its page alone
		le.PutUint32(out[20:], 1<<16) // max_write
		le.PutUint16(out[28:], 1)     // max_pages
		fs.reply(unique, 0, out)
	case fuseLookup:
		name := string(in[:len(in)-1])
		if len(name) != 2 || name[0] != 'f' || name[1] < '1' || name[1] > '9' || node != 1 {
			fs.reply(unique, unix.ENOENT, nil)
			return
		}
		file := uint64(name[1]-'1') + fuseFileNode
		out := make([]byte, 40, 40+fuseAttrLen)
		le.PutUint64(out[0:], file)
		le.PutUint64(out[16:], 3600) // entry_valid
		le.PutUint64(out[24:], 3600) // attr_valid
		fs.reply(unique, 0, append(out, attr(file)...))
	case fuseGetattr:
		out := make([]byte, 16, 16+fuseAttrLen)
		le.PutUint64(out[0:], 3600)
		fs.reply(unique, 0, append(out, attr(node)...))
	case fuseOpen:
		out := make([]byte, 16)
		le.PutUint32(out[8:], 2) // FOPEN_KEEP_CACHE
		fs.reply(unique, 0, out)
	case fuseRead:
		off, size := le.Uint64(in[8:]), le.Uint32(in[16:])
		end := min(off+uint64(size), fuseFileSize)
		data := make([]byte, max(int(end)-int(off), 0))
		for i := range data {
			data[i] = 'F'
		}
		if off < 2*pmPage && off+uint64(size) > pmPage {
			time.AfterFunc(stallFSLate, func() { fs.reply(unique, 0, data) })
			return
		}
		fs.reply(unique, 0, data)
	case fuseForget:
		// no reply
	case fuseFlush, fuseRelease:
		fs.reply(unique, 0, nil)
	default:
		fs.reply(unique, unix.ENOSYS, nil)
	}
}
