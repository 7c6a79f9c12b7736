package nsserver

import (
	"context"
	"log/slog"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Log levels at runtime (kaon debug LEVEL [--role R]): the namespace
// server's own (Config.LogLevel) at once, the storage servers' through
// their next heartbeat's reply. Not kept across restarts: a server starts
// at the level of its flags.

// SetLogLevel sets the log level of role (mgm, fst, or "" for both) and
// returns the levels set (admin only).
func (s *Server) SetLogLevel(ctx context.Context, p auth.Principal, r nsapi.DebugRequest) (out nsapi.DebugLevels, err error) {
	defer func() { err = s.audit(ctx, p, "debug", r.Role, r.Level, err) }()
	if err := requireRoot(p, "debug"); err != nil {
		return out, err
	}
	var l slog.Level
	lv := strings.ToUpper(r.Level)
	if lv == "WARNING" {
		lv = "WARN"
	}
	if err := l.UnmarshalText([]byte(lv)); err != nil {
		return out, kerr.New(kerr.Invalid, "debug", r.Level, "unknown level (debug, info, warn, error)")
	}
	switch r.Role {
	case "", "all", "mgm", "fst":
	default:
		return out, kerr.New(kerr.Invalid, "debug", r.Role, "unknown role (mgm, fst; none: both)")
	}
	if r.Role != "fst" {
		if s.cfg.LogLevel == nil {
			return out, kerr.New(kerr.Unsupported, "debug", "mgm", "this namespace server's log level is fixed")
		}
		s.cfg.LogLevel.Set(l)
		s.log.Info("log level set (kaon debug)", "level", l, "by", p.Name)
	}
	if r.Role != "mgm" {
		s.fstLevel.Store(l.String())
	}
	return s.logLevels(), nil
}

// logLevels are the levels in force (the storage servers': as last set
// here, "" if never).
func (s *Server) logLevels() nsapi.DebugLevels {
	out := nsapi.DebugLevels{}
	if s.cfg.LogLevel != nil {
		out.MGM = s.cfg.LogLevel.Level().String()
	}
	out.FST, _ = s.fstLevel.Load().(string)
	return out
}
