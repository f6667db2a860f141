// Package rdtest is a simulated datagram link between rd.Endpoints with a
// virtual clock: loss, duplication, reordering, delay and jitter from a
// seeded RNG, links that go down, receivers that are not ready for a while
// and nodes that restart. Each Node plays a minimal RD engine: it sends the
// tokens queued to each destination as the window allows, holds and
// delivers out-of-order datagrams as told, and records deliveries and
// completions. The Net checks the RD guarantees as it runs and records
// every breach in Violations:
//
//   - a token is delivered at most once per (source, destination) pair;
//   - tokens are delivered in the order they were queued (tokens queued to
//     one destination must be increasing);
//   - Acked only for a token already delivered.
//
// Imports: llp/rd, llp/dgram and the standard library.
package rdtest
