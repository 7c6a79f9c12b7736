package main

import (
	"log/slog"
	"net"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// startXRootD starts the root:// listener of the namespace server and, in
// the all-in-one, one for the storage server too (on a free port of the
// same host). addr "" disables root://.
func startXRootD(addr, host string, m *nsserver.Server, id auth.Chain, fst *storage.Server, tpc *remote.Policy, sec *security, ep *Endpoints, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	l, nsAddr, err := listen(addr)
	if err != nil {
		return nil, err
	}
	cfg := xrootd.Config{Namespace: xrdfront.Namespace{NS: m}, IdentifyConn: xrdfront.Identifier(id),
		Logger: log.With("role", "xrootd-mgm")}
	sec.xrootd(&cfg, id)
	srv := xrootd.NewServer(cfg)
	noteXRootD("mgm", srv)
	go srv.Serve(l)
	ep.XRootD = "root://" + nsAddr
	stops := []func(){func() { srv.Close() }}
	if fst != nil {
		stop, err := startFSTXRootD(net.JoinHostPort(host, "0"), nsAddr, fst, tpc, sec, ep, log)
		if err != nil {
			srv.Close()
			return nil, err
		}
		stops = append(stops, stop)
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}

// startFSTXRootD starts a storage server's root:// data listener; namespace
// requests arriving there are redirected to manager (host:port). It is the
// source and the destination of XRootD third-party copies, reaching
// remotes under the tpc policy.
func startFSTXRootD(addr, manager string, fst *storage.Server, tpc *remote.Policy, sec *security, ep *Endpoints, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	l, a, err := listen(addr)
	if err != nil {
		return nil, err
	}
	// Request buffers in flight share the storage server's stream budget
	// figure: root:// clients cannot make it hold more than HTTP ones.
	cfg := xrootd.Config{Data: xrdfront.Data{S: fst}, Manager: manager,
		GlobalBudget: fst.StreamMemory(), Logger: log.With("role", "xrootd-fst"),
		TPC: xrdfront.TPC{Remote: &remote.XRootD{Policy: tpc}, Log: log}}
	sec.xrootd(&cfg, nil)
	srv := xrootd.NewServer(cfg)
	noteXRootD("fst", srv)
	go srv.Serve(l)
	fst.SetXrdAddr(a)
	ep.FSTXrd = "root://" + a
	return func() { srv.Close() }, nil
}
