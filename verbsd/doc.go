// Package verbsd is the software RNIC inside iwarpd: client sessions and
// their verbs objects (PD, MR, CQ, QP, AH, SRQ), and the polling engine that
// moves data between shared-memory queues and the network.
//
// Imports: proto, rdmap, ddp, mpa, llp and its subpackages, internal/...;
// never ofverbs, never gopacket or logrus (logging goes through an adapter
// passed in by cmd/iwarpd).
package verbsd
