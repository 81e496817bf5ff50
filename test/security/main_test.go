// Package security tests the fleet's protections (docs/security.md): mutual TLS on the
// record transport with node ids tied to certificates, encrypted gossip and its key
// rotation, certificate reload, the admin API's authentication, and the safe defaults;
// in-process fleets (meshtest, fleet) and real meshnode processes (test/proc), with
// certificates the tests issue.
package security

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/meshnode/meshnode/test/proc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { proc.Cleanup() }))
}
