package binding_test

import (
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
