package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Private returned references: a method returns a Ref, a capability for one object of
// the provider's (a job it started, say) that only the caller that got it can use. It
// is not a business value: it crosses as a control envelope the endpoint makes and
// checks ({"$ref": handle}, a random handle registered for that one client and its
// connection), never discovered by Observe. It ends when the provider closes it, the
// caller releases it, or the caller's connection or attachment ends (a disconnect, a
// switch, the worker's move): a call through it then fails stale_reference, as does a
// handle another client presents.

// MetaRef names the reference a call or a subscription is for.
const MetaRef = "ref"

// MaxRefsPerClient bounds the references one client holds at once; a method that
// returns one more fails (the reference is closed) with CodeUnavailable.
const MaxRefsPerClient = 256

// Ref is a private returned reference to an object of contract T. A provider makes one
// with NewRef and returns it from a method (Method[In, Ref[T]]); the caller uses the
// object through Get and ends the reference with Release.
type Ref[T any] struct {
	obj *refObject // the provider's object (the provider, or a caller in its process)
	st  *refState  // the caller's side, once it came back from a call
}

// refState is a caller's reference: how it came (the facade the method was called on)
// and the object's facade, made at the first Get.
type refState struct {
	mu     sync.Mutex
	handle string     // a remote caller's handle
	obj    *refObject // a caller in the provider's process
	via    *facade
	rf     *facade
	value  any
}

// refObject is a referenced object on the provider's side.
type refObject struct {
	svc    string // the contract's token id
	table  *memberTable
	slots  map[string]*slot
	closed atomic.Bool

	mu     sync.Mutex
	owners map[*Endpoint]string // the endpoints it is registered with, and its handle there
}

// NewRef makes a reference to impl, an object of the contract t describes (its methods
// set with Func or Task, its states with NewState, as for Provide). Methods of a
// referenced object run on the caller's goroutine at the provider (not one at a time:
// impl synchronises itself).
func NewRef[T any](t Token[T], impl *T) Ref[T] {
	members, order, err := table(t.describe, impl)
	obj := &refObject{svc: t.id, table: &memberTable{members: members, order: order}, slots: map[string]*slot{}, owners: map[*Endpoint]string{}}
	if err != nil {
		obj.closed.Store(true)
		return Ref[T]{obj: obj}
	}
	for name, m := range members {
		if m.pub != nil {
			raw, val := m.pub.current()
			sl := newSlot(m.kind, subAddr{svc: t.id, member: name}, raw, val)
			obj.slots[name] = sl
			m.pub.adopt(sl)
		}
	}
	return Ref[T]{obj: obj}
}

// Close ends the reference (the provider's side): calls through it fail
// stale_reference from now on, its subscriptions end.
func (r Ref[T]) Close() {
	if r.obj != nil {
		r.obj.close()
	}
}

// Get returns the referenced object as the contract t describes it (the token the
// provider made the reference with): a facade whose methods and states reach the
// object through the connection the reference came by. It is made once per reference;
// nil for a reference that did not come back from a call.
func (r Ref[T]) Get(t Token[T]) *T {
	st := r.st
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rf != nil {
		return st.value.(*T)
	}
	f := &facade{host: st.via.host, id: t.id, ref: st.handle}
	v := new(T)
	d := &Describer{mode: describeFacade, facade: f}
	t.describe(d, v)
	f.members, f.value = d.members, v
	if st.obj != nil {
		f.bindRef(st.obj)
	} else if box := st.via.remote.Load(); box != nil {
		f.bindRemote(box.c)
	} else {
		f.retire()
	}
	st.rf, st.value = f, v
	return v
}

// Release ends the reference from the caller's side: the provider forgets it, and its
// facade fails stale_reference from now on.
func (r Ref[T]) Release() {
	st := r.st
	if st == nil {
		return
	}
	st.mu.Lock()
	rf, obj, handle, via := st.rf, st.obj, st.handle, st.via
	st.mu.Unlock()
	if rf != nil {
		rf.retire()
	}
	if obj != nil {
		obj.close()
		return
	}
	if box := via.remote.Load(); box != nil {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultAttachTimeout)
		defer cancel()
		_, _ = box.c.Call(ctx, Call{Service: via.id, Ref: handle, Member: releaseMember})
	}
}

// MarshalJSON refuses: a reference crosses only as a method's result, where the
// endpoint makes its envelope; it is never part of a business value.
func (r Ref[T]) MarshalJSON() ([]byte, error) {
	return nil, errors.New("a private reference crosses only as a method's result")
}

// UnmarshalJSON reads the envelope of a method's result (the consumer's side; a Ref
// inside a business value never decodes into a usable reference: its handle is checked
// against the caller's own references at the provider).
func (r *Ref[T]) UnmarshalJSON(b []byte) error {
	var env struct {
		Ref string `json:"$ref"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Ref == "" {
		return fmt.Errorf("not a private reference")
	}
	r.st = &refState{handle: env.Ref}
	return nil
}

// refResult is a method's result that is a reference (the provider's side).
type refResult interface{ refObj() *refObject }

func (r Ref[T]) refObj() *refObject { return r.obj }

// refBinder is a reference result on the consumer's side: it learns the facade it
// came by.
type refBinder interface{ cameBy(via *facade) }

func (r *Ref[T]) cameBy(via *facade) {
	if r.st == nil {
		// In process: the provider's own object.
		r.st = &refState{obj: r.obj}
	}
	r.st.via = via
}

// bindRef binds a reference's facade to an object of this process.
func (f *facade) bindRef(o *refObject) {
	f.localRef = o
	f.st.Store(uint32(stateBound))
	for name, m := range f.members {
		if m.replica == nil {
			continue
		}
		if sl := o.slots[name]; sl != nil {
			m.replica.bind(slotSource{sl})
		} else {
			m.replica.bind(nil)
		}
	}
}

// close ends the object everywhere it is registered. Its slots close first, so that
// every subscriber is told (stale_reference) before its endpoint forgets the handle
// and the subscription with it: the other way round the subscribers were dropped
// silently, and a holder's replica of an ended reference looked live for ever.
func (o *refObject) close() {
	if !o.closed.CompareAndSwap(false, true) {
		return
	}
	why := &Error{Code: CodeStaleReference, Message: "the reference was closed"}
	for _, sl := range o.slots {
		sl.close(why)
	}
	o.mu.Lock()
	owners := o.owners
	o.owners = map[*Endpoint]string{}
	o.mu.Unlock()
	for e, handle := range owners {
		e.dropRef(handle)
	}
}

// newHandle makes a reference's handle: random, so that nobody guesses another's.
func newHandle() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// endpointKey holds the endpoint serving a call, in the call's context (the provider
// side registers a returned reference with it).
type endpointKey struct{}

// registerRef registers a method's reference result with the calling client's
// endpoint and returns its envelope.
func registerRef(ctx context.Context, o *refObject) (json.RawMessage, error) {
	e, ok := ctx.Value(endpointKey{}).(*Endpoint)
	if !ok {
		return nil, &Error{Code: CodeInternal, Message: "a reference returned outside a client's call"}
	}
	if o == nil || o.closed.Load() {
		return nil, &Error{Code: CodeStaleReference, Message: "the method returned a reference that is closed"}
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, &Error{Code: CodeDisconnected, Message: "the connection is closed"}
	}
	if len(e.refs) >= MaxRefsPerClient {
		e.mu.Unlock()
		o.close()
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("a %s reference: this client holds %d references (the bound); release one", o.svc, MaxRefsPerClient)}
	}
	handle := newHandle()
	e.refs[handle] = o
	e.mu.Unlock()
	o.mu.Lock()
	o.owners[e] = handle
	o.mu.Unlock()
	raw, _ := json.Marshal(map[string]string{"$ref": handle})
	return raw, nil
}

// dropRef forgets a handle of the endpoint's (the reference closed).
func (e *Endpoint) dropRef(handle string) {
	e.mu.Lock()
	delete(e.refs, handle)
	subs := make([]subAddr, 0)
	for a := range e.subs {
		if a.ref == handle {
			subs = append(subs, a)
		}
	}
	e.mu.Unlock()
	for _, a := range subs {
		e.unsubscribe(a, 0)
	}
}

// closeRefs ends the client's references (its connection or attachment ended).
func (e *Endpoint) closeRefs() {
	e.mu.Lock()
	refs := e.refs
	e.refs = map[string]*refObject{}
	e.mu.Unlock()
	for _, o := range refs {
		o.mu.Lock()
		delete(o.owners, e)
		last := len(o.owners) == 0
		o.mu.Unlock()
		if last {
			o.close()
		}
	}
}

// ref returns the client's object of handle.
func (e *Endpoint) ref(handle string) (*refObject, *Error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.refs[handle]
	if o == nil || o.closed.Load() {
		return nil, &Error{Code: CodeStaleReference, Message: "no such reference on this connection (it ended, or it is not this client's)"}
	}
	return o, nil
}

// releaseMember is the member a consumer calls on a reference to release it.
const releaseMember = "$release"

// serveRef runs a call on one of the client's references, on a goroutine of its own.
func (e *Endpoint) serveRef(ctx context.Context, call Call, done func(json.RawMessage, error)) {
	o, err := e.ref(call.Ref)
	if err != nil {
		done(nil, err)
		return
	}
	if call.Member == releaseMember {
		e.dropRef(call.Ref)
		o.mu.Lock()
		delete(o.owners, e)
		last := len(o.owners) == 0
		o.mu.Unlock()
		if last {
			o.close()
		}
		done(nil, nil)
		return
	}
	m, ok := o.table.members[call.Member]
	switch {
	case !ok || m.kind != kindMethod:
		done(nil, &Error{Code: CodeUnknownMember, Message: fmt.Sprintf("the reference has no method %q", call.Member)})
		return
	case !m.set:
		done(nil, &Error{Code: CodeNotImplemented, Message: fmt.Sprintf("%s.%s is not implemented", o.svc, call.Member)})
		return
	}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				e.h.log.Error("services: a referenced object panicked", "service", o.svc, "member", call.Member, "panic", fmt.Sprint(r))
				done(nil, &Error{Code: CodeInternal, Message: "internal error"})
			}
		}()
		done(m.json(ctx, call.Args))
	}()
}

// callRef runs a call on a referenced object of this process (a caller in the
// provider's process).
func callRef(ctx context.Context, o *refObject, name string, in any) (any, error) {
	if o.closed.Load() {
		return nil, &Error{Code: CodeStaleReference, Message: "the reference was closed"}
	}
	m, ok := o.table.members[name]
	if !ok || m.kind != kindMethod || !m.set {
		return nil, &Error{Code: CodeNotImplemented, Message: fmt.Sprintf("%s.%s is not implemented", o.svc, name)}
	}
	return m.local(ctx, in)
}
