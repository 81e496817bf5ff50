// Package services is meshnode's plugin service RPC: plugins offer typed services to
// each other and to client programs with one API, whether the provider is in the same
// process, on another node, or behind a STREAM connection.
//
// Define a token (a service id and a contract struct of Method members), provide it
// from a Facet's setup with Provide, use it from another facet with Use, and start a
// Host with the facets (NewHost). A Host resolves every requirement to its own
// provision or to exactly one connected provider (NewLoopback, NewStreamConnection);
// calls carry strict JSON, get a fresh context at the endpoint (the authenticated
// client under ClientOf, a cancel of their own, the caller's trace as the parent of an
// rpc.server span), and fail with *Error values whose stable codes errors.Is matches.
// Session workers (WorkerKind) are Actors whose session facets a presentation reaches
// after SessionManagement.Attach. In a node, meshnode.Config.Services and
// Config.ServiceWorker wire it; docs/services.md has the frames and the decisions.
package services
