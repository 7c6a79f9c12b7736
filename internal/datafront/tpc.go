package datafront

// HTTP third-party copy (WLCG HTTP-TPC): a WebDAV COPY whose Source
// (pull: Kaon is the destination) or Destination (push: Kaon is the
// source) header names a remote http(s) URL.
//
// Where the bytes flow: the namespace endpoint only authorizes, exactly as
// for GET and PUT: nsserver.Open with the request's principal (write on
// the destination for a pull, read on the source for a push) and a 307 to
// the storage server holding the grant, with the capability in the URL.
// Clients repeat the COPY there with the same headers (davix/gfal hop
// through redirects on COPY; curl -L keeps the method on a 307). The
// storage server runs the copy with package transfer: it pulls from the
// remote straight into the normal upload path (checksums while streaming,
// nothing visible before commit) or pushes the file to the remote with
// PUT. No byte passes through the namespace server.
//
// TransferHeader<Name>: <value> request headers go to the remote as
// <Name>: <value> (tokens travel this way); their values are never
// logged. The answer is 202 Accepted with a chunked text body: a
// performance marker at once and every TPCConfig.Markers while the copy
// runs, then "success: Created" or "failure: <reason>" as the last line.

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
)

// TPCConfig configures third-party copy on a storage server's data
// endpoint.
type TPCConfig struct {
	HTTP    *remote.HTTP  // the remote ends and their policy (nil: COPY refused)
	Markers time.Duration // performance marker period (default 5 s)
}

// transferHeaderPrefix marks the request headers a COPY forwards.
const transferHeaderPrefix = "Transferheader"

// transferHeaders are the TransferHeader* headers of r with the prefix
// stripped. Headers that would change how the remote request is framed
// are not forwarded.
func transferHeaders(r *http.Request) http.Header {
	out := http.Header{}
	for k, vs := range r.Header {
		name, ok := strings.CutPrefix(http.CanonicalHeaderKey(k), transferHeaderPrefix)
		if !ok || name == "" {
			continue
		}
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Expect", "Te", "Upgrade", "Trailer":
			continue
		}
		for _, v := range vs {
			out.Add(name, v)
		}
	}
	return out
}

// copy runs a third-party copy on the storage server holding the grant.
func (d *data) copy(w http.ResponseWriter, r *http.Request, c *capability.Capability, token string) {
	if d.tpc.HTTP == nil {
		httpserve.CopyRefused(w, kerr.New(kerr.Unsupported, "COPY", c.Path, "third-party copy is not enabled on this storage server"), http.StatusNotImplemented)
		return
	}
	if err := httpserve.CheckCredential(r, c.Path); err != nil {
		httpserve.CopyRefused(w, err, http.StatusBadRequest)
		return
	}
	pull := c.Write
	raw := r.Header.Get("Destination")
	if pull {
		raw = r.Header.Get("Source")
	}
	u, err := d.tpc.HTTP.Policy.CheckURL(raw)
	if err != nil {
		httpserve.CopyRefused(w, kerr.WithOp(err, "COPY"), 0)
		return
	}
	hdr := transferHeaders(r)
	var src transfer.Source
	var dst transfer.Destination
	if pull {
		src, dst = d.tpc.HTTP.Source(u, hdr), d.s.UploadDest(c, token, httpAdmitWait)
	} else {
		src, dst = d.s.FileSource(c, token, httpAdmitWait), d.tpc.HTTP.Destination(u, hdr)
	}
	every := d.tpc.Markers
	if every <= 0 {
		every = 5 * time.Second
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusAccepted)
	rc := http.NewResponseController(w)
	marker := func(n int64) {
		fmt.Fprintf(w, "Perf Marker\n\tTimestamp: %d\n\tStripe Index: 0\n\tStripe Bytes Transferred: %d\n\tTotal Stripe Count: 1\nEnd\n", time.Now().Unix(), n)
		rc.Flush()
	}
	marker(0)
	res, err := transfer.Copy(r.Context(), src, dst, transfer.Options{ProgressInterval: every,
		Progress: func(p transfer.Progress) { marker(p.Bytes) }})
	mode := "push"
	if pull {
		mode = "pull"
	}
	if err != nil {
		d.log.Warn("third-party copy failed", "mode", mode, "path", c.Path, "remote", remote.Redact(u), "err", err)
		fmt.Fprintf(w, "failure: %s\n", httpserve.OneLine(err.Error()))
		return
	}
	d.log.Info("third-party copy done", "mode", mode, "path", c.Path, "remote", remote.Redact(u), "bytes", res.Bytes,
		"checksum", res.Type+":"+res.Checksum, "verified", res.Verified, "MiB/s", fmt.Sprintf("%.1f", float64(res.Bytes)/(1<<20)/res.Elapsed.Seconds()))
	fmt.Fprintln(w, "success: Created")
}
