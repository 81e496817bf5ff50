package topic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode"
	"github.com/meshnode/meshnode/examples/sampleapp"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/meshtest"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/session"
	swire "github.com/meshnode/meshnode/session/wire"
	"github.com/meshnode/meshnode/test/fleet"
	"github.com/meshnode/meshnode/topic"
)

// Issue 26, item 4 and "Bad input": a bad topic name, one topic too many, a payload over
// the limit are typed errors; a publish to a topic nobody subscribes to is accepted
// and counted. None of them disturbs a subscriber of another topic.
func TestTopics_BadInputGetsTypedErrorsAndDisturbsNobody(t *testing.T) {
	f, peers := startCapturing(t, 2)
	bystander := f.Connect(t, 1)
	got := listen(bystander)
	subscribe(t, bystander, "calm")
	c := f.Connect(t, 0)
	for _, bad := range []string{"", "has space", strings.Repeat("x", topic.MaxNameLen+1), "nul\x00", "ünïcode"} {
		err := request(t, c, "subscribe", map[string]string{"topic": bad})
		if remoteCode(err) != fault.InvalidOperation.Code() {
			t.Errorf("subscribe to %q: %v, want invalid_operation", bad, err)
		}
		if err := request(t, c, "publish", map[string]any{"topic": bad, "payload": 1}); remoteCode(err) != fault.InvalidOperation.Code() {
			t.Errorf("publish to %q: %v, want invalid_operation", bad, err)
		}
	}
	for i := 0; i < topic.DefaultMaxTopicsPerSession; i++ {
		subscribe(t, c, fmt.Sprintf("t%d", i))
	}
	if err := request(t, c, "subscribe", map[string]string{"topic": "one-too-many"}); remoteCode(err) != fault.CapacityExceeded.Code() {
		t.Fatalf("subscribe to topic %d: %v, want capacity_exceeded", topic.DefaultMaxTopicsPerSession+1, err)
	}
	subscribe(t, c, "t0") // again: a no-op, not one more
	before := f.Node(0).Topics().Stats()
	publish(t, c, "nobody-listens", 1)
	if st := f.Node(0).Topics().Stats(); st.Unheard != before.Unheard+1 || st.PublishRecords != before.PublishRecords {
		t.Fatalf("a publish nobody hears: %+v (before %+v)", st, before)
	}
	// Over the payload limit, through the API (the STREAM frame limit stops it first).
	peer := peers()[1] // c's session (the bystander's was first)
	_, err := f.Node(0).Topics().PublishMessage(context.Background(), peer, "calm",
		topic.Message{Name: "big", Codec: swire.CodecRaw, Payload: make([]byte, topic.DefaultMaxPayload+1)})
	if !errors.Is(err, topic.ErrTooLarge) || !errors.Is(err, fault.CapacityExceeded) {
		t.Fatalf("a publish over the limit: %v", err)
	}
	if _, err := f.Node(0).Topics().PublishMessage(context.Background(), peer, "calm",
		topic.Message{Name: "$zlink.sneaky", Codec: swire.CodecRaw}); !errors.Is(err, fault.InvalidOperation) {
		t.Fatalf("a publish under a reserved name: %v", err)
	}
	publish(t, c, "calm", "still")
	if r := next(t, got, "the bystander"); string(r.Payload) != `"still"` || r.Seq != 1 {
		t.Fatalf("the bystander got %+v", r)
	}
	if st := f.Node(0).Topics().Stats(); st.Refused < 13 {
		t.Fatalf("refusals counted %d", st.Refused)
	}
}

// "Bad input": a subscribe from a session that is closing fails ShuttingDown; a publish
// racing an unsubscribe never delivers twice or out of order.
func TestTopics_ClosingSessionAndPublishRacingUnsubscribe(t *testing.T) {
	f, peers := startCapturing(t, 2)
	gone := f.Dial(t, 0)
	eventually(t, "the session connected", func() bool { return len(peers()) == 1 })
	_ = gone.Close()
	p := peers()[0]
	<-p.Done()
	if err := f.Node(0).Topics().Subscribe(context.Background(), p, "late"); !errors.Is(err, topic.ErrSessionClosing) && !errors.Is(err, fault.ShuttingDown) {
		t.Fatalf("subscribe of a closed session: %v", err)
	}

	sub := f.Connect(t, 1)
	ch := listen(sub)
	pub := f.Connect(t, 0)
	for round := 0; round < 20; round++ {
		subscribe(t, sub, "race")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				_ = request(t, pub, "publish", map[string]any{"topic": "race", "payload": i})
			}
		}()
		mustRequest(t, sub, "unsubscribe", map[string]string{"topic": "race"})
		wg.Wait()
	}
	var last uint64
	for {
		select {
		case r := <-ch:
			if r.Seq <= last {
				t.Fatalf("seq %d after %d: a duplicate or a reorder", r.Seq, last)
			}
			last = r.Seq
			continue
		default:
		}
		break
	}
}

// "Bad input": interest records from a peer with a stale generation are dropped by the
// transport; one older than what the node applied is refused and counted; one with a
// bad topic name changes nothing. None disturbs the registry.
func TestTopics_StaleAndForgedInterestRecords(t *testing.T) {
	f := fleet.Start(t, 2, fleet.Options{})
	c := f.Connect(t, 1)
	subscribe(t, c, "real")
	eventually(t, "node 0 sees the subscriber", func() bool { return f.Node(0).Topics().Presence("real").Subscribers == 1 })
	from, to := f.Node(1).ID(), f.Node(0).ID()
	send := func(gen uint64, ti *wire.TopicInterest) {
		frames, err := wire.Encode(&wire.Record{Body: ti})
		if err != nil {
			t.Fatal(err)
		}
		meshtest.SendEnvelope(f.Node(1).Mesh(), f.Node(0).Mesh().RemoteAddr(), meshtest.RecordsActor,
			&meshpb.Envelope{FromRid: from.RID, FromGeneration: gen, ToRid: to.RID, ToGeneration: to.Generation, Frames: frames})
	}
	before := f.Node(0).Topics().Stats()
	// An earlier lifecycle of node 1 claims a thousand subscribers.
	send(from.Generation-1, &wire.TopicInterest{Version: 1 << 40, Reset: true, Entries: []wire.TopicCount{{Topic: "real", Subscribers: 1000}}})
	// The live lifecycle, but an old version.
	send(from.Generation, &wire.TopicInterest{Version: 1, Entries: []wire.TopicCount{{Topic: "ghost", Subscribers: 7}}})
	eventually(t, "the old version counted stale", func() bool { return f.Node(0).Topics().Stats().StaleInterest == before.StaleInterest+1 })
	if p := f.Node(0).Topics().Presence("real"); p.Subscribers != 1 {
		t.Fatalf("presence after the stale records: %+v", p)
	}
	if p := f.Node(0).Topics().Presence("ghost"); p.Subscribers != 0 {
		t.Fatalf("a stale record made a topic: %+v", p)
	}
}

// startCapturing starts a fleet serving the sample session that records each session's
// peer as it connects, in order; peers returns them.
func startCapturing(t *testing.T, n int) (*fleet.Fleet, func() []*session.Peer) {
	var (
		mu    sync.Mutex
		peers []*session.Peer
	)
	f := fleet.Start(t, n, fleet.Options{Config: func(cfg *meshnode.Config) {
		cfg.Session = func(n *meshnode.Node) session.SessionType {
			return sampleapp.Mux(n.Binder(), n.Topics()).OnConnect(func(_ context.Context, p *session.Peer) {
				mu.Lock()
				peers = append(peers, p)
				mu.Unlock()
			}).Type()
		}
	}})
	return f, func() []*session.Peer {
		mu.Lock()
		defer mu.Unlock()
		return append([]*session.Peer(nil), peers...)
	}
}

// "Bad input", found when the plugin services began to fan out on topics of their own:
// the runtime's topics (meshnode.session-directory, each session worker's) are
// reserved, so a client can neither read what they carry nor forge a publication on
// them; the refusal is typed and counted, and the name is said.
func TestTopics_ClientsCannotUseTheRuntimesReservedTopics(t *testing.T) {
	f, _ := startCapturing(t, 1)
	c := f.Connect(t, 0)
	before := f.Node(0).Topics().Stats().Refused
	for _, name := range []string{"meshnode.session-directory", "meshnode.svc:00ff", topic.ReservedPrefix} {
		err := request(t, c, "subscribe", map[string]string{"topic": name})
		if remoteCode(err) != fault.InvalidOperation.Code() || !strings.Contains(err.Error(), "reserved") || !strings.Contains(err.Error(), name) {
			t.Errorf("subscribe to %q: %v, want invalid_operation naming the reserved topic", name, err)
		}
		err = request(t, c, "publish", map[string]any{"topic": name, "payload": 1})
		if remoteCode(err) != fault.InvalidOperation.Code() || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("publish to %q: %v, want invalid_operation", name, err)
		}
	}
	if got := f.Node(0).Topics().Stats().Refused - before; got != 6 {
		t.Errorf("%d refusals counted, want 6", got)
	}
	// A name that only looks alike is the application's.
	subscribe(t, c, "meshnode-fans")
}
