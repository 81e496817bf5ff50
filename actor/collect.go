package actor

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/meshnode/meshnode/internal/histogram"
)

// Idle collection, as Orleans collects grain activations past their collection age and
// Akka passivates idle entities: an activation with no session binding that received no
// message for the idle timeout is deactivated through the normal stop path (its
// Stopping turn runs, layers above are told). It then leaves Active (and /v1/actors);
// the next lookup activates it anew, with a new ObjectGeneration.

// collectIfIdle asks an activation, in its own turn, whether it is still idle; the
// decision is made there so that no message can slip in between check and stop.
type collectIfIdle struct{}

// sweepInterval is how often the host looks for idle activations: a quarter of the idle
// timeout, between 10 ms and 30 s.
func (h *Host) sweepInterval() time.Duration {
	return min(max(h.idleTimeout/4, 10*time.Millisecond), 30*time.Second)
}

// sweep runs until the host closes, asking idle activations to collect themselves.
func (h *Host) sweep() {
	defer close(h.sweepDone)
	tick := time.NewTicker(h.sweepInterval())
	defer tick.Stop()
	for {
		select {
		case <-h.stopSweep:
			return
		case now := <-tick.C:
			h.clock.Store(now.UnixNano())
			h.mu.Lock()
			var idle []*activation
			for _, a := range h.acts {
				if h.collectable(a, now) {
					idle = append(idle, a)
				}
			}
			h.mu.Unlock()
			for _, a := range idle {
				h.system.Root.Send(a.pid, collectIfIdle{})
			}
		}
	}
}

// collectable reports whether a is idle: not held by a binding or by itself, nothing queued, no turn
// for the idle timeout. Turns stamp their activity with the sweeper's clock, so an
// activation is collected between one idle timeout and one sweep interval more after
// its last message.
func (h *Host) collectable(a *activation, now time.Time) bool {
	return !a.keepActive.Load() && !a.stayActive.Load() && a.queued.Load() == 0 &&
		now.Sub(time.Unix(0, a.lastActive.Load())) >= h.idleTimeout
}

// retire removes a from the host's table if it is still the current activation of its
// ActorId; a lookup from now on activates a new one.
func (h *Host) retire(a *activation) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.acts[a.fence.ID]; !ok || cur != a {
		return false
	}
	h.leave(a)
	return true
}

// Stats are the Actor host's figures (also exported as metrics).
type Stats struct {
	Active          int   // activations on this node
	System          int   // of Active, those of the runtime's own kinds (IsSystemKind)
	Collected       int64 // activations deactivated because they were idle
	MailboxRejected int64 // messages refused because an Actor's mailbox was full
	Panics          int64 // Actor turns that panicked
	PanicStops      int64 // activations the panic policy stopped
	Moves           int64 // Actors this node moved to another node
	MovesFailed     int64 // moves from this node that failed, or commits here that did
	MovesRefused    int64 // moves to this node it refused (bad state, unknown kind, ...)
	Followed        int64 // records forwarded to an Actor that moved away (Message Follow)
	Duplicates      int64 // second activations of one Actor the directory retired
	DirectoryPulls  int64 // members this node asked for their activations (directory rebuilds)
	StopWaits       int64 // activations that waited for an earlier one of their Actor here to stop (it moved away and back at once)
	DirectoryBusy   int64 // directory requests from peers answered unavailable at once: the bound of requests in progress was reached
	// RequestsTimedOut: Actor requests from this node that ended at their deadline
	// (their ctx, or DefaultRequestTimeout) unanswered.
	RequestsTimedOut int64
	// RequestsNodeFailed: Actor requests from this node that failed while they waited
	// because the target's node failed or left.
	RequestsNodeFailed int64
	Quorum             bool // this node sees a majority of the mesh (keep-majority)
}

// Stats returns the current figures.
func (h *Host) Stats() Stats {
	h.mu.Lock()
	n, sys := len(h.acts), h.systemActs
	h.mu.Unlock()
	return Stats{Active: n, System: sys, Collected: h.collected.Load(), MailboxRejected: h.mailboxRejected.Load(),
		Panics: h.panics.Load(), PanicStops: h.stoppedBad.Load(),
		Moves: h.moves.Load(), MovesFailed: h.movesFailed.Load(), MovesRefused: h.movesRefused.Load(),
		Followed: h.followed.Load(), Duplicates: h.duplicates.Load(), DirectoryPulls: h.dirPulls.Load(), StopWaits: h.stopWaits.Load(), DirectoryBusy: h.dirBusy.Load(),
		RequestsTimedOut: h.reqTimedOut.Load(), RequestsNodeFailed: h.calls.nodeFailed.Load(), Quorum: h.quorum.has()}
}

func (h *Host) registerMetrics(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/meshnode/meshnode/actor")
	active, err := m.Int64ObservableGauge("meshnode.actor.activations", metric.WithUnit("{actor}"),
		metric.WithDescription("Actor activations on this node."))
	if err != nil {
		return err
	}
	collected, err := m.Int64ObservableCounter("meshnode.actor.collected", metric.WithUnit("{actor}"),
		metric.WithDescription("Activations deactivated because they were idle (no binding, no message for the idle timeout)."))
	if err != nil {
		return err
	}
	rejected, err := m.Int64ObservableCounter("meshnode.actor.mailbox_rejected", metric.WithUnit("{message}"),
		metric.WithDescription("Messages refused because the Actor's mailbox was at its bound."))
	if err != nil {
		return err
	}
	panics, err := m.Int64ObservableCounter("meshnode.actor.panics", metric.WithUnit("{turn}"),
		metric.WithDescription("Actor turns that panicked."))
	if err != nil {
		return err
	}
	panicStops, err := m.Int64ObservableCounter("meshnode.actor.panic_stops", metric.WithUnit("{actor}"),
		metric.WithDescription("Activations stopped by the panic policy."))
	if err != nil {
		return err
	}
	moves, err := m.Int64ObservableCounter("meshnode.actor.moves", metric.WithUnit("{actor}"),
		metric.WithDescription("Actors moved from this node to another."))
	if err != nil {
		return err
	}
	movesFailed, err := m.Int64ObservableCounter("meshnode.actor.moves_failed", metric.WithUnit("{actor}"),
		metric.WithDescription("Moves from this node that failed (or whose commit failed here)."))
	if err != nil {
		return err
	}
	movesRefused, err := m.Int64ObservableCounter("meshnode.actor.moves_refused", metric.WithUnit("{actor}"),
		metric.WithDescription("Moves to this node it refused (bad state or CRC, unknown kind, already active here)."))
	if err != nil {
		return err
	}
	followed, err := m.Int64ObservableCounter("meshnode.actor.followed", metric.WithUnit("{record}"),
		metric.WithDescription("Records forwarded once to the new location of an Actor that moved away (Message Follow)."))
	if err != nil {
		return err
	}
	duplicates, err := m.Int64ObservableCounter("meshnode.actor.duplicates_retired", metric.WithUnit("{actor}"),
		metric.WithDescription("Second activations of one Actor the directory found and retired (after a partition healed)."))
	if err != nil {
		return err
	}
	stopWaits, err := m.Int64ObservableCounter("meshnode.actor.stop_waits", metric.WithUnit("{actor}"),
		metric.WithDescription("Activations that waited for an earlier activation of their Actor on this node to finish stopping (an Actor moved away and straight back)."))
	if err != nil {
		return err
	}
	dirBusy, err := m.Int64ObservableCounter("meshnode.actor.directory_busy", metric.WithUnit("{request}"),
		metric.WithDescription("Directory requests from peers (lookups that place, activations, claims, relocations, move prepares) answered unavailable at once because this node served its bound of requests already."))
	if err != nil {
		return err
	}
	reqFailed, err := m.Int64ObservableCounter("meshnode.actor.requests.failed", metric.WithUnit("{request}"),
		metric.WithDescription("Actor requests from this node that failed while they waited, by reason: deadline_exceeded (their deadline, or the default of 30 s, passed unanswered) or node_failed (the target's node failed or left)."))
	if err != nil {
		return err
	}
	timedOut := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "deadline_exceeded")))
	nodeFailed := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "node_failed")))
	// No unit: the exporter would name a gauge of unit "1" a ratio; this is a 0/1 state.
	quorum, err := m.Int64ObservableGauge("meshnode.actor.quorum",
		metric.WithDescription("1 while this node sees a majority of the mesh and places Actors (keep-majority), 0 otherwise."))
	if err != nil {
		return err
	}
	if h.turnDuration, err = m.Float64Histogram("meshnode.actor.turn.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of Actor turns (one Receive each), sampled: the first turn of each activation and one in "+strconv.Itoa(turnSample)+" after it."),
		metric.WithExplicitBucketBoundaries(histogram.Seconds...)); err != nil {
		return err
	}
	h.metricsReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := h.Stats()
		o.ObserveInt64(active, int64(s.Active))
		o.ObserveInt64(collected, s.Collected)
		o.ObserveInt64(rejected, s.MailboxRejected)
		o.ObserveInt64(panics, s.Panics)
		o.ObserveInt64(panicStops, s.PanicStops)
		o.ObserveInt64(moves, s.Moves)
		o.ObserveInt64(movesFailed, s.MovesFailed)
		o.ObserveInt64(movesRefused, s.MovesRefused)
		o.ObserveInt64(followed, s.Followed)
		o.ObserveInt64(duplicates, s.Duplicates)
		o.ObserveInt64(stopWaits, s.StopWaits)
		o.ObserveInt64(dirBusy, s.DirectoryBusy)
		o.ObserveInt64(reqFailed, s.RequestsTimedOut, timedOut)
		o.ObserveInt64(reqFailed, s.RequestsNodeFailed, nodeFailed)
		q := int64(0)
		if s.Quorum {
			q = 1
		}
		o.ObserveInt64(quorum, q)
		return nil
	}, active, collected, rejected, panics, panicStops, moves, movesFailed, movesRefused, followed, duplicates, stopWaits, dirBusy, reqFailed, quorum)
	return err
}
