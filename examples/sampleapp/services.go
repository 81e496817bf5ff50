package sampleapp

import (
	"context"

	"github.com/meshnode/meshnode/services"
)

// The sample app's plugin services: a server service nodeinfo on every node, and a
// session service counter provided by session workers (Actors of kind WorkerKind).

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

// Counter is the session service "counter": a value kept by the worker Actor.
type Counter struct {
	Add services.Method[AddArgs, CounterValue]
	Get services.Method[struct{}, CounterValue]
}

// CounterToken names Counter.
var CounterToken = services.Define("counter", func(d *services.Describer, c *Counter) {
	services.DescribeMethod(d, "add", &c.Add)
	services.DescribeMethod(d, "get", &c.Get)
})

// WorkerKind is the Actor kind of the sample's session workers.
const WorkerKind = "worker"

// CounterFacet is the worker's session facet: each activation counts on its own (the
// service's calls run one at a time in its actor, so the value needs no lock).
func CounterFacet() services.Facet {
	return services.Facet{ID: "sampleapp.counter", Setup: func(env *services.Env) {
		var value int
		services.Provide(env, CounterToken, &Counter{
			Add: services.Func(func(_ context.Context, in AddArgs) (CounterValue, error) {
				value += in.N
				return CounterValue{Value: value}, nil
			}),
			Get: services.Func(func(context.Context, struct{}) (CounterValue, error) { return CounterValue{Value: value}, nil }),
		})
	}}
}
