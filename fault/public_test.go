package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/meshnode/meshnode/fault"
)

// Public shows a classified error's code and text, and hides the text of an error
// without a kind (or of kind InternalFailure).
func TestPublic_HidesUnclassifiedText(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code, text string
	}{
		{fault.Errorf(fault.NotFound, "no room %q", "r1"), "not_found", `no room "r1"`},
		{fmt.Errorf("wrapped: %w", fault.New(fault.Rejected, "full")), "rejected", "wrapped: full"},
		{errors.New("open /etc/secret: denied"), "internal_failure", fault.InternalMessage},
		{fault.Errorf(fault.InternalFailure, "nil map at x.go:12"), "internal_failure", fault.InternalMessage},
	} {
		code, text := fault.Public(tc.err)
		if code != tc.code || text != tc.text {
			t.Errorf("Public(%v) = %q %q, want %q %q", tc.err, code, text, tc.code, tc.text)
		}
	}
}
