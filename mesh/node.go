package mesh

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/meshnode/meshnode/fault"
	"github.com/meshnode/meshnode/internal/protoactor/actor"
	"github.com/meshnode/meshnode/internal/protoactor/eventstream"
	"github.com/meshnode/meshnode/internal/protoactor/remote"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/meshnode/meshnode/internal/buildinfo"
	"github.com/meshnode/meshnode/internal/grpcbuf"
	"github.com/meshnode/meshnode/internal/logfloor"
	"github.com/meshnode/meshnode/internal/ratelog"
	"github.com/meshnode/meshnode/internal/workpool"
	"github.com/meshnode/meshnode/mesh/gossipnet"
	"github.com/meshnode/meshnode/mesh/meshpb"
	"github.com/meshnode/meshnode/mesh/wire"
	"github.com/meshnode/meshnode/meshtls"
)

// Preset chooses memberlist's timing.
type Preset int

const (
	// PresetLAN is memberlist's DefaultLANConfig: the production default.
	PresetLAN Preset = iota
	// PresetLocal is memberlist's DefaultLocalConfig: one host, faster detection.
	PresetLocal
	// PresetTest converges and detects failures fast, for in-process test meshes.
	PresetTest
)

// Config configures a node. The zero value joins nothing and binds OS-chosen ports on
// 127.0.0.1.
type Config struct {
	// RID is the node's stable identity. Default: its advertised mesh address.
	RID string
	// Generation of this lifecycle. Default: NewGeneration().
	Generation uint64
	// BindHost is the host every socket opens on (default 127.0.0.1).
	BindHost string
	// AdvertiseHost is the host peers dial (default BindHost; required when BindHost is
	// a wildcard).
	AdvertiseHost string
	// MeshPort is the memberlist (gossip) port; 0 lets the OS choose.
	MeshPort int
	// RemotePort is the protoactor remote (gRPC) port; 0 lets the OS choose.
	RemotePort int
	// Join lists seed host:port mesh addresses.
	Join []string
	// Preset tunes memberlist (default PresetLAN).
	Preset Preset
	// Logger, MeterProvider: nil means slog.Default() and otel's global provider.
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
	// PeerWindowRecords and PeerWindowBytes bound the records sent to one peer and not
	// yet acknowledged by it (flow.go). 0: DefaultPeerWindowRecords and
	// DefaultPeerWindowBytes.
	PeerWindowRecords int
	PeerWindowBytes   int64
	// DNSConfigPath is the resolv.conf whose name servers resolve seed names that are
	// DNS names (default /etc/resolv.conf; the system resolver is the fallback).
	DNSConfigPath string
	// NoCoalescing sends every record toward a peer as a protoactor message of its own
	// instead of coalescing the records queued at the same moment (coalesce.go): the
	// switch that lets the suites run with the fast path off.
	NoCoalescing bool
	// AdminAddr is this node's admin HTTP host:port, gossiped to the other members (as
	// Member.AdminAddr) so that one node's operator dashboard can read every member's
	// figures. Empty: none is gossiped. Peers must be able to dial it: not a wildcard
	// host.
	AdminAddr string

	// TLS, when set, makes the record transport mutual TLS: every gRPC connection
	// between nodes presents the node's certificate and checks the peer's against the
	// fleet CA, and a peer's messages must carry a sender RID its certificate names
	// (security.go). The node's own certificate must name RID. Its owner reloads it.
	TLS *meshtls.Certs
	// GossipKeys encrypt gossip with memberlist's keyring (16, 24 or 32 bytes each;
	// the first is the primary); GossipKeyFile reads them from a file instead (one
	// base64 key per line, the first the primary), re-read by ReloadGossipKeys. Give
	// one or neither.
	GossipKeys    [][]byte
	GossipKeyFile string
	// ClusterLabel is memberlist's label, carried on every gossip packet and stream
	// (authenticated with the gossip key when there is one): a node refuses gossip
	// labelled otherwise, so two fleets on one network never merge. At most 255 bytes.
	ClusterLabel string

	// Build and Revision are the build version and VCS revision this node announces to
	// the others (Member.Versions, node metadata version 3), at most 64 and 40 bytes.
	// Empty: the main module's version and revision from the binary's build
	// information.
	Build, Revision string

	// legacyMeta plays a build from before node metadata version 3 (tests only): it
	// neither says it reads version 3 nor writes it, and ignores members that write it.
	legacyMeta bool
	// updateHook runs inside each re-gossip of the metadata (tests only).
	updateHook func()
}

// Node is one running meshnode lifecycle in the mesh.
type Node struct {
	id     NodeID
	cfg    Config
	log    *slog.Logger
	system *actor.ActorSystem
	remote *remote.Remote
	// pool runs the record receiver and the endpoint writers toward peers on
	// long-lived goroutines (a fresh goroutine's stack grows again on every batch).
	pool    *workpool.Pool
	members *membership
	// membersSet is set once members is: the metrics callback reads members only then.
	membersSet atomic.Bool
	metrics    *meshMetrics
	sec        *security
	handlers   atomic.Pointer[map[wire.Command]RecordHandler]
	// inline: the handlers registered with Records.HandleInline, by command, which
	// may run on the peer connection's reader; ownPending: records in the record
	// receiver's mailbox or being handled there (no record runs inline while there
	// is one).
	inline     [256]atomic.Pointer[RecordHandler]
	ownPending atomic.Int64
	hmu        sync.Mutex
	tapFn      atomic.Pointer[func(TapRecord)]
	pids       sync.Map        // remote address -> records PID
	dropLog    ratelog.Limiter // drops: once per (reason, sending RID) and interval
	stopping   atomic.Bool
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
	meshAddr   string
	remAddr    string
	// meta is what this node gossips; metaV3 whether it writes version 3 (meta.go:
	// once every live member reads it), changed by metaLoop under metaMu.
	meta   nodeMeta
	metaMu sync.Mutex
	metaV3 bool
	// updateMu serialises memberlist's UpdateNode (updateNode).
	updateMu sync.Mutex

	flow *flow
	// coalesce: records toward a peer are coalesced (Config.NoCoalescing off).
	coalesce bool
	// localPIDs: the local actors coalesced records were for (coalesce.go).
	localPIDs localPIDs

	timing timing // memberlist's failure-detection settings, for FailureBound

	// suspicions counts what memberlist's log tells of suspicion: peers this node
	// suspected, and suspicions of this node it refuted (each one a false suspicion).
	suspicions suspicionCounts

	membershipView Membership
	recordsView    Records
	unsubFlow      func()
	deadLetters    *eventstream.Subscription
	endpointEvents *eventstream.Subscription // protoactor endpoint writers: connections lost
	undeliverable  atomic.Pointer[func(env *meshpb.Envelope, actorName string) bool]
}

// Errors of node start-up.
var (
	ErrConfig = fault.New(fault.NotConfigured, "mesh: configuration error")
	// ErrDuplicateRID: a live member of the mesh has this node's RID (another process
	// started with the same id). The start fails, and the mesh keeps that member.
	ErrDuplicateRID = fault.New(fault.AlreadyExists, "mesh: node id already live in the mesh")
)

// grpcWindow is the fixed gRPC flow-control window (per stream and per connection) of
// the remote streams between nodes. With gRPC's default dynamic window, every message
// that arrives when no estimate is in flight makes the receiver send a window update
// and a bandwidth-estimation ping, and the sender answer the ping: three writes per
// message instead of one, which is most of a lone request's cost. A fixed window turns
// the estimation off. 4 MiB is less than the 16 MiB the estimate may grow to, and the
// peer window (flow.go) bounds what is in flight anyway.
const grpcWindow = 4 << 20

// tlsHandshakeTimeout bounds a TLS handshake on the record transport's server.
const tlsHandshakeTimeout = 10 * time.Second

// grpcBuffers is the buffer pool of every node's gRPC connections (see grpcbuf).
var (
	grpcBuffers grpcbuf.Pool
	grpcCodec   = grpcbuf.Codec{Pool: &grpcBuffers}
)

// Start starts a node: it binds the gossip and remote ports, joins the seeds (retrying
// in the background with backoff when none answers) and starts receiving records.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.BindHost == "" {
		cfg.BindHost = "127.0.0.1"
	}
	if cfg.AdvertiseHost == "" {
		if cfg.BindHost == "0.0.0.0" || cfg.BindHost == "::" {
			return nil, fmt.Errorf("%w: wildcard bind host %s needs an advertise host", ErrConfig, cfg.BindHost)
		}
		cfg.AdvertiseHost = cfg.BindHost
	}
	if cfg.Generation == 0 {
		cfg.Generation = NewGeneration()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	n := &Node{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), localPIDs: localPIDs{seed: maphash.MakeSeed()}}
	n.membershipView.n, n.recordsView.n = n, n
	n.flow = newFlow(n, cfg.PeerWindowRecords, cfg.PeerWindowBytes)
	n.coalesce = !cfg.NoCoalescing
	empty := map[wire.Command]RecordHandler{}
	n.handlers.Store(&empty)
	var err error
	if n.sec, err = newSecurity(cfg, n.log); err != nil {
		return nil, err
	}
	if cfg.TLS != nil && cfg.RID == "" {
		return nil, fmt.Errorf("%w: mesh TLS needs a RID (the node id its certificate names)", ErrConfig)
	}
	if cfg.TLS != nil && !slices.Contains(cfg.TLS.Leaf().DNSNames, cfg.RID) {
		return nil, fmt.Errorf("%w: the mesh TLS certificate does not name the RID %q (DNS SANs %v)", ErrConfig, cfg.RID, cfg.TLS.Leaf().DNSNames)
	}
	known := func() []Member { // a collection may come before the membership exists
		if !n.membersSet.Load() {
			return nil
		}
		return n.membershipView.Known()
	}
	if n.metrics, err = newMeshMetrics(cfg.MeterProvider, n.flowStats, &n.suspicions, known); err != nil {
		return nil, fmt.Errorf("mesh metrics: %w", err)
	}
	if err := n.sec.registerMetrics(cfg.MeterProvider); err != nil {
		n.metrics.unregister()
		return nil, fmt.Errorf("mesh metrics: %w", err)
	}

	// Gossip transport first: with port 0 its real port is part of the default RID.
	mlLogger := log.New(slogWriter{log: n.log, counts: &n.suspicions, stopping: &n.stopping, sec: n.sec,
		onSuspect: func(name string) { n.members.suspected(name) }}, "", 0)
	nt, err := gossipnet.New([]string{cfg.BindHost}, cfg.MeshPort, mlLogger)
	if err != nil {
		n.metrics.unregister()
		n.sec.unregister()
		return nil, fmt.Errorf("%w: mesh port %s:%d: %v", ErrConfig, cfg.BindHost, cfg.MeshPort, err)
	}
	meshPort := nt.Port()
	n.meshAddr = net.JoinHostPort(cfg.AdvertiseHost, strconv.Itoa(meshPort))
	if cfg.RID == "" {
		cfg.RID = n.meshAddr
		n.cfg.RID = cfg.RID
	}
	if len(cfg.RID) > 255 {
		_ = nt.Shutdown()
		n.metrics.unregister()
		n.sec.unregister()
		return nil, fmt.Errorf("%w: RID over 255 bytes", ErrConfig)
	}
	n.id = NodeID{RID: cfg.RID, Generation: cfg.Generation}

	// The remote's listener is opened here and handed to protoactor, so the port is
	// held from the moment it is chosen (with port 0, its real number is needed for the
	// advertised address before the remote starts).
	remoteLn, err := net.Listen("tcp", net.JoinHostPort(cfg.BindHost, strconv.Itoa(cfg.RemotePort)))
	if err != nil {
		_ = nt.Shutdown()
		n.metrics.unregister()
		n.sec.unregister()
		return nil, fmt.Errorf("%w: remote port %s:%d: %v", ErrConfig, cfg.BindHost, cfg.RemotePort, err)
	}
	remotePort := remoteLn.Addr().(*net.TCPAddr).Port
	n.remAddr = net.JoinHostPort(cfg.AdvertiseHost, strconv.Itoa(remotePort))
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(logfloor.New(n.log.Handler(), slog.LevelWarn))
	}),
		// The dead-letter throttle parks a goroutine for one interval after the first
		// dead letter; keep it short so it never outlives the node for long.
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond))
	n.pool = workpool.New(300)
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	serverOpts := []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcMaxMessage), grpc.InitialWindowSize(grpcWindow), grpc.InitialConnWindowSize(grpcWindow),
		experimental.BufferPool(&grpcBuffers), grpc.ForceServerCodecV2(grpcCodec)}
	var tlsOpts []remote.ConfigOption
	if cfg.TLS != nil {
		creds = tlsCreds{n: n}
		// A handshake that does not finish in time (a peer that opens connections and
		// says nothing) ends; gRPC's default waits 120 s.
		serverOpts = append(serverOpts, grpc.Creds(creds), grpc.ConnectionTimeout(tlsHandshakeTimeout))
		tlsOpts = append(tlsOpts, remote.WithStreamFilter(n.streamFilter))
	}
	rc := remote.Configure(cfg.BindHost, remotePort, append([]remote.ConfigOption{
		remote.WithListener(remoteLn),
		remote.WithAdvertisedHost(n.remAddr),
		// A dead peer should cost seconds, not the default ~110 s of gRPC retries.
		remote.WithDialOptions(
			grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 2 * time.Second}),
			grpc.WithInitialWindowSize(grpcWindow),
			grpc.WithInitialConnWindowSize(grpcWindow),
			experimental.WithBufferPool(&grpcBuffers),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcCodec)),
		),
		remote.WithServerOptions(serverOpts...),
		// The default preallocates a million-slot queue per peer. The queue grows when
		// it fills, and with coalescing and the peer window it rarely holds more than a
		// few messages: start it small (16,384 slots were 256 KiB zeroed per peer, an
		// eighth of a 30-node fleet's CPU while it joined).
		remote.WithEndpointWriterQueueSize(256),
		remote.WithEndpointWriterDispatcher(n.pool),
		remote.WithEndpointManagerQueueSize(1 << 14),
	}, tlsOpts...)...)
	rc.MaxRetryCount = 2
	n.remote = remote.NewRemote(n.system, rc)
	if err := n.remote.Start(); err != nil {
		_ = remoteLn.Close()
		_ = nt.Shutdown()
		n.system.Shutdown()
		return nil, fmt.Errorf("mesh: remote: %w", err)
	}
	n.deadLetters = n.system.EventStream.Subscribe(n.onDeadLetter)
	n.endpointEvents = n.system.EventStream.Subscribe(n.onEndpointEvent)
	recordsProps := actor.PropsFromProducer(func() actor.Actor { return &recordsActor{n: n} },
		actor.WithMailbox(func() actor.Mailbox { return recordsMailbox{Mailbox: actor.Unbounded()(), n: n} }),
		actor.WithDispatcher(n.pool))
	if _, err := n.system.Root.SpawnNamed(recordsProps, recordsActorName); err != nil {
		n.shutdownTransport()
		_ = nt.Shutdown()
		return nil, fmt.Errorf("mesh: records actor: %w", err)
	}

	n.meta = nodeMeta{RID: n.id.RID, Generation: n.id.Generation, RemoteAddr: n.remAddr, AdvertiseHost: cfg.AdvertiseHost, AdminAddr: cfg.AdminAddr,
		Versions: announcedVersions(cfg)}
	// Alone, every member reads version 3; joining, the seeds may not: version 3 once
	// they say they do (metaLoop), so that older members never see a metadata they
	// would ignore.
	n.metaV3 = len(cfg.Join) == 0 && !cfg.legacyMeta
	meta, err := n.meta.encode(n.metaV3)
	if err != nil {
		n.shutdownTransport()
		_ = nt.Shutdown()
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var ver *verifier
	if cfg.TLS != nil {
		ver = newVerifier(n.verifyMember, func(mem Member, err error) {
			n.sec.tlsRefusal("to", mem.RemoteAddr, mem.ID.RID, fmt.Errorf("member not admitted: it did not prove its node id: %w", err))
		})
	}
	n.members = newMembership(n.id, meta, n.log, ver)
	n.members.legacyMeta, n.members.selfVersions = cfg.legacyMeta, n.meta.Versions
	n.membersSet.Store(true)
	n.unsubFlow = n.members.subscribe(func(ev MemberEvent) {
		if ev.Type == EventLeft || ev.Type == EventFailed {
			n.flow.drop(ev.Member.ID)
		}
	})
	mlc := presetConfig(cfg.Preset)
	n.timing = timing{probe: mlc.ProbeInterval, probeTimeout: mlc.ProbeTimeout, suspicionMult: mlc.SuspicionMult, maxMult: mlc.SuspicionMaxTimeoutMult}
	mlc.Name = n.id.RID
	mlc.Transport = nt
	mlc.AdvertiseAddr = cfg.AdvertiseHost
	mlc.AdvertisePort = meshPort
	mlc.Delegate = n.members
	mlc.Events = n.members
	mlc.Conflict = n.members
	mlc.Ping = n.members
	if !cfg.legacyMeta {
		mlc.DelegateProtocolMax = metaV3Capable
	}
	mlc.Logger = mlLogger
	n.sec.configure(mlc)
	if cfg.DNSConfigPath != "" {
		mlc.DNSConfigPath = cfg.DNSConfigPath
	}
	list, err := memberlist.Create(mlc)
	if err != nil {
		n.members.stop()
		n.shutdownTransport()
		_ = nt.Shutdown() // memberlist shuts it down on some of its failures, not all
		return nil, fmt.Errorf("mesh: memberlist: %w", err)
	}
	n.members.list = list
	// memberlist announced this node to itself inside Create; once the membership
	// goroutine applied it, this node is live in its own view, so placement and
	// look-ups work as soon as Start returns.
	select {
	case <-n.members.selfLive:
	case <-ctx.Done():
		n.finish()
		return nil, fmt.Errorf("mesh: start: %w", ctx.Err())
	}
	if len(cfg.Join) > 0 {
		// A seed may be a DNS name: memberlist resolves it to every address (a
		// Kubernetes headless service, a Consul name) and joins through each; the retry
		// below resolves it again. A name that does not resolve at all is a mistake in
		// the configuration, not a peer that is late: the start fails naming it.
		c, err := list.Join(cfg.Join)
		if c == 0 && err != nil {
			if bad := unresolved(err, cfg.Join); len(bad) == len(cfg.Join) {
				n.finish()
				return nil, fault.Errorf(fault.NotConfigured, "mesh: join: %s does not resolve (Config.Join, --join): %v", strings.Join(bad, ", "), err)
			}
		}
		if c > 0 {
			if err := n.members.refusal(); err != nil {
				// Another process holds this RID: leave no trace (no leave message
				// either, which peers would take for the live member's).
				n.finish()
				return nil, err
			}
		}
		if err != nil || c == 0 {
			if err == nil {
				err = errors.New("no seed answered")
			}
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.members.joinLoop(cfg.Join, n.stop, err)
			}()
		}
		if c > 0 {
			n.members.settle()
			// Join returned with the seed's members notified, not yet applied: until
			// they are, this node sees itself alone and would hold every directory
			// entry, placing fresh activations of Actors that live elsewhere (found
			// by the chaos suite: a restarted node did, and the merge that followed
			// stopped the ones with the state).
			select {
			case <-n.members.barrier():
			case <-ctx.Done():
				n.finish()
				return nil, fmt.Errorf("mesh: start: %w", ctx.Err())
			}
		}
	}
	if len(cfg.Join) == 0 {
		n.members.settle()
	}
	n.wg.Add(3)
	go n.metaLoop()
	go n.outboxSweep()
	go n.healLoop(max(4*mlc.ProbeInterval, time.Second))
	return n, nil
}

// joinRetransmitMult: each node passes a membership change on to at most
// RetransmitMult × ⌈log10(n+1)⌉ peers. With memberlist's 2 (local) or 4 (LAN) a change
// sometimes never reached a member of a 30-node fleet that was joining, which then
// learned of the new node only at its next full state sync (15 or 30 s later: 1 start
// in 3 of a 30-node fleet on local timing, about 1 in 10 on LAN). With 8 the chance
// that an epidemic that wide misses a member is negligible; the cost is a few more
// entries piggybacked on gossip after each change.
const joinRetransmitMult = 8

func presetConfig(p Preset) *memberlist.Config {
	switch p {
	case PresetLocal:
		c := memberlist.DefaultLocalConfig()
		c.DeadNodeReclaimTime = 5 * time.Second
		c.RetransmitMult = joinRetransmitMult
		return c
	case PresetTest:
		c := memberlist.DefaultLocalConfig()
		c.ProbeInterval = 200 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.GossipInterval = 50 * time.Millisecond
		c.PushPullInterval = 2 * time.Second
		c.SuspicionMult = 2
		c.RetransmitMult = 4
		c.TCPTimeout = 2 * time.Second
		c.DeadNodeReclaimTime = time.Second
		return c
	}
	c := memberlist.DefaultLANConfig()
	// Faster failure detection than memberlist's LAN default (about 6 s for three
	// nodes): a probe every 400 ms with a 300 ms ack timeout, and a suspicion of
	// 3 × max(1, log10 n) probe intervals (1.2 s below ten nodes), cut short by peer
	// confirmations. Lifeguard stays on: a node that is itself slow to answer widens its
	// own timeouts (awareness) before it suspects others, which is what keeps a loaded
	// node from raising false suspicions. Gossip every 50 ms to 4 peers spreads a join
	// through 30 nodes in about three rounds: 0.29 s for a 30-node fleet to converge,
	// against 0.42 s at 100 ms. A round with nothing queued sends nothing: an idle
	// node pays a timer wake-up and a pick of random members (a scan of the member list
	// under its lock) 20 times a second instead of 10.
	c.ProbeInterval = 400 * time.Millisecond
	c.ProbeTimeout = 300 * time.Millisecond
	c.SuspicionMult = 3
	c.GossipInterval = 50 * time.Millisecond
	c.GossipNodes = 4
	c.RetransmitMult = joinRetransmitMult
	// No LZW compression of gossip: on a LAN it saves little, and memberlist's LZW
	// allocates its tables on every message (in a 30-node fleet joining, compression was
	// an eighth of all CPU and most of the garbage). A peer that compresses is still
	// understood: memberlist decompresses whatever arrives compressed.
	c.EnableCompression = false
	// A node restarted on another address may take its RID back once the old
	// lifecycle has been dead this long (on the same address it refutes at once).
	c.DeadNodeReclaimTime = 30 * time.Second
	return c
}

// ID returns this node's identity.
func (n *Node) ID() NodeID { return n.id }

// MeshAddr returns the advertised gossip address (what --join takes).
func (n *Node) MeshAddr() string { return n.meshAddr }

// RemoteAddr returns the advertised protoactor remote address.
func (n *Node) RemoteAddr() string { return n.remAddr }

// Logger returns the node's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

// Membership returns the node's view of the mesh: members, events, liveness.
func (n *Node) Membership() *Membership { return &n.membershipView }

// Records returns the node's record transport: handlers, sends, flow control, tap.
func (n *Node) Records() *Records { return &n.recordsView }

// Leave leaves the mesh gracefully and stops the node: peers see it as left.
func (n *Node) Leave(ctx context.Context) error {
	timeout := 2 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	var err error
	n.stopOnce.Do(func() {
		n.stopping.Store(true)
		close(n.stop)
		if n.members.refusal() != nil {
			// Refused for a duplicate RID: a leave would name the live member's RID.
			n.finish()
			return
		}
		// Tell peers this is a leave, not a death, before the leave itself.
		n.metaMu.Lock()
		leaving := n.meta
		leaving.Leaving = true
		b, merr := leaving.encode(n.metaV3)
		n.metaMu.Unlock()
		if merr == nil {
			n.members.setMeta(b)
			_ = n.updateNode(timeout/2, false)
		}
		if lerr := n.members.list.Leave(timeout / 2); lerr != nil {
			err = fmt.Errorf("mesh: leave: %w", lerr)
		}
		n.finish()
	})
	return err
}

// kill stops the node abruptly, without leaving: peers detect it as failed. Tests reach
// it through meshtest.Kill.
func (n *Node) kill() {
	n.stopOnce.Do(func() {
		n.stopping.Store(true)
		close(n.stop)
		n.finish()
	})
}

func (n *Node) finish() {
	_ = n.members.list.Shutdown()
	n.wg.Wait()
	n.unsubFlow()
	n.members.stop()
	n.flow.stop()
	n.shutdownTransport()
}

func (n *Node) shutdownTransport() {
	n.metrics.unregister()
	n.sec.unregister()
	if n.deadLetters != nil {
		n.system.EventStream.Unsubscribe(n.deadLetters)
	}
	if n.endpointEvents != nil {
		n.system.EventStream.Unsubscribe(n.endpointEvents)
	}
	n.remote.Shutdown(false)
	n.system.Shutdown()
	// Not Stop: a writer blocked toward a peer that stopped reading must not hold up
	// the shutdown; it ends when its stream does.
	n.pool.Release()
}

var _ io.Writer = slogWriter{}

// healLoop re-joins, every interval, one of the members this node saw fail (not those
// that left), in turn. memberlist probes and gossips only with live members, so two
// sides of a partition that has healed would otherwise never hear of each other again;
// a join exchanges the full state, each side refutes the other's "dead", and the views
// merge. One address per round: a join to a host that does not answer blocks for
// memberlist's TCP timeout, and the loop must notice the node stopping soon after.
func (n *Node) healLoop(interval time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	next := 0
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		var addrs []string
		for _, m := range n.members.table.Load().byRID {
			if m.State == StateDead && m.MeshAddr != "" && m.ID.RID != n.id.RID {
				addrs = append(addrs, m.MeshAddr)
			}
		}
		if len(addrs) == 0 {
			continue
		}
		slices.Sort(addrs)
		addr := addrs[next%len(addrs)]
		next++
		if c, err := n.members.list.Join([]string{addr}); err == nil && c > 0 {
			n.log.Info("mesh: reached a member seen failed, merging views", "addr", addr)
		}
	}
}

// announcedVersions is what the node announces of itself (Config.Build, Revision, the
// build information, the wire versions).
func announcedVersions(cfg Config) Versions {
	bi := buildinfo.Read(cfg.Build)
	rev := cfg.Revision
	if rev == "" {
		rev = bi.ShortRevision()
	}
	return Versions{Build: truncate(bi.Version, maxBuildLen), Revision: truncate(rev, maxRevisionLen),
		Stream: buildinfo.Stream, Service: buildinfo.ServiceWire, Meta: buildinfo.NodeMeta, Snapshot: buildinfo.StateSnapshot}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// metaLoop keeps the node metadata version in step with the members (meta.go): after
// each membership change it writes version 3 if every live member reads it, else
// version 1 or 2, and gossips the metadata again when that choice changed.
func (n *Node) metaLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.members.review:
		}
		if n.cfg.legacyMeta {
			continue
		}
		want := n.members.allReadV3()
		n.metaMu.Lock()
		if want == n.metaV3 || n.stopping.Load() {
			n.metaMu.Unlock()
			continue
		}
		b, err := n.meta.encode(want)
		if err == nil {
			n.metaV3 = want
			n.members.setMeta(b)
		}
		n.metaMu.Unlock()
		if err != nil {
			n.log.Warn("mesh: node metadata", "err", err)
			continue
		}
		version := metaVersion3
		if !want {
			version = metaVersion1
			if n.meta.AdminAddr != "" {
				version = metaVersion2
			}
		}
		n.log.Debug("mesh: node metadata version changes", "version", version)
		// UpdateNode queues the gossip, then waits until it has been retransmitted to
		// enough peers (a few gossip rounds), which a node that stops meanwhile never
		// does: do not wait (its timeout error says only that it did not).
		_ = n.updateNode(time.Millisecond, true)
	}
}

// updateNode gossips this node's metadata again. memberlist's UpdateNode reads the
// node's own address fields without its lock while a concurrent UpdateNode writes them
// under it (a data race CI caught between metaLoop and Leave), so the calls are
// serialised; once the node is stopping, only Leave's goes out (unlessStopping).
func (n *Node) updateNode(timeout time.Duration, unlessStopping bool) error {
	n.updateMu.Lock()
	defer n.updateMu.Unlock()
	if unlessStopping && n.stopping.Load() {
		return nil
	}
	if n.cfg.updateHook != nil {
		n.cfg.updateHook()
	}
	return n.members.list.UpdateNode(timeout)
}

// timing is what bounds memberlist's failure detection.
type timing struct {
	probe, probeTimeout    time.Duration
	suspicionMult, maxMult int
}

// failureBound: see Membership.FailureBound.
func (n *Node) failureBound() time.Duration {
	t := n.timing
	live := len(n.membershipView.Live())
	scale := math.Max(1, math.Log10(math.Max(1, float64(live))))
	maxMult := max(t.maxMult, 1)
	suspicion := time.Duration(float64(maxMult*t.suspicionMult) * scale * float64(t.probe))
	return suspicion + t.probe + t.probeTimeout
}

// unresolved returns the seeds a memberlist join error says did not resolve.
func unresolved(err error, seeds []string) []string {
	var out []string
	for _, s := range seeds {
		if strings.Contains(err.Error(), "failed to resolve "+s+":") {
			out = append(out, s)
		}
	}
	return out
}
