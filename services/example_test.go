package services_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/meshnode/meshnode/services"
)

type Greeter struct {
	Greet services.Method[GreetArgs, Greeting]
}

type GreetArgs struct {
	Name string `json:"name"`
}

type Greeting struct {
	Text string `json:"text"`
}

var GreeterToken = services.Define("example.greeter", func(d *services.Describer, g *Greeter) {
	services.DescribeMethod(d, "greet", &g.Greet)
})

// A provider host and a consumer host in one process, joined by a loopback connection:
// the consumer's facet uses the service without saying where it lives, and the call
// crosses as strict JSON with a fresh context that carries the consumer's identity.
func Example() {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	provider, err := services.NewHost(ctx, services.HostOptions{Name: "provider", Logger: quiet},
		services.Facet{ID: "greeter", Setup: func(env *services.Env) {
			services.Provide(env, GreeterToken, &Greeter{Greet: services.Func(func(ctx context.Context, in GreetArgs) (Greeting, error) {
				c, _ := services.ClientOf(ctx)
				return Greeting{Text: "hello, " + in.Name + " (from " + c.ID + ")"}, nil
			})})
		}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer provider.Close(ctx)
	conn := services.NewLoopback(provider, services.Client{ID: "ui-1"})
	defer conn.Close()

	var greeter *Greeter
	consumer, err := services.NewHost(ctx, services.HostOptions{Name: "ui", Logger: quiet, Connections: []services.Connection{conn}},
		services.Facet{ID: "ui", Setup: func(env *services.Env) { greeter = services.Use(env, GreeterToken) }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer consumer.Close(ctx)

	g, err := greeter.Greet.Call(ctx, GreetArgs{Name: "mesh"})
	fmt.Println(g.Text, err)
	// Output: hello, mesh (from ui-1) <nil>
}
