package httpfront

// The namespace's half of an HTTP third-party copy (WLCG HTTP-TPC): it
// authorizes the copy and redirects the client to the storage server,
// whose data endpoint runs it (datafront/tpc.go says how).

import (
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
)

// davCopy authorizes a third-party copy and sends the client to the
// storage server that will run it.
func (f *Namespace) davCopy(w http.ResponseWriter, r *http.Request, c auth.Principal, p string) {
	src, dst := r.Header.Get("Source"), r.Header.Get("Destination")
	if err := httpserve.CheckCredential(r, p); err != nil {
		httpserve.CopyRefused(w, err, http.StatusBadRequest)
		return
	}
	var pol remote.Policy // URL checks only; addresses are checked where the copy runs
	var g *nsapi.Grant
	var err error
	switch {
	case src != "" && dst != "":
		httpserve.CopyRefused(w, kerr.New(kerr.Invalid, "COPY", p, "both Source and Destination given"), http.StatusBadRequest)
		return
	case src != "":
		if _, err := pol.CheckURL(src); err != nil {
			httpserve.CopyRefused(w, kerr.WithOp(err, "COPY"), 0)
			return
		}
		overwrite := !strings.EqualFold(strings.TrimSpace(r.Header.Get("Overwrite")), "F")
		g, err = f.NS.Open(r.Context(), c, p, nsapi.OpenRequest{Write: true, Create: true, Truncate: overwrite,
			Exclusive: !overwrite, MkPath: true})
		if kerr.Is(err, kerr.Exists) {
			httpserve.CopyRefused(w, err, http.StatusPreconditionFailed)
			return
		}
	case dst != "":
		u, err := pol.CheckURL(dst)
		if err != nil {
			httpserve.CopyRefused(w, kerr.WithOp(err, "COPY"), 0)
			return
		}
		if strings.EqualFold(u.Host, r.Host) {
			httpserve.CopyRefused(w, kerr.New(kerr.Unsupported, "COPY", p, "copying within this server is not supported (Destination names this server)"), http.StatusNotImplemented)
			return
		}
		g, err = f.NS.Open(r.Context(), c, p, nsapi.OpenRequest{})
		if err != nil {
			httpserve.CopyRefused(w, err, 0)
			return
		}
	default:
		httpserve.CopyRefused(w, kerr.New(kerr.Invalid, "COPY", p, "third-party copy needs a Source or a Destination header"), http.StatusBadRequest)
		return
	}
	if err != nil {
		httpserve.CopyRefused(w, err, 0)
		return
	}
	http.Redirect(w, r, dataURL(r, g), http.StatusTemporaryRedirect)
}
