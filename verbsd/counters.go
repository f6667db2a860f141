package verbsd

// counter names one statistic kept per QP and for the whole daemon. The
// names (counterNames) are what OpInspect reports and iwarpctl prints.
type counter int

const (
	cDatagramsIn counter = iota
	cDatagramsOut
	cBytesIn // payload octets of delivered messages
	cBytesOut
	cMessagesIn
	cMessagesOut
	cDropCRC
	cDropTruncated
	cDropBadVersion
	cDropTagged
	cDropBadOpcode
	cDropBadQN
	cDropBadSegment
	cDropNotReady
	cDropNoRecv
	cRecvTooLong
	cReassemblyTimeout
	cReassemblyEvicted
	cSendErrors
	cSendBlocked
	cWRErrors
	cFlushed
	cCQOverruns
	cEventsDropped
	cMemoryFaults
	cProcessMemFaults  // process-memory accesses that failed (unmapped, process gone)
	cProcessMemRead    // octets read from client processes (process_vm_readv)
	cProcessMemWritten // octets written to client processes (process_vm_writev)
	cProcessMemStaged  // octets of staging buffers taken for process memory (stage.go)
	cSendCalls         // sendmmsg calls
	cRecvCalls         // recvmmsg calls that returned datagrams
	cGSOSends          // messages of a sendmmsg carrying several datagrams (UDP_SEGMENT)
	cGSOFallback       // UDP GSO refused by the kernel: disabled on that socket
	cGROUnavailable    // UDP_GRO could not be enabled on a socket
	cGROCoalesced      // received buffers holding several datagrams (UDP_GRO)
	cRecvCopied        // single-datagram messages copied into their receive (every one since issue 13: judged before placed)
	// Write-Record and error messages (wrec*.go).
	cWrecPlaced    // Write-Record segments placed
	cWrecComplete  // Write-Records completed with every octet placed
	cWrecTrimmed   // Write-Records completed partly placed (reassembly timeout)
	cWrecAccessErr // Write-Record segments refused by the access checks (nothing placed; error message sent)
	cWrecDropped   // Write-Record segments dropped: record failed or already completed, malformed
	cWrecNoRecv    // Write-Records whose completion found no posted receive (data stays placed)
	cWrecEvicted   // Write-Records forgotten to make room for new ones (no completion)
	cErrorMsgsOut  // error messages (Terminate on QN 2) sent to a source
	cErrorMsgsIn   // error messages received from a peer (async event EventQPAccessError)
	// Keys (keys.go, access_guard.go).
	cDropQKey            // datagrams whose Q_Key is not the QP's (dropped silently)
	cRemoteAccessRefused // remote accesses refused by the STag/PD/rights/bounds checks (datagram QPs)
	cRemoteInvalidStag   // of those, naming no valid STag (guesses)
	cErrorMsgsLimited    // error messages not sent: per-source rate limit (UD)
	// RFC 7306 atomics (rc_atomic.go, rd_atomic.go).
	cAtomicsIn     // Atomic Requests executed (responder)
	cAtomicErrors  // Atomic Requests refused by the access, alignment or operation checks (nothing modified)
	cAtomicReplays // RD Atomic Requests answered from the replay cache (not executed again)
	// The UD receive backlog (ud_backlog.go).
	cRecvParked     // times a UD QP stopped reading its sockets: datagrams waited and no receive was posted
	cRecvHeld       // datagrams of a GRO buffer read beyond the posted receives, held in the daemon
	cRecvHeldJudged // held datagrams judged once a receive was posted
	cDropSocketFull // datagrams the kernel dropped on UD sockets (SO_MEMINFO; per QP read at Inspect, daemon-wide also the destroyed QPs')
	counterCount
)

var counterNames = [counterCount]string{
	cMemoryFaults:        "memory_faults",
	cProcessMemFaults:    "process_mem_faults",
	cProcessMemRead:      "process_mem_read_bytes",
	cProcessMemWritten:   "process_mem_written_bytes",
	cProcessMemStaged:    "process_mem_staged_bytes",
	cDatagramsIn:         "datagrams_in",
	cDatagramsOut:        "datagrams_out",
	cBytesIn:             "bytes_in",
	cBytesOut:            "bytes_out",
	cMessagesIn:          "messages_in",
	cMessagesOut:         "messages_out",
	cDropCRC:             "drop_crc",
	cDropTruncated:       "drop_truncated",
	cDropBadVersion:      "drop_bad_version",
	cDropTagged:          "drop_tagged",
	cDropBadOpcode:       "drop_bad_opcode",
	cDropBadQN:           "drop_bad_qn",
	cDropBadSegment:      "drop_bad_segment",
	cDropNotReady:        "drop_not_ready",
	cDropNoRecv:          "drop_no_recv",
	cRecvTooLong:         "recv_too_long",
	cReassemblyTimeout:   "drop_reassembly_timeout",
	cReassemblyEvicted:   "drop_reassembly_evicted",
	cSendErrors:          "send_errors",
	cSendBlocked:         "send_blocked",
	cWRErrors:            "wr_errors",
	cFlushed:             "wr_flushed",
	cCQOverruns:          "cq_overruns",
	cEventsDropped:       "events_dropped",
	cSendCalls:           "send_calls",
	cRecvCalls:           "recv_calls",
	cGSOSends:            "gso_sends",
	cGSOFallback:         "gso_fallback",
	cGROUnavailable:      "gro_unavailable",
	cGROCoalesced:        "gro_coalesced",
	cRecvCopied:          "recv_copied",
	cWrecPlaced:          "wrec_segments_placed",
	cWrecComplete:        "wrec_complete",
	cWrecTrimmed:         "wrec_trimmed",
	cWrecAccessErr:       "wrec_access_errors",
	cWrecDropped:         "wrec_dropped",
	cWrecNoRecv:          "wrec_no_recv",
	cWrecEvicted:         "wrec_evicted",
	cErrorMsgsOut:        "error_msgs_out",
	cErrorMsgsIn:         "error_msgs_in",
	cDropQKey:            "drop_qkey",
	cRemoteAccessRefused: "remote_access_refused",
	cRemoteInvalidStag:   "remote_invalid_stag",
	cErrorMsgsLimited:    "error_msgs_limited",
	cAtomicsIn:           "atomics_in",
	cAtomicErrors:        "atomic_errors",
	cAtomicReplays:       "atomic_replays",
	cRecvParked:          "recv_parked",
	cRecvHeld:            "recv_held",
	cRecvHeldJudged:      "recv_held_judged",
	cDropSocketFull:      "drop_socket_full",
}

// counters is a set of statistics; engine-owned, copied out by Inspect.
type counters [counterCount]int64

func (c *counters) snapshot() map[string]int64 {
	m := make(map[string]int64, counterCount)
	for i, v := range c {
		m[counterNames[i]] = v
	}
	return m
}
