// Package rd is the reliability state machine of reliable-datagram (RD)
// queue pairs (docs/wire-format.md §7, issue 5): exactly-once, in-order
// delivery per (source QP, destination QP) over an unreliable datagram
// link, with 32-bit sequence numbers, cumulative plus selective (SACK)
// acknowledgement — piggybacked on DATA where possible, otherwise a delayed
// standalone ACK — retransmission on an RFC 6298 timer (SRTT/RTTVAR, Karn's
// rule, exponential backoff; one timer, for the oldest outstanding datagram
// only: no go-back-N) and selective fast retransmission of the holes the
// SACKs show (RFC 6675 DupThresh with RACK's time rules, RFC 8985: three
// later datagrams received, and outstanding longer than min RTT + min
// RTT/4, or SRTT + max(SRTT/4, 4·RTTVAR) on a path seen reordering;
// duplicate ACKs resend nothing), SACK Block ACKs reaching the whole
// reorder window (wire-format.md §7.1, flags X and B), a window of
// datagrams in flight (SACKed ones left it) inside the receiver's
// advertised reorder window, with receiver flow control
// (NOTREADY: the receiver had no posted receive; the sender retries after
// its own back-off and does not count it as loss), a retry limit ending in a
// Failed action, per-peer state created on first contact and reclaimed when
// idle, restart safety through incarnations (RESET), and an incarnation
// handshake for new peers (cookie.go, docs/wire-format.md §7.4): DATA from
// a source address that has not proven it receives there is dropped
// without state or buffering and answered, within rate limits, by a
// Challenge carrying a cookie its DATA must echo.
//
// It is pure and clocked: no goroutines, no sockets, no time.Now, no payload
// bytes. The engine feeds it parsed RD headers (Endpoint.Receive), asks it
// for the header of each new DATA datagram (Endpoint.Send; Endpoint.SendRun
// for several consecutive ones in one call, sendrun.go), and drives
// its timers with Endpoint.Poll at Endpoint.NextDeadline; the actions Poll
// returns tell the engine what to (re)transmit, which tokens are
// acknowledged or failed and which held datagrams are now in order. A Token
// is the engine's own name for one DATA datagram: it must be able to rebuild
// the datagram from it.
//
// Per-peer memory: a peer costs one map entry and one peer struct (see
// PeerStateBytes, 200 bytes on amd64, and TestIdlePeerMemory: about 390
// heap bytes per idle peer); the retransmission ring (32 bytes per
// outstanding datagram) and the reorder bitmap are allocated only while
// datagrams are outstanding or held and dropped by the idle sweep.
//
// Engine contract, beyond the signatures:
//   - Receive and Send queue actions (Acked, DeliverHeld, ACKs, RESETs);
//     call Poll after a batch of them and carry out the actions in order.
//     A datagram that arrives in order while earlier held ones are still
//     queued for delivery gets Hold (then its own DeliverHeld), so order
//     holds even if the engine receives a whole batch before polling.
//   - Held datagrams are named by (Peer, Header.Seq).
//   - Acked means delivered in order at the peer (a SACK only stops
//     retransmission); with Config.AckedRuns one Acked action names N
//     consecutive tokens (Action.N). Failed and PeerReset end the other tokens
//     outstanding to that peer too; the next Send starts a new space at 1
//     under a new incarnation of ours towards that peer.
//   - NOTREADY pauses sending to the peer (CanSend false) until the
//     back-off expires; not-ready retries never count as retries.
//   - HoldAcks: when the engine refuses a delivered datagram it calls
//     HoldAcks(peer, seq, errTok) before sending the error message errTok;
//     acks to the peer do not cover seq until errTok is Acked (or ends), so
//     the peer always handles the error before the ack completing its WR.
//
// Guarantees across restarts. The two halves of a pair are independent: a
// sequence space is named by its sender's incarnation towards the peer and
// ends only on the sender's side (retry exceeded, RESET, an inconsistent
// ACK); a sender whose space ends renews its incarnation towards that peer
// (Endpoint.renew), so that no life of the peer can take the next space —
// starting at 1 again — for the ended one (late or duplicated datagrams of
// it included). A receiver seeing a new incarnation from an address ends
// only its receive half (the peer restarted or renewed); its own send space
// goes on, now echoing the new incarnation: the new life either holds
// receive state for it (it acknowledged it: the ack is checked against the
// space once, then taken) or answers RESET. Hence: a token is Acked only if
// the life of the peer that sent the acknowledgement delivered it, exactly
// once and in order; a token whose fate is unknown (outstanding when the
// peer's life ended, or refused by the new life) ends with PeerReset (the
// engine's WCRetryExcErr), never with Acked. A token the old life delivered
// and never acknowledged may be delivered again to the new life (at most
// once per life). Both sides failing on a dead link renew their own spaces
// only: after recovery the first messages go through.
//
// Wire decisions on top of docs/wire-format.md §7: a RESET carries in its
// CumAck field (unused without the A flag) the incarnation of its sender
// whose state is gone when that is not the current one (RESET answering
// DATA meant for a previous life), so a late or duplicated RESET cannot
// reset the newer state. RESET means "I have no receive state for the
// space you echo": it ends the receiver's send space only. A send half idle
// for IdleTimeout starts over at 1 (same incarnation); the receiver accepts
// seq 1 as a new space when its receive half has been idle for
// IdleTimeout/2 and holds nothing; it keeps the receive half for
// 2×IdleTimeout (then held datagrams are discarded too). DATA for the
// peer's last previous incarnation is Stale; DATA echoing the endpoint's
// incarnation or one of its last two incarnations towards the peer is for
// this life.
//
// Timeouts back off per datagram on timeouts only; an acknowledgement
// covering datagrams sent before the latest timeout gives an RTT sample
// measured from the timeout (sender.go processAck, peer.rtoAt). While the
// peer acknowledges or SACKs, the oldest datagram is resent after a probe
// timeout of two SRTT instead (a tail probe, RFC 8985 §7; rtt.go
// probing): no backoff, not counted against MaxRetries, at most
// maxProbes in a row without progress before the RFC 6298 timeouts take
// over. Only those timeouts count against MaxRetries.
//
// Imports: the standard library, iwerr, llp/dgram. The simulated lossy,
// reordering, duplicating link used by the tests is package rd/rdtest.
package rd
