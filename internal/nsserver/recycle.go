package nsserver

import (
	"context"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// RecycleList lists the recycled entries p may see.
func (s *Server) RecycleList(_ context.Context, p auth.Principal) ([]nsapi.RecycleEntry, error) {
	if err := unrestricted(p, "recycle ls"); err != nil {
		return nil, err
	}
	es, err := s.ns.RecycleList(caller(p))
	if err != nil {
		return nil, err
	}
	out := []nsapi.RecycleEntry{}
	for _, e := range es {
		out = append(out, nsapi.RecycleEntry{Key: e.Key, Path: e.Path, Dir: e.Dir, UID: e.UID, GID: e.GID,
			Size: e.Size, Files: e.Files, Time: time.Unix(0, e.Time)})
	}
	return out, nil
}

// RecycleRestore puts a recycled entry back and returns where.
func (s *Server) RecycleRestore(ctx context.Context, p auth.Principal, key string, forceRename bool) (string, error) {
	if err := unrestricted(p, "recycle restore"); err != nil {
		return "", s.audit(ctx, p, "recycle restore", key, "", err)
	}
	to, err := s.ns.RecycleRestore(caller(p), key, forceRename)
	return to, s.audit(ctx, p, "recycle restore", key, to, err)
}

// RecyclePurge removes recycled entries for good (key "" = all p may see,
// olderThan > 0 = only older ones).
func (s *Server) RecyclePurge(ctx context.Context, p auth.Principal, key string, olderThan time.Duration) (int, error) {
	if err := unrestricted(p, "recycle purge"); err != nil {
		return 0, s.audit(ctx, p, "recycle purge", key, "", err)
	}
	n, err := s.ns.RecyclePurge(caller(p), key, olderThan)
	return n, s.audit(ctx, p, "recycle purge", key, "", err)
}

// expireRecycled enforces the bin's lifetime and size until ctx ends.
func (s *Server) expireRecycled(ctx context.Context, lifetime time.Duration, maxBytes int64) {
	if lifetime <= 0 && maxBytes <= 0 {
		return
	}
	every := time.Minute
	if lifetime > 0 {
		every = min(max(lifetime/10, time.Second), time.Minute)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.ns.RecycleExpire(lifetime, maxBytes); err != nil {
			s.log.Error("recycle bin expiry failed", "err", err)
		} else if n > 0 {
			s.log.Info("purged expired recycle bin entries", "count", n)
		}
	}
}
