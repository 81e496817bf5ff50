package mesh

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// NodeID names one lifecycle of one node: its stable RID and the generation of the
// process that currently carries it.
type NodeID struct {
	RID        string
	Generation uint64
}

func (id NodeID) String() string { return fmt.Sprintf("%s#%d", id.RID, id.Generation) }

// IsZero reports whether id names nothing.
func (id NodeID) IsZero() bool { return id.RID == "" && id.Generation == 0 }

var (
	generationMu   sync.Mutex
	lastGeneration uint64
)

// NewGeneration returns a lifecycle generation: the wall clock in nanoseconds, made
// strictly increasing within the process. A restarted process reads a later clock, so
// its generation is larger and never reused (the value stays in the nonzero-u64 range
// of the service wire until the year 2262).
func NewGeneration() uint64 {
	generationMu.Lock()
	defer generationMu.Unlock()
	g := uint64(time.Now().UnixNano())
	if g <= lastGeneration {
		g = lastGeneration + 1
	}
	if g > math.MaxInt64 {
		g = math.MaxInt64
	}
	lastGeneration = g
	return g
}
