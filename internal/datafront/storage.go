package datafront

import (
	"log/slog"
	"net/http"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/storage"
)

// Storage serves a storage server's HTTP listener: the client data
// endpoint (access-logged) and the internal storage RPC (not logged per
// request: an erasure-coded read across servers makes one stripe request
// per frame; refusals are logged). tpc configures third-party copy on the
// data endpoint (zero: COPY refused).
func Storage(fst *storage.Server, key *capability.Key, tpc TPCConfig, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(httpserve.DataPath, httpserve.AccessLog(Data(fst, log, tpc), log))
	internal := cluster.StorageHandler(fst, key.Internal(), log)
	mux.Handle(cluster.StripePath, internal)
	mux.Handle(cluster.ReadFilePath, internal)
	mux.Handle(cluster.TruncatePath, internal)
	moves := cluster.MoveHandler(fst, key.Internal(), log)
	mux.Handle(cluster.MovePath, moves)
	mux.Handle(cluster.ConvertPath, moves)
	mux.Handle(cluster.FsckRepairPath, cluster.RepairHandler(fst, key.Internal()))
	return mux
}
