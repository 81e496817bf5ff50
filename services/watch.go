package services

import (
	"context"
	"encoding/json"
	"fmt"
)

// Watch subscribes, with no Go type, to the state or events member of service on conn
// (a StreamConnection or its Session(), a Loopback or its Session()): fn gets each value
// of a state (the hydrated value first, then each later one) or each event, as JSON,
// with its delivery, one call at a time, in order; failed (when set) is told if the
// subscription is refused or ends for good. It returns the member's kind ("state" or
// "events") and stop. The member's kind comes from conn's catalogue: an unknown service
// is unknown_service, an unknown member unknown_member, a method invalid_arguments.
// meshnode watch is built on it.
func Watch(ctx context.Context, conn Connection, service, member string, fn func(d Delivery, value json.RawMessage), failed func(error)) (kind string, stop func(), err error) {
	sub, ok := conn.(subscriber)
	if !ok {
		return "", nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("a connection of type %T carries no subscriptions", conn)}
	}
	cat, err := conn.Catalogue(ctx)
	if err != nil {
		return "", nil, err
	}
	var entry *CatalogueEntry
	for i := range cat.Services {
		if cat.Services[i].ID == service {
			entry = &cat.Services[i]
		}
	}
	if entry == nil {
		return "", nil, &Error{Code: CodeUnknownService, Message: fmt.Sprintf("no service %q", service)}
	}
	k, ok := entry.Members[member]
	switch {
	case !ok:
		return "", nil, &Error{Code: CodeUnknownMember, Message: fmt.Sprintf("service %q has no member %q", service, member)}
	case k != string(kindState) && k != string(kindEvents):
		return "", nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("%s.%s is a %s, not a state or events member", service, member, k)}
	}
	r := newReplica(nil, service+"."+member, memberKind(k), func(raw json.RawMessage, val any) (any, error) {
		if len(raw) > 0 {
			return append(json.RawMessage(nil), raw...), nil
		}
		return encodeStrict(val)
	})
	if failed != nil {
		r.onClosed = func(e *Error) { failed(e) }
	}
	unsubscribe := r.subscribe("", func(ctx context.Context, v any) {
		d, _ := DeliveryOf(ctx)
		fn(d, v.(json.RawMessage))
	})
	r.bind(remoteSource{sub: sub, addr: subAddr{svc: service, member: member}, kind: memberKind(k)})
	return k, func() { unsubscribe(); r.bind(nil) }, nil
}
