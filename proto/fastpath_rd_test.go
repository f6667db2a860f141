package proto

import "testing"

// TestFastpathRDLayout checks that the RD halves' fixed layout fits where
// proto/fastpath_rd.go says: the slots between the UD words and the end of
// the first page, the ring inside its slot, every word naturally aligned,
// the copies after the first page.
func TestFastpathRDLayout(t *testing.T) {
	if end := FPRDSlotOff(FPRDSlots); end > OffFPRDCopies {
		t.Fatalf("slots end at %d, beyond the copies at %d", end, OffFPRDCopies)
	}
	if OffFPRDSlots < OffFPReleases+8 {
		t.Fatalf("slots at %d overlap the UD words (end %d)", OffFPRDSlots, OffFPReleases+8)
	}
	if end := OffFPRDRing + FPRDRing*FPRDEntryLen; end > FPRDSlotLen {
		t.Fatalf("ring ends at %d, beyond its slot (%d)", end, FPRDSlotLen)
	}
	for name, w := range map[string][2]int{
		"State": {OffFPRDState, 4}, "Port": {OffFPRDPort, 2}, "QKey": {OffFPRDQKey, 4}, "AdvWnd": {OffFPRDAdvWnd, 2},
		"OurInc": {OffFPRDOurInc, 4}, "PeerInc": {OffFPRDPeerInc, 4}, "Cookie": {OffFPRDCookie, 4},
		"InFlight": {OffFPRDInFlight, 4}, "RTO": {OffFPRDRTO, 8}, "NextSeq": {OffFPRDNextSeq, 4},
		"SndUna": {OffFPRDSndUna, 4}, "AckCum": {OffFPRDAckCum, 4}, "Limit": {OffFPRDLimit, 4},
		"OutHead": {OffFPRDOutHead, 4}, "OutN": {OffFPRDOutN, 4}, "RcvNext": {OffFPRDRcvNext, 4},
		"Unacked": {OffFPRDUnacked, 4}, "AckDue": {OffFPRDAckDue, 4}, "Ring": {OffFPRDRing, 8},
		"EntrySentAt": {OffFPRDRing + OffFPRDEntrySentAt, 8},
	} {
		if w[0]%w[1] != 0 || (FPRDSlotOff(1)+w[0])%w[1] != 0 {
			t.Errorf("%s at %d is not %d-aligned", name, w[0], w[1])
		}
	}
	if FPRDCopyOff(FPRDSlots-1, FPRDRing-1)+FPRDCopyLen != OffFPRDReqData || FPRDReqDataOff(FPRDReqs-1)+FPRDCopyLen != FastpathRDPageLen {
		t.Fatalf("the last copy ends at %d, the requests' data at %d, the page at %d", FPRDCopyOff(FPRDSlots-1, FPRDRing-1)+FPRDCopyLen, FPRDReqDataOff(FPRDReqs-1)+FPRDCopyLen, FastpathRDPageLen)
	}
	if FPRDReqOff(FPRDReqs) > PageSize || FPRDReqOff(0) < FPRDSlotOff(FPRDSlots) || FPRDReqLen%8 != 0 {
		t.Fatalf("request entries at %d..%d overlap the slots or leave the first page", FPRDReqOff(0), FPRDReqOff(FPRDReqs))
	}
	if FastpathRDPageLen%PageSize != 0 || FastpathPageLenOf(QPTypeRD) != FastpathRDPageLen || FastpathPageLenOf(QPTypeUD) != FastpathPageLen {
		t.Fatalf("page lengths: RD %d, UD %d", FastpathPageLenOf(QPTypeRD), FastpathPageLenOf(QPTypeUD))
	}
}
