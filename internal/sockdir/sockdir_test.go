package sockdir

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	me := os.Geteuid()
	if err := Check(dir, me); err != nil {
		t.Fatalf("own 0700 directory refused: %v", err)
	}
	os.Chmod(dir, 0o777)
	if err := Check(dir, me); err == nil {
		t.Fatal("world-writable directory accepted")
	}
	os.Chmod(dir, os.ModeSticky|0o777)
	if err := Check(dir, me); err != nil {
		t.Fatalf("sticky directory refused: %v", err)
	}
	os.Chmod(dir, 0o700)
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other")
		os.Mkdir(other, 0o700)
		os.Chown(other, 1002, 1002)
		if err := Check(other, 1001); err == nil {
			t.Fatal("a directory of uid 1002 accepted for uid 1001")
		}
		link := filepath.Join(dir, "link")
		os.Symlink(other, link)
		if err := Check(link, 1001); err == nil {
			t.Fatal("a link to a directory of uid 1002 accepted for uid 1001")
		}
		if err := Check(dir, 1001); err != nil {
			t.Fatalf("root's directory refused for uid 1001: %v", err)
		}
	}
	if err := Check(filepath.Join(dir, "missing"), me); err == nil {
		t.Fatal("missing directory accepted")
	}
}

func TestPeerUID(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uid, err := PeerUID(c)
	if err != nil || uid != os.Geteuid() {
		t.Fatalf("PeerUID = %d %v, want %d", uid, err, os.Geteuid())
	}
	if !TrustedPeer(uid) || !TrustedPeer(0) || TrustedPeer(54321) || !TrustedPeer(54321, 54321) {
		t.Fatal("TrustedPeer")
	}
}
