package services_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testkit"
	"github.com/meshnode/meshnode/services"
	"github.com/meshnode/meshnode/session/connector"
)

// The contract the state and event tests use: a board whose score is replicated state
// and whose moves are remote events.

type Score struct {
	N  int    `json:"n"`
	By string `json:"by"`
}

type Move struct {
	Type string `json:"type"`
	N    int    `json:"n"`
	Pad  string `json:"pad,omitempty"`
}

type BurstArgs struct {
	From  int    `json:"from"`
	Count int    `json:"count"`
	Type  string `json:"type,omitempty"`
	Pad   int    `json:"pad,omitempty"` // bytes of padding per event
}

type Board struct {
	Score services.State[Score]
	Moves services.Events[Move]
	Set   services.Method[Score, Score]        // sets the score (the call's context is the write's)
	Burst services.Method[BurstArgs, struct{}] // sets score n = from..from+count-1, one write each
	Emit  services.Method[BurstArgs, struct{}] // emits moves n = from..from+count-1
	Who   services.Method[struct{}, Score]     // the provider's name
	Incr  services.Method[struct{}, Score]     // adds one to the score (read, then write)
}

var BoardToken = services.Define("test.board", func(d *services.Describer, b *Board) {
	services.DescribeState(d, "score", &b.Score)
	services.DescribeEvents(d, "moves", &b.Moves)
	services.DescribeMethod(d, "set", &b.Set)
	services.DescribeMethod(d, "burst", &b.Burst)
	services.DescribeMethod(d, "emit", &b.Emit)
	services.DescribeMethod(d, "who", &b.Who)
	services.DescribeMethod(d, "incr", &b.Incr)
})

// boardImpl is a provider named by, its score starting at {n: start}.
func boardImpl(by string, start int) *Board {
	score := services.NewState(Score{N: start, By: by})
	moves := services.NewEvents[Move]()
	return &Board{
		Score: score,
		Moves: moves,
		Set: services.Func(func(ctx context.Context, in Score) (Score, error) {
			in.By = by
			return in, score.Set(ctx, in)
		}),
		Burst: services.Task(func(ctx context.Context, in BurstArgs) (struct{}, error) {
			for n := in.From; n < in.From+in.Count; n++ {
				if err := score.Set(ctx, Score{N: n, By: by}); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		}),
		Emit: services.Task(func(ctx context.Context, in BurstArgs) (struct{}, error) {
			typ := in.Type
			if typ == "" {
				typ = "move"
			}
			pad := strings.Repeat("x", in.Pad)
			for n := in.From; n < in.From+in.Count; n++ {
				if err := moves.Emit(ctx, Move{Type: typ, N: n, Pad: pad}); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		}),
		Who: services.Func(func(context.Context, struct{}) (Score, error) { return Score{By: by}, nil }),
		Incr: services.Func(func(ctx context.Context, _ struct{}) (Score, error) {
			v, _ := score.Value()
			v.N++
			return v, score.Set(ctx, v)
		}),
	}
}

func boardFacet(by string, start int) services.Facet {
	return services.Facet{ID: "board", Setup: func(env *services.Env) { services.Provide(env, BoardToken, boardImpl(by, start)) }}
}

// seen records what a listener was called with.
type seen struct {
	mu    sync.Mutex
	vals  []int
	kinds []services.DeliveryKind
	seqs  []uint64
	repl  []bool
	ctxs  []context.Context
}

func (s *seen) score(ctx context.Context, v Score) { s.add(ctx, v.N) }
func (s *seen) move(ctx context.Context, m Move)   { s.add(ctx, m.N) }

func (s *seen) add(ctx context.Context, n int) {
	d, _ := services.DeliveryOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals = append(s.vals, n)
	s.kinds = append(s.kinds, d.Kind)
	s.seqs = append(s.seqs, d.Seq)
	s.repl = append(s.repl, d.Replacement)
	s.ctxs = append(s.ctxs, ctx)
}

func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.vals)
}

// at returns call i.
func (s *seen) at(i int) (int, services.DeliveryKind, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[i], s.kinds[i], s.seqs[i], s.repl[i]
}

// ctx returns the context of call i.
func (s *seen) ctx(i int) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctxs[i]
}

func (s *seen) waitLen(t *testing.T, n int, what string) {
	t.Helper()
	eventually(t, what, func() bool { return s.len() >= n })
}

// last returns the last value seen.
func (s *seen) last() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.vals) == 0 {
		return -1
	}
	return s.vals[len(s.vals)-1]
}

// boardWay is one way a consumer reaches a board provider: a server's over loopback or
// STREAM, or a session worker's on another node over a STREAM or loopback presentation.
type boardWay struct {
	name string
	// start returns a consumer host's facade of the board and the provider's name; hooks
	// may be nil when the way has none.
	start func(t *testing.T) *boardRig
}

type boardRig struct {
	board *Board
	by    string
	// consumer makes one more consumer host of the same provider, with setup run in
	// the consumer's facet after Use.
	consumer func(t *testing.T, setup func(b *Board)) *Board
	// drop and back cut the consumer's connection and make it again (nil: not here).
	drop, back func()
	// subscriptions reports how many subscriptions the provider side holds.
	subscriptions func() int
	// closers close what each consumer opened, newest last.
	closers []func()
}

// closeNewest closes the newest consumer: its host and its connection.
func (r *boardRig) closeNewest() {
	fn := r.closers[len(r.closers)-1]
	r.closers = r.closers[:len(r.closers)-1]
	fn()
}

// serverWays are the server-scope ways: the provider is a host in this process.
func serverWays() []boardWay {
	return []boardWay{
		{"loopback", func(t *testing.T) *boardRig {
			provider := newHost(t, "provider", nil, boardFacet("provider", 0))
			rig := &boardRig{by: "provider"}
			var last *services.Loopback
			rig.consumer = func(t *testing.T, setup func(b *Board)) *Board {
				l := services.NewLoopback(provider, services.Client{ID: "loop"})
				t.Cleanup(l.Close)
				last = l
				var b *Board
				h := newHost(t, "consumer", []services.Connection{l}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
					b = services.Use(env, BoardToken)
					if setup != nil {
						setup(b)
					}
				}})
				rig.closers = append(rig.closers, func() { _ = h.Close(context.Background()); l.Close() })
				return b
			}
			rig.board = rig.consumer(t, nil)
			first := last
			rig.drop, rig.back = first.Disconnect, first.Reconnect
			rig.subscriptions = func() int { return services.SubscriptionsOf(provider) }
			return rig
		}},
		{"stream", func(t *testing.T) *boardRig {
			provider := newHost(t, "provider", nil, boardFacet("provider", 0))
			rig := &boardRig{by: "provider"}
			var lastC *connector.Connector
			rig.consumer = func(t *testing.T, setup func(b *Board)) *Board {
				c := reconnectingConnector(t, streamEndpoint(t, provider))
				lastC = c
				sc := services.NewStreamConnection(c)
				t.Cleanup(sc.Close)
				var b *Board
				h := newHost(t, "consumer", []services.Connection{sc}, services.Facet{ID: "ui", Setup: func(env *services.Env) {
					b = services.Use(env, BoardToken)
					if setup != nil {
						setup(b)
					}
				}})
				rig.closers = append(rig.closers, func() { _ = h.Close(context.Background()); sc.Close(); _ = c.Close() })
				return b
			}
			rig.board = rig.consumer(t, nil)
			c := lastC
			var mu sync.Mutex
			drops, ups := 0, 0
			c.WatchState(func(st connector.State) {
				mu.Lock()
				defer mu.Unlock()
				switch st {
				case connector.StateReconnecting:
					drops++
				case connector.StateConnected:
					ups++
				}
			})
			rig.drop = func() {
				mu.Lock()
				d0 := drops
				mu.Unlock()
				_ = c.Request(callCtx(t), "bye", map[string]any{}, nil)
				eventually(t, "the connection drops", func() bool { mu.Lock(); defer mu.Unlock(); return drops > d0 })
			}
			rig.back = func() {
				eventually(t, "the connector reconnects", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return ups >= drops && c.State() == connector.StateConnected
				})
			}
			rig.subscriptions = func() int { return services.SubscriptionsOf(provider) }
			return rig
		}},
	}
}

// sessionWays are the session-scope ways: the board of a session worker on node 1,
// reached from a presentation on node 0 over STREAM or loopback.
func sessionWays() []boardWay {
	var ways []boardWay
	for _, tr := range presentationTransports {
		ways = append(ways, boardWay{"session-" + tr, func(t *testing.T) *boardRig {
			f := startSvcFleet(t, 2, nil)
			w := f.workerOn(t, 1, "board-")
			rig := &boardRig{by: "worker"}
			var first *presentation
			rig.consumer = func(t *testing.T, setup func(b *Board)) *Board {
				p := f.present(t, 0, tr, func(p *presentation) {
					if setup != nil {
						setup(p.board)
					}
				})
				if first == nil {
					first = p
					p.create(t, w)
				}
				p.attach(t, w)
				rig.closers = append(rig.closers, p.disconnect)
				return p.board
			}
			rig.board = rig.consumer(t, nil)
			rig.subscriptions = func() int {
				n := 0
				for i := 0; i < f.Len(); i++ {
					n += services.AttacherOf(f.Node(i).Services()).Stats().Subscriptions
				}
				return n
			}
			return rig
		}})
	}
	return ways
}

// allWays are the server and the session ways.
func allWays() []boardWay { return append(serverWays(), sessionWays()...) }

// streamEndpoint serves provider over STREAM (once) and returns where.
func streamEndpoint(t *testing.T, provider *services.Host) string {
	connectStream(t, provider) // starts the server
	ep, _ := streamServers.Load(provider)
	return ep.(string)
}

// reconnectingConnector dials endpoint with reconnects on (quickly).
func reconnectingConnector(t *testing.T, endpoint string) *connector.Connector {
	t.Helper()
	c, err := connector.New(endpoint, connector.Options{
		Heartbeat: connector.HeartbeatOptions{Disabled: true},
		Reconnect: connector.ReconnectPolicy{InitialDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Connect(callCtx(t)); err != nil {
		t.Fatal(err)
	}
	return c
}

var _ = testkit.DialConnector
var _ = errors.Is
var _ = strconv.Itoa
