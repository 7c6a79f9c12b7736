package main

import (
	"context"
	"log/slog"

	"github.com/kaon-storage/kaon/internal/mgm"
	"github.com/kaon-storage/kaon/internal/storage"
)

// startXRootD starts the root:// listeners of an all-in-one or namespace
// process (placeholder until the XRootD server is wired).
func startXRootD(ctx context.Context, addr, host string, m *mgm.Server, fst *storage.Server, ep *Endpoints, log *slog.Logger) (func(), error) {
	return func() {}, nil
}

func startFSTXRootD(ctx context.Context, addr, host, mgmURL string, fst *storage.Server, ep *Endpoints, log *slog.Logger) (func(), error) {
	return func() {}, nil
}
