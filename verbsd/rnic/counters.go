package rnic

// Counter names one statistic kept per QP and for the whole daemon. The
// names (counterNames) are what OpInspect reports and iwarpctl prints.
type Counter int

const (
	CDatagramsIn Counter = iota
	CDatagramsOut
	CBytesIn // payload octets of delivered messages
	CBytesOut
	CMessagesIn
	CMessagesOut
	CDropCRC
	CDropTruncated
	CDropBadVersion
	CDropTagged
	CDropBadOpcode
	CDropBadQN
	CDropBadSegment
	CDropNotReady
	CDropNoRecv
	CRecvTooLong
	CReassemblyTimeout
	CReassemblyEvicted
	CSendErrors
	CSendBlocked
	CWRErrors
	CFlushed
	cCQOverruns
	cEventsDropped
	CMemoryFaults
	cProcessMemFaults  // process-memory accesses that failed (unmapped, process gone)
	cProcessMemRead    // octets read from client processes (pread of /proc/PID/mem)
	cProcessMemWritten // octets written to client processes (pwrite of /proc/PID/mem)
	cProcessMemStaged  // octets of staging buffers taken for process memory (rnic/stage.go)
	CSendCalls         // sendmmsg calls
	CRecvCalls         // recvmmsg calls that returned datagrams
	CGSOSends          // messages of a sendmmsg carrying several datagrams (UDP_SEGMENT)
	CGSOFallback       // UDP GSO refused by the kernel: disabled on that socket
	CGROUnavailable    // UDP_GRO could not be enabled on a socket
	CGROCoalesced      // received buffers holding several datagrams (UDP_GRO)
	CRecvCopied        // single-datagram messages copied into their receive (every one: judged before placed)
	// Write-Record and error messages (wrec*.go).
	CWrecPlaced    // Write-Record segments placed
	CWrecComplete  // Write-Records completed with every octet placed
	CWrecTrimmed   // Write-Records completed partly placed (reassembly timeout)
	CWrecAccessErr // Write-Record segments refused by the access checks (nothing placed; error message sent)
	CWrecDropped   // Write-Record segments dropped: record failed or already completed, malformed
	CWrecNoRecv    // Write-Records whose completion found no posted receive (data stays placed)
	CWrecEvicted   // Write-Records forgotten to make room for new ones (no completion)
	CErrorMsgsOut  // error messages (Terminate on QN 2) sent to a source
	CErrorMsgsIn   // error messages received from a peer (async event EventQPAccessError)
	// Keys (rnic/keys.go, rnic/access_guard.go).
	CDropQKey            // datagrams whose Q_Key is not the QP's (dropped silently)
	cRemoteAccessRefused // remote accesses refused by the STag/PD/rights/bounds checks (datagram QPs)
	cRemoteInvalidStag   // of those, naming no valid STag (guesses)
	cErrorMsgsLimited    // error messages not sent: per-source rate limit (UD)
	// RFC 7306 atomics (rc/atomic.go, rd/atomic.go).
	CAtomicsIn     // Atomic Requests executed (responder)
	CAtomicErrors  // Atomic Requests refused by the access, alignment or operation checks (nothing modified)
	CAtomicReplays // RD Atomic Requests answered from the replay cache (not executed again)
	CImmHeld       // tagged Immediate Data held for the next Send (merge_send_imm, rc/imm.go)
	// The UD receive backlog (ud/backlog.go).
	CRecvParked     // times a UD QP stopped reading its sockets: datagrams waited and no receive was posted
	CRecvHeld       // datagrams of a GRO buffer read beyond the posted receives, held in the daemon
	CRecvHeldJudged // held datagrams judged once a receive was posted
	// The RC receive hold (rc/hold.go).
	CRCHeld         // untagged RC messages held for want of a receive (hold_recv)
	CRCHeldDropped  // held RC messages dropped: the connection ended or the QP was destroyed before a receive took them
	CDropSocketFull // datagrams the kernel dropped on UD sockets (SO_MEMINFO; per QP read at Inspect, daemon-wide also the destroyed QPs')
	// The fast path's hand-over of a UD QP's socket (rnic/fastpath.go).
	CFastpathTakeovers  // the rank's lease expired: the engine took the socket over
	CFastpathHandbacks  // the engine gave the socket back to the rank (Want)
	CFastpathReleases   // the rank gave the socket to the engine itself
	CFastpathBusySkips  // services that did not read: the rank's Busy was still set after a take-over
	CFastpathViolations // owner words the protocol does not allow (the QP failed)
	CFastpathGROWaits   // hand-backs put off: UDP_GRO could not go off, a buffer was queued (fastpath_gro.go)
	counterCount
)

var CounterNames = [counterCount]string{
	CMemoryFaults:        "memory_faults",
	cProcessMemFaults:    "process_mem_faults",
	cProcessMemRead:      "process_mem_read_bytes",
	cProcessMemWritten:   "process_mem_written_bytes",
	cProcessMemStaged:    "process_mem_staged_bytes",
	CDatagramsIn:         "datagrams_in",
	CDatagramsOut:        "datagrams_out",
	CBytesIn:             "bytes_in",
	CBytesOut:            "bytes_out",
	CMessagesIn:          "messages_in",
	CMessagesOut:         "messages_out",
	CDropCRC:             "drop_crc",
	CDropTruncated:       "drop_truncated",
	CDropBadVersion:      "drop_bad_version",
	CDropTagged:          "drop_tagged",
	CDropBadOpcode:       "drop_bad_opcode",
	CDropBadQN:           "drop_bad_qn",
	CDropBadSegment:      "drop_bad_segment",
	CDropNotReady:        "drop_not_ready",
	CDropNoRecv:          "drop_no_recv",
	CRecvTooLong:         "recv_too_long",
	CReassemblyTimeout:   "drop_reassembly_timeout",
	CReassemblyEvicted:   "drop_reassembly_evicted",
	CSendErrors:          "send_errors",
	CSendBlocked:         "send_blocked",
	CWRErrors:            "wr_errors",
	CFlushed:             "wr_flushed",
	cCQOverruns:          "cq_overruns",
	cEventsDropped:       "events_dropped",
	CSendCalls:           "send_calls",
	CRecvCalls:           "recv_calls",
	CGSOSends:            "gso_sends",
	CGSOFallback:         "gso_fallback",
	CGROUnavailable:      "gro_unavailable",
	CGROCoalesced:        "gro_coalesced",
	CRecvCopied:          "recv_copied",
	CWrecPlaced:          "wrec_segments_placed",
	CWrecComplete:        "wrec_complete",
	CWrecTrimmed:         "wrec_trimmed",
	CWrecAccessErr:       "wrec_access_errors",
	CWrecDropped:         "wrec_dropped",
	CWrecNoRecv:          "wrec_no_recv",
	CWrecEvicted:         "wrec_evicted",
	CErrorMsgsOut:        "error_msgs_out",
	CErrorMsgsIn:         "error_msgs_in",
	CDropQKey:            "drop_qkey",
	cRemoteAccessRefused: "remote_access_refused",
	cRemoteInvalidStag:   "remote_invalid_stag",
	cErrorMsgsLimited:    "error_msgs_limited",
	CAtomicsIn:           "atomics_in",
	CAtomicErrors:        "atomic_errors",
	CAtomicReplays:       "atomic_replays",
	CImmHeld:             "imm_held",
	CRecvParked:          "recv_parked",
	CRecvHeld:            "recv_held",
	CRecvHeldJudged:      "recv_held_judged",
	CDropSocketFull:      "drop_socket_full",
	CRCHeld:              "rc_recv_held",
	CRCHeldDropped:       "rc_held_dropped",
	CFastpathTakeovers:   "fastpath_takeovers",
	CFastpathHandbacks:   "fastpath_handbacks",
	CFastpathReleases:    "fastpath_releases",
	CFastpathBusySkips:   "fastpath_busy_skips",
	CFastpathViolations:  "fastpath_violations",
	CFastpathGROWaits:    "fastpath_gro_waits",
}

// counters is a set of statistics; engine-owned, copied out by Inspect.
type counters [counterCount]int64

func (c *counters) Snapshot() map[string]int64 {
	m := make(map[string]int64, counterCount)
	for i, v := range c {
		m[CounterNames[i]] = v
	}
	return m
}
