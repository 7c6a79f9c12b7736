package httpfront

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// negotiateMethod stands for the krb5 method: it applies to requests with
// a Kerberos credential and takes "good".
type negotiateMethod struct{ got []byte }

func (m *negotiateMethod) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if len(r.Kerberos) == 0 {
		return auth.Principal{}, false, nil
	}
	m.got = r.Kerberos
	if string(r.Kerberos) != "good" {
		return auth.Nobody, true, kerr.New(kerr.Unauthenticated, "authenticate", "", "Kerberos ticket refused: forged")
	}
	return auth.Principal{UID: 1, GID: 1, Name: "daemon", Method: "krb5"}, true, nil
}

func (*negotiateMethod) Challenge() string { return "Negotiate" }

// TestNegotiate: a chain with the krb5 method makes every 401 offer
// Negotiate (beside Bearer), so curl --negotiate sends its token; the
// token of "Authorization: Negotiate" reaches the method decoded and its
// principal is the request's; a refused one is refused.
func TestNegotiate(t *testing.T) {
	m := &negotiateMethod{}
	chain := auth.Chain{m, auth.Refuse{Reason: "a Kerberos ticket is required"}}
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1234}
	req := func(authz string) *http.Request {
		r := httptest.NewRequest("GET", "https://kaon.test/f", nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		return r.WithContext(ConnContext(r.Context(), fakeConn{remote: remote}))
	}
	_, err := authenticate(chain, req(""), false)
	rec := httptest.NewRecorder()
	textError(&challengeWriter{ResponseWriter: rec, schemes: challenges(chain)}, err, 0)
	if rec.Code != 401 || len(rec.Header().Values("WWW-Authenticate")) != 2 || rec.Header().Values("WWW-Authenticate")[1] != "Negotiate" {
		t.Fatalf("no credential: %d %v", rec.Code, rec.Header().Values("WWW-Authenticate"))
	}
	p, err := authenticate(chain, req("Negotiate "+base64.StdEncoding.EncodeToString([]byte("good"))), false)
	if err != nil || p.Name != "daemon" || string(m.got) != "good" {
		t.Fatalf("good token: %+v %v (method got %q)", p, err, m.got)
	}
	if p, err := authenticate(chain, req("Negotiate "+base64.StdEncoding.EncodeToString([]byte("forged"))), false); err == nil || kerr.KindOf(err) != kerr.Unauthenticated {
		t.Fatalf("forged token: %+v %v", p, err)
	}
	if p, err := authenticate(chain, req("Negotiate !!!"), false); err == nil {
		t.Fatalf("a token that is not base64 was taken: %+v", p)
	}
}
