package role

import (
	"context"
	"log/slog"
)

// leveled is log with a level of its own, which kaon debug changes at
// runtime (nsserver.Config.LogLevel, storage.Config.LogLevel); it starts
// at log's (debug with -v, else info). In kaon up each role has its own,
// over the one output.
func leveled(log *slog.Logger) (*slog.Logger, *slog.LevelVar) {
	v := &slog.LevelVar{}
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		v.Set(slog.LevelInfo)
	}
	return slog.New(levelHandler{h: log.Handler(), level: v}), v
}

// levelHandler passes the records at or above its level to h.
type levelHandler struct {
	h     slog.Handler
	level *slog.LevelVar
}

func (l levelHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= l.level.Level() }

func (l levelHandler) Handle(ctx context.Context, r slog.Record) error { return l.h.Handle(ctx, r) }

func (l levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return levelHandler{h: l.h.WithAttrs(as), level: l.level}
}

func (l levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{h: l.h.WithGroup(name), level: l.level}
}
