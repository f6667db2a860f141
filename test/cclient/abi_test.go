package cclient

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/iwarpd/iwarpd/proto"
	"github.com/iwarpd/iwarpd/test/daemontest"
)

// cDefines returns the integer #defines and enumerators of a C header.
func cDefines(t *testing.T, rel string) map[string]int64 {
	t.Helper()
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]int64{}
	re := regexp.MustCompile(`(?m)^\s*(?:#define\s+(\w+)\s+\(?(0x[0-9a-fA-F]+|\d+)u?\)?|(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)u?\s*,)`)
	shift := regexp.MustCompile(`(?m)^\s*(?:#define\s+(\w+)\s+\((\d+)u?\s*<<\s*(\d+)\)|(\w+)\s*=\s*(\d+)\s*<<\s*(\d+)\s*,)`)
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		name, num := m[1], m[2]
		if name == "" {
			name, num = m[3], m[4]
		}
		v, err := strconv.ParseInt(num, 0, 64)
		if err != nil {
			t.Fatalf("%s: %s = %s: %v", rel, name, num, err)
		}
		vals[name] = v
	}
	for _, m := range shift.FindAllStringSubmatch(string(src), -1) {
		name, a, b := m[1], m[2], m[3]
		if name == "" {
			name, a, b = m[4], m[5], m[6]
		}
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		vals[name] = x << y
	}
	return vals
}

func checkConsts(t *testing.T, file string, vals map[string]int64, want map[string]int64) {
	t.Helper()
	for name, w := range want {
		got, ok := vals[name]
		if !ok {
			t.Errorf("%s: %s not found", file, name)
			continue
		}
		if got != w {
			t.Errorf("%s: %s = %d, proto says %d", file, name, got, w)
		}
	}
}

// TestABIVersion: the C header's IWV_ABI_VERSION is proto.ABIVersion, and
// every protocol constant the C core uses (c/core/wire.h) and every enum
// value of the public header equal proto's, so C and Go cannot drift.
func TestABIVersion(t *testing.T) {
	pub := cDefines(t, "c/include/iwarpd/verbs.h")
	checkConsts(t, "verbs.h", pub, map[string]int64{
		"IWV_ABI_VERSION": proto.ABIVersion,
		"IWV_QPT_RC":      int64(proto.QPTypeRC), "IWV_QPT_UD": int64(proto.QPTypeUD), "IWV_QPT_RD": int64(proto.QPTypeRD),
		"IWV_QPS_RESET": int64(proto.QPStateReset), "IWV_QPS_INIT": int64(proto.QPStateInit), "IWV_QPS_RTR": int64(proto.QPStateRTR),
		"IWV_QPS_RTS": int64(proto.QPStateRTS), "IWV_QPS_SQD": int64(proto.QPStateSQD), "IWV_QPS_SQE": int64(proto.QPStateSQE),
		"IWV_QPS_ERR":            int64(proto.QPStateError),
		"IWV_ACCESS_LOCAL_WRITE": int64(proto.AccessLocalWrite), "IWV_ACCESS_REMOTE_WRITE": int64(proto.AccessRemoteWrite),
		"IWV_ACCESS_REMOTE_READ": int64(proto.AccessRemoteRead), "IWV_ACCESS_REMOTE_ATOMIC": int64(proto.AccessRemoteAtomic),
		"IWV_WR_SEND": int64(proto.WRSend), "IWV_WR_SEND_WITH_INV": int64(proto.WRSendInvalidate),
		"IWV_WR_RDMA_WRITE": int64(proto.WRRDMAWrite), "IWV_WR_RDMA_READ": int64(proto.WRRDMARead),
		"IWV_WR_WRITE_RECORD": int64(proto.WRWriteRecord), "IWV_WR_LOCAL_INV": int64(proto.WRLocalInvalidate),
		"IWV_WR_SEND_WITH_IMM": int64(proto.WRSendWithImm), "IWV_WR_RDMA_WRITE_WITH_IMM": int64(proto.WRWriteWithImm),
		"IWV_WR_ATOMIC_FETCH_AND_ADD": int64(proto.WRFetchAdd), "IWV_WR_ATOMIC_CMP_AND_SWP": int64(proto.WRCmpSwap),
		"IWV_WR_WRITE_RECORD_WITH_IMM": int64(proto.WRWriteRecordWithImm), "IWV_WC_FLAG_IMM": int64(proto.WCFlagImm),
		"IWV_WC_FETCH_ADD": int64(proto.WCFetchAdd), "IWV_WC_COMP_SWAP": int64(proto.WCCmpSwap),
		"IWV_WC_RECV_RDMA_WITH_IMM": int64(proto.WCRecvRDMAWithImm), "IWV_ATOMIC_NONE": int64(proto.AtomicNone),
		"IWV_ATOMIC_HCA": int64(proto.AtomicHCA), "IWV_ATOMIC_GLOB": int64(proto.AtomicGlob),
		"IWV_SEND_SIGNALED": int64(proto.SendSignaled), "IWV_SEND_SOLICITED": int64(proto.SendSolicited),
		"IWV_SEND_INLINE": int64(proto.SendInline), "IWV_SEND_FENCE": int64(proto.SendFence),
		"IWV_WC_SUCCESS": int64(proto.WCSuccess), "IWV_WC_LOC_LEN_ERR": int64(proto.WCLocLenErr),
		"IWV_WC_LOC_QP_OP_ERR": int64(proto.WCLocQPOpErr), "IWV_WC_LOC_PROT_ERR": int64(proto.WCLocProtErr),
		"IWV_WC_WR_FLUSH_ERR": int64(proto.WCWRFlushErr), "IWV_WC_BAD_RESP_ERR": int64(proto.WCBadRespErr),
		"IWV_WC_LOC_ACCESS_ERR": int64(proto.WCLocAccessErr), "IWV_WC_REM_INV_REQ_ERR": int64(proto.WCRemInvReqErr),
		"IWV_WC_REM_ACCESS_ERR": int64(proto.WCRemAccessErr), "IWV_WC_REM_OP_ERR": int64(proto.WCRemOpErr),
		"IWV_WC_RETRY_EXC_ERR": int64(proto.WCRetryExcErr), "IWV_WC_RNR_RETRY_EXC_ERR": int64(proto.WCRNRRetryExcErr),
		"IWV_WC_REM_ABORT_ERR": int64(proto.WCRemAbortErr), "IWV_WC_FATAL_ERR": int64(proto.WCFatalErr),
		"IWV_WC_RESP_TIMEOUT_ERR": int64(proto.WCRespTimeoutErr), "IWV_WC_GENERAL_ERR": int64(proto.WCGeneralErr),
		"IWV_WC_SEND": int64(proto.WCSend), "IWV_WC_RDMA_WRITE": int64(proto.WCRDMAWrite), "IWV_WC_RDMA_READ": int64(proto.WCRDMARead),
		"IWV_WC_WRITE_RECORD": int64(proto.WCWriteRecord), "IWV_WC_LOCAL_INV": int64(proto.WCLocalInvalidate),
		"IWV_WC_RECV": int64(proto.WCRecv), "IWV_WC_RECV_WRITE_RECORD": int64(proto.WCRecvWriteRecord),
		"IWV_WC_FLAG_SOLICITED": int64(proto.WCFlagSolicited), "IWV_WC_FLAG_WITH_INV": int64(proto.WCFlagWithInv),
		"IWV_WC_FLAG_SRC_VALID": int64(proto.WCFlagSrcValid), "IWV_WC_FLAG_TERM_VALID": int64(proto.WCFlagTermValid),
		"IWV_WC_FLAG_RECORD_TRIM": int64(proto.WCFlagRecordTrim),
		"IWV_EVENT_QP_FATAL":      int64(proto.EventQPFatal), "IWV_EVENT_QP_ACCESS_ERR": int64(proto.EventQPAccessError),
		"IWV_EVENT_CQ_ERR": int64(proto.EventCQError), "IWV_EVENT_SRQ_LIMIT_REACHED": int64(proto.EventSRQLimit),
		"IWV_EVENT_DEVICE_FATAL": int64(proto.EventDeviceFatal), "IWV_EVENT_REMOTE_ACCESS_REFUSED": int64(proto.EventRemoteAccessRefused),
		"IWV_CM_CONNECT_REQUEST": int64(proto.CMConnectRequest), "IWV_CM_ESTABLISHED": int64(proto.CMEstablished),
		"IWV_CM_REJECTED": int64(proto.CMRejected), "IWV_CM_UNREACHABLE": int64(proto.CMUnreachable),
		"IWV_CM_TIMED_OUT": int64(proto.CMTimedOut), "IWV_CM_DISCONNECTED": int64(proto.CMDisconnected),
		"IWV_CM_CONNECTION_ERROR": int64(proto.CMConnectionError),
	})
	wire := cDefines(t, "c/core/wire.h")
	checkConsts(t, "wire.h", wire, map[string]int64{
		"W_MAGIC": int64(proto.Magic), "W_HEADER_LEN": proto.HeaderLen, "W_MAX_MESSAGE": proto.MaxMessage, "W_MAX_FDS": proto.MaxFDs,
		"W_OP_HELLO": int64(proto.OpHello), "W_OP_QUERY_DEVICE": int64(proto.OpQueryDevice), "W_OP_QUERY_PORT": int64(proto.OpQueryPort),
		"W_OP_ALLOC_PD": int64(proto.OpAllocPD), "W_OP_DEALLOC_PD": int64(proto.OpDeallocPD), "W_OP_REG_MR": int64(proto.OpRegMR),
		"W_OP_DEREG_MR": int64(proto.OpDeregMR), "W_OP_CREATE_COMP_CHANNEL": int64(proto.OpCreateCompChannel),
		"W_OP_DESTROY_COMP_CHANNEL": int64(proto.OpDestroyCompChannel), "W_OP_CREATE_CQ": int64(proto.OpCreateCQ),
		"W_OP_DESTROY_CQ": int64(proto.OpDestroyCQ), "W_OP_CREATE_QP": int64(proto.OpCreateQP), "W_OP_MODIFY_QP": int64(proto.OpModifyQP),
		"W_OP_QUERY_QP": int64(proto.OpQueryQP), "W_OP_DESTROY_QP": int64(proto.OpDestroyQP), "W_OP_CREATE_SRQ": int64(proto.OpCreateSRQ),
		"W_OP_DESTROY_SRQ": int64(proto.OpDestroySRQ), "W_OP_INSPECT": int64(proto.OpInspect), "W_OP_LISTEN": int64(proto.OpListen),
		"W_OP_CLOSE_LISTENER": int64(proto.OpCloseListener), "W_OP_ACCEPT": int64(proto.OpAccept), "W_OP_REJECT": int64(proto.OpReject),
		"W_OP_CONNECT": int64(proto.OpConnect), "W_OP_DISCONNECT": int64(proto.OpDisconnect),
		"W_OP_ATTACH_MCAST": int64(proto.OpAttachMcast), "W_OP_DETACH_MCAST": int64(proto.OpDetachMcast),
		"W_OP_RESERVE_PORT": int64(proto.OpReservePort),
		"W_OP_EVENT":        int64(proto.OpEvent), "W_OP_CM_EVENT": int64(proto.OpCMEvent), "W_OP_REPLY": int64(proto.OpReply),
		"W_RING_MAGIC": int64(proto.RingMagic), "W_RING_HEADER_LEN": proto.RingHeaderLen,
		"W_OFF_RING_MAGIC": proto.OffRingMagic, "W_OFF_RING_VERSION": proto.OffRingVersion, "W_OFF_RING_KIND": proto.OffRingKind,
		"W_OFF_RING_DEPTH": proto.OffRingDepth, "W_OFF_RING_STRIDE": proto.OffRingStride,
		"W_OFF_RING_PRODUCER": proto.OffRingProducer, "W_OFF_RING_CONSUMER": proto.OffRingConsumer,
		"W_OFF_RING_ARM": proto.OffRingArm, "W_OFF_RING_OVERRUN": proto.OffRingOverrun,
		"W_RING_SQ": int64(proto.RingSQ), "W_RING_RQ": int64(proto.RingRQ), "W_RING_CQ": int64(proto.RingCQ), "W_RING_SRQ": int64(proto.RingSRQ),
		"W_ARM_NONE": int64(proto.ArmNone), "W_ARM_NEXT": int64(proto.ArmNext), "W_ARM_SOLICITED": int64(proto.ArmSolicited),
		"W_PAGE_SIZE": proto.PageSize, "W_MAX_DEPTH": proto.MaxDepth,
		"W_SGE_LEN": proto.SGELen, "W_SQE_HEADER_LEN": proto.SQEHeaderLen, "W_RQE_HEADER_LEN": proto.RQEHeaderLen,
		"W_ATOMIC_OPERANDS_LEN": proto.AtomicOperandsLen,
		"W_CQE_SIZE":            proto.CQESize, "W_OFF_SQE_QKEY": proto.OffSQEQKey, "W_OFF_SQE_AH": proto.OffSQEAH, "W_AV_LEN": proto.AddressVectorLen,
		"W_STATUS_MAGIC": int64(proto.StatusMagic), "W_STATUS_PAGE_LEN": proto.StatusPageLen,
		"W_OFF_STATUS_MAGIC": proto.OffStatusMagic, "W_OFF_STATUS_ASLEEP": proto.OffStatusAsleep,
		"W_AV_IPV4": int64(proto.AVFamilyIPv4), "W_AV_IPV6": int64(proto.AVFamilyIPv6),
	})
}

// TestExports: libiwverbs.so exports only iwv_* (everything else is built
// -fvisibility=hidden), and every global symbol of libiwverbs.a is iwv_* or
// iwvi_*, so the static library links into another shared object (the
// libfabric provider) without clashing with its symbols.
func TestExports(t *testing.T) {
	needC(t)
	if _, err := exec.LookPath("nm"); err != nil {
		t.Skip("nm not found; run scripts/install-build-deps.sh")
	}
	check := func(args []string, allowed ...string) int {
		out, err := exec.Command("nm", args...).Output()
		if err != nil {
			t.Fatalf("nm %v: %v", args, err)
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || !strings.ContainsAny(f[1], "TDBR") {
				continue // undefined, local, or a file header
			}
			n++
			ok := false
			for _, p := range allowed {
				ok = ok || strings.HasPrefix(f[2], p)
			}
			if !ok {
				t.Errorf("nm %v: %s is global and not %v", args, f[2], allowed)
			}
		}
		return n
	}
	dyn := check([]string{"-D", "--defined-only", filepath.Join(cBuild, "libiwverbs.so")}, "iwv_")
	st := check([]string{filepath.Join(cBuild, "libiwverbs.a")}, "iwv_", "iwvi_")
	if dyn == 0 || st == 0 {
		t.Fatalf("no symbols found (%d dynamic, %d static)", dyn, st)
	}
	t.Logf("%d exported symbols, %d global in the archive", dyn, st)
}

// TestFastpathPageABI: the fast-path page's layout in c/core/wire.h (the
// UD words and an RD QP's halves, c/core/fpown.c and fprd.c) is proto's
// (proto/fastpath.go, proto/fastpath_rd.go).
func TestFastpathPageABI(t *testing.T) {
	wire := cDefines(t, "c/core/wire.h")
	checkConsts(t, "wire.h", wire, map[string]int64{
		"W_OP_FASTPATH_PAGE": int64(proto.OpFastpathPage),
		"W_FP_MAGIC":         int64(proto.FastpathMagic), "W_FP_VERSION": int64(proto.FastpathVersion), "W_FP_PAGE_LEN": proto.FastpathPageLen,
		"W_OFF_FP_MAGIC": proto.OffFPMagic, "W_OFF_FP_VERSION": proto.OffFPVersion, "W_OFF_FP_FLAGS": proto.OffFPFlags, "W_FP_FLAG_GRO": int64(proto.FPFlagGRO), "W_OFF_FP_OWNER": proto.OffFPOwner,
		"W_OFF_FP_BUSY": proto.OffFPBusy, "W_OFF_FP_WANT": proto.OffFPWant, "W_OFF_FP_LEASE": proto.OffFPLease,
		"W_OFF_FP_TAKEOVERS": proto.OffFPTakeovers, "W_OFF_FP_HANDBACKS": proto.OffFPHandbacks, "W_OFF_FP_RELEASES": proto.OffFPReleases,
		"W_FP_OWNER_DAEMON": int64(proto.FPOwnerDaemon), "W_FP_OWNER_RANK": int64(proto.FPOwnerRank),
		"W_FP_RD_PAGE_LEN": proto.FastpathRDPageLen, "W_FP_RD_SLOTS": proto.FPRDSlots, "W_FP_RD_RING": proto.FPRDRing,
		"W_FP_RD_COPY_LEN": proto.FPRDCopyLen, "W_FP_RD_MIN_BODY": proto.FPRDMinBody, "W_FP_RD_SLOT_LEN": proto.FPRDSlotLen,
		"W_FP_RD_ENTRY_LEN": proto.FPRDEntryLen, "W_OFF_FP_RD_SEND_MSN": proto.OffFPRDSendMSN,
		"W_OFF_FP_RD_ATOMIC_RESP_MSN": proto.OffFPRDAtomicRespMSN,
		"W_OFF_FP_RD_READ_REQ_MSN":    proto.OffFPRDReadReqMSN, "W_OFF_FP_RD_NEXT_REQ_ID": proto.OffFPRDNextReqID,
		"W_OFF_FP_RD_REQS": proto.OffFPRDReqs, "W_OFF_FP_RD_REQ_DATA": proto.OffFPRDReqData,
		"W_FP_RD_REQS": proto.FPRDReqs, "W_FP_RD_REQ_LEN": proto.FPRDReqLen,
		"W_OFF_FP_RD_REQ_STATE": proto.OffFPRDReqState, "W_OFF_FP_RD_REQ_KIND": proto.OffFPRDReqKind,
		"W_OFF_FP_RD_REQ_SLOT": proto.OffFPRDReqSlot, "W_OFF_FP_RD_REQ_MSN": proto.OffFPRDReqMSN,
		"W_OFF_FP_RD_REQ_ID": proto.OffFPRDReqID, "W_OFF_FP_RD_REQ_LEN_W": proto.OffFPRDReqLenW,
		"W_OFF_FP_RD_REQ_SINK_TO": proto.OffFPRDReqSinkTO, "W_OFF_FP_RD_REQ_STATUS": proto.OffFPRDReqStatus,
		"W_OFF_FP_RD_REQ_TERM": proto.OffFPRDReqTerm, "W_FP_RD_REQ_SENT": int64(proto.FPRDReqSent),
		"W_FP_RD_REQ_DONE": int64(proto.FPRDReqDone), "W_FP_RD_REQ_FAILED": int64(proto.FPRDReqFailed),
		"W_FP_RD_REQ_READ": int64(proto.FPRDReqRead), "W_FP_RD_REQ_ATOMIC": int64(proto.FPRDReqAtomic),
		"W_OFF_FP_RD_SLOTS": proto.OffFPRDSlots, "W_OFF_FP_RD_COPIES": proto.OffFPRDCopies,
		"W_OFF_FP_RD_STATE": proto.OffFPRDState, "W_OFF_FP_RD_PORT": proto.OffFPRDPort, "W_OFF_FP_RD_ADDR": proto.OffFPRDAddr,
		"W_OFF_FP_RD_QKEY": proto.OffFPRDQKey, "W_OFF_FP_RD_ADV_WND": proto.OffFPRDAdvWnd,
		"W_OFF_FP_RD_OUR_INC": proto.OffFPRDOurInc, "W_OFF_FP_RD_PEER_INC": proto.OffFPRDPeerInc,
		"W_OFF_FP_RD_COOKIE": proto.OffFPRDCookie, "W_OFF_FP_RD_IN_FLIGHT": proto.OffFPRDInFlight, "W_OFF_FP_RD_RTO": proto.OffFPRDRTO,
		"W_OFF_FP_RD_NEXT_SEQ": proto.OffFPRDNextSeq, "W_OFF_FP_RD_SND_UNA": proto.OffFPRDSndUna,
		"W_OFF_FP_RD_ACK_CUM": proto.OffFPRDAckCum, "W_OFF_FP_RD_LIMIT": proto.OffFPRDLimit,
		"W_OFF_FP_RD_OUT_HEAD": proto.OffFPRDOutHead, "W_OFF_FP_RD_OUT_N": proto.OffFPRDOutN,
		"W_OFF_FP_RD_RCV_NEXT": proto.OffFPRDRcvNext, "W_OFF_FP_RD_UNACKED": proto.OffFPRDUnacked,
		"W_OFF_FP_RD_ACK_DUE": proto.OffFPRDAckDue, "W_OFF_FP_RD_RING": proto.OffFPRDRing,
		"W_OFF_FP_RD_ENTRY_SEQ": proto.OffFPRDEntrySeq, "W_OFF_FP_RD_ENTRY_LEN": proto.OffFPRDEntryLen,
		"W_OFF_FP_RD_ENTRY_SENT_AT": proto.OffFPRDEntrySentAt,
		"W_FP_RD_VALID":             int64(proto.FPRDValid), "W_FP_RD_SEND": int64(proto.FPRDSend), "W_FP_RD_RECV": int64(proto.FPRDRecv),
	})
}
