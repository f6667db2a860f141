package ofverbs_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/iwarpd/iwarpd/ofverbs"
	"golang.org/x/sys/unix"
)

// Open the device, register a buffer, and exchange one datagram between two
// UD queue pairs: post a receive, post a send, poll both completion queues.
// (It needs a running iwarpd, so it has no Output line.)
func Example() {
	ctx, err := ofverbs.Open(ofverbs.WithClientName("example"))
	if err != nil {
		log.Fatal(err) // e.g. "ofverbs: open: no such file or directory: no iwarpd answers at ..."
	}
	defer ctx.Close() // closes every object below too

	attr, err := ctx.QueryDevice()
	if err != nil {
		log.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(1 << 16) // shared memory the daemon can map
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pd.RegMR(buf.Bytes(), ofverbs.AccessLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	cq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		log.Fatal(err)
	}
	newQP := func() *ofverbs.QP {
		qp, err := pd.CreateQP(ofverbs.QPInitAttr{
			Type: ofverbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: ofverbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1,
				MaxInline: uint32(min(64, attr.MaxInline))},
		})
		if err != nil {
			log.Fatal(err)
		}
		if err := qp.ModifyState(ofverbs.QPStateInit, ofverbs.QPStateRTR, ofverbs.QPStateRTS); err != nil {
			log.Fatal(err)
		}
		return qp
	}
	alice, bob := newQP(), newQP()
	toBob, err := pd.CreateAHTo(bob.Endpoint())
	if err != nil {
		log.Fatal(err)
	}

	mem := buf.Bytes()
	if _, err := bob.PostRecv([]ofverbs.RecvWR{{ID: 1, SGL: []ofverbs.SGE{mr.SGE(mem[4096:8192])}}}); err != nil {
		log.Fatal(err)
	}
	n := copy(mem, "hello, bob")
	if _, err := alice.PostSend([]ofverbs.SendWR{{
		ID: 2, Opcode: ofverbs.WRSend, SGL: []ofverbs.SGE{mr.SGE(mem[:n])},
		AH: toBob, Signaled: true,
	}}); err != nil {
		log.Fatal(err)
	}

	wcs := make([]ofverbs.WC, 8) // reused: Poll never allocates
	for done := 0; done < 2; {
		got, err := cq.Poll(wcs)
		if err != nil {
			log.Fatal(err)
		}
		for _, wc := range wcs[:got] {
			if err := wc.Err(); err != nil {
				log.Fatal(err)
			}
			if wc.Opcode == ofverbs.WCRecv {
				fmt.Printf("bob got %q from %v\n", mem[4096:4096+wc.ByteLen], wc.Src)
			}
		}
		done += got
		if got == 0 {
			time.Sleep(100 * time.Microsecond) // or block on a completion channel
		}
	}
}

// Block for completions instead of polling: arm the CQ, wait on its channel,
// drain it, acknowledge, re-arm.
func ExampleCompChannel() {
	ctx, err := ofverbs.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := ctx.CreateCQ(256, ch)
	if err != nil {
		log.Fatal(err)
	}
	// ... create QPs on cq and post receives ...
	wcs := make([]ofverbs.WC, 32)
	for {
		if err := cq.ReqNotify(false); err != nil { // true: solicited only
			log.Fatal(err)
		}
		// Completions that arrived before arming are still in the CQ.
		for {
			n, err := cq.Poll(wcs)
			if err != nil {
				log.Fatal(err)
			}
			if n == 0 {
				break
			}
			// ... handle wcs[:n] ...
		}
		got, err := ch.GetEvent() // blocks; ch.FD() serves epoll users
		if errors.Is(err, unix.ENODEV) {
			log.Fatal("iwarpd went away: ", err)
		}
		if err != nil {
			log.Fatal(err)
		}
		got.AckEvents(1)
	}
}

// Errors keep the errno the daemon chose.
func ExampleError() {
	ctx, err := ofverbs.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if errors.Is(err, unix.ENOMEM) {
		log.Fatal("too many protection domains: ", err)
	}
	var verr *ofverbs.Error
	if errors.As(err, &verr) {
		log.Fatalf("%s failed with errno %d: %s", verr.Op, verr.Errno, verr.Msg)
	}
	_ = pd
}

// Asynchronous events: QP errors, CQ overruns, and the daemon going away.
func ExampleContext_AsyncEvents() {
	ctx, err := ofverbs.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	go func() {
		for ev := range ctx.AsyncEvents() { // closed when the session ends
			switch ev.Type {
			case ofverbs.EventQPFatal:
				log.Printf("QP %v failed: %s", ev.QP, ev.Detail)
			case ofverbs.EventDeviceFatal:
				log.Printf("device lost: %v", ctx.Err())
			}
		}
	}()
}
