// Package verbsd is the control side of the software RNIC inside iwarpd:
// a Server (NewServer, Serve, Close) accepts control connections
// (SOCK_SEQPACKET, package proto), one session each, and serves their
// requests: verbs objects (PD, MR, completion channel, CQ, SRQ, QP;
// control.go, control_qp.go), connection management (control_cm.go, handed
// to verbsd/rc's CM), multicast (control_mcast.go) and inspection
// (inspect_page.go; iwarpctl). Requests that touch engine state run inside
// rnic.Engine.Do.
//
// The data path lives below (docs/architecture.md "The daemon's RNIC by
// layer"): verbsd/rnic is the engine core (engines, polling, sessions'
// objects and client memory, CQ delivery) and knows no transport;
// verbsd/ud, verbsd/rd and verbsd/rc are the transports, each with its own
// QP type driven by the engine through rnic.QPOps and by this package
// through transportQP (qp_transport.go); verbsd/config is the daemon's
// configuration.
//
// Everything read from shared memory or the control socket is untrusted:
// requests are validated against the session's own objects; a bad one
// fails with an errno and a message (rnic.Errf), never the daemon.
//
// Imports: the verbsd packages, proto, the wire packages, internal/...;
// never ofverbs, never gopacket or logrus (logging goes through the
// config.Logger adapter passed in by cmd/iwarpd).
package verbsd
