package services

import (
	"github.com/meshnode/meshnode/actor"
)

// The messages between a node's Attacher (the server side of presentations) and the
// session workers and the sessions directory, which may live on any node. They are
// ordinary Actor messages (msgpack between nodes); every node of a fleet with session
// workers registers them (MessageTypes; meshnode.Start does it when
// Config.ServiceWorker is set). Payloads of calls stay the caller's JSON bytes: no
// node but the worker decodes them.

// workerAttach registers a presentation's attachment with a worker: Client is the
// attachment's key (unique in the fleet: the presentation's node lifecycle, its
// connection, the attach), Presenter and Transport what the worker's providers see
// (ClientOf).
type workerAttach struct {
	Client     string
	Presenter  string
	Transport  string
	Attachment string
	// Replaces is the client key of the same presentation's previous attachment to this
	// worker (a re-attach): the worker ends it first, so that a re-attach at the
	// worker's bound of presentations takes its own place back instead of being
	// refused while the old attachment's asynchronous detach is still on its way.
	Replaces string
}

// workerAttached answers workerAttach: the worker's topic (its updates and notices),
// its node and its incarnation (the activation's ObjectGeneration: a replacement
// worker has another).
type workerAttached struct {
	Topic       string
	Node        string
	Incarnation uint64
}

// workerDetach ends an attachment (one-way): the worker cancels its calls.
type workerDetach struct{ Client string }

// workerCall is one routed call: Client's request Rid.
type workerCall struct {
	Client string
	Rid    string
	Svc    string
	Key    string
	Gen    uint64
	Ref    string
	Member string
	Args   []byte
	Trace  map[string]string
}

// workerCancel cancels Client's call Rid (one-way).
type workerCancel struct {
	Client string
	Rid    string
}

// workerSubscribe subscribes Client's presentation to a member of the worker's: the
// answer is the snapshot it starts from (JSON snapshotReply); the worker publishes the
// member from then on, while any presentation subscribes to it.
type workerSubscribe struct {
	Client string
	Svc    string
	Key    string
	Gen    uint64
	Ref    string
	Member string
	// Sid is the client's id of the subscription (0: none, an older node's): an
	// unsubscribe ends only its own subscription or an older one (Endpoint.subscribe).
	Sid uint64 `msgpack:",omitempty"`
}

// workerUnsubscribe ends such a subscription (one-way).
type workerUnsubscribe workerSubscribe

// workerCatalogue asks a worker for its catalogue.
type workerCatalogue struct{ Client string }

// workerStart activates a worker (one-way, after a create): nothing else.
type workerStart struct{}

// workerRemoved tells a worker its session was removed (one-way): it tells its
// presentations and stops.
type workerRemoved struct{}

// answer is a worker's or the directory's reply: Raw (JSON) or an error Code and
// Message. Errors cross as values, not as Actor errors, so that a service code
// (stale_generation, unknown_session) is not mapped to a fault kind on the way.
type answer struct {
	Raw     []byte
	Code    string
	Message string
}

func (a *answer) err() error {
	if a.Code == "" {
		return nil
	}
	return &Error{Code: a.Code, Message: a.Message}
}

func answerOf(raw []byte, err error) *answer {
	if err != nil {
		we := wireError(err)
		return &answer{Code: we.Code, Message: we.Message}
	}
	return &answer{Raw: raw}
}

// The sessions directory's messages.

// dirCreate records a new session (Owner is the creator's identity, never shown).
type dirCreate struct {
	ID    string
	Title string
	Owner string
}

// dirRemove removes a session's record.
type dirRemove struct{ ID string }

// dirLookup asks whether a session exists.
type dirLookup struct{ ID string }

// dirReport is a worker telling the directory where it runs and who is attached
// (Running), or that it stopped.
type dirReport struct {
	ID          string
	Node        string
	Incarnation uint64
	Running     bool
	Clients     []string
}

// dirNodeDown tells the directory a node left the mesh (every node sends it).
type dirNodeDown struct{ RID string }

// dirSnapshot asks the directory for every summary (a mirror's resync).
type dirSnapshot struct{}

// workerPing asks a worker to report itself to the directory (one-way).
type workerPing struct{}

// MessageTypes returns the Actor message types of session workers and the sessions
// directory: register them on every node of a fleet that has session workers
// (meshnode.Start does when Config.ServiceWorker is set).
func MessageTypes() []actor.MessageType {
	return []actor.MessageType{
		actor.MessageOf[workerAttach]("meshnode.svc.attach"),
		actor.MessageOf[workerAttached]("meshnode.svc.attached"),
		actor.MessageOf[workerDetach]("meshnode.svc.detach"),
		actor.MessageOf[workerCall]("meshnode.svc.call"),
		actor.MessageOf[workerCancel]("meshnode.svc.cancel"),
		actor.MessageOf[workerCatalogue]("meshnode.svc.catalogue"),
		actor.MessageOf[workerSubscribe]("meshnode.svc.subscribe"),
		actor.MessageOf[workerUnsubscribe]("meshnode.svc.unsubscribe"),
		actor.MessageOf[workerStart]("meshnode.svc.start"),
		actor.MessageOf[workerRemoved]("meshnode.svc.removed"),
		actor.MessageOf[answer]("meshnode.svc.answer"),
		actor.MessageOf[dirCreate]("meshnode.sessions.create"),
		actor.MessageOf[dirRemove]("meshnode.sessions.remove"),
		actor.MessageOf[dirLookup]("meshnode.sessions.lookup"),
		actor.MessageOf[dirReport]("meshnode.sessions.report"),
		actor.MessageOf[dirNodeDown]("meshnode.sessions.node-down"),
		actor.MessageOf[dirSnapshot]("meshnode.sessions.snapshot"),
		actor.MessageOf[workerPing]("meshnode.svc.ping"),
	}
}
