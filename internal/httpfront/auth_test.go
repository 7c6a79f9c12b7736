package httpfront

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/macaroon"
)

// certMethod stands for the x509 method: it applies to requests with a
// certificate chain.
type certMethod struct{}

func (certMethod) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if len(r.Certs) == 0 {
		return auth.Principal{}, false, nil
	}
	return auth.Principal{UID: 1000, Name: "alice", Method: "x509"}, true, nil
}

// TestBearerKeepsCertificate: over TLS, a bearer credential no method of
// the chain takes (a JWT where only macaroons are) leaves the client the
// identity of its certificate; over plaintext a chain headed by
// RefusePlaintextBearer refuses it.
func TestBearerKeepsCertificate(t *testing.T) {
	chain := auth.Chain{auth.RefusePlaintextBearer{}, &macaroon.Service{Key: []byte("k")}, certMethod{}}
	r := httptest.NewRequest("GET", "https://kaon.test/data/f", nil)
	r.Header.Set("Authorization", "Bearer eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}}
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1234}
	r = r.WithContext(ConnContext(r.Context(), fakeConn{remote: remote}))
	p, err := authenticate(chain, takeBearer(r), false)
	if err != nil || p.Name != "alice" {
		t.Fatalf("a JWT beside a client certificate on an instance without tokens: %+v %v", p, err)
	}
	r.TLS = nil
	if p, err := authenticate(chain, takeBearer(r), false); err == nil {
		t.Fatalf("a bearer credential over plaintext was taken: %+v", p)
	}
}

// fakeConn is a connection known by its addresses only.
type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c fakeConn) LocalAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 443} }
