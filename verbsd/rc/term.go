package rc

import (
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
	"github.com/iwarpd/iwarpd/verbsd/rnic"
)

// The peer's Terminate on an RC connection (RFC 5040 §5.6 / §6.9, split
// out of rc/rx.go).

// termReceived handles the peer's Terminate: the oldest uncompleted work
// request completes with the error it reports, the rest is flushed, the QP
// goes to ERROR and the connection is closed.
func (e *engine) termReceived(q *QP, b []byte) {
	c := q.Conn
	t, _, err := rdmap.ParseTerminate(b)
	if err != nil {
		t = rdmap.Terminate{Err: iwerr.RDMAPOperationUnspecified}
	}
	t.DDPHeader = append([]byte(nil), t.DDPHeader...)
	t.RDMAPHeader = append([]byte(nil), t.RDMAPHeader...)
	c.term = &t
	c.reason = ClosedTermReceived
	c.setCause("the peer sent a Terminate: " + t.Err.Error())
	if c.pend.n > 0 {
		p := c.pend.front()
		p.done, p.status, p.term, p.flags = true, rnic.TermStatus(t.Err), rnic.TermWord(t.Err), proto.WCFlagTermValid
	}
	if q.State != proto.QPStateError {
		q.State = proto.QPStateError
		q.Session.SendEvent(e.Engine, proto.Event{Type: proto.EventQPFatal, Handle: q.Handle, Detail: "terminate received: " + t.Err.Error()})
	}
	e.close(q, ClosedTermReceived, "")
}
