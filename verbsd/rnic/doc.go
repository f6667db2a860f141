// Package rnic is the engine core of iwarpd's software RNIC (DESIGN.md §3,
// docs/engines.md): the engines (one goroutine locked to a thread each,
// -engines), their polling sets, ready lists, doorbells and sleep; the
// sessions' verbs objects (PDs, MRs and their keys, CQs and completion
// channels, SRQs, QPs) and the client memory they name (memfd regions,
// process memory, staging); completion and asynchronous event delivery;
// counters; per-user limits.
//
// It knows no transport. A QP's transport (UD, RD, RC in the packages
// above it) serves the QP through QPOps, and keeps per-engine state through
// EngineHooks; the engine decides when: after a doorbell, a socket event,
// a timer, or a probe of the client's rings (rnic/ready.go).
//
// Every object is engine-owned: it is changed only on an engine (inside
// Engine.Do for control commands, with every other engine parked), so a
// pass reads the tables without locks (rnic/engines.go says what several
// engines share and how).
package rnic
