package verbsd

import (
	"encoding/json"
	"math"
	"sort"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
	"golang.org/x/sys/unix"
)

// inspectOp answers OpInspect with one page of the daemon's state, starting
// at the request's cursor (proto.InspectRequest; no body: the first page).
// Every page fits in one control message (proto.MaxMessage): a larger
// reply could not be sent at all.
func (s *session) inspectOp(body []byte, _ []int) (any, error) {
	var req proto.InspectRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	in, err := s.srv.Inspect()
	if err != nil {
		return nil, err
	}
	page, err := inspectPage(in, req.Cursor, proto.MaxMessage)
	if err != nil {
		return nil, err
	}
	return &page, nil
}

// inspectObject is one MR, CQ or QP of a session, in the session's handle
// order (handles are unique across kinds within a session).
type inspectObject struct {
	handle uint32
	add    func(*proto.SessionInfo)
	value  any
}

func sessionObjects(si *proto.SessionInfo, from uint32) []inspectObject {
	var objs []inspectObject
	for _, m := range si.MRs {
		if m.Handle >= from {
			objs = append(objs, inspectObject{m.Handle, func(p *proto.SessionInfo) { p.MRs = append(p.MRs, m) }, m})
		}
	}
	for _, c := range si.CQs {
		if c.Handle >= from {
			objs = append(objs, inspectObject{c.Handle, func(p *proto.SessionInfo) { p.CQs = append(p.CQs, c) }, c})
		}
	}
	for _, q := range si.QPs {
		if q.Handle >= from {
			objs = append(objs, inspectObject{q.Handle, func(p *proto.SessionInfo) { p.QPs = append(p.QPs, q) }, q})
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].handle < objs[j].handle })
	return objs
}

// encodedLen is the length of v's JSON encoding, as proto.Marshal makes it.
func encodedLen(v any) (int, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, rnic.Errf(unix.EIO, "inspect: encoding the reply: %v", err)
	}
	return len(b), nil
}

// inspectPage cuts the page that starts at cur out of the full state (its
// sessions sorted by ID), filling it while the encoded reply, header
// included, stays within limit octets. Sizes are measured by encoding each
// part as it is added (an element of a JSON array costs its encoding plus
// one comma), and the finished page is encoded once more to check. A page
// always makes progress (at least one session or object) or fails with
// EMSGSIZE, so a client that follows Next always ends.
func inspectPage(full proto.Inspect, cur proto.InspectCursor, limit int) (proto.Inspect, error) {
	page := full
	page.Sessions = []proto.SessionInfo{}
	// The fixed part, measured with the largest More/Next it may carry.
	page.More, page.Next = true, &proto.InspectCursor{Session: math.MaxUint64, Handle: math.MaxUint32}
	base, err := encodedLen(page)
	if err != nil {
		return proto.Inspect{}, err
	}
	page.More, page.Next = false, nil
	hdr := len(proto.Header{}.Append(nil))
	used := hdr + base
	if used > limit {
		return proto.Inspect{}, rnic.Errf(unix.EMSGSIZE, "inspect: the device and counters alone take %d octets, more than the %d of a control message", used, limit)
	}
	stop := func(next proto.InspectCursor) (proto.Inspect, error) {
		if len(page.Sessions) == 0 {
			return proto.Inspect{}, rnic.Errf(unix.EMSGSIZE, "inspect: session %d object %d does not fit in a %d-octet control message", next.Session, next.Handle, limit)
		}
		page.More, page.Next = true, &next
		return page, checkPage(page, used, limit)
	}
	for i := range full.Sessions {
		si := &full.Sessions[i]
		if si.ID < cur.Session {
			continue
		}
		from := uint32(0)
		if si.ID == cur.Session {
			from = cur.Handle
		}
		objs := sessionObjects(si, from)
		part := *si
		part.MRs, part.CQs, part.QPs = []proto.MRInfo{}, []proto.CQInfo{}, []proto.QPInfo{}
		n, err := encodedLen(part)
		if err != nil {
			return proto.Inspect{}, err
		}
		if used+n+1 > limit {
			return stop(proto.InspectCursor{Session: si.ID, Handle: from})
		}
		partUsed := n + 1
		added := 0
		for _, o := range objs {
			n, err := encodedLen(o.value)
			if err != nil {
				return proto.Inspect{}, err
			}
			if used+partUsed+n+1 > limit {
				if added > 0 { // the session continues on the next page
					page.Sessions = append(page.Sessions, part)
					used += partUsed
				}
				return stop(proto.InspectCursor{Session: si.ID, Handle: o.handle})
			}
			o.add(&part)
			partUsed += n + 1
			added++
		}
		page.Sessions = append(page.Sessions, part)
		used += partUsed
	}
	return page, checkPage(page, used, limit)
}

// checkPage encodes the finished page as it will be sent and checks the
// size against the limit and against the running count.
func checkPage(page proto.Inspect, used, limit int) error {
	b, err := proto.Marshal(proto.Header{Op: proto.OpInspect | proto.OpReply}, page)
	if err != nil {
		return rnic.Errf(unix.EMSGSIZE, "inspect: %v", err)
	}
	if len(b) > limit || len(b) > used {
		return rnic.Errf(unix.EIO, "inspect: page encodes to %d octets, counted %d, limit %d (a bug in the page filler)", len(b), used, limit)
	}
	return nil
}
