package verbsd

import (
	"github.com/iwarpd/iwarpd/iwerr"
	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/rdmap"
)

// The peer's Terminate on an RC connection (RFC 5040 §5.6 / §6.9, split
// out of rc_rx.go).

// rcTermReceived handles the peer's Terminate: the oldest uncompleted work
// request completes with the error it reports, the rest is flushed, the QP
// goes to ERROR and the connection is closed.
func (e *engine) rcTermReceived(q *qp, b []byte) {
	c := q.rc
	t, _, err := rdmap.ParseTerminate(b)
	if err != nil {
		t = rdmap.Terminate{Err: iwerr.RDMAPOperationUnspecified}
	}
	t.DDPHeader = append([]byte(nil), t.DDPHeader...)
	t.RDMAPHeader = append([]byte(nil), t.RDMAPHeader...)
	c.term = &t
	c.reason = rcClosedTermReceived
	c.setCause("the peer sent a Terminate: " + t.Err.Error())
	if c.pend.n > 0 {
		p := c.pend.front()
		p.done, p.status, p.term, p.flags = true, termStatus(t.Err), termWord(t.Err), proto.WCFlagTermValid
	}
	if q.State != proto.QPStateError {
		q.State = proto.QPStateError
		q.S.SendEvent(e.Engine, proto.Event{Type: proto.EventQPFatal, Handle: q.Handle, Detail: "terminate received: " + t.Err.Error()})
	}
	e.rcClose(q, rcClosedTermReceived, "")
}

// termStatus is the completion status of a work request the peer
// terminated the connection for.
func termStatus(err iwerr.Error) proto.WCStatus {
	switch {
	case err.Layer == iwerr.LayerRDMAP && err.Type == iwerr.RDMAPRemoteProtection,
		err.Layer == iwerr.LayerDDP && err.Type == iwerr.DDPTaggedBuffer:
		return proto.WCRemAccessErr
	case err.Layer == iwerr.LayerDDP && err.Type == iwerr.DDPUntaggedBuffer:
		return proto.WCRemInvReqErr
	case err.Layer == iwerr.LayerRDMAP && err.Type == iwerr.RDMAPRemoteOperation:
		return proto.WCRemOpErr
	}
	return proto.WCRemAbortErr
}
