package httpfront

import (
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
)

// Kerberos reaches the namespace endpoint as SPNEGO (RFC 4559): a client
// that holds a ticket sends "Authorization: Negotiate TOKEN" once a 401
// offers "WWW-Authenticate: Negotiate" (curl --negotiate, davix). Every
// request carrying a token is authenticated by it (a token is good for
// one request: its authenticator is in the replay cache afterwards); no
// answer token is sent back (no mutual authentication, as XRootD's krb5).

// negotiation is the GSS-API token of r's "Authorization: Negotiate" (ok
// false: none; a token that is not base64 is an empty one, refused by
// the krb5 method).
func negotiation(r *http.Request) ([]byte, bool) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "Negotiate") {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil || len(b) == 0 {
		return []byte{0}, true
	}
	return b, true
}

// challenges are the schemes chain's methods ask for in a 401.
func challenges(chain auth.Chain) []string {
	var out []string
	for _, a := range chain {
		if c, ok := a.(auth.Challenger); ok {
			out = append(out, c.Challenge())
		}
	}
	return out
}

// challengeWriter adds the chain's schemes to every 401 it answers.
type challengeWriter struct {
	http.ResponseWriter
	schemes []string
}

func (w *challengeWriter) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		for _, s := range w.schemes {
			w.Header().Add("WWW-Authenticate", s)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *challengeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *challengeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
