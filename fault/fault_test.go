package fault_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/meshnode/meshnode/fault"
)

var errPeerFull = fault.New(fault.Unavailable, "mesh: peer queue full")

func TestSentinelMatchesItselfAndItsKind(t *testing.T) {
	err := fmt.Errorf("relay: %w", errPeerFull)
	if !errors.Is(err, errPeerFull) || !errors.Is(err, fault.Unavailable) {
		t.Fatalf("errors.Is misses the cause or the class: %v", err)
	}
	if errors.Is(err, fault.NotFound) {
		t.Fatal("matches another kind")
	}
	if got := fault.Code(err); got != "unavailable" {
		t.Fatalf("Code = %q", got)
	}
}

func TestErrorfKeepsTheCauseAndAddsTheKind(t *testing.T) {
	err := fault.Errorf(fault.DeadlineExceeded, "lookup of %s: %w", "room-1", context.DeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fault.DeadlineExceeded) {
		t.Fatalf("errors.Is: %v", err)
	}
	if k, ok := fault.Of(err); !ok || k != fault.DeadlineExceeded {
		t.Fatalf("Of = %v %v", k, ok)
	}
	if err.Error() != "lookup of room-1: context deadline exceeded" {
		t.Fatalf("message %q", err.Error())
	}
}

func TestUnclassifiedIsInternalFailureOnTheWire(t *testing.T) {
	if got := fault.Code(errors.New("boom")); got != "internal_failure" {
		t.Fatalf("Code = %q", got)
	}
	if _, ok := fault.Of(errors.New("boom")); ok {
		t.Fatal("a plain error has a kind")
	}
	if fault.Code(nil) != "" {
		t.Fatal("Code(nil) is not empty")
	}
}

// The thirteen kinds and their wire codes, in the error model's order.
func TestKindsAndCodes(t *testing.T) {
	want := []string{"not_found", "already_exists", "type_mismatch", "not_configured", "rejected",
		"unavailable", "capacity_exceeded", "deadline_exceeded", "shutting_down",
		"protocol_error", "invalid_operation", "data_lost", "internal_failure"}
	for i, code := range want {
		k := fault.Kind(i)
		if k.Code() != code {
			t.Errorf("Kind(%d).Code() = %q, want %q", i, k.Code(), code)
		}
		if back, ok := fault.KindOf(code); !ok || back != k {
			t.Errorf("KindOf(%q) = %v %v", code, back, ok)
		}
	}
	if _, ok := fault.KindOf("teapot"); ok {
		t.Error("an unknown code has a kind")
	}
}

func ExampleCode() {
	errNotBound := fault.New(fault.InvalidOperation, "binding: session not bound to the Actor")
	err := fmt.Errorf("room.echo: %w", errNotBound)
	fmt.Println(fault.Code(err), errors.Is(err, fault.InvalidOperation))
	// Output: invalid_operation true
}
