package services

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

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

	// slots publish the state and events members of a singleton, whatever
	// implementation is installed (made with the service, kept across reloads).
	slots map[string]*slot

	mu        sync.Mutex
	instances map[string]*instance // keyed services
	gens      map[string]uint64
	dir       *slot                 // a keyed service's instance directory
	kinds     map[string]memberKind // a keyed service's member kinds (its catalogue)
}

type instance struct {
	key        string
	generation uint64
	table      *memberTable
	slots      map[string]*slot // its state and events members
}

// instanceRef names one live instance in a keyed service's directory.
type instanceRef struct {
	Key        string `json:"key"`
	Generation uint64 `json:"generation"`
}

// callMsg is a call delivered to a service actor.
type callMsg struct {
	ctx    context.Context
	key    string // an instance of a keyed service: its key and generation
	gen    uint64
	member string
	local  bool // in holds a Go value (same process); else args holds JSON
	in     any
	args   json.RawMessage
	reply  func(v any, err error)
}

// replaceMsg installs a new implementation (nil withdraws the current one); old is the
// implementation it replaces, whose states stop publishing.
type replaceMsg struct{ table, old *memberTable }

// makeSlots makes the slots of a singleton's state and events members from the
// implementation set up (its initial values).
func (s *service) makeSlots() {
	if s.mode == Keyed {
		raw, _ := json.Marshal([]instanceRef{})
		s.dir = newSlot(kindInstances, subAddr{svc: s.id, member: MemberInstances}, raw, []instanceRef{})
		return
	}
	if s.pending == nil {
		return
	}
	s.slots = map[string]*slot{}
	for name, m := range s.pending.members {
		if m.pub == nil {
			continue
		}
		raw, val := m.pub.current()
		s.slots[name] = newSlot(m.kind, subAddr{svc: s.id, member: name}, raw, val)
	}
}

// adoptAll makes t's state and events write to the service's slots (retiring old's);
// with replace, each state's slot publishes t's value as a complete replacement.
func (s *service) adoptAll(old, t *memberTable, replace bool) {
	if old != nil {
		for _, m := range old.members {
			if m.pub != nil {
				m.pub.adopt(nil)
			}
		}
	}
	if t == nil {
		return
	}
	for name, m := range t.members {
		sl := s.slots[name]
		if m.pub == nil || sl == nil {
			continue
		}
		m.pub.adopt(sl)
		if m.kind != kindState {
			continue
		}
		raw, val := m.pub.current()
		if _, cur, _, _ := sl.snapshot(); replace || !bytes.Equal(cur, raw) {
			// A replacement, or a state set during setup, before its slot was adopted.
			sl.publish(&delivery{op: opReplace, raw: raw, val: val})
		}
	}
}

// slot returns the slot of a singleton's member (nil: none).
func (s *service) slot(member string) *slot { return s.slots[member] }

func (s *service) start() {
	s.table.Store(s.pending)
	s.adoptAll(nil, s.pending, false)
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
		if m.table != nil {
			// A complete replacement snapshot on every subscription of the service's
			// states: their replicas clear readiness and install it.
			s.adoptAll(m.old, m.table, true)
		}
		s.table.Store(m.table)
	}
}

// run executes one call in the actor's turn (or hands a Task member to a goroutine).
func (s *service) run(m *callMsg) {
	var tab *memberTable
	if m.key != "" {
		inst, err := s.instanceAt(m.key, m.gen)
		if err != nil {
			m.reply(nil, err)
			return
		}
		tab = inst.table
	} else if tab = s.table.Load(); tab == nil {
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
func (s *service) replace(old, t *memberTable) {
	s.host.system.Root.Send(s.pid, &replaceMsg{table: t, old: old})
}

// validKey is a valid instance key: 1-128 bytes of UTF-8 with no control character
// (keys cross as STREAM metadata).
func validKey(key string) bool {
	if key == "" || len(key) > 128 || !utf8.ValidString(key) {
		return false
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// addInstance publishes a keyed instance under the next generation of its key.
func (s *service) addInstance(key string, t *memberTable) (func(), error) {
	if !validKey(key) {
		return nil, fmt.Errorf("services: %s: instance key %q: 1-128 bytes of UTF-8 without control characters", s.id, key)
	}
	s.mu.Lock()
	if s.instances == nil {
		s.instances = map[string]*instance{}
	}
	if s.gens == nil {
		s.gens = map[string]uint64{}
	}
	if _, live := s.instances[key]; live {
		s.mu.Unlock()
		return nil, fmt.Errorf("services: %s: instance %q is already live", s.id, key)
	}
	s.gens[key]++
	inst := &instance{key: key, generation: s.gens[key], table: t, slots: map[string]*slot{}}
	for name, m := range t.members {
		if m.pub == nil {
			continue
		}
		raw, val := m.pub.current()
		sl := newSlot(m.kind, subAddr{svc: s.id, key: key, gen: inst.generation, member: name}, raw, val)
		inst.slots[name] = sl
		m.pub.adopt(sl)
	}
	s.instances[key] = inst
	s.publishDirectoryLocked()
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { s.closeInstance(inst) }) }, nil
}

// closeInstance ends an instance: new calls through it fail stale_generation (calls
// admitted run to their end), its subscriptions end (their observers' tasks are
// cancelled), and the directory drops it.
func (s *service) closeInstance(inst *instance) {
	s.mu.Lock()
	if s.instances[inst.key] != inst {
		s.mu.Unlock()
		return
	}
	delete(s.instances, inst.key)
	s.publishDirectoryLocked()
	s.mu.Unlock()
	why := &Error{Code: CodeStaleGeneration, Message: fmt.Sprintf("instance %q generation %d of %s was closed", inst.key, inst.generation, s.id)}
	for _, m := range inst.table.members {
		if m.pub != nil {
			m.pub.adopt(nil)
		}
	}
	for _, sl := range inst.slots {
		sl.close(why)
	}
}

// closeInstances closes every live instance (the owning facet's generation retires).
func (s *service) closeInstances() {
	s.mu.Lock()
	insts := make([]*instance, 0, len(s.instances))
	for _, inst := range s.instances {
		insts = append(insts, inst)
	}
	s.mu.Unlock()
	for _, inst := range insts {
		s.closeInstance(inst)
	}
}

// publishDirectoryLocked publishes the live instances. s.mu is held.
func (s *service) publishDirectoryLocked() {
	refs := make([]instanceRef, 0, len(s.instances))
	for _, inst := range s.instances {
		refs = append(refs, instanceRef{Key: inst.key, Generation: inst.generation})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Key < refs[j].Key })
	raw, _ := json.Marshal(refs)
	s.dir.publish(&delivery{op: opUpdate, raw: raw, val: refs})
}

// directory returns a keyed service's instance directory slot.
func (s *service) directory() *slot { return s.dir }

// instanceAt returns the live instance key of generation gen: a closed one, or an
// older or newer generation, is stale (a client cannot locate work by key alone).
func (s *service) instanceAt(key string, gen uint64) (*instance, *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.instances[key]
	if inst == nil || inst.generation != gen {
		return nil, &Error{Code: CodeStaleGeneration, Message: fmt.Sprintf("%s has no live instance %q of generation %d", s.id, key, gen)}
	}
	return inst, nil
}

// errCallCancelled is a call's failure when its context ended (the caller cancelled it
// or its connection dropped).
var errCallCancelled = &Error{Code: CodeCancelled, Message: "the call was cancelled"}
