package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshnode/meshnode/internal/buildinfo"
)

// version, when stamped by the build (-ldflags "-X main.version=v1.4.0"), replaces the
// module version Go's build information gives (internal/buildinfo).
var version string

// revision, when stamped by the build (-X main.revision=$(git rev-parse HEAD), with
// "+dirty" for a modified work tree), replaces the VCS revision of the build
// information: make build and make run stamp it, for builds made with -buildvcs=false.
var revision string

// build is this binary's build information.
func build() buildinfo.Info { return buildinfo.Read(version, revision) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// exitCode is the process's exit status for run's error, whose text it writes to
// stderr: 0 for none; 1 for a failed service call or watch ("code: message") or a
// failed benchmark; 2 for anything else (usage: the flag package already said what).
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ce *callFailed
	if errors.As(err, &ce) {
		fmt.Fprintln(stderr, ce.Error())
		return 1
	}
	var bf *benchFailed
	if errors.As(err, &bf) {
		fmt.Fprintln(stderr, "meshnode:", bf.Error())
		return 1
	}
	if !errors.Is(err, errUsage) {
		fmt.Fprintln(stderr, "meshnode:", err)
	}
	return 2
}

// errUsage means the flag package already printed what was wrong.
var errUsage = errors.New("usage")
