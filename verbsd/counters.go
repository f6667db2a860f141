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
	cSendCalls      // sendmmsg calls
	cRecvCalls      // recvmmsg calls that returned datagrams
	cGSOSends       // messages of a sendmmsg carrying several datagrams (UDP_SEGMENT)
	cGSOFallback    // UDP GSO refused by the kernel: disabled on that socket
	cGROUnavailable // UDP_GRO could not be enabled on a socket
	cGROCoalesced   // received buffers holding several datagrams (UDP_GRO)
	cRecvCopied     // single-datagram messages copied into place (not received in place)
	counterCount
)

var counterNames = [counterCount]string{
	cDatagramsIn:       "datagrams_in",
	cDatagramsOut:      "datagrams_out",
	cBytesIn:           "bytes_in",
	cBytesOut:          "bytes_out",
	cMessagesIn:        "messages_in",
	cMessagesOut:       "messages_out",
	cDropCRC:           "drop_crc",
	cDropTruncated:     "drop_truncated",
	cDropBadVersion:    "drop_bad_version",
	cDropTagged:        "drop_tagged",
	cDropBadOpcode:     "drop_bad_opcode",
	cDropBadQN:         "drop_bad_qn",
	cDropBadSegment:    "drop_bad_segment",
	cDropNotReady:      "drop_not_ready",
	cDropNoRecv:        "drop_no_recv",
	cRecvTooLong:       "recv_too_long",
	cReassemblyTimeout: "drop_reassembly_timeout",
	cReassemblyEvicted: "drop_reassembly_evicted",
	cSendErrors:        "send_errors",
	cSendBlocked:       "send_blocked",
	cWRErrors:          "wr_errors",
	cFlushed:           "wr_flushed",
	cCQOverruns:        "cq_overruns",
	cEventsDropped:     "events_dropped",
	cSendCalls:         "send_calls",
	cRecvCalls:         "recv_calls",
	cGSOSends:          "gso_sends",
	cGSOFallback:       "gso_fallback",
	cGROUnavailable:    "gro_unavailable",
	cGROCoalesced:      "gro_coalesced",
	cRecvCopied:        "recv_copied",
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
