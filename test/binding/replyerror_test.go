package binding_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/session/connector"
	"github.com/meshnode/meshnode/test/fleet"
)

// An Actor that answers a relayed Request with an error: a classified error reaches
// the client with its kind's code and its text; an error without a kind reaches it as
// internal_failure with a fixed message, so its text (paths, internals) stays on the
// server.
func TestRelayedReplyError_KindAndTextOnlyWhenClassified(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "err-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")

	var re *connector.RemoteError
	err := request(t, c, "room.reject", struct{}{}, nil)
	if !errors.As(err, &re) || re.Code != "rejected" || !strings.Contains(re.Message, "the probe rejects this") {
		t.Errorf("classified error: %v, want rejected with its text", err)
	}
	err = request(t, c, "room.fail", struct{}{}, nil)
	if !errors.As(err, &re) || re.Code != "internal_failure" {
		t.Fatalf("unclassified error: %v, want internal_failure", err)
	}
	if strings.Contains(re.Message, "secret") || re.Message != "internal failure" {
		t.Errorf("the client saw the error's text: %q", re.Message)
	}
}

// A relay carries the packet's metadata to the Actor, but not a key of the relay's own
// reserved namespace: a client that sends a Send with "zlink.kind=request" does not
// turn it into a Request at the Actor.
func TestRelayMetadata_ClientCannotForgeTheRelaysOwnKeys(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	id := f.IDOn(t, "probe", 1, "meta-")
	c := f.Connect(t, 0)
	mustBind(t, c, id, "probe")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Send(ctx, "room.meta", struct{}{}, connector.WithMetadata("zlink.kind", "request"), connector.WithMetadata("app", "v1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Actor sees the packet", func() bool { return len(metaEvents(f.Ev.Of(id))) == 1 })
	if got := metaEvents(f.Ev.Of(id))[0]; got != "meta request=false app=v1" {
		t.Fatalf("the Actor saw %q, want the client's own metadata on a Send", got)
	}
}

func metaEvents(evs []string) []string {
	var out []string
	for _, e := range evs {
		if strings.HasPrefix(e, "meta ") {
			out = append(out, e)
		}
	}
	return out
}
