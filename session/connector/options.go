package connector

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// The connector defaults of digest §4.2 (identical in every language).
const (
	DefaultMaxPayload       = 64 << 10
	DefaultConnectTimeout   = 5 * time.Second
	DefaultRequestTimeout   = 30 * time.Second
	DefaultHeartbeatPeriod  = 1 * time.Second
	DefaultHeartbeatTimeout = 5 * time.Second
	DefaultReconnectInitial = 250 * time.Millisecond
	DefaultReconnectMax     = 5 * time.Second
	DefaultReconnectFactor  = 2.0
	DefaultReconnectTries   = 3
)

// Compression is the payload compression algorithm, chosen once per connector (digest
// §2.13). It is never written on the wire: flag 0x04 only says "compressed with the
// agreed algorithm".
type Compression uint8

const (
	// CompressionLZ4 is the default: inbound compressed payloads are decompressed, and
	// calls made WithCompression are compressed.
	CompressionLZ4 Compression = iota
	// CompressionNone rejects WithCompression calls (ErrCompression) and inbound
	// compressed payloads (ErrDecompression, connection kept).
	CompressionNone
)

// HeartbeatOptions configures liveness checking (digest §4.4). The zero value is the
// default: on, ping every second, drop after 5 s without any inbound frame.
type HeartbeatOptions struct {
	// Disabled stops sending pings and the timeout check. Inbound pings are still
	// answered.
	Disabled bool
	Interval time.Duration
	Timeout  time.Duration
}

// ReconnectPolicy configures automatic reconnection after a drop (digest §4.3). The
// zero value is the default: on, 250 ms first delay, ×2 backoff up to 5 s, 3 attempts.
type ReconnectPolicy struct {
	Disabled     bool
	InitialDelay time.Duration
	MaxDelay     time.Duration
	Multiplier   float64
	// MaxAttempts bounds the attempts after one drop; 0 means the default (3), a
	// negative value means no bound.
	MaxAttempts int
	// NotAfterReplaced leaves the connector Disconnected, instead of reconnecting, when
	// the server closed the session because another session took over its binding
	// (CloseError.Replaced): a reconnected session would start unbound, and the client
	// that replaced this one holds the Actor now.
	NotAfterReplaced bool
}

// Options configures a Connector. The zero value of every field selects the default of
// digest §4.2.
type Options struct {
	// Codec is the one typed codec: Send and Request marshal with it (replies and
	// pushes decode with the codec their frame names). Zero (wire.CodecRaw) selects
	// JSON; raw bytes go through SendRaw and RequestRaw instead.
	Codec wire.Codec
	// Codecs holds the codec implementations; nil means codec.NewRegistry().
	Codecs *codec.Registry

	// MaxSendPayload and MaxReceivePayload bound payload bytes only (digest §2.12); the
	// send bound counts the payload after compression, the receive bound is checked on
	// the wire payload and on the decompressed result. Zero means 64 KiB.
	MaxSendPayload    int
	MaxReceivePayload int

	Compression Compression

	// ConnectTimeout bounds one connect attempt (dial, TLS and WebSocket handshakes).
	ConnectTimeout time.Duration
	// RequestTimeout applies to requests whose context has no deadline.
	RequestTimeout time.Duration

	Heartbeat HeartbeatOptions
	Reconnect ReconnectPolicy

	// DiagnosticsOff leaves the flow fields (flag 0x10) off outbound Send and Request
	// frames (diagnostics level Off); the default level Errors puts a fresh UUIDv7 flow
	// with origin application on each.
	DiagnosticsOff bool

	// TLS configures tls:// and wss:// endpoints; nil means the system roots and the
	// endpoint host as server name. Giving it for tcp:// or ws:// is a configuration
	// error (a transport option that disagrees with the scheme, digest §2.1).
	TLS *tls.Config
	// Dialer dials the TCP connection under every transport; nil means a zero
	// net.Dialer.
	Dialer *net.Dialer

	// NoCallerReads makes the read goroutine read every frame. By default, on tcp://
	// and tls://, a request that finds no one reading reads the socket itself until its
	// reply arrives (it saves a goroutine hand-off per reply); ws:// never does. The
	// switch exists to compare the two paths and to rule the fast one out when
	// diagnosing.
	NoCallerReads bool

	// OnDrop is told every drop of a live connection that Close did not ask for (the
	// server's session-closing, a transport error, a heartbeat timeout) with its reason
	// and diagnostic: the application tells a replacement (CloseError.Replaced) from a
	// server drain there. Like the other callbacks it runs on the dispatch goroutine,
	// after the pushes the connection delivered.
	OnDrop func(*CloseError)

	// Logger receives debug and warning records; nil discards them.
	Logger *slog.Logger

	// TracerProvider starts a client span for each Request and Send and sends its W3C
	// trace context to the server as the packet's traceparent and tracestate metadata
	// (docs/tracing.md). nil (the default) or otel's no-op provider: no spans, no
	// metadata added.
	TracerProvider trace.TracerProvider

	// OnStateChange is told every state transition, in order.
	OnStateChange func(State)
	// OnError is told stream-level errors: Error frames without request_seq
	// (*RemoteError), replies matching no pending request (ErrUnexpectedReply),
	// undecodable frames, decompression failures of pushes and handler panics.
	OnError func(error)
}

// normalize fills in defaults and rejects values that have no meaning.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: %s", ErrConfiguration, fmt.Sprintf(format, args...))
	}
	if o.Codecs == nil {
		o.Codecs = codec.NewRegistry()
	}
	if o.Codec == wire.CodecRaw {
		o.Codec = wire.CodecJSON
	}
	if _, err := o.Codecs.Lookup(o.Codec); err != nil {
		return o, fmt.Errorf("%w: %w", ErrConfiguration, err)
	}
	var err error
	if o.MaxSendPayload, err = orDefault("MaxSendPayload", o.MaxSendPayload, DefaultMaxPayload); err != nil {
		return o, err
	}
	if o.MaxReceivePayload, err = orDefault("MaxReceivePayload", o.MaxReceivePayload, DefaultMaxPayload); err != nil {
		return o, err
	}
	// The wire payload length is a u32.
	if int64(o.MaxSendPayload) > math.MaxUint32 || int64(o.MaxReceivePayload) > math.MaxUint32 {
		return bad("payload bounds must fit in 32 bits")
	}
	if o.Compression > CompressionNone {
		return bad("unknown compression %d", o.Compression)
	}
	if o.ConnectTimeout, err = orDefault("ConnectTimeout", o.ConnectTimeout, DefaultConnectTimeout); err != nil {
		return o, err
	}
	if o.RequestTimeout, err = orDefault("RequestTimeout", o.RequestTimeout, DefaultRequestTimeout); err != nil {
		return o, err
	}
	hb := &o.Heartbeat
	if hb.Interval, err = orDefault("Heartbeat.Interval", hb.Interval, DefaultHeartbeatPeriod); err != nil {
		return o, err
	}
	if hb.Timeout, err = orDefault("Heartbeat.Timeout", hb.Timeout, DefaultHeartbeatTimeout); err != nil {
		return o, err
	}
	rc := &o.Reconnect
	if rc.InitialDelay, err = orDefault("Reconnect.InitialDelay", rc.InitialDelay, DefaultReconnectInitial); err != nil {
		return o, err
	}
	if rc.MaxDelay, err = orDefault("Reconnect.MaxDelay", rc.MaxDelay, DefaultReconnectMax); err != nil {
		return o, err
	}
	if rc.MaxDelay < rc.InitialDelay {
		return bad("Reconnect.MaxDelay %v is below InitialDelay %v", rc.MaxDelay, rc.InitialDelay)
	}
	switch {
	case rc.Multiplier == 0:
		rc.Multiplier = DefaultReconnectFactor
	case rc.Multiplier < 1 || math.IsNaN(rc.Multiplier) || math.IsInf(rc.Multiplier, 0):
		return bad("Reconnect.Multiplier %v must be a finite number >= 1", rc.Multiplier)
	}
	if rc.MaxAttempts == 0 {
		rc.MaxAttempts = DefaultReconnectTries
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// orDefault maps zero to def and rejects negative values.
func orDefault[T int | time.Duration](name string, v, def T) (T, error) {
	if v < 0 {
		return v, fmt.Errorf("%w: %s must not be negative", ErrConfiguration, name)
	}
	if v == 0 {
		return def, nil
	}
	return v, nil
}

// endpoint is a parsed tcp://, tls://, ws:// or wss:// address (digest §2.1).
type endpoint struct {
	raw    string
	scheme string
	addr   string // host:port, for tcp and tls
	url    string // the WebSocket URL, for ws and wss
}

func (e endpoint) secure() bool { return e.scheme == "tls" || e.scheme == "wss" }

// parseEndpoint accepts tcp://host:port, tls://host:port, ws://host[:port][/path] and
// wss://host[:port][/path]. The WebSocket path defaults to "/" like the Core listener.
func parseEndpoint(raw string) (endpoint, error) {
	bad := func(why string) (endpoint, error) {
		return endpoint{}, fmt.Errorf("%w: endpoint %q: %s", ErrConfiguration, raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad(err.Error())
	}
	if u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return bad("user info, fragments and opaque forms are not allowed")
	}
	ep := endpoint{raw: raw, scheme: u.Scheme}
	switch u.Scheme {
	case "tcp", "tls":
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return bad("tcp and tls endpoints take no path or query")
		}
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			return bad("want host:port")
		}
		if err := checkHostPort(host, port); err != nil {
			return bad(err.Error())
		}
		ep.addr = net.JoinHostPort(host, port)
	case "ws", "wss":
		host, port := u.Hostname(), u.Port()
		if port == "" && u.Host != "" && u.Host[len(u.Host)-1] == ':' {
			return bad("empty port")
		}
		if port == "" {
			port = "80"
			if u.Scheme == "wss" {
				port = "443"
			}
		}
		if err := checkHostPort(host, port); err != nil {
			return bad(err.Error())
		}
		if u.Path == "" {
			u.Path = "/"
		}
		ep.url = u.String()
	default:
		return bad("scheme must be tcp, tls, ws or wss")
	}
	return ep, nil
}

func checkHostPort(host, port string) error {
	if host == "" {
		return fmt.Errorf("missing host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not in 1..65535", port)
	}
	return nil
}
