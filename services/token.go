package services

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
)

// Mode is how a token is provided and used in one host graph: one implementation
// (Singleton: Provide / Use) or many keyed instances (Keyed: ProvideMany / Observe).
type Mode uint8

const (
	Singleton Mode = iota + 1
	Keyed
)

func (m Mode) String() string {
	switch m {
	case Singleton:
		return "singleton"
	case Keyed:
		return "keyed"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Token names a service: a stable ID and the contract type T. A token creates nothing;
// it is the shared handle providers and consumers agree on. T is a struct whose fields
// are the service's members (Method values), and describe names them for the wire, so
// one declaration drives the provider's member table and the consumer's facade:
//
//	type Counter struct {
//		Add services.Method[AddArgs, Value]
//		Get services.Method[struct{}, Value]
//	}
//	var CounterToken = services.Define("sample.counter", func(d *services.Describer, c *Counter) {
//		services.DescribeMethod(d, "add", &c.Add)
//		services.DescribeMethod(d, "get", &c.Get)
//	})
//
// Tokens are RPC-capable by default: every provided RPC-capable service is published to
// the host's connections. LocalOnly tokens never leave the process; their T may be any
// type (a describe function is optional) and their values need not be JSON.
type Token[T any] struct {
	id       string
	rpc      bool
	describe func(*Describer, *T)
}

// TokenOption configures Define.
type TokenOption func(*tokenOptions)

type tokenOptions struct{ local bool }

// LocalOnly makes a process-local token: never published, never reachable remotely.
func LocalOnly() TokenOption { return func(o *tokenOptions) { o.local = true } }

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Define returns the token of the service id with contract T. It panics on an invalid id
// or a missing describe for an RPC-capable token: tokens are package-level declarations,
// and a bad one is a programming error found at start-up.
func Define[T any](id string, describe func(d *Describer, svc *T), opts ...TokenOption) Token[T] {
	var o tokenOptions
	for _, f := range opts {
		f(&o)
	}
	if !validID.MatchString(id) {
		panic(fmt.Sprintf("services.Define: service id %q: 1-128 of [A-Za-z0-9._-], starting with a letter or digit", id))
	}
	if describe == nil && !o.local {
		panic(fmt.Sprintf("services.Define(%q): an RPC-capable token needs a describe function", id))
	}
	if describe != nil {
		// Fail now, not at the first call, on a contract that does not describe.
		var probe T
		d := &Describer{mode: describeProbe}
		describe(d, &probe)
		if d.err != nil {
			panic(fmt.Sprintf("services.Define(%q): %v", id, d.err))
		}
	}
	return Token[T]{id: id, rpc: !o.local, describe: describe}
}

// ID returns the stable service id.
func (t Token[T]) ID() string { return t.id }

// RPC reports whether the token is RPC-capable (published to connections).
func (t Token[T]) RPC() bool { return t.rpc }

// Method is one method member of a contract: a call from a context.Context and a JSON
// argument In to a JSON result Out. A provider sets it with Func (or Task); a consumer's
// facade has it set by the host and calls it with Call.
type Method[In, Out any] struct {
	fn   func(context.Context, In) (Out, error)
	task bool // run outside the service's turn (long-running)
}

// Func makes a method from f. It runs in the service instance's turn: calls to one
// service instance run one at a time, so the provider needs no locks of its own.
func Func[In, Out any](f func(ctx context.Context, in In) (Out, error)) Method[In, Out] {
	return Method[In, Out]{fn: f}
}

// Task makes a long-running method from f: it runs as a task outside the instance's
// turn (other calls proceed meanwhile), and its result is posted back. f must not touch
// the provider's state without its own synchronisation.
func Task[In, Out any](f func(ctx context.Context, in In) (Out, error)) Method[In, Out] {
	return Method[In, Out]{fn: f, task: true}
}

// Call invokes the method. On a facade it goes to the provider the facade is bound to
// now (local or remote); a member the provider left unset fails with ErrNotImplemented.
func (m Method[In, Out]) Call(ctx context.Context, in In) (Out, error) {
	if m.fn == nil {
		var zero Out
		return zero, &Error{Code: CodeNotImplemented, Message: "the method is not implemented"}
	}
	return m.fn(ctx, in)
}

// memberKind is the kind of a contract member announced in a catalogue.
type memberKind string

const (
	kindMethod memberKind = "method"
	kindState  memberKind = "state"
	kindEvents memberKind = "events"
	// kindInstances is a keyed service's instance directory (not a contract member).
	kindInstances memberKind = "instances"
)

// member is one entry of a member table: how to run a method of one implementation
// locally (Go values) and remotely (strict JSON), or the state or events an
// implementation publishes (pub), or a facade's replica of them.
type member struct {
	kind    memberKind
	task    bool
	set     bool
	local   func(ctx context.Context, in any) (any, error)
	json    func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
	pub     published
	replica *replica
}

type describeMode uint8

const (
	describeTable  describeMode = iota + 1 // read an implementation's members
	describeFacade                         // set a facade's members to call through a slot
	describeProbe                          // check the names only (Define)
)

// Describer is handed to a token's describe function; DescribeMethod registers each
// member with it.
type Describer struct {
	mode    describeMode
	members map[string]member
	order   []string
	facade  *facade
	err     error
}

var validMember = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// begin checks a member's name and records it with its kind; false: do not describe
// it (an error is recorded, or the describer only probes names and kinds).
func (d *Describer) begin(name string, kind memberKind) bool {
	if d.err != nil {
		return false
	}
	if !validMember.MatchString(name) {
		d.err = fmt.Errorf("member name %q is not 1-64 of [A-Za-z0-9_.-] starting with a letter or _", name)
		return false
	}
	if d.members == nil {
		d.members = map[string]member{}
	}
	if _, dup := d.members[name]; dup {
		d.err = fmt.Errorf("member %q described twice", name)
		return false
	}
	d.order = append(d.order, name)
	if d.mode == describeProbe {
		d.members[name] = member{kind: kind}
		return false
	}
	return true
}

// kinds returns the member kinds a describe function declares (what a keyed service
// announces in its catalogue before any instance exists).
func kinds[T any](describe func(*Describer, *T)) map[string]memberKind {
	var probe T
	d := &Describer{mode: describeProbe}
	describe(d, &probe)
	out := make(map[string]memberKind, len(d.members))
	for name, m := range d.members {
		out[name] = m.kind
	}
	return out
}

// DescribeMethod registers the method member name, held in *m.
func DescribeMethod[In, Out any](d *Describer, name string, m *Method[In, Out]) {
	if !d.begin(name, kindMethod) {
		return
	}
	switch d.mode {
	case describeTable:
		impl := *m
		d.members[name] = member{
			kind: kindMethod,
			task: impl.task,
			set:  impl.fn != nil,
			local: func(ctx context.Context, in any) (any, error) {
				v, _ := in.(In)
				return impl.Call(ctx, v)
			},
			json: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
				var in In
				if err := decodeStrict(args, &in); err != nil {
					return nil, &Error{Code: CodeInvalidArguments, Message: err.Error()}
				}
				out, err := impl.Call(ctx, in)
				if err != nil {
					return nil, err
				}
				if r, ok := any(out).(refResult); ok {
					return registerRef(ctx, r.refObj())
				}
				if _, void := any(out).(struct{}); void {
					return nil, nil // a void result: a success with no result
				}
				raw, err := encodeStrict(out)
				if err != nil {
					return nil, &Error{Code: CodeInvalidResult, Message: err.Error()}
				}
				return raw, nil
			},
		}
	case describeFacade:
		f := d.facade
		d.members[name] = member{kind: kindMethod}
		*m = Method[In, Out]{fn: func(ctx context.Context, in In) (Out, error) {
			var out Out
			v, err := f.call(ctx, name, in, func() (json.RawMessage, error) { return encodeStrict(in) })
			if err != nil {
				return out, err
			}
			switch r := v.(type) {
			case Out:
				out = r
			case json.RawMessage:
				if err := decodeStrict(r, &out); err != nil {
					return out, &Error{Code: CodeInvalidResult, Message: err.Error()}
				}
			case nil:
				return out, nil
			default:
				return out, &Error{Code: CodeInvalidResult, Message: fmt.Sprintf("result of type %T", v)}
			}
			if rb, ok := any(&out).(refBinder); ok {
				rb.cameBy(f) // a private reference: reached the way this facade is
			}
			return out, nil
		}}
	}
}

// table returns the member table of impl under describe.
func table[T any](describe func(*Describer, *T), impl *T) (map[string]member, []string, error) {
	d := &Describer{mode: describeTable}
	describe(d, impl)
	return d.members, d.order, d.err
}
