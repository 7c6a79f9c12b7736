package nsserver

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// The audit log: one JSON line per mutation (done or refused) and per
// refused read, with who asked (principal and how it was authenticated),
// through which front end, what and where, and the outcome. Requests carry
// no secrets into it: the service never sees tokens or capabilities, only
// the principal they were turned into, and logs paths, never URLs.

// AuditRecord is one line of the audit log.
type AuditRecord struct {
	Time     time.Time `json:"time"`
	User     string    `json:"user"`
	UID      uint32    `json:"uid"`
	GID      uint32    `json:"gid"`
	Method   string    `json:"method"`   // how the principal was authenticated
	Protocol string    `json:"protocol"` // front end
	Op       string    `json:"op"`
	Path     string    `json:"path"`
	Target   string    `json:"target,omitempty"` // a rename's destination
	Result   string    `json:"result"`           // "ok" or the error kind
	Error    string    `json:"error,omitempty"`
}

type auditor struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newAuditor(w io.Writer) *auditor {
	if w == nil {
		return nil
	}
	return &auditor{enc: json.NewEncoder(w)}
}

// audit records a mutation's outcome and returns err.
func (s *Server) audit(ctx context.Context, p auth.Principal, op, path, target string, err error) error {
	if s.auditLog == nil {
		return err
	}
	r := AuditRecord{Time: s.now().UTC(), User: p.Name, UID: p.UID, GID: p.GID, Method: p.Method,
		Protocol: auth.Protocol(ctx), Op: op, Path: path, Target: target, Result: "ok"}
	if err != nil {
		r.Result, r.Error = kerr.KindOf(err).String(), err.Error()
	}
	s.auditLog.mu.Lock()
	_ = s.auditLog.enc.Encode(r)
	s.auditLog.mu.Unlock()
	return err
}

// refused records a read that was refused (permission, quota, expiry)
// and returns err.
func (s *Server) refused(ctx context.Context, p auth.Principal, op, path string, err error) error {
	switch kerr.KindOf(err) {
	case kerr.Permission, kerr.Expired, kerr.Quota:
		return s.audit(ctx, p, op, path, "", err)
	}
	return err
}
