package wire

import "testing"

func TestCloseReasonNames(t *testing.T) {
	want := []struct {
		r            CloseReason
		name, metric string
	}{
		{CloseClientClose, "ClientClose", "client_close"},
		{CloseIdleTimeout, "IdleTimeout", "idle_timeout"},
		{CloseHeartbeatTimeout, "HeartbeatTimeout", "heartbeat_timeout"},
		{CloseServerDrain, "ServerDrain", "server_shutdown"},
		{CloseProtocolError, "ProtocolError", "protocol_error"},
		{CloseTransportError, "TransportError", "transport_error"},
	}
	for i, w := range want {
		if byte(w.r) != byte(i+1) || !w.r.Valid() || w.r.String() != w.name || w.r.MetricLabel() != w.metric {
			t.Errorf("reason %d: %d %v %q %q", i+1, w.r, w.r.Valid(), w.r.String(), w.r.MetricLabel())
		}
	}
	for _, r := range []CloseReason{0, 7, 255} {
		if r.Valid() || r.String() != "Unknown" {
			t.Errorf("reason %d: Valid %v, String %q", r, r.Valid(), r.String())
		}
	}
}

func TestHeaderHelpers(t *testing.T) {
	h := Header{RequestSeq: 1, Metadata: Metadata{}, Compressed: true, CorrelationID: "c", FlowOrigin: FlowTimer}
	if f := h.Flags(); f != knownFlags {
		t.Errorf("Flags = %#x, want %#x", f, knownFlags)
	}
	if f := (&Header{}).Flags(); f != 0 {
		t.Errorf("zero Flags = %#x", f)
	}
	md := Metadata{{Key: "a", Value: "1"}, {Key: "b", Value: ""}}
	if v, ok := md.Get("b"); !ok || v != "" {
		t.Errorf("Get(b) = %q, %v", v, ok)
	}
	if _, ok := md.Get("c"); ok {
		t.Error("Get(c) found a missing key")
	}
	if !IsReservedName(NameHeartbeatPing) || IsReservedName(NameSessionClosing) || IsReservedName("$zlink") {
		t.Error("IsReservedName disagrees with the $zlink. prefix rule")
	}
}
