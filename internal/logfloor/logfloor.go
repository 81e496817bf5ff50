package logfloor

import (
	"context"
	"log/slog"
)

type handler struct {
	slog.Handler
	min slog.Level
}

// New returns h without the records below min.
func New(h slog.Handler, min slog.Level) slog.Handler { return handler{h, min} }

func (l handler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= l.min && l.Handler.Enabled(ctx, lv)
}

func (l handler) WithAttrs(a []slog.Attr) slog.Handler { return handler{l.Handler.WithAttrs(a), l.min} }

func (l handler) WithGroup(g string) slog.Handler { return handler{l.Handler.WithGroup(g), l.min} }
