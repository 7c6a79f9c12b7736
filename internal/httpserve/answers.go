package httpserve

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// DataPath is the URL prefix of a storage server's data endpoint, where
// the namespace server redirects clients with a capability:
//
//	GET|HEAD|PUT|COPY /kaon/v1/data/<fid hex>?cap=C
const DataPath = "/kaon/v1/data/"

// SetDigest answers Want-Digest with checksums stored at write time.
func SetDigest(w http.ResponseWriter, r *http.Request, sums map[string]string) {
	if want := r.Header.Get("Want-Digest"); want != "" {
		if v, ok := checksum.DigestHeaderValue(want, sums); ok {
			w.Header().Set("Digest", v)
		}
	}
}

// PutRange reads the Content-Range of a PUT: a partial update writing
// bytes FIRST-LAST of an existing file (as Apache mod_dav does), with the
// file's length after the slash or "*". ok is false without the header.
// RFC 9110 (14.5) wants 400 for a range the server would not apply, so a
// malformed one is refused rather than taken for the whole file. Both
// endpoints a PUT reaches ask here, the namespace's before it opens the
// file (an update with the range, an upload without) and the data
// endpoint before it writes.
func PutRange(r *http.Request, path string) (first, last int64, ok bool, err error) {
	v := r.Header.Get("Content-Range")
	if v == "" {
		return 0, 0, false, nil
	}
	bad := func(why string) (int64, int64, bool, error) {
		return 0, 0, true, kerr.New(kerr.Invalid, "PUT", path, "Content-Range "+strconv.Quote(v)+": "+why)
	}
	spec, ok := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !ok {
		return bad("only byte ranges (bytes FIRST-LAST/LENGTH or /*) are supported")
	}
	rng, length, ok := strings.Cut(strings.TrimSpace(spec), "/")
	a, b, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 {
		return bad("want bytes FIRST-LAST/LENGTH or bytes FIRST-LAST/*")
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first {
		return bad("not a range of bytes FIRST-LAST with FIRST <= LAST")
	}
	if length != "*" {
		n, err := strconv.ParseInt(length, 10, 64)
		if err != nil || n <= last {
			return bad("the length after the slash must be * or greater than LAST")
		}
	}
	if r.ContentLength >= 0 && r.ContentLength != last-first+1 {
		return bad(fmt.Sprintf("the range has %d bytes, the body (Content-Length) %d", last-first+1, r.ContentLength))
	}
	return first, last, true, nil
}

// CopyRefused answers a third-party COPY refused before any transfer
// started, with the status kerr maps to (or status when not 0) and a
// "failure:" line clients show.
func CopyRefused(w http.ResponseWriter, err error, status int) {
	if status == 0 {
		status = kerr.HTTPStatus(transfer.KindOf(err))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintln(w, "failure: "+OneLine(err.Error()))
}

// OneLine is s on one line, as a "failure:" line carries it.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// CheckCredential refuses credential delegation (GridSite), which Kaon
// does not offer: tokens go in TransferHeaderAuthorization.
func CheckCredential(r *http.Request, p string) error {
	if c := r.Header.Get("Credential"); c != "" && !strings.EqualFold(c, "none") {
		return kerr.New(kerr.Unsupported, "COPY", p, fmt.Sprintf("credential delegation %q is not supported (send a token as TransferHeaderAuthorization and Credential: none)", c))
	}
	return nil
}
