package connector

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/meshnode/meshnode/session/codec"
	"github.com/meshnode/meshnode/session/wire"
)

// Message is a server push (a Send frame) handed to a handler. The handler owns it: the
// payload is a private copy, already decompressed.
type Message struct {
	Name     string
	Codec    wire.Codec
	Payload  []byte
	Metadata wire.Metadata // nil when the frame had none
	FlowID   string        // "" when the frame carried no flow

	codecs *codec.Registry
}

// Decode unmarshals the payload with the codec the frame names.
func (m Message) Decode(v any) error { return decode(m.codecs, m.Codec, m.Payload, v) }

// Reply is the successful reply of RequestRaw. The caller owns Payload.
type Reply struct {
	Codec    wire.Codec
	Payload  []byte
	Metadata wire.Metadata

	codecs *codec.Registry
}

// Decode unmarshals the payload with the codec the reply names.
func (r Reply) Decode(v any) error { return decode(r.codecs, r.Codec, r.Payload, v) }

func decode(reg *codec.Registry, id wire.Codec, payload []byte, v any) error {
	if err := reg.Unmarshal(id, payload, v); err != nil {
		return fmt.Errorf("connector: decode payload (codec %d): %w", id, err)
	}
	return nil
}

type eventKind uint8

const (
	eventMessage eventKind = iota
	eventError
	eventState
	eventDrop
)

type event struct {
	kind    eventKind
	handler func(Message)
	msg     Message
	err     error
	state   State
	drop    *CloseError
}

// dispatcher runs the application's callbacks on one goroutine, in the order they were
// queued. The queue is unbounded on purpose: the connector applies no backpressure to
// server pushes (digest §4.7); flow control belongs to the server's socket.
type dispatcher struct {
	c       *Connector
	mu      sync.Mutex
	queue   []event
	spare   []event
	running bool // a callback batch is being run
	stopped bool
	halt    atomic.Bool // read between callbacks of a batch
	wake    chan struct{}
	done    chan struct{}
}

func newDispatcher(c *Connector) *dispatcher {
	d := &dispatcher{c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go d.loop()
	return d
}

// push queues e; it never blocks.
func (d *dispatcher) push(e event) {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	d.queue = append(d.queue, e)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// stop discards the queue, lets the loop report StateClosed and waits for the loop to
// end, unless a callback is running: the caller may be that callback.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.stopped = true
	d.halt.Store(true)
	wait := !d.running
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	if wait {
		<-d.done
	}
}

func (d *dispatcher) loop() {
	defer close(d.done)
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && !d.stopped {
			d.mu.Unlock()
			<-d.wake
			d.mu.Lock()
		}
		if d.stopped {
			d.queue = nil
			d.mu.Unlock()
			if f := d.c.opts.OnStateChange; f != nil {
				d.guard(func() { f(StateClosed) })
			}
			for _, f := range d.c.stateWatchers() {
				d.guard(func() { f(StateClosed) })
			}
			return
		}
		batch := d.queue
		d.queue = d.spare[:0]
		d.running = true
		d.mu.Unlock()

		for i := range batch {
			if !d.halt.Load() {
				d.run(&batch[i])
			}
			batch[i] = event{} // let the payload be collected
		}

		d.mu.Lock()
		d.spare = batch[:0]
		d.running = false
		d.mu.Unlock()
	}
}

func (d *dispatcher) run(e *event) {
	o := &d.c.opts
	switch e.kind {
	case eventMessage:
		h, m := e.handler, e.msg
		d.guard(func() { h(m) })
	case eventError:
		if o.OnError != nil {
			err := e.err
			d.guard(func() { o.OnError(err) })
		}
	case eventState:
		s := e.state
		if o.OnStateChange != nil {
			d.guard(func() { o.OnStateChange(s) })
		}
		for _, f := range d.c.stateWatchers() {
			d.guard(func() { f(s) })
		}
	case eventDrop:
		if o.OnDrop != nil {
			ce := e.drop
			d.guard(func() { o.OnDrop(ce) })
		}
	}
}

// guard runs one callback; a panic is reported to OnError (ErrUserCallback) instead of
// killing the process from a goroutine the application does not own.
func (d *dispatcher) guard(f func()) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("%w: panic: %v", ErrUserCallback, r)
			d.c.opts.Logger.Error("stream connector callback panicked", "error", err)
			if onErr := d.c.opts.OnError; onErr != nil {
				func() {
					defer func() { _ = recover() }() // a panicking OnError is only logged above
					onErr(err)
				}()
			}
		}
	}()
	f()
}
