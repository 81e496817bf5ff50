package services_test

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session"
	"github.com/meshnode/meshnode/session/wire"
)

// FuzzCallFromPacket feeds the control-frame decoder of $svc.call packets arbitrary
// metadata (newline-separated key=value lines), codecs and payloads: it never panics,
// and what it accepts has a service, a member and a request id, and leaves the payload
// undecoded.
func FuzzCallFromPacket(f *testing.F) {
	f.Add("svc=test.echo\nmember=say\nrid=1", byte(1), []byte(`{"text":"x"}`))
	f.Add("svc=a\nmember=b\nrid=2\ntraceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", byte(0), []byte(`null`))
	f.Add("member=b\nrid=2", byte(1), []byte(`{}`))
	f.Add("svc=a\nmember=b\nrid=3", byte(2), []byte{0x81, 0xa1, 0x61, 0x01})
	f.Fuzz(func(t *testing.T, meta string, codec byte, payload []byte) {
		var md wire.Metadata
		for _, line := range strings.Split(meta, "\n") {
			k, v, _ := strings.Cut(line, "=")
			md = append(md, wire.MetadataEntry{Key: k, Value: v})
		}
		p := &session.Packet{Kind: wire.KindRequest, Name: services.NameCall, Metadata: md, Codec: wire.Codec(codec), Payload: payload}
		call, rid, err := services.CallFromPacket(p)
		if err != nil {
			return
		}
		if call.Service == "" || call.Member == "" || rid == "" {
			t.Fatalf("accepted a call without its control fields: %+v rid %q", call, rid)
		}
		if string(call.Args) != string(payload) {
			t.Fatal("the decoder touched the payload")
		}
	})
}
