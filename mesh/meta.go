package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Versions of the gossiped node metadata (its first byte). Version 2 appends the admin
// address; a node writes version 1 when it has none, byte for byte what nodes without
// version 2 write and read, and reads both.
const (
	metaVersion1 = 1
	metaVersion2 = 2
)

// maxMetaSize is memberlist's limit on node metadata (it panics above it).
const maxMetaSize = 512

var errBadMeta = errors.New("mesh: malformed node metadata")

// nodeMeta is what a node gossips about itself: never Actor locations, only what peers
// need to reach it and to tell its lifecycles apart.
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
}

const metaFlagLeaving = 0x01

func (m nodeMeta) encode() ([]byte, error) {
	fields := []string{m.RID, m.RemoteAddr, m.AdvertiseHost}
	version := byte(metaVersion1)
	if m.AdminAddr != "" {
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
	if len(b) > maxMetaSize {
		return nil, fmt.Errorf("mesh: node metadata is %d bytes, over memberlist's %d", len(b), maxMetaSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) < 10 || (b[0] != metaVersion1 && b[0] != metaVersion2) || b[1]&^metaFlagLeaving != 0 {
		return m, errBadMeta
	}
	m.Leaving = b[1]&metaFlagLeaving != 0
	m.Generation = binary.BigEndian.Uint64(b[2:10])
	rest := b[10:]
	fields := []*string{&m.RID, &m.RemoteAddr, &m.AdvertiseHost}
	if b[0] == metaVersion2 {
		fields = append(fields, &m.AdminAddr)
	}
	for _, f := range fields {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return m, errBadMeta
		}
		*f = string(rest[1 : 1+int(rest[0])])
		rest = rest[1+int(rest[0]):]
	}
	if len(rest) != 0 || m.RID == "" || m.Generation == 0 {
		return m, errBadMeta
	}
	return m, nil
}
