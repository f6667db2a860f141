package eventfd

import "testing"

func TestSignalDrain(t *testing.T) {
	e, err := New(true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if n, err := e.Drain(); n != 0 || err != nil {
		t.Fatalf("unsignalled drain = %d %v", n, err)
	}
	for range 3 {
		if err := e.Signal(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.Drain(); n != 3 || err != nil {
		t.Fatalf("drain = %d %v, want 3", n, err)
	}
	if _, err := FromFD(-1); err == nil {
		t.Fatal("FromFD(-1) accepted")
	}
}
