//go:build linux && (amd64 || arm64)

package wire

import (
	"math"
	"syscall"
	"testing"
)

// A payload longer than u32 cannot be framed. The 4 GiB slice is an untouched anonymous
// MAP_NORESERVE mapping, so it costs address space only (the build tag limits the test
// to 64-bit Linux, where that space always exists); AppendFrame must reject it by
// length alone.
func TestAppendFramePayloadTooLarge(t *testing.T) {
	n := math.MaxUint32 + 1
	payload, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ,
		syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		t.Fatalf("cannot reserve %d bytes of address space: %v", n, err)
	}
	defer func() { _ = syscall.Munmap(payload) }()

	h := send("a")
	out, err := AppendFrame([]byte("keep"), &h, payload)
	assertViolation(t, err, ViolationPayloadTooLarge, -1)
	if string(out) != "keep" {
		t.Fatalf("dst changed on error: %q", out)
	}
}
