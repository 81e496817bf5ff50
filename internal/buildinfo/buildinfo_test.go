package buildinfo

import (
	"runtime"
	"testing"
)

// A test binary has build information: the toolchain is this one; an override
// replaces the module version; a revision is shortened to 12 characters.
func TestRead(t *testing.T) {
	i := Read("")
	if i.GoVersion != runtime.Version() || i.Version == "" {
		t.Fatalf("Read: %+v", i)
	}
	if got := Read("v9.8.7").Version; got != "v9.8.7" {
		t.Errorf("override: %q", got)
	}
	if got := Read("", "abcdef0123456789+dirty"); got.Revision != "abcdef0123456789" || !got.Modified || got.ShortRevision() != "abcdef012345+dirty" {
		t.Errorf("revision override: %+v", got)
	}
	r := Info{Revision: "0123456789abcdef0123", Modified: true}
	if got := r.ShortRevision(); got != "0123456789ab+dirty" {
		t.Errorf("ShortRevision: %q", got)
	}
	if got := (Info{}).ShortRevision(); got != "" {
		t.Errorf("no revision: %q", got)
	}
}
