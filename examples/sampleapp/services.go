package sampleapp

import (
	"context"

	"github.com/meshnode/meshnode/services"
)

// The sample app's plugin services: a server service nodeinfo on every node, and a
// session service counter provided by session workers (Actors of kind WorkerKind): a
// count with its replicated state (value) and change events (changed).

// Description answers nodeinfo.describe.
type Description struct {
	Node    string `json:"node"`
	Members int    `json:"members"`
}

// NodeInfo is the server service "nodeinfo".
type NodeInfo struct {
	Describe services.Method[struct{}, Description]
}

// NodeInfoToken names NodeInfo.
var NodeInfoToken = services.Define("nodeinfo", func(d *services.Describer, n *NodeInfo) {
	services.DescribeMethod(d, "describe", &n.Describe)
})

// NodeInfoFacet provides nodeinfo: describe answers the node's RID and how many live
// members it sees.
func NodeInfoFacet(rid func() string, members func() int) services.Facet {
	return services.Facet{ID: "sampleapp.nodeinfo", Setup: func(env *services.Env) {
		services.Provide(env, NodeInfoToken, &NodeInfo{Describe: services.Func(func(context.Context, struct{}) (Description, error) {
			return Description{Node: rid(), Members: members()}, nil
		})})
	}}
}

// AddArgs is counter.add's argument.
type AddArgs struct {
	N int `json:"n"`
}

// CounterValue answers counter.add and counter.get.
type CounterValue struct {
	Value int `json:"value"`
}

// CounterChange is counter.changed: the count went from From to To.
type CounterChange struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// Counter is the session service "counter": a count kept by the session's worker.
// Value is its replicated state (the count), Changed an event per change; add and get
// answer the count too.
type Counter struct {
	Add     services.Method[AddArgs, CounterValue]
	Get     services.Method[struct{}, CounterValue]
	Value   services.State[int]
	Changed services.Events[CounterChange]
}

// CounterToken names Counter.
var CounterToken = services.Define("counter", func(d *services.Describer, c *Counter) {
	services.DescribeMethod(d, "add", &c.Add)
	services.DescribeMethod(d, "get", &c.Get)
	services.DescribeState(d, "value", &c.Value)
	services.DescribeEvents(d, "changed", &c.Changed)
})

// WorkerKind is the Actor kind of the sample's session workers.
const WorkerKind = "worker"

// CounterFacet is the worker's session facet. The count is its state, so it moves with
// the worker (meshnode relocate); the service's calls run one at a time in its actor,
// so reading and writing it needs no lock.
func CounterFacet() services.Facet {
	return services.Facet{ID: "sampleapp.counter", Setup: func(env *services.Env) {
		value := services.NewState(0)
		changed := services.NewEvents[CounterChange]()
		services.Provide(env, CounterToken, &Counter{
			Value:   value,
			Changed: changed,
			Add: services.Func(func(ctx context.Context, in AddArgs) (CounterValue, error) {
				from, _ := value.Value()
				to := from + in.N
				if err := value.Set(ctx, to); err != nil {
					return CounterValue{}, err
				}
				if err := changed.Emit(ctx, CounterChange{From: from, To: to}); err != nil {
					return CounterValue{}, err
				}
				return CounterValue{Value: to}, nil
			}),
			Get: services.Func(func(context.Context, struct{}) (CounterValue, error) {
				v, _ := value.Value()
				return CounterValue{Value: v}, nil
			}),
		})
	}}
}
