// Package siwvm drives a Linux SoftiWARP (siw) peer for interoperability
// tests: a small qemu guest (TCG) with Debian's 6.1 kernel, siw.ko built from
// Debian's linux-source-6.1 (patched so its MPA knobs are module parameters)
// and rdma-core's rping/ucmatose, built by scripts/siw-vm/build.sh and booted
// by scripts/siw-vm/run.sh. See docs/siw-interop.md.
//
// The guest uses qemu user networking: it is 10.0.2.15, and the host's
// loopback is reachable from it as 10.0.2.2. A Forward makes a guest port
// reachable on the host's 127.0.0.1. So an iwarpd responder listens on
// 127.0.0.1:P and the guest runs `rping -c -a 10.0.2.2 -p P`; an iwarpd
// initiator connects to 127.0.0.1:H with Forward{HostPort: H, GuestPort: G}
// while the guest runs `rping -s -a 10.0.2.15 -p G`.
//
// Booting costs about 3 s of guest time and 7–8 s of wall time on this
// machine, so tests that use the guest run only when IWARPD_SIW_VM=1 (make
// interop); Available says why it is not usable otherwise, for t.Skip.
package siwvm
