// Package verbsd is the software RNIC inside iwarpd: client sessions and
// their verbs objects (PD, MR, completion channel, CQ, QP, SRQ; address
// handles are the client's, ud_dest.go), and the polling engine that moves
// data between shared-memory queues and the network.
//
// A Server (NewServer, Serve, Close) accepts control connections
// (SOCK_SEQPACKET, package proto) and runs one engine goroutine, locked to
// an OS thread, that owns every data-path object; control goroutines hand it
// work through a bounded command queue and a wake eventfd (engine.Do). The
// engine serves QPs round-robin with bounded work per pass, polls for
// Config.PollWindow yielding the CPU between empty passes, then sleeps in
// epoll_wait with the status page's Asleep word set (doorbell suppression).
//
// UD queue pairs run the datagram profile (docs/wire-format.md) over one
// non-blocking UDP socket each: DDP untagged Send / Send with SE, CRC32c
// trailer, DDP segmentation up to Config.MaxMsgUD with best-effort
// reassembly. Sends gather straight from registered memory (sendmsg with
// iovecs); single-datagram receives scatter straight into posted buffers.
// RC and RD queue pairs are not supported yet (EOPNOTSUPP).
//
// Everything read from shared memory is untrusted: work requests are copied
// then validated against the session's own objects; a bad one fails that
// QP only. Malformed datagrams are dropped and counted, never fatal.
//
// Client memory (docs/memory-registration.md, docs/iwarpd.md "Client
// memory"): memfd regions and rings are checked (memfd, not hugetlb,
// sealed) and mapped without being populated (memory.go); process-memory
// regions are reached with process_vm_readv/writev on the session's
// pidfd-pinned peer (procmem.go) through staging buffers that every data
// path commits before completing (stage.go: translate and rcLookup give
// the view, commit writes it back; a new path that writes registered
// memory must commit too). A fault on client memory fails that client's
// session, never the daemon (fault.go). Per-user limits: userlimits.go.
//
// Imports: proto, rdmap, ddp, llp and its subpackages, internal/...; never
// ofverbs, never gopacket or logrus (logging goes through the Logger
// adapter passed in by cmd/iwarpd).
package verbsd
