package connector

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshnode/meshnode/internal/traceprop"
	"github.com/meshnode/meshnode/session/wire"
)

// State is the connector life cycle of digest §4.1.
type State int32

const (
	StateCreated State = iota
	StateConnecting
	StateConnected
	StateReconnecting
	StateDisconnected
	StateClosed // terminal
)

var stateNames = [...]string{"Created", "Connecting", "Connected", "Reconnecting", "Disconnected", "Closed"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Connector is a client of one STREAM endpoint. Create it with New; the zero value is
// not usable.
type Connector struct {
	ep   endpoint
	opts Options

	// seq is the last request_seq handed out. It is never reset, not even on reconnect,
	// so a late reply of an old session can never match a new request.
	seq  atomic.Uint64
	live atomic.Pointer[conn] // the connected session, nil otherwise

	life context.Context // cancelled by Close: stops dials and the reconnect loop
	kill context.CancelFunc

	mu       sync.Mutex
	state    State
	reason   wire.CloseReason // of the last drop; 0 before the first
	lastDrop *CloseError      // the last drop Close did not ask for
	attempt  *attempt         // the running connect or reconnect, while Connecting/Reconnecting
	disp     *dispatcher      // started by the first Connect
	wg       sync.WaitGroup   // read, heartbeat and reconnect goroutines

	hmu      sync.RWMutex
	handlers map[string]func(Message)
	watchers map[uint64]func(State) // WatchState, under hmu
	nextW    uint64
	watching atomic.Int32

	tracer trace.Tracer // nil: tracing off (the default)
	clock  clock        // flow ids' and leads' time

	grace time.Duration // readerGrace; tests change it before Connect
	leads atomic.Uint64 // requests that read their own reply (see conn), for tests
}

// attempt lets Connect callers wait for a connect or reconnect that is already running.
type attempt struct {
	done chan struct{}
	err  error
}

// New validates the endpoint and options and returns a connector in state Created. It
// does not dial and starts no goroutine.
func New(endpoint string, opts Options) (*Connector, error) {
	ep, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if opts.TLS != nil && !ep.secure() {
		return nil, fmt.Errorf("%w: TLS options given for the %s:// endpoint %q", ErrConfiguration, ep.scheme, endpoint)
	}
	opts, err = opts.normalize()
	if err != nil {
		return nil, err
	}
	c := &Connector{ep: ep, opts: opts, handlers: make(map[string]func(Message)), grace: readerGrace,
		tracer: traceprop.Tracer(opts.TracerProvider, tracerName)}
	c.life, c.kill = context.WithCancel(context.Background())
	return c, nil
}

// State returns the current state.
func (c *Connector) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// CloseReason returns the reason of the last drop: the server's session-closing reason,
// HeartbeatTimeout, ClientClose when Close ended a live connection, else TransportError
// (also after a failed connect attempt, digest §4.6). It is 0 while nothing has dropped
// yet.
func (c *Connector) CloseReason() wire.CloseReason {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// Handle registers h for server pushes (Send frames) named name, replacing any earlier
// handler; a nil h removes it. Pushes without a handler are dropped (logged at debug
// level). Handlers run on the dispatch goroutine, one at a time, in arrival order.
func (c *Connector) Handle(name string, h func(Message)) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if h == nil {
		delete(c.handlers, name)
		return
	}
	c.handlers[name] = h
}

// WatchState registers fn to be told every state transition from now on, in order,
// on the dispatch goroutine like OnStateChange (after the pushes that arrived before
// the transition); stop removes it. For a library layered on a connector it was handed
// (the plugin services' connection re-subscribes when it reconnects).
func (c *Connector) WatchState(fn func(State)) (stop func()) {
	c.hmu.Lock()
	if c.watchers == nil {
		c.watchers = map[uint64]func(State){}
	}
	c.nextW++
	id := c.nextW
	c.watchers[id] = fn
	c.watching.Add(1)
	c.hmu.Unlock()
	return func() {
		c.hmu.Lock()
		if _, ok := c.watchers[id]; ok {
			delete(c.watchers, id)
			c.watching.Add(-1)
		}
		c.hmu.Unlock()
	}
}

// stateWatchers returns the WatchState functions.
func (c *Connector) stateWatchers() []func(State) {
	c.hmu.RLock()
	defer c.hmu.RUnlock()
	out := make([]func(State), 0, len(c.watchers))
	for _, fn := range c.watchers {
		out = append(out, fn)
	}
	return out
}

func (c *Connector) handler(name string) func(Message) {
	c.hmu.RLock()
	defer c.hmu.RUnlock()
	return c.handlers[name]
}

// Connect establishes the connection (digest §4.1): from Created or Disconnected it
// makes one connect attempt bounded by ConnectTimeout and ctx; while Connecting or
// Reconnecting it waits for the running attempt (a reconnect run ends when it connects or
// gives up); when Connected it returns nil at once; after Close it returns ErrClosed.
// A failed Connect leaves the connector Disconnected and does not start the reconnect
// policy: that applies to drops of an established connection.
func (c *Connector) Connect(ctx context.Context) error {
	c.mu.Lock()
	switch c.state {
	case StateClosed:
		c.mu.Unlock()
		return ErrClosed
	case StateConnected:
		c.mu.Unlock()
		return nil
	case StateConnecting, StateReconnecting:
		a := c.attempt
		c.mu.Unlock()
		select {
		case <-a.done:
			return a.err
		case <-ctx.Done():
			return fmt.Errorf("connector: waiting for the running connect: %w", ctx.Err())
		}
	}
	a := &attempt{done: make(chan struct{})}
	c.attempt = a
	if c.disp == nil {
		c.disp = newDispatcher(c)
	}
	c.setStateLocked(StateConnecting)
	c.mu.Unlock()

	t, err := c.dial(ctx)

	c.mu.Lock()
	switch {
	case c.state == StateClosed:
		err = ErrClosed
	case err != nil:
		c.reason = wire.CloseTransportError
		c.setStateLocked(StateDisconnected)
	default:
		c.installLocked(t)
		t = nil
	}
	c.attempt = nil
	a.err = err
	close(a.done)
	c.mu.Unlock()
	if t != nil {
		t.shutdown(false)
	}
	return err
}

// Close ends the connector for good: frames already queued by Send are written (for at
// most a second), then the live connection is closed (no frame is added; the server
// sees the transport close, reason ClientClose), pending requests fail with a
// *CloseError matching ErrClosed, the reconnect loop stops, and Close waits for the read,
// heartbeat, reconnect and dispatch goroutines. Callbacks still queued are discarded;
// OnStateChange(StateClosed) is the last callback. If a callback is running when Close
// is called (which includes Close called from a callback), Close does not wait for it:
// the dispatch goroutine ends as soon as it returns. A WebSocket connection gets the
// WebSocket close handshake (bounded by the library's 5 s timeouts). Close is
// idempotent.
func (c *Connector) Close() error {
	c.mu.Lock()
	if c.state == StateClosed {
		c.mu.Unlock()
		return nil
	}
	// Not setStateLocked: the dispatcher reports Closed itself, after dropping the queue.
	c.state = StateClosed
	cn := c.live.Swap(nil)
	if cn != nil {
		c.reason = wire.CloseClientClose
	}
	d := c.disp
	c.kill()
	c.mu.Unlock()

	if cn != nil {
		// Sends return once queued: write what they queued before closing the socket, so
		// that "Send, then Close" still delivers.
		cn.flush(closeFlushTimeout)
		cn.drop(wire.CloseClientClose, "", ErrClosed)
	}
	c.wg.Wait()
	if d != nil {
		d.stop()
	} else if c.opts.OnStateChange != nil {
		// Nothing ever ran on a dispatcher, so this cannot race with another callback.
		c.opts.OnStateChange(StateClosed)
	}
	return nil
}

// setStateLocked records s and queues the OnStateChange callback; queueing under c.mu
// keeps the callbacks in transition order.
func (c *Connector) setStateLocked(s State) {
	c.state = s
	if (c.opts.OnStateChange != nil || c.watching.Load() > 0) && c.disp != nil {
		c.disp.push(event{kind: eventState, state: s})
	}
}

// installLocked makes t the live connection and starts its goroutines.
func (c *Connector) installLocked(t *transport) {
	cn := newConn(c, t)
	c.live.Store(cn)
	c.wg.Add(2)
	go cn.readLoop()
	go cn.writeLoop()
	if !c.opts.Heartbeat.Disabled {
		c.wg.Add(1)
		go cn.heartbeatLoop()
	}
	c.setStateLocked(StateConnected)
}

// dropped is told by a connection that it ended. Close swaps the live connection out
// before dropping it, so here the drop was not asked for by the application.
func (c *Connector) dropped(cn *conn, ce *CloseError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live.CompareAndSwap(cn, nil) {
		return
	}
	c.reason, c.lastDrop = ce.Reason, ce
	c.opts.Logger.Warn("stream connection dropped", "endpoint", c.ep.raw, "reason", ce.Reason.String(), "error", ce)
	if c.opts.OnDrop != nil && c.disp != nil {
		// On the dispatch goroutine, after the pushes the connection delivered (a
		// sample app's room.replaced comes before the drop it announces).
		c.disp.push(event{kind: eventDrop, drop: ce})
	}
	if c.opts.Reconnect.Disabled || c.opts.Reconnect.NotAfterReplaced && ce.Replaced() {
		c.setStateLocked(StateDisconnected)
		return
	}
	a := &attempt{done: make(chan struct{})}
	c.attempt = a
	c.setStateLocked(StateReconnecting)
	c.wg.Add(1)
	go c.reconnectLoop(a)
}

// LastDrop returns how the last live connection that Close did not end was dropped:
// its reason, the server's diagnostic, the cause. nil before the first drop.
func (c *Connector) LastDrop() *CloseError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastDrop
}

// reconnectLoop applies the reconnect policy after a drop: attempt n waits
// min(InitialDelay × Multiplier^(n-1), MaxDelay) before dialing, whatever the close
// reason. Each attempt is a brand-new session; nothing of the old one is restored or
// resent.
func (c *Connector) reconnectLoop(a *attempt) {
	defer c.wg.Done()
	rc := c.opts.Reconnect
	delay := rc.InitialDelay
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var lastErr error
	n := 1
	for ; rc.MaxAttempts < 0 || n <= rc.MaxAttempts; n++ {
		select {
		case <-c.life.Done():
			c.finishAttempt(a, ErrClosed)
			return
		case <-timer.C:
		}
		t, err := c.dial(c.life)
		c.mu.Lock()
		if c.state == StateClosed {
			c.mu.Unlock()
			if t != nil {
				t.shutdown(false)
			}
			c.finishAttempt(a, ErrClosed)
			return
		}
		if err == nil {
			c.installLocked(t)
			c.attempt = nil
			close(a.done)
			c.mu.Unlock()
			c.opts.Logger.Info("stream connection re-established", "endpoint", c.ep.raw, "attempt", n)
			return
		}
		c.mu.Unlock()
		lastErr = err
		c.opts.Logger.Warn("stream reconnect attempt failed", "endpoint", c.ep.raw, "attempt", n, "error", err)
		delay = min(time.Duration(float64(delay)*rc.Multiplier), rc.MaxDelay)
		timer.Reset(delay)
	}
	c.mu.Lock()
	if c.state != StateClosed {
		c.reason = wire.CloseTransportError
		c.setStateLocked(StateDisconnected)
	}
	c.attempt = nil
	a.err = fmt.Errorf("connector: reconnect gave up after %d attempts: %w", n-1, lastErr)
	close(a.done)
	c.mu.Unlock()
}

func (c *Connector) finishAttempt(a *attempt, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attempt == a {
		c.attempt = nil
	}
	a.err = err
	close(a.done)
}
