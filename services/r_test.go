package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/services"
)

// R1: the setup-time ledger records every provision and requirement with its owning
// facet generation.
func TestR1_LedgerHasTheRightOwners(t *testing.T) {
	var echo *Echo
	h := newHost(t, "one", nil,
		providerFacet("local", nil),
		consumerFacet("user-a", &echo),
		services.Facet{ID: "keyed-owner", Setup: func(env *services.Env) { services.ProvideMany(env, KeyedToken) }},
		services.Facet{ID: "watcher", Setup: func(env *services.Env) {
			services.Observe(env, KeyedToken, func(context.Context, string, *Echo) error { return nil })
		}},
	)
	got := map[string]bool{}
	gens := map[string]uint64{}
	for _, e := range h.Ledger() {
		got[e.Facet+" "+map[bool]string{true: "provides", false: "requires"}[e.Provides]+" "+e.Service+"/"+e.Mode.String()] = true
		if g, ok := gens[e.Facet]; ok && g != e.Generation {
			t.Errorf("facet %s has entries of two generations", e.Facet)
		}
		gens[e.Facet] = e.Generation
	}
	for _, want := range []string{
		"echo-provider provides test.echo/singleton",
		"user-a requires test.echo/singleton",
		"keyed-owner provides test.keyed/keyed",
		"watcher requires test.keyed/keyed",
	} {
		if !got[want] {
			t.Errorf("ledger lacks %q; has %v", want, got)
		}
	}
	if len(gens) != 4 || gens["echo-provider"] == gens["user-a"] || gens["watcher"] == gens["keyed-owner"] {
		t.Errorf("each facet generation has its own owner identity: %v", gens)
	}
}

// KeyedToken is a keyed service for the mode tests.
var KeyedToken = services.Define("test.keyed", func(d *services.Describer, e *Echo) {
	services.DescribeMethod(d, "say", &e.Say)
})

// R2: acquisition and provision happen only in setup; a late one is rejected loudly.
func TestR2_LateAcquisitionIsRejected(t *testing.T) {
	var captured *services.Env
	newHost(t, "late", nil, providerFacet("p", nil), services.Facet{ID: "sneaky", Setup: func(env *services.Env) { captured = env }})
	for name, late := range map[string]func(){
		"Use":         func() { services.Use(captured, EchoToken) },
		"Provide":     func() { services.Provide(captured, SecretToken, echoImpl("late", nil)) },
		"ProvideMany": func() { services.ProvideMany(captured, KeyedToken) },
		"Observe": func() {
			services.Observe(captured, KeyedToken, func(context.Context, string, *Echo) error { return nil })
		},
		"OnActivate": func() { captured.OnActivate(func(context.Context) error { return nil }) },
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmtAny(r), "after its setup") {
					t.Errorf("%s after setup: %v, want a rejection", name, r)
				}
			}()
			late()
		}()
	}
}

func fmtAny(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}

// R3: a facet uses a service another facet of the same host provides.
func TestR3_LocalUse(t *testing.T) {
	var echo *Echo
	newHost(t, "local", nil, consumerFacet("user", &echo), providerFacet("here", nil))
	r, err := echo.Say.Call(callCtx(t), SayArgs{Text: "hi"})
	if err != nil || r.Text != "hi" || r.By != "here" {
		t.Fatalf("local call: %+v %v", r, err)
	}
	if r.Client != "" {
		t.Errorf("a local call has a remote client identity %q", r.Client)
	}
}

// R4: a facet uses a service a connected host provides, through the same API.
func TestR4_RemoteUse(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			_, _, echo, _ := remotePair(t, tr, nil)
			r, err := echo.Say.Call(callCtx(t), SayArgs{Text: "over " + tr.name})
			if err != nil || r.Text != "over "+tr.name || r.By != "provider" {
				t.Fatalf("remote call: %+v %v", r, err)
			}
			if _, err := echo.Say.Call(callCtx(t), SayArgs{Text: "fail"}); !errors.Is(err, &services.Error{Code: "test_failure"}) {
				t.Errorf("an application error: %v, want code test_failure", err)
			}
			_, err = echo.Say.Call(callCtx(t), SayArgs{Text: "boom"})
			if !errors.Is(err, services.ErrInternal) || strings.Contains(err.Error(), "secret") {
				t.Errorf("an unexpected provider error: %v, want internal without its text", err)
			}
			if _, err := echo.Unset.Call(callCtx(t), struct{}{}); !errors.Is(err, services.ErrNotImplemented) {
				t.Errorf("an unset member: %v, want service_not_implemented", err)
			}
		})
	}
}

// R5: only the owner's ServiceInstances handle adds keyed instances; a second owner of
// the same keyed service is an assembly error; a live key cannot be added twice and a
// closed key comes back under a new generation.
func TestR5_OnlyTheOwnerAddsKeyedInstances(t *testing.T) {
	var inst *services.Instances[Echo]
	newHost(t, "keyed", nil, services.Facet{ID: "owner", Setup: func(env *services.Env) { inst = services.ProvideMany(env, KeyedToken) }})
	closeA, err := inst.Add("a", echoImpl("a", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Add("a", echoImpl("again", nil)); err == nil {
		t.Error("a live key added twice")
	}
	closeA()
	closeA() // idempotent
	if _, err := inst.Add("a", echoImpl("reborn", nil)); err != nil {
		t.Errorf("a closed key added again: %v", err)
	}

	_, err = services.NewHost(context.Background(), services.HostOptions{Logger: quiet()},
		services.Facet{ID: "owner", Setup: func(env *services.Env) { services.ProvideMany(env, KeyedToken) }},
		services.Facet{ID: "usurper", Setup: func(env *services.Env) { services.ProvideMany(env, KeyedToken) }})
	if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), `"owner" and "usurper"`) {
		t.Fatalf("two owners: %v", err)
	}
}

// R6: one mode per token per graph: using a keyed service as a singleton (locally or
// from a connection) and requiring one token in both modes are assembly errors that
// name the service and the facets.
func TestR6_MixingModesIsRejected(t *testing.T) {
	_, err := services.NewHost(context.Background(), services.HostOptions{Logger: quiet()},
		services.Facet{ID: "keyed-owner", Setup: func(env *services.Env) { services.ProvideMany(env, KeyedToken) }},
		services.Facet{ID: "singleton-user", Setup: func(env *services.Env) { services.Use(env, KeyedToken) }})
	if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), "test.keyed") || !strings.Contains(err.Error(), "singleton-user") {
		t.Fatalf("local mode mismatch: %v", err)
	}
	_, err = services.NewHost(context.Background(), services.HostOptions{Logger: quiet()},
		services.Facet{ID: "both", Setup: func(env *services.Env) {
			services.Use(env, KeyedToken)
			services.Observe(env, KeyedToken, func(context.Context, string, *Echo) error { return nil })
		}})
	if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), "both") {
		t.Fatalf("one facet, two modes: %v", err)
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			provider := newHost(t, "keyed-provider", nil, services.Facet{ID: "keyed-owner", Setup: func(env *services.Env) { services.ProvideMany(env, KeyedToken) }})
			conn, _ := tr.connect(t, provider)
			_, err := services.NewHost(context.Background(), services.HostOptions{Connections: []services.Connection{conn}, Logger: quiet()},
				services.Facet{ID: "singleton-user", Setup: func(env *services.Env) { services.Use(env, KeyedToken) }})
			if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), "keyed") {
				t.Fatalf("remote mode mismatch: %v", err)
			}
		})
	}
}

// R7: publication follows the token: every provided RPC-capable service is in the
// host's catalogue without any call to publish it; a LocalOnly one is not.
func TestR7_PublicationIsDrivenByTheToken(t *testing.T) {
	h := newHost(t, "pub", nil, providerFacet("p", nil), services.Facet{ID: "secret", Setup: func(env *services.Env) {
		services.Provide(env, SecretToken, echoImpl("secret", nil))
	}})
	cat := h.Catalogue()
	if len(cat.Services) != 1 || cat.Services[0].ID != "test.echo" || cat.Services[0].Mode != "singleton" {
		t.Fatalf("catalogue %+v, want test.echo only", cat)
	}
	if cat.Services[0].Members["say"] != "method" || len(cat.Services[0].Members) != 6 {
		t.Errorf("members %v", cat.Services[0].Members)
	}
}

// R8: members bind lazily: a method value taken from the facade during setup fails
// with ErrSetupPhase then, and calls the provider once the host has assembled; member
// kinds are checked against the provider's catalogue when the facade binds.
func TestR8_MemberAccessIsLazy(t *testing.T) {
	var during error
	var say services.Method[SayArgs, SayReply]
	newHost(t, "lazy", nil, providerFacet("p", nil), services.Facet{ID: "early", Setup: func(env *services.Env) {
		say = services.Use(env, EchoToken).Say // a member captured before anything is bound
		_, during = say.Call(context.Background(), SayArgs{Text: "too early"})
	}})
	if !errors.Is(during, services.ErrSetupPhase) {
		t.Errorf("a call during setup: %v, want ErrSetupPhase", during)
	}
	if r, err := say.Call(callCtx(t), SayArgs{Text: "later"}); err != nil || r.Text != "later" {
		t.Errorf("the captured member after assembly: %+v %v", r, err)
	}

	wrongKind := fakeConn{cat: services.Catalogue{Services: []services.CatalogueEntry{{ID: "test.echo", Mode: "singleton", Members: map[string]string{"say": "state"}}}}}
	_, err := services.NewHost(context.Background(), services.HostOptions{Connections: []services.Connection{wrongKind}, Logger: quiet()},
		services.Facet{ID: "user", Setup: func(env *services.Env) { services.Use(env, EchoToken) }})
	if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), `member "say"`) {
		t.Fatalf("a member of another kind at the provider: %v", err)
	}
}

type fakeConn struct{ cat services.Catalogue }

func (f fakeConn) Catalogue(context.Context) (services.Catalogue, error) { return f.cat, nil }
func (f fakeConn) Call(context.Context, services.Call) (json.RawMessage, error) {
	return nil, services.ErrUnavailable
}

// R9: a facade, and a method value taken from it, stay valid across a replacement of
// the providing facet: while the replacement sets up, calls fail unavailable at once
// (nothing is queued for it); afterwards they call the replacement, locally and
// remotely.
func TestR9_FacadesStayStableAcrossProviderReplacement(t *testing.T) {
	// reload replaces h's provider facet by one (named by) that holds its setup until
	// the test has checked the facade in between.
	reload := func(t *testing.T, h *services.Host, by string, during func()) {
		t.Helper()
		hold, resume := make(chan struct{}), make(chan struct{})
		next := services.Facet{ID: "echo-provider", Setup: func(env *services.Env) {
			close(hold)
			<-resume
			services.Provide(env, EchoToken, echoImpl(by, nil))
		}}
		done := make(chan error, 1)
		go func() { done <- h.Reload(callCtx(t), next) }()
		<-hold
		during()
		close(resume)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	duringReload := func(t *testing.T, say services.Method[SayArgs, SayReply]) func() {
		return func() {
			start := time.Now()
			if _, err := say.Call(callCtx(t), SayArgs{Text: "between"}); !errors.Is(err, services.ErrUnavailable) {
				t.Errorf("a call while the provider is replaced: %v, want unavailable", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("the call waited %v: it must fail at once, not queue for the replacement", d)
			}
		}
	}
	t.Run("local", func(t *testing.T) {
		var echo *Echo
		h := newHost(t, "reload", nil, providerFacet("v1", nil), consumerFacet("user", &echo))
		say := echo.Say
		if r, _ := say.Call(callCtx(t), SayArgs{Text: "x"}); r.By != "v1" {
			t.Fatalf("before: %+v", r)
		}
		reload(t, h, "v2", duringReload(t, say))
		if r, err := say.Call(callCtx(t), SayArgs{Text: "x"}); err != nil || r.By != "v2" {
			t.Fatalf("after the reload: %+v %v, want the replacement", r, err)
		}
	})
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			provider, _, echo, _ := remotePair(t, tr, nil)
			say := echo.Say
			reload(t, provider, "provider-v2", duringReload(t, say))
			if r, err := say.Call(callCtx(t), SayArgs{Text: "x"}); err != nil || r.By != "provider-v2" {
				t.Fatalf("after the provider's reload: %+v %v", r, err)
			}
		})
	}
	t.Run("ShapeChangeRefused", func(t *testing.T) {
		h := newHost(t, "reload", nil, providerFacet("v1", nil))
		err := h.Reload(callCtx(t), services.Facet{ID: "echo-provider", Setup: func(*services.Env) {}})
		if !errors.Is(err, services.ErrAssembly) {
			t.Fatalf("a reload that drops a provision: %v", err)
		}
	})
}

// R10: a LocalOnly service is never reachable from a connection: not in the catalogue,
// not resolvable, and a hand-made call to it is unknown_service.
func TestR10_LocalOnlyServicesAreUnreachableRemotely(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			provider := newHost(t, "provider", nil, services.Facet{ID: "secret", Setup: func(env *services.Env) {
				services.Provide(env, SecretToken, echoImpl("secret", nil))
			}})
			conn, _ := tr.connect(t, provider)
			_, err := services.NewHost(context.Background(), services.HostOptions{Connections: []services.Connection{conn}, Logger: quiet()},
				services.Facet{ID: "prier", Setup: func(env *services.Env) { services.Use(env, SecretToken) }})
			if !errors.Is(err, services.ErrAssembly) || !strings.Contains(err.Error(), "no provider") {
				t.Fatalf("resolving a local-only service remotely: %v", err)
			}
			_, err = conn.Call(callCtx(t), services.Call{Service: "test.secret", Member: "say", Args: json.RawMessage(`{"text":"x"}`)})
			if !errors.Is(err, services.ErrUnknownService) {
				t.Fatalf("calling it by hand: %v, want unknown_service", err)
			}
		})
	}
}
