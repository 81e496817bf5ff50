package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// The golden files in testdata/golden are copies of the zlink runtime protocol's golden vectors:
// every canonical vector must be reproduced byte for byte by Encode from the file's field
// values and decode back to them; every malformed vector must fail with its class.

func readGolden(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// fields hands out a golden object's string fields and remembers which were used, so a
// field the test does not map cannot be silently ignored.
type fields struct {
	t    *testing.T
	name string
	m    map[string]string
	used map[string]bool
}

func newFields(t *testing.T, name string, m map[string]string) *fields {
	return &fields{t: t, name: name, m: m, used: map[string]bool{}}
}

func (f *fields) str(k string) string {
	f.t.Helper()
	v, ok := f.m[k]
	if !ok {
		f.t.Fatalf("%s: no field %q", f.name, k)
	}
	f.used[k] = true
	return v
}

func (f *fields) u64(k string) uint64 {
	f.t.Helper()
	v, err := strconv.ParseUint(f.str(k), 10, 64)
	if err != nil {
		f.t.Fatalf("%s.%s: %v", f.name, k, err)
	}
	return v
}

func (f *fields) allUsed() {
	f.t.Helper()
	for k := range f.m {
		if !f.used[k] {
			f.t.Errorf("%s: field %q is not checked by the test", f.name, k)
		}
	}
}

func ints(t testing.TB, in []int) []byte {
	out := make([]byte, len(in))
	for i, v := range in {
		if v < 0 || v > 255 {
			t.Fatalf("byte value %d", v)
		}
		out[i] = byte(v)
	}
	return out
}

// goldenCheck encodes want, compares with the vector, and decodes the vector back.
func goldenCheck(t *testing.T, want *Record, vector []byte) {
	t.Helper()
	frames := mustEncode(t, want)
	if len(frames) != 1 || !bytes.Equal(frames[0], vector) {
		t.Fatalf("Encode:\n got % x\nwant % x", frames, vector)
	}
	got, err := Decode([][]byte{vector})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode:\n got %+v\nwant %+v", got.Body, want.Body)
	}
}

func TestGoldenBoundSessionReplaced(t *testing.T) {
	var g struct {
		Schema    string `json:"schema"`
		CommandID int    `json:"commandId"`
		Canonical struct {
			ActorAuthority map[string]string `json:"actorAuthority"`
			RetiredSession map[string]string `json:"retiredSession"`
			Bytes          []int             `json:"bytes"`
		} `json:"canonical"`
		Malformed []struct {
			Name  string `json:"name"`
			Bytes []int  `json:"bytes"`
			Error string `json:"error"`
		} `json:"malformed"`
	}
	readGolden(t, "bound-session-replaced-v1.json", &g)
	if g.CommandID != int(CmdBoundSessionReplaced) {
		t.Fatalf("commandId %d", g.CommandID)
	}
	aa := newFields(t, "actorAuthority", g.Canonical.ActorAuthority)
	rs := newFields(t, "retiredSession", g.Canonical.RetiredSession)
	want := &Record{Body: &BoundSessionReplaced{
		ActorAuthority: ActorRouteFence{
			Actor:                            ActorRef{ID: aa.str("actorId"), Generation: aa.u64("objectGeneration")},
			TargetNodeRID:                    aa.str("targetNodeRid"),
			TargetNodeGeneration:             aa.u64("targetNodeGeneration"),
			ExpectedAuthorityOwnerGeneration: aa.u64("expectedAuthorityOwnerGeneration"),
			ExpectedOwnerLeaseGeneration:     aa.u64("expectedOwnerLeaseGeneration"),
		},
		RetiredSession: SessionFence{
			OwnerNodeRID:         rs.str("sessionOwnerNodeRid"),
			OwnerNodeGeneration:  rs.u64("sessionOwnerNodeGeneration"),
			OwnerID:              rs.str("sessionOwnerId"),
			OwnerLeaseGeneration: rs.u64("sessionOwnerLeaseGeneration"),
			SessionRID:           rs.str("sessionRid"),
			BindingGeneration:    rs.u64("retiredBindingGeneration"),
		},
	}}
	aa.allUsed()
	rs.allUsed()
	vector := ints(t, g.Canonical.Bytes)
	if len(vector) != 121 {
		t.Fatalf("canonical vector is %d bytes, the digest says 121", len(vector))
	}
	goldenCheck(t, want, vector)

	if len(g.Malformed) == 0 {
		t.Fatal("no malformed vectors")
	}
	for _, m := range g.Malformed {
		t.Run(m.Name, func(t *testing.T) {
			frames := [][]byte{ints(t, m.Bytes)}
			_, err := Decode(frames)
			checkError(t, err, ErrorClass(m.Error), frames)
		})
	}
}

func TestGoldenSessionRelocationBarrier(t *testing.T) {
	var g struct {
		Identity  map[string]string `json:"identity"`
		Canonical []struct {
			Name    string            `json:"name"`
			Command int               `json:"command"`
			Decoded map[string]string `json:"decoded"`
			Hex     string            `json:"hex"`
		} `json:"canonical"`
	}
	readGolden(t, "session-relocation-barrier-v1.json", &g)
	id := newFields(t, "identity", g.Identity)
	relocation := RelocationID{High: id.u64("relocationHigh"), Low: id.u64("relocationLow")}
	coord := CoordinatorFence{
		OwnerID:                       id.str("coordinatorOwnerId"),
		LeaseGeneration:               id.u64("coordinatorLeaseGeneration"),
		NodeRID:                       id.str("coordinatorNodeRid"),
		NodeGeneration:                id.u64("coordinatorNodeGeneration"),
		ExpectedAuthorityStoreVersion: id.str("expectedAuthorityStoreVersion"),
	}
	actor := ActorRef{ID: id.str("actorId"), Generation: id.u64("objectGeneration")}
	session := SessionFence{
		OwnerNodeRID:         id.str("sessionOwnerNodeRid"),
		OwnerNodeGeneration:  id.u64("sessionOwnerNodeGeneration"),
		OwnerID:              id.str("sessionOwnerId"),
		OwnerLeaseGeneration: id.u64("sessionOwnerLeaseGeneration"),
		SessionRID:           id.str("sessionRid"),
		BindingGeneration:    id.u64("bindingGeneration"),
	}
	// The identity's source/target fields describe the relocation; the records carry
	// them through "decoded". Mark them used after checking they agree with it.
	for _, k := range []string{"sourceNodeRid", "sourceNodeGeneration", "sourceAuthorityOwnerGeneration",
		"sourceOwnerLeaseGeneration", "targetNodeRid", "targetNodeGeneration", "targetOwnerLeaseGeneration",
		"targetAuthorityOwnerGeneration"} {
		id.str(k)
	}
	id.allUsed()

	role := func(f *fields) RelocationRole {
		switch s := f.str("senderRole"); s {
		case "source":
			return RoleSource
		case "target":
			return RoleTarget
		default:
			t.Fatalf("senderRole %q", s)
			return 0
		}
	}
	fence := func(d *fields) ActorRouteFence {
		return ActorRouteFence{Actor: actor, TargetNodeRID: d.str("targetNodeRid"),
			TargetNodeGeneration:             d.u64("targetNodeGeneration"),
			ExpectedAuthorityOwnerGeneration: d.u64("authorityOwnerGeneration"),
			ExpectedOwnerLeaseGeneration:     d.u64("ownerLeaseGeneration")}
	}
	seen := map[string]bool{}
	for _, c := range g.Canonical {
		t.Run(c.Name, func(t *testing.T) {
			d := newFields(t, c.Name+".decoded", c.Decoded)
			var body Body
			switch c.Name {
			case "sessionRelocationSeal":
				f := fence(d)
				if f.TargetNodeRID != id.m["sourceNodeRid"] || f.ExpectedAuthorityOwnerGeneration != id.u64("sourceAuthorityOwnerGeneration") {
					t.Fatal("seal fence is not the source location")
				}
				body = &SessionRelocationSeal{Relocation: relocation, Coordinator: coord, SenderRole: role(d), Actor: f, Session: session}
			case "sessionRelocationSealed":
				body = &SessionRelocationSealed{Relocation: relocation, Coordinator: coord, Actor: fence(d), Session: session}
			case "sessionRelocationRouteCommit", "sessionRelocationRouteAbort":
				rb := &SessionRelocationRoute{Relocation: relocation, Coordinator: coord, SenderRole: role(d), Actor: actor, Session: session}
				switch a := d.str("action"); a {
				case "commit":
					rb.Route.Commit = &RouteCommit{
						PreviousAuthorityOwnerGeneration: d.u64("previousAuthorityOwnerGeneration"),
						TargetAuthorityOwnerGeneration:   d.u64("targetAuthorityOwnerGeneration"),
						TargetNodeRID:                    d.str("targetNodeRid"),
						TargetNodeGeneration:             d.u64("targetNodeGeneration"),
						TargetOwnerLeaseGeneration:       d.u64("targetOwnerLeaseGeneration"),
					}
					if rb.Route.Commit.TargetOwnerLeaseGeneration != id.u64("targetOwnerLeaseGeneration") {
						t.Fatal("commit lease generation disagrees with the identity")
					}
				case "abort":
					rb.Route.Abort = &RouteAbort{CurrentAuthorityOwnerGeneration: d.u64("currentAuthorityOwnerGeneration")}
				default:
					t.Fatalf("action %q", a)
				}
				body = rb
			default:
				t.Fatalf("unknown canonical vector %q", c.Name)
			}
			d.allUsed()
			if body.Command() != Command(c.Command) {
				t.Fatalf("command %d, vector says %d", body.Command(), c.Command)
			}
			vector, err := hex.DecodeString(c.Hex)
			if err != nil {
				t.Fatal(err)
			}
			goldenCheck(t, &Record{Body: body}, vector)
			seen[c.Name] = true
		})
	}
	if len(seen) != 4 {
		t.Fatalf("checked %d canonical vectors, want 4", len(seen))
	}
}

// TestGoldenRouteCommitOldLayout: the older schema's 4-field commit (case length 31,
// without targetOwnerLeaseGeneration) is rejected by its length, not misread.
func TestGoldenRouteCommitOldLayout(t *testing.T) {
	frames := mustEncode(t, routeCommit())
	f := frames[0]
	// The commit case is the last 3+39 bytes: action, u16 length, then 39 bytes.
	caseAt := len(f) - 39
	if f[caseAt-3] != actionCommit || binary.BigEndian.Uint16(f[caseAt-2:]) != 39 {
		t.Fatalf("unexpected commit layout % x", f[caseAt-3:])
	}
	old := append([]byte(nil), f[:len(f)-8]...)
	binary.BigEndian.PutUint16(old[caseAt-2:], 31)
	in := [][]byte{old}
	_, err := Decode(in)
	e := checkError(t, err, ClassInvalidField, in)
	if e.Reason != reasonCaseLength {
		t.Fatalf("reason %q, want the case-length mismatch: %v", e.Reason, e)
	}
}

// TestGoldenReceiverMutations: the receiver cases of the barrier fixture are decided by
// the session layer, but they rely on the codec giving each mutation its own valid bytes
// (identical duplicates are byte-identical, conflicting ones are not).
func TestGoldenReceiverMutations(t *testing.T) {
	seal := mustEncode(t, sealRecord())[0]
	if again := mustEncode(t, sealRecord())[0]; !bytes.Equal(seal, again) {
		t.Fatal("identical seal encodes differently")
	}
	conflicting := sealRecord()
	conflicting.Body.(*SessionRelocationSeal).Actor.ExpectedAuthorityOwnerGeneration = 12
	if b := mustEncode(t, conflicting)[0]; bytes.Equal(b, seal) {
		t.Fatal("conflicting seal encodes identically")
	}
	commit := routeCommit()
	commit.Body.(*SessionRelocationRoute).Route.Commit.TargetAuthorityOwnerGeneration = 13
	mustEncode(t, commit)
	other := routeAbort()
	other.Body.(*SessionRelocationRoute).Relocation.Low = 10
	got, err := Decode(mustEncode(t, other))
	if err != nil || got.Body.(*SessionRelocationRoute).Relocation != (RelocationID{7, 10}) {
		t.Fatalf("relocationLow=10 abort: %v", err)
	}
}
