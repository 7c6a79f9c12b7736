package xrdfront

import (
	"context"
	"log/slog"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/transfer"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// TPC pulls XRootD third-party copies into a storage server: the
// destination side of the tpc.* protocol (internal/xrootd/tpc.go). The
// source is opened with the rendezvous key and the client's origin, and
// its bytes go through the mover into the upload the client's open
// started (checksums computed as they stream, committed by the client's
// close).
type TPC struct {
	Remote *remote.XRootD
	Log    *slog.Logger
	S      *storage.Server // counts the copies (nil: not counted)
}

var _ xrootd.TPCPuller = TPC{}

// Pull runs one copy.
func (t TPC) Pull(ctx context.Context, job xrootd.TPCJob, df xrootd.DataFile) error {
	wf, ok := df.(*writeFile)
	if !ok {
		return kerr.New(kerr.Internal, "tpc", job.Path, "destination is not an upload")
	}
	// Raw, as xrootd servers compare it (the key is hex, the origin
	// "user.pid@host").
	opaque := xrootd.TPCKey + "=" + job.Key + "&" + xrootd.TPCOrg + "=" + job.Org
	typ, sums := "", map[string]string(nil)
	if job.Cks != "" { // "type" or "type:value"
		name, val, _ := strings.Cut(job.Cks, ":")
		typ = checksumType(strings.ToLower(name))
		if val != "" {
			sums = map[string]string{typ: strings.ToLower(val)}
		}
	}
	src := t.Remote.Source(job.Src, job.Lfn, opaque, sums)
	res, err := transfer.Copy(ctx, src, wf.u.CopyDest(wf.c.Path), transfer.Options{Checksum: typ})
	if t.S != nil {
		t.S.CopyDone(storage.TPCKind{Protocol: "root", Direction: "pull"}, res.Bytes, err)
	}
	if err != nil {
		t.Log.Warn("xrootd third-party copy failed", "path", job.Path, "source", src.String(), "err", err)
		return kerr.Wrap(transfer.KindOf(err), "tpc", job.Path, err)
	}
	t.Log.Info("xrootd third-party copy done", "path", job.Path, "source", src.String(), "bytes", res.Bytes,
		"checksum", res.Type+":"+res.Checksum, "verified", res.Verified)
	return nil
}
