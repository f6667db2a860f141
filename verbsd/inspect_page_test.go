package verbsd

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
)

// TestInspectPage pages a made-up state with a small limit and checks that
// every page fits, that the cursor moves forward, and that the merged pages
// are the whole state (sessions split across pages included).
func TestInspectPage(t *testing.T) {
	full := proto.Inspect{Daemon: "test", PID: 1, Counters: map[string]int64{"qps": 90}}
	h := uint32(0)
	for id := uint64(1); id <= 3; id++ {
		si := proto.SessionInfo{ID: id, PDs: 1, Client: fmt.Sprintf("c%d", id),
			MRs: []proto.MRInfo{}, CQs: []proto.CQInfo{}, QPs: []proto.QPInfo{}}
		for i := 0; i < 30; i++ {
			h++
			switch i % 3 {
			case 0:
				si.MRs = append(si.MRs, proto.MRInfo{Handle: h, Length: uint64(i)})
			case 1:
				si.CQs = append(si.CQs, proto.CQInfo{Handle: h, Depth: 16})
			default:
				si.QPs = append(si.QPs, proto.QPInfo{Handle: h, QPN: h, Type: "UD", State: "RTS",
					Addr: fmt.Sprintf("127.0.0.1:%d", 20000+h), Counters: map[string]int64{"bytes_in": int64(h)}})
			}
		}
		full.Sessions = append(full.Sessions, si)
	}
	const limit = 2000
	var merged []proto.SessionInfo
	var cur proto.InspectCursor
	pages := 0
	for ; pages < 1000; pages++ {
		page, err := inspectPage(full, cur, limit)
		if err != nil {
			t.Fatalf("page %d at %+v: %v", pages, cur, err)
		}
		b, err := proto.Marshal(proto.Header{Op: proto.OpInspect | proto.OpReply}, page)
		if err != nil || len(b) > limit {
			t.Fatalf("page %d: %d octets (limit %d), %v", pages, len(b), limit, err)
		}
		for _, s := range page.Sessions {
			if n := len(merged); n > 0 && merged[n-1].ID == s.ID {
				merged[n-1].MRs = append(merged[n-1].MRs, s.MRs...)
				merged[n-1].CQs = append(merged[n-1].CQs, s.CQs...)
				merged[n-1].QPs = append(merged[n-1].QPs, s.QPs...)
				continue
			}
			merged = append(merged, s)
		}
		if !page.More {
			break
		}
		next := *page.Next
		if next.Session < cur.Session || next.Session == cur.Session && next.Handle <= cur.Handle {
			t.Fatalf("page %d: cursor %+v does not move past %+v", pages, next, cur)
		}
		cur = next
	}
	if pages < 3 {
		t.Errorf("only %d pages at a %d-octet limit: the test does not split", pages+1, limit)
	}
	if !reflect.DeepEqual(merged, full.Sessions) {
		t.Errorf("merged pages differ from the state:\n got %+v\nwant %+v", merged, full.Sessions)
	}

	// A limit that holds no object fails instead of sending empty pages.
	if _, err := inspectPage(full, proto.InspectCursor{}, 300); err == nil {
		t.Error("a 300-octet limit gave a page")
	}
}
