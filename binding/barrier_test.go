package binding

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/actor"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/wire"
)

// The golden relocation-barrier vectors are the repository's copy under mesh/wire
// (the codec's golden tests read the same file).
var barrierGoldenPath = filepath.Join("..", "mesh", "wire", "testdata", "golden", "session-relocation-barrier-v1.json")

type barrierGolden struct {
	Identity  map[string]string `json:"identity"`
	Canonical []struct {
		Name    string `json:"name"`
		Command int    `json:"command"`
		Hex     string `json:"hex"`
	} `json:"canonical"`
	ReceiverCases []struct {
		Name             string `json:"name"`
		First            string `json:"first"`
		Retry            string `json:"retry"`
		RetryMutation    string `json:"retryMutation"`
		Seal             string `json:"seal"`
		Route            string `json:"route"`
		RouteMutation    string `json:"routeMutation"`
		Result           string `json:"result"`
		StateTransitions *int   `json:"stateTransitions"`
	} `json:"receiverCases"`
}

// goldenBarrier is the golden file with its canonical records decoded.
type goldenBarrier struct {
	g       barrierGolden
	records map[string][]byte // canonical name -> record bytes
	source  mesh.NodeID
	target  mesh.NodeID
	route   actor.RouteFence // the binding's route before the move (the source)
}

func loadGoldenBarrier(t *testing.T) *goldenBarrier {
	t.Helper()
	raw, err := os.ReadFile(barrierGoldenPath)
	if err != nil {
		t.Fatal(err)
	}
	gb := &goldenBarrier{records: map[string][]byte{}}
	if err := json.Unmarshal(raw, &gb.g); err != nil {
		t.Fatal(err)
	}
	for _, c := range gb.g.Canonical {
		b, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		// Byte for byte both ways: the barrier judges exactly what the codec decodes.
		rec, err := wire.Decode([][]byte{b})
		if err != nil {
			t.Fatalf("%s: decode: %v", c.Name, err)
		}
		if int(rec.Command()) != c.Command {
			t.Fatalf("%s: command %d, golden %d", c.Name, rec.Command(), c.Command)
		}
		frames, err := wire.Encode(rec)
		if err != nil || len(frames) != 1 || !bytes.Equal(frames[0], b) {
			t.Fatalf("%s: re-encode: %x %v\nwant %x", c.Name, frames, err, b)
		}
		gb.records[c.Name] = b
	}
	id := gb.g.Identity
	u := func(k string) uint64 {
		v, err := strconv.ParseUint(id[k], 10, 64)
		if err != nil {
			t.Fatalf("identity %s: %v", k, err)
		}
		return v
	}
	gb.source = mesh.NodeID{RID: id["sourceNodeRid"], Generation: u("sourceNodeGeneration")}
	gb.target = mesh.NodeID{RID: id["targetNodeRid"], Generation: u("targetNodeGeneration")}
	gb.route = actor.RouteFence{
		Ref:                      actor.Ref{ID: id["actorId"], ObjectGeneration: u("objectGeneration")},
		Node:                     gb.source,
		AuthorityOwnerGeneration: u("sourceAuthorityOwnerGeneration"),
		OwnerLeaseGeneration:     u("sourceOwnerLeaseGeneration"),
	}
	return gb
}

// record returns a fresh decode of the canonical record name, with mutation
// ("field=value", the golden file's spelling) applied and checked to still be a valid
// record (it goes through the codec like one received).
func (gb *goldenBarrier) record(t *testing.T, name, mutation string) *wire.Record {
	t.Helper()
	b, ok := gb.records[name]
	if !ok {
		t.Fatalf("no canonical record %q", name)
	}
	rec, err := wire.Decode([][]byte{b})
	if err != nil {
		t.Fatal(err)
	}
	if mutation == "" {
		return rec
	}
	field, value, ok := strings.Cut(mutation, "=")
	n, err := strconv.ParseUint(value, 10, 64)
	if !ok || err != nil {
		t.Fatalf("mutation %q", mutation)
	}
	switch body := rec.Body.(type) {
	case *wire.SessionRelocationSeal:
		switch field {
		case "sourceAuthorityOwnerGeneration":
			body.Actor.ExpectedAuthorityOwnerGeneration = n
		case "relocationLow":
			body.Relocation.Low = n
		default:
			t.Fatalf("mutation %q of a seal", mutation)
		}
	case *wire.SessionRelocationRoute:
		switch {
		case field == "targetAuthorityOwnerGeneration" && body.Route.Commit != nil:
			body.Route.Commit.TargetAuthorityOwnerGeneration = n
		case field == "relocationLow":
			body.Relocation.Low = n
		default:
			t.Fatalf("mutation %q of a route update", mutation)
		}
	default:
		t.Fatalf("mutation of %T", body)
	}
	frames, err := wire.Encode(rec)
	if err != nil {
		t.Fatalf("mutated %s: %v", name, err)
	}
	if rec, err = wire.Decode(frames); err != nil {
		t.Fatalf("mutated %s: %v", name, err)
	}
	return rec
}

// apply feeds a record to the barrier as the session owner's handlers do, from the
// node that sends it (42 and 44 abort: the source; 44 commit: the target).
func (gb *goldenBarrier) apply(r *relocationBarrier, rec *wire.Record) verdict {
	switch body := rec.Body.(type) {
	case *wire.SessionRelocationSeal:
		v, _ := r.seal(body, gb.route, gb.source)
		return v
	case *wire.SessionRelocationRoute:
		from := gb.source
		if body.Route.Commit != nil {
			from = gb.target
		}
		v, _ := r.route(body, from)
		return v
	}
	panic("not a relocation record")
}

// runReceiverCase runs the golden receiver case name. A case with "first" applies
// first, then its retry (or first mutated), and the retry's verdict is the result; the
// state transitions counted are those of first and retry. A route update needs an
// installed seal: for a "first" that is a 44, the canonical seal is installed
// beforehand and not counted. A case with "seal" installs it, then applies its route
// (or, for routeMutation, the case's route update mutated: the golden file names it by
// the case name only, an abort).
func runReceiverCase(t *testing.T, name string) {
	gb := loadGoldenBarrier(t)
	for _, c := range gb.g.ReceiverCases {
		if c.Name != name {
			continue
		}
		var r relocationBarrier
		switch {
		case c.First != "":
			first := gb.record(t, c.First, "")
			if _, isRoute := first.Body.(*wire.SessionRelocationRoute); isRoute {
				if v := gb.apply(&r, gb.record(t, "sessionRelocationSeal", "")); v != verdictApplied {
					t.Fatalf("seal before %s: %v", c.First, v)
				}
			}
			base := r.transitions
			if v := gb.apply(&r, first); v != verdictApplied {
				t.Fatalf("first %s: %v, want applied", c.First, v)
			}
			retryName := c.Retry
			if retryName == "" {
				retryName = c.First
			}
			if v := gb.apply(&r, gb.record(t, retryName, c.RetryMutation)); v.String() != c.Result {
				t.Fatalf("retry %s %s: %v, want %s", retryName, c.RetryMutation, v, c.Result)
			}
			if c.StateTransitions != nil && r.transitions-base != *c.StateTransitions {
				t.Fatalf("%d state transitions, want %d", r.transitions-base, *c.StateTransitions)
			}
		case c.Seal != "":
			if v := gb.apply(&r, gb.record(t, c.Seal, "")); v != verdictApplied {
				t.Fatalf("seal %s: %v", c.Seal, v)
			}
			routeName := c.Route
			if routeName == "" && strings.HasSuffix(c.Name, "Abort") {
				routeName = "sessionRelocationRouteAbort"
			}
			if v := gb.apply(&r, gb.record(t, routeName, c.RouteMutation)); v.String() != c.Result {
				t.Fatalf("route %s %s: %v, want %s", routeName, c.RouteMutation, v, c.Result)
			}
			wantSealed := c.Result != verdictApplied.String()
			if r.isSealed() != wantSealed {
				t.Fatalf("sealed after the route update: %v, want %v", r.isSealed(), wantSealed)
			}
		default:
			t.Fatalf("receiver case %s has neither first nor seal", name)
		}
		return
	}
	t.Fatalf("no receiver case %q in the golden file", name)
}

func TestRelocationBarrier_Golden_identicalSealDuplicate(t *testing.T) {
	runReceiverCase(t, "identicalSealDuplicate")
}

func TestRelocationBarrier_Golden_conflictingSealDuplicate(t *testing.T) {
	runReceiverCase(t, "conflictingSealDuplicate")
}

func TestRelocationBarrier_Golden_identicalCommitDuplicate(t *testing.T) {
	runReceiverCase(t, "identicalCommitDuplicate")
}

func TestRelocationBarrier_Golden_conflictingCommitDuplicate(t *testing.T) {
	runReceiverCase(t, "conflictingCommitDuplicate")
}

func TestRelocationBarrier_Golden_matchingAbort(t *testing.T) {
	runReceiverCase(t, "matchingAbort")
}

func TestRelocationBarrier_Golden_differentRelocationAbort(t *testing.T) {
	runReceiverCase(t, "differentRelocationAbort")
}

// Every receiver case of the golden file has its test above.
func TestRelocationBarrier_GoldenCasesCovered(t *testing.T) {
	covered := map[string]bool{
		"identicalSealDuplicate": true, "conflictingSealDuplicate": true, "identicalCommitDuplicate": true,
		"conflictingCommitDuplicate": true, "matchingAbort": true, "differentRelocationAbort": true,
	}
	for _, c := range loadGoldenBarrier(t).g.ReceiverCases {
		if !covered[c.Name] {
			t.Errorf("golden receiver case %s has no test", c.Name)
		}
	}
}

// Beyond the golden cases: what the session owner ignores as stale.
func TestRelocationBarrier_StaleRecords(t *testing.T) {
	gb := loadGoldenBarrier(t)
	seal := func(r *relocationBarrier) {
		t.Helper()
		if v := gb.apply(r, gb.record(t, "sessionRelocationSeal", "")); v != verdictApplied {
			t.Fatalf("seal: %v", v)
		}
	}
	sealBody := func(mutation string) *wire.SessionRelocationSeal {
		return gb.record(t, "sessionRelocationSeal", mutation).Body.(*wire.SessionRelocationSeal)
	}
	routeBody := func(name, mutation string) *wire.SessionRelocationRoute {
		return gb.record(t, name, mutation).Body.(*wire.SessionRelocationRoute)
	}
	t.Run("seal from another node than the route's", func(t *testing.T) {
		var r relocationBarrier
		if v, _ := r.seal(sealBody(""), gb.route, gb.target); v != verdictStale || r.isSealed() {
			t.Fatalf("%v sealed=%v", v, r.isSealed())
		}
	})
	t.Run("seal naming another authority than the route's", func(t *testing.T) {
		var r relocationBarrier
		if v, _ := r.seal(sealBody("sourceAuthorityOwnerGeneration=12"), gb.route, gb.source); v != verdictStale {
			t.Fatalf("%v", v)
		}
	})
	t.Run("seal for another relocation while sealed", func(t *testing.T) {
		var r relocationBarrier
		seal(&r)
		if v, _ := r.seal(sealBody("relocationLow=10"), gb.route, gb.source); v != verdictStale || r.transitions != 1 {
			t.Fatalf("%v transitions=%d", v, r.transitions)
		}
	})
	t.Run("commit not from the target it names", func(t *testing.T) {
		var r relocationBarrier
		seal(&r)
		if v, _ := r.route(routeBody("sessionRelocationRouteCommit", ""), gb.source); v != verdictStale || !r.isSealed() {
			t.Fatalf("%v sealed=%v", v, r.isSealed())
		}
	})
	t.Run("route update without a seal", func(t *testing.T) {
		var r relocationBarrier
		if v := gb.apply(&r, gb.record(t, "sessionRelocationRouteCommit", "")); v != verdictStale {
			t.Fatalf("%v", v)
		}
	})
	t.Run("commit after the seal timed out", func(t *testing.T) {
		var r relocationBarrier
		seal(&r)
		if !r.expire(sealBody("").Relocation) {
			t.Fatal("expire did not release the seal")
		}
		if v := gb.apply(&r, gb.record(t, "sessionRelocationRouteCommit", "")); v != verdictStale {
			t.Fatalf("%v", v)
		}
	})
	t.Run("timeout after the commit", func(t *testing.T) {
		var r relocationBarrier
		seal(&r)
		if v := gb.apply(&r, gb.record(t, "sessionRelocationRouteCommit", "")); v != verdictApplied {
			t.Fatalf("%v", v)
		}
		if r.expire(sealBody("").Relocation) {
			t.Fatal("the timeout released a seal the commit had released")
		}
	})
	t.Run("commit after the abort of the same relocation", func(t *testing.T) {
		var r relocationBarrier
		seal(&r)
		if v := gb.apply(&r, gb.record(t, "sessionRelocationRouteAbort", "")); v != verdictApplied {
			t.Fatalf("%v", v)
		}
		if v := gb.apply(&r, gb.record(t, "sessionRelocationRouteCommit", "")); v != verdictProtocolError {
			t.Fatalf("%v", v)
		}
	})
	t.Run("retransmitted seal after the commit", func(t *testing.T) {
		var r relocationBarrier
		seal(&r)
		gb.apply(&r, gb.record(t, "sessionRelocationRouteCommit", ""))
		if v := gb.apply(&r, gb.record(t, "sessionRelocationSeal", "")); v != verdictStale || r.isSealed() {
			t.Fatalf("%v sealed=%v", v, r.isSealed())
		}
	})
	t.Run("commit matching the seal except the coordinator", func(t *testing.T) {
		// The coordinator fence is not part of the matching seal identity.
		var r relocationBarrier
		seal(&r)
		u := routeBody("sessionRelocationRouteCommit", "")
		u.Coordinator.LeaseGeneration++
		if v, _ := r.route(u, gb.target); v != verdictApplied {
			t.Fatalf("%v", v)
		}
	})
}
