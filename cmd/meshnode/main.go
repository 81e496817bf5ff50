package main

import (
	"context"
	"errors"
	"fmt"
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
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var ce *callFailed
		if errors.As(err, &ce) {
			fmt.Fprintln(os.Stderr, ce.Error())
			os.Exit(1)
		}
		var bf *benchFailed
		if errors.As(err, &bf) {
			fmt.Fprintln(os.Stderr, "meshnode:", bf.Error())
			os.Exit(1)
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "meshnode:", err)
		}
		os.Exit(2)
	}
}

// errUsage means the flag package already printed what was wrong.
var errUsage = errors.New("usage")
