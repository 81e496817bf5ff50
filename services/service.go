package services

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/meshnode/meshnode/internal/protoactor/actor"
)

// memberTable is one implementation's members.
type memberTable struct {
	members map[string]member
	order   []string
}

// service is one provided service of a host. Its actor runs the calls of its current
// implementation one at a time (a Task member runs outside the turn and posts its
// result back) and installs replacements between calls.
type service struct {
	host    *Host
	id      string
	rpc     bool
	mode    Mode
	owner   *Env
	pending *memberTable // the implementation set up, installed at start

	pid   *actor.PID
	table atomic.Pointer[memberTable] // nil: withdrawn (no provider bound)

	mu        sync.Mutex
	instances map[string]*instance // keyed services
	gens      map[string]uint64
}

type instance struct {
	key        string
	generation uint64
	table      *memberTable
}

// callMsg is a call delivered to a service actor.
type callMsg struct {
	ctx    context.Context
	member string
	local  bool // in holds a Go value (same process); else args holds JSON
	in     any
	args   json.RawMessage
	reply  func(v any, err error)
}

// replaceMsg installs a new implementation (nil withdraws the current one).
type replaceMsg struct{ table *memberTable }

func (s *service) start() {
	s.table.Store(s.pending)
	// Calls run on the goroutine that submits them when the service is idle (the
	// session turn, the caller of a local facade): no goroutine hand-off per call.
	// Calls stay serial; a Func that blocks holds its caller, so long work is a Task.
	props := actor.PropsFromFunc(s.receive, actor.WithDispatcher(actor.NewSynchronizedDispatcher(300)))
	s.pid = s.host.system.Root.Spawn(props)
}

func (s *service) stop() {
	if s.pid != nil {
		_ = s.host.system.Root.StopFuture(s.pid).Wait()
	}
}

func (s *service) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *callMsg:
		s.run(m)
	case *replaceMsg:
		s.table.Store(m.table)
	}
}

// run executes one call in the actor's turn (or hands a Task member to a goroutine).
func (s *service) run(m *callMsg) {
	tab := s.table.Load()
	if tab == nil {
		m.reply(nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("service %q has no provider bound", s.id)})
		return
	}
	mem, ok := tab.members[m.member]
	if !ok {
		m.reply(nil, &Error{Code: CodeUnknownMember, Message: fmt.Sprintf("service %q has no member %q", s.id, m.member)})
		return
	}
	if !mem.set {
		m.reply(nil, &Error{Code: CodeNotImplemented, Message: fmt.Sprintf("%s.%s is not implemented", s.id, m.member)})
		return
	}
	if err := m.ctx.Err(); err != nil {
		m.reply(nil, errCallCancelled) // cancelled while queued: no effect starts
		return
	}
	exec := func() {
		defer func() {
			if r := recover(); r != nil {
				s.host.log.Error("services: provider panicked", "service", s.id, "member", m.member, "panic", fmt.Sprint(r))
				m.reply(nil, &Error{Code: CodeInternal, Message: "internal error"})
			}
		}()
		if m.local {
			m.reply(mem.local(m.ctx, m.in))
			return
		}
		m.reply(mem.json(m.ctx, m.args))
	}
	if mem.task {
		go exec() // a long-running member: its result is posted back by reply
		return
	}
	exec()
}

// submit hands a call to the service's actor.
func (s *service) submit(m *callMsg) {
	s.host.system.Root.Send(s.pid, m)
}

// withdraw marks the service unavailable: calls after it fail at once.
func (s *service) withdraw() { s.host.system.Root.Send(s.pid, &replaceMsg{}) }

// replace installs a new implementation after the calls already queued.
func (s *service) replace(t *memberTable) { s.host.system.Root.Send(s.pid, &replaceMsg{table: t}) }

// addInstance publishes a keyed instance.
func (s *service) addInstance(key string, t *memberTable) (func(), error) {
	if key == "" || len(key) > 256 {
		return nil, fmt.Errorf("services: %s: instance key must be 1-256 bytes", s.id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.instances == nil {
		s.instances, s.gens = map[string]*instance{}, map[string]uint64{}
	}
	if _, live := s.instances[key]; live {
		return nil, fmt.Errorf("services: %s: instance %q is already live", s.id, key)
	}
	s.gens[key]++
	inst := &instance{key: key, generation: s.gens[key], table: t}
	s.instances[key] = inst
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.instances[key] == inst {
				delete(s.instances, key)
			}
			s.mu.Unlock()
		})
	}, nil
}

// errCallCancelled is a call's failure when its context ended (the caller cancelled it
// or its connection dropped).
var errCallCancelled = &Error{Code: CodeCancelled, Message: "the call was cancelled"}
