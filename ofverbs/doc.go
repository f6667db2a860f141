// Package ofverbs is the client side of iwarpd: OpenFabrics-style verbs
// (device, PD, MR, CQ, completion channel, QP, AH, SRQ, connection manager)
// for Go programs. Control goes to the daemon over its Unix socket; work
// queues, completion queues and registered buffers live in shared memory.
//
// # Objects
//
// Open (or ListDevices) finds the daemon at DefaultSocket (IWARPD_SOCKET,
// else the daemon's default path) and returns a Context. From it: AllocPD,
// AllocBuffer (shared memory the daemon maps: registered Buffer memory is
// the zero-copy path), CreateCompChannel, CreateCQ; from a PD: RegMR (of a
// Buffer's memory, or of any other memory of the process, which the daemon
// then reaches through this process's /proc/self/mem: docs/memory-registration.md),
// CreateQP, CreateAH, CreateSRQ. Every object has an idempotent Close; closing the Context
// closes everything it owns. Capabilities come from QueryDevice.
//
// # Datagram peers
//
// A UD or RD QP has an address and a Q_Key (random unless QPInitAttr.QKey
// chooses one); the daemon drops every datagram that does not name the
// key. QP.Endpoint gives both, as text with Endpoint.String
// ("ip:port/qkey"): hand it to peers out of band as InfiniBand programs
// hand out QPNs, and they call PD.CreateAHTo(endpoint). A memory region's
// RKey (its STag, random) is for peers, its LKey for local work requests;
// neither works as the other.
//
// # Data path
//
// PostSend and PostRecv encode work requests straight into the shared rings
// (SGEs or inline bytes copied), publish them with one atomic store per
// batch and ring the daemon's doorbell (an eventfd write) only when the
// daemon's status page says its engine sleeps: no system call per work
// request while it polls. Poll copies completions out of the CQ ring into
// the caller's slice and never allocates. ReqNotify is a store into the
// CQ's arming word; CompChannel.GetEvent blocks on the channel's eventfd.
// Posting and polling are safe from several goroutines (a mutex per queue).
//
// # Errors
//
// A failed verb returns an *Error that keeps the errno (errors.Is(err,
// unix.ENOMEM)) and the daemon's explanation. Unknown handles are EINVAL,
// exhausted limits ENOMEM, objects in use EBUSY. Work requests that fail
// complete with an error status (WC.Err) and move their QP to ERROR. A
// daemon of another ABI version is refused with a *proto.VersionError.
//
// If the daemon dies or ends the session, every waiting and later control
// verb returns an *Error wrapping unix.ENODEV promptly, Context.Err says so,
// AsyncEvents delivers EventDeviceFatal and is closed, and blocked GetEvent
// calls return. PostSend, PostRecv and Poll keep working on the rings, but
// nothing completes any more: check Context.Err when completions stop.
//
// Imports: proto, internal/shm, internal/eventfd and golang.org/x/sys only;
// never verbsd or protocol code.
package ofverbs
