package remote

import (
	stdcontext "context"
	"fmt"
	"io/ioutil"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/meshnode/meshnode/internal/protoactor/extensions"

	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"
)

var extensionId = extensions.NextExtensionID()

type Remote struct {
	actorSystem  *actor.ActorSystem
	s            *grpc.Server
	edpReader    *endpointReader
	edpManager   *endpointManager
	config       *Config
	kinds        map[string]*actor.Props
	activatorPid *actor.PID
	blocklist    *BlockList

	// meshnode patch: done when the remote shuts down, so that endpoint writers stop
	// retrying connections (and close them) instead of outliving it.
	stopCtx  stdcontext.Context
	stopFunc stdcontext.CancelFunc
}

func NewRemote(actorSystem *actor.ActorSystem, config *Config) *Remote {
	r := &Remote{
		actorSystem: actorSystem,
		config:      config,
		kinds:       make(map[string]*actor.Props),
		blocklist:   NewBlockList(),
	}
	r.stopCtx, r.stopFunc = stdcontext.WithCancel(stdcontext.Background())
	for k, v := range config.Kinds {
		r.kinds[k] = v
	}

	actorSystem.Extensions.Register(r)

	return r
}

//goland:noinspection GoUnusedExportedFunction
func GetRemote(actorSystem *actor.ActorSystem) *Remote {
	r := actorSystem.Extensions.Get(extensionId)

	return r.(*Remote)
}

func (r *Remote) ExtensionID() extensions.ExtensionID {
	return extensionId
}

func (r *Remote) BlockList() *BlockList { return r.blocklist }

var silenceOnce sync.Once

// SilenceGRPCLog discards gRPC's process-wide logging, once per process.
func SilenceGRPCLog() {
	silenceOnce.Do(func() {
		grpclog.SetLoggerV2(grpclog.NewLoggerV2(ioutil.Discard, ioutil.Discard, ioutil.Discard))
	})
}

// Start the remote server. meshnode patch: a listen failure is returned instead of
// panicking, and a listener given with WithListener is served as is.
func (r *Remote) Start() error {
	// meshnode patch: the gRPC logger is process-wide; setting it on every Start races
	// with the gRPC servers of other in-process nodes. SilenceGRPCLog sets it once.
	SilenceGRPCLog()
	lis := r.config.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", r.config.Address()); err != nil {
			return fmt.Errorf("failed to listen: %w", err)
		}
	}

	var address string
	if r.config.AdvertisedHost != "" {
		address = r.config.AdvertisedHost
	} else {
		address = lis.Addr().String()
	}

	r.actorSystem.ProcessRegistry.RegisterAddressResolver(r.remoteHandler)
	r.actorSystem.ProcessRegistry.Address = address
	r.Logger().Info("Starting remote with address", slog.String("address", address))

	r.edpManager = newEndpointManager(r)
	r.edpManager.start()

	r.s = grpc.NewServer(r.config.ServerOptions...)
	r.edpReader = newEndpointReader(r)
	RegisterRemotingServer(r.s, r.edpReader)
	r.Logger().Info("Starting Proto.Actor server", slog.String("address", address))
	go r.s.Serve(lis)
	return nil
}

func (r *Remote) Shutdown(graceful bool) {
	r.stopFunc()
	if graceful {
		// TODO: need more graceful
		r.edpReader.suspend(true)
		r.edpManager.stop()

		// For some reason GRPC doesn't want to stop
		// Setup timeout as workaround but need to figure out in the future.
		// TODO: grpc not stopping
		c := make(chan bool, 1)
		go func() {
			r.s.GracefulStop()
			c <- true
		}()

		select {
		case <-c:
			r.Logger().Info("Stopped Proto.Actor server")
		case <-time.After(time.Second * 10):
			r.s.Stop()
			r.Logger().Info("Stopped Proto.Actor server", slog.String("err", "timeout"))
		}
	} else {
		r.s.Stop()
		r.Logger().Info("Killed Proto.Actor server")
	}
}

func (r *Remote) SendMessage(pid *actor.PID, header actor.ReadonlyMessageHeader, message interface{}, sender *actor.PID, serializerID int32) {
	rd := &remoteDeliver{
		header:       header,
		message:      message,
		sender:       sender,
		target:       pid,
		serializerID: serializerID,
	}
	r.edpManager.remoteDeliver(rd)
}

func (r *Remote) Logger() *slog.Logger {
	return r.actorSystem.Logger()
}
