package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Versions of the gossiped node metadata (its first byte). Version 2 appends the admin
// address; version 3 appends, after it (empty or not), the versions the node announces
// (Versions). A node writes the lowest version that carries what it has to say and
// that every live member reads: version 1 without an admin address, byte for byte what
// nodes without version 2 write and read; version 3 only once every live member says
// (memberlist's delegate protocol maximum, metaV3Capable) that it reads version 3.
// Every node reads versions 1 and 2 strictly; a version 3 or later reader takes the
// version 3 fields and ignores what follows them, so that a later version can append
// fields that version 3 nodes tolerate.
const (
	metaVersion1 = 1
	metaVersion2 = 2
	metaVersion3 = 3
)

// metaV3Capable is the delegate protocol maximum a node gossips (memberlist's
// DelegateProtocolMax) to say that it reads node metadata version 3. Its delegate
// protocol minimum and current version stay 0, so nodes that do not know of it (0, 0,
// 0) still accept it.
const metaV3Capable = 1

// maxMetaSize is memberlist's limit on node metadata (it panics above it).
const maxMetaSize = 512

// Bounds of the announced build strings in version 3 metadata.
const (
	maxBuildLen    = 64
	maxRevisionLen = 40
)

var errBadMeta = errors.New("mesh: malformed node metadata")

// nodeMeta is what a node gossips about itself: never Actor locations, only what peers
// need to reach it and to tell its lifecycles apart, and what it announces of itself.
type nodeMeta struct {
	RID           string
	Generation    uint64
	RemoteAddr    string // protoactor remote host:port
	AdvertiseHost string
	// AdminAddr is the node's admin HTTP host:port (Config.AdminAddr), empty when it has
	// none; an operator dashboard reads every member's figures there.
	AdminAddr string
	// Leaving is gossiped just before a graceful leave: memberlist reports a leave and
	// a death through the same callback, so this is how peers tell them apart.
	Leaving bool
	// Versions is carried by version 3 only (zero when read from versions 1 and 2).
	Versions Versions
}

const metaFlagLeaving = 0x01

// encode writes the metadata: version 3 when v3 is set (with the versions), else
// version 1 or 2 (without them).
func (m nodeMeta) encode(v3 bool) ([]byte, error) {
	fields := []string{m.RID, m.RemoteAddr, m.AdvertiseHost}
	version := byte(metaVersion1)
	switch {
	case v3:
		version = metaVersion3
		if len(m.Versions.Build) > maxBuildLen || len(m.Versions.Revision) > maxRevisionLen {
			return nil, fmt.Errorf("mesh: announced build %q or revision %q over %d or %d bytes", m.Versions.Build, m.Versions.Revision, maxBuildLen, maxRevisionLen)
		}
		fields = append(fields, m.AdminAddr, m.Versions.Build, m.Versions.Revision)
	case m.AdminAddr != "":
		version = metaVersion2
		fields = append(fields, m.AdminAddr)
	}
	size := 2 + 8
	for _, s := range fields {
		if len(s) > 255 {
			return nil, fmt.Errorf("mesh: node metadata field over 255 bytes: %q", s)
		}
		size += 1 + len(s)
	}
	if v3 {
		size += 1 + 4
	}
	b := make([]byte, 0, size)
	var flags byte
	if m.Leaving {
		flags |= metaFlagLeaving
	}
	b = append(b, version, flags)
	b = binary.BigEndian.AppendUint64(b, m.Generation)
	for _, s := range fields {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	if v3 {
		v := m.Versions
		b = append(b, 4, v.Stream, v.Service, v.Meta, v.Snapshot)
	}
	if len(b) > maxMetaSize {
		return nil, fmt.Errorf("mesh: node metadata is %d bytes, over memberlist's %d", len(b), maxMetaSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) < 10 || b[0] < metaVersion1 || b[1]&^metaFlagLeaving != 0 {
		return m, errBadMeta
	}
	m.Leaving = b[1]&metaFlagLeaving != 0
	m.Generation = binary.BigEndian.Uint64(b[2:10])
	rest := b[10:]
	fields := []*string{&m.RID, &m.RemoteAddr, &m.AdvertiseHost}
	switch {
	case b[0] == metaVersion2:
		fields = append(fields, &m.AdminAddr)
	case b[0] >= metaVersion3:
		fields = append(fields, &m.AdminAddr, &m.Versions.Build, &m.Versions.Revision)
	}
	for _, f := range fields {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return m, errBadMeta
		}
		*f = string(rest[1 : 1+int(rest[0])])
		rest = rest[1+int(rest[0]):]
	}
	if b[0] >= metaVersion3 {
		// The wire versions: a count, then that many bytes, of which this version knows
		// the first four; anything after them belongs to a later version.
		if len(rest) < 1 || rest[0] < 4 || len(rest) < 1+int(rest[0]) {
			return m, errBadMeta
		}
		v := rest[1:]
		m.Versions.Stream, m.Versions.Service, m.Versions.Meta, m.Versions.Snapshot = v[0], v[1], v[2], v[3]
		rest = nil
	}
	if len(rest) != 0 || m.RID == "" || m.Generation == 0 {
		return m, errBadMeta
	}
	return m, nil
}
