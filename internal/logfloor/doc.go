// Package logfloor wraps a slog.Handler so records below a level are dropped: the
// dependencies we embed (protoactor-go, memberlist) narrate their life at Info. New
// returns the wrapped handler.
package logfloor
