package remote

import (
	stdcontext "context"
	"fmt"
	"net"

	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"google.golang.org/grpc"
)

func defaultConfig() *Config {
	return &Config{
		AdvertisedHost:           "",
		DialOptions:              []grpc.DialOption{grpc.WithInsecure()},
		EndpointWriterBatchSize:  1000,
		EndpointManagerBatchSize: 1000,
		EndpointWriterQueueSize:  1000000,
		EndpointManagerQueueSize: 1000000,
		Kinds:                    make(map[string]*actor.Props),
		MaxRetryCount:            5,
	}
}

func newConfig(options ...ConfigOption) *Config {
	config := defaultConfig()
	for _, option := range options {
		option(config)
	}
	return config
}

// Address returns the address of the remote
func (rc Config) Address() string {
	return fmt.Sprintf("%v:%v", rc.Host, rc.Port)
}

// Configure configures the remote
func Configure(host string, port int, options ...ConfigOption) *Config {
	c := newConfig(options...)
	c.Host = host
	c.Port = port

	return c
}

// Config is the configuration for the remote
type Config struct {
	Host                     string
	Port                     int
	AdvertisedHost           string
	ServerOptions            []grpc.ServerOption
	CallOptions              []grpc.CallOption
	DialOptions              []grpc.DialOption
	EndpointWriterBatchSize  int
	EndpointWriterQueueSize  int
	EndpointManagerBatchSize int
	EndpointManagerQueueSize int
	Kinds                    map[string]*actor.Props
	MaxRetryCount            int
	// Listener, when set, is served by Start instead of a listener it opens itself
	// (meshnode patch: the caller keeps the port from the moment it chose it).
	Listener net.Listener
	// EndpointWriterDispatcher, when set, runs the endpoint writers' mailboxes
	// (meshnode patch: on long-lived goroutines, whose stacks stay grown).
	EndpointWriterDispatcher actor.Dispatcher
	// StreamFilter, when set, is asked once per inbound stream, with the stream's
	// context (its gRPC peer: the TLS state and the verified client certificate), for
	// a filter of the messages that stream may deliver; an error refuses the stream
	// (meshnode patch: the mesh ties what a peer claims in a message to the certificate
	// it authenticated with).
	StreamFilter func(ctx stdcontext.Context) (MessageFilter, error)
}

// MessageFilter reports whether a message a stream delivered may reach its target;
// false drops it (the filter counts and logs what it drops). It runs on the stream's
// reader goroutine, once per deserialized message (meshnode patch).
type MessageFilter func(message interface{}) bool
