// Package buildinfo says what a meshnode build is: its module version and VCS revision
// (from the build information Go stamps into every binary), and the versions of the
// wire formats it speaks. Nodes announce them to each other (node metadata version 3),
// and the binary prints them (meshnode version, /v1/members, meshnode_build_info).
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"

	meshwire "github.com/meshnode/meshnode/mesh/wire"
)

// Versions of the wire formats this build speaks. A format's version changes only
// when a node of the previous version could not read what this one writes;
// docs/upgrading.md says which may differ within one fleet.
const (
	// Stream is the STREAM wire between clients and nodes (docs/stream.md): the zlink
	// Stream Connector's frames, whose layout has no version field of its own.
	Stream = 1
	// ServiceWire is the service-wire major of the records between nodes
	// (docs/records.md: byte 2 of every record).
	ServiceWire = meshwire.Major
	// NodeMeta is the newest gossiped node metadata version this build writes and
	// reads (docs/ARCHITECTURE.md, "Node lifecycles"); it reads every earlier one.
	NodeMeta = 3
	// StateSnapshot is the format of an Actor's state carried by a move (a
	// MovePrepare's state and layers, docs/relocation.md).
	StateSnapshot = 1
)

// Info is one build.
type Info struct {
	// Version is the main module's version: a release tag (v1.4.0), a pseudo-version
	// Go derived from the VCS state (v0.0.0-20261202035800-d8059cb2f1a7+dirty), or
	// "(devel)" when the build had no VCS information.
	Version string
	// Revision is the VCS revision the build was made from ("" when unknown), Time its
	// commit time (RFC 3339), Modified whether the work tree had uncommitted changes.
	Revision string
	Time     string
	Modified bool
	// GoVersion is the Go toolchain that built it.
	GoVersion string
}

// Read returns this binary's build information. version and revision, when not
// empty, replace the module version and the VCS revision (stamped at link time with
// -ldflags -X, for a build without VCS information).
func Read(version string, revision ...string) Info {
	info := Info{Version: "(devel)", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		info.Version = version
	}
	if len(revision) > 0 && revision[0] != "" {
		info.Revision, info.Modified = strings.TrimSuffix(revision[0], "+dirty"), strings.HasSuffix(revision[0], "+dirty")
	}
	return info
}

// ShortRevision is the first 12 characters of the revision (what nodes gossip), with
// "+dirty" when the work tree was modified.
func (i Info) ShortRevision() string {
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if r != "" && i.Modified {
		r += "+dirty"
	}
	return r
}
