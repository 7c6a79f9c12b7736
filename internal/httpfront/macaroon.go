package httpfront

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/macaroon"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// mintMacaroon answers a macaroon request (POST to a path with
// Content-Type application/macaroon-request, as XrdMacaroons and dCache
// take it) with a macaroon for client c below p; any other POST is not
// a method of the namespace endpoint. The macaroon is in the body only:
// no log line carries it.
func (f *Namespace) mintMacaroon(w http.ResponseWriter, r *http.Request, c auth.Principal, p string) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	svc := macaroons(f.Auth)
	if ct != macaroon.ContentType || svc == nil {
		w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND")
		why := "POST is for macaroon requests (Content-Type " + macaroon.ContentType + ")"
		if svc == nil {
			why = "this instance issues no macaroons (--auth lists neither token nor x509)"
		}
		textError(w, kerr.New(kerr.Unsupported, r.Method, p, why), http.StatusMethodNotAllowed)
		return
	}
	if r.TLS == nil {
		textError(w, kerr.New(kerr.Permission, "macaroon", p, "macaroons are minted over https only"), 0)
		return
	}
	var req macaroon.Request
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		textError(w, kerr.New(kerr.Invalid, "macaroon", p, "the request body is not JSON {\"caveats\": [...], \"validity\": \"PT30M\"}"), 0)
		return
	}
	resp, err := svc.Mint(c, p, req)
	detail := ""
	if err == nil {
		detail = "activities=" + strings.Join(resp.Activities, ",") + " expires=" + resp.Expires.Format(time.RFC3339)
	}
	if f.NS != nil {
		err = f.NS.AuditGrant(r.Context(), c, "macaroon", p, detail, err)
	}
	if err != nil {
		textError(w, err, 0)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, resp)
}

// macaroons is the macaroon service of chain (nil: none).
func macaroons(chain auth.Chain) *macaroon.Service {
	for _, a := range chain {
		if s, ok := a.(*macaroon.Service); ok {
			return s
		}
	}
	return nil
}
