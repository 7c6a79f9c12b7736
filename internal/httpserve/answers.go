package httpserve

import (
	"fmt"
	"net/http"
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

// SetDigest answers Want-Digest (RFC 3230: Digest) and Want-Repr-Digest
// (RFC 9530: Repr-Digest) with checksums stored at write time.
func SetDigest(w http.ResponseWriter, r *http.Request, sums map[string]string) {
	if want := r.Header.Get("Want-Digest"); want != "" {
		if v, ok := checksum.DigestHeaderValue(want, sums); ok {
			w.Header().Set("Digest", v)
		}
	}
	if want := r.Header.Get("Want-Repr-Digest"); want != "" {
		if v, ok := checksum.ReprDigestValue(want, sums); ok {
			w.Header().Set("Repr-Digest", v)
		}
	}
}

// WantedDigests are the checksum types r asks for: one list per header
// that names a known one (Want-Digest, Want-Repr-Digest), most wanted
// first.
func WantedDigests(r *http.Request) [][]string {
	var out [][]string
	for _, want := range [][]string{checksum.WantedTypes(r.Header.Get("Want-Digest")), checksum.WantedReprTypes(r.Header.Get("Want-Repr-Digest"))} {
		if len(want) > 0 {
			out = append(out, want)
		}
	}
	return out
}

// RangedPut refuses a PUT that carries Content-Range (a partial update):
// files are written whole, and RFC 9110 (14.5) wants 400 from a server
// that would not apply the range, as its bytes are likely part of the
// file mistakenly PUT as all of it (writing them replaced the file with
// the range). Both endpoints a PUT reaches ask here, the namespace's
// before it starts an upload and the data endpoint before it writes one;
// ranged updates, when files can be updated in place, start here.
func RangedPut(r *http.Request, path string) error {
	if r.Header.Get("Content-Range") == "" {
		return nil
	}
	return kerr.New(kerr.Invalid, "PUT", path, "Content-Range: a partial update of a file is not supported (PUT the whole file)")
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
