package wire

import "testing"

// flowIDByRule is digest §2.8's flow id rule written out position by position, the
// reference that the table-driven validFlowID must agree with.
func flowIDByRule(s []byte) bool {
	if len(s) != FlowIDLen {
		return false
	}
	for i, c := range s {
		var ok bool
		switch i {
		case 8, 13, 18, 23:
			ok = c == '-'
		case 14:
			ok = c == '7'
		case 19:
			ok = c == '8' || c == '9' || c == 'a' || c == 'b'
		default:
			ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
		}
		if !ok {
			return false
		}
	}
	return true
}

// Every byte value at every position of a valid flow id: validFlowID accepts exactly
// what the rule accepts, as bytes and as a string.
func TestValidFlowID_EveryByteAtEveryPositionFollowsTheRule(t *testing.T) {
	base := []byte(testFlowID)
	if !flowIDByRule(base) || !validFlowID(base) {
		t.Fatalf("the test's flow id %q is not valid", testFlowID)
	}
	accepted := 0
	for i := range FlowIDLen {
		for c := range 256 {
			id := append([]byte(nil), base...)
			id[i] = byte(c)
			want := flowIDByRule(id)
			if got := validFlowID(id); got != want {
				t.Fatalf("byte %#02x at %d: validFlowID says %v, the rule %v", c, i, got, want)
			}
			if got := ValidFlowID(string(id)); got != want {
				t.Fatalf("byte %#02x at %d as a string: ValidFlowID says %v, the rule %v", c, i, got, want)
			}
			if want {
				accepted++
			}
		}
	}
	// 30 hex positions × 16 values, 1 hyphen at each of 4, 1 version, 4 variants.
	if want := 30*16 + 4 + 1 + 4; accepted != want {
		t.Fatalf("%d single-byte variants accepted, want %d", accepted, want)
	}
	for _, n := range []int{0, FlowIDLen - 1, FlowIDLen + 1} {
		if validFlowID(make([]byte, n)) {
			t.Fatalf("a flow id of %d bytes was accepted", n)
		}
	}
}
