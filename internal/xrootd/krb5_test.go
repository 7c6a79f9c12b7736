package xrootd_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// TestKrb5Wire: krb5 is offered on a plaintext login with the service
// principal (as XrdSecProtkrb5 does: "&P=krb5,<principal>"); one kXR_auth
// of "krb5\0" + AP-REQ makes the verified identity the session's; an
// AP-REQ the verifier refuses leaves a session refusing every request
// with the reason; credentials without the "krb5\0" header fail the auth
// (the session stays unauthenticated);
// an empty ticket is refused as such. The AP-REQ never reaches the log.
func TestKrb5Wire(t *testing.T) {
	logs := &lockedBuf{}
	var mu sync.Mutex
	var got []byte // what the verifier was given (by the server's goroutine)
	cfg := xrootd.Config{Namespace: whoNS{&xrdtest.Backend{Root: t.TempDir()}},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		IdentifyConn: func(user string, remote, local net.Addr) xrootd.Identity {
			return xrootd.Identity{User: user, UID: 4242, GID: 4242}
		},
		Security: []xrootd.SecProtocol{xrootd.Krb5("xrootd/localhost@KAON.TEST", func(_ context.Context, p xrootd.Peer, apreq []byte) (xrootd.Identity, error) {
			mu.Lock()
			got = append([]byte(nil), apreq...)
			mu.Unlock()
			if string(apreq) != "\x6egood-ap-req" {
				return xrootd.Identity{}, errors.New("Kerberos ticket refused: not sealed with this server's keys")
			}
			return xrootd.Identity{User: "daemon", UID: 1, GID: 1}, nil
		})}}
	srv := xrootd.NewServer(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()

	w := dialWire(t, addr, false)
	w.protocol(0, 0x03)
	if r := w.login("tester"); r.status != 0 || len(r.body) < 16 || string(r.body[16:]) != "&P=krb5,xrootd/localhost@KAON.TEST&P=unix" {
		t.Fatalf("login answer %+v (%q)", r, r.body)
	}
	if r := w.auth("krb5", []byte("krb5\x00\x6egood-ap-req")); r.status != 0 {
		t.Fatalf("auth with a good AP-REQ: %+v %q", r, r.body)
	}
	mu.Lock()
	given := string(got)
	mu.Unlock()
	if given != "\x6egood-ap-req" {
		t.Fatalf("the verifier got %q, want the AP-REQ after krb5\\0", given)
	}
	if _, uid := w.statUID(); uid != "1" {
		t.Fatalf("session uid %s, want the ticket's 1", uid)
	}

	for _, c := range []struct {
		name, body, want string
		refusal          bool // the auth succeeds, every request is refused
	}{
		{"forged", "krb5\x00\x6eforged-ap-req", "not sealed with this server's keys", true},
		{"empty ticket", "krb5\x00", "no Kerberos ticket", true},
		{"no header", "\x6egood-ap-req", "malformed credentials", false},
	} {
		w := dialWire(t, addr, false)
		w.protocol(0, 0x03)
		w.login("tester")
		r := w.auth("krb5", []byte(c.body))
		if c.refusal && r.status != 0 || !c.refusal && (r.errCode() != 3010 || !strings.Contains(string(r.body), c.want)) {
			t.Fatalf("%s: auth answer %+v %q", c.name, r, r.body)
		}
		want := c.want
		if !c.refusal {
			want = "authentication required" // the session is still unauthenticated
		}
		if r, _ := w.statUID(); r.errCode() != 3010 || !strings.Contains(string(r.body), want) {
			t.Fatalf("%s: stat after a refused ticket: %+v %q, want kXR_NotAuthorized saying %q", c.name, r, r.body, want)
		}
	}
	if strings.Contains(logs.String(), "ap-req") {
		t.Fatal("an AP-REQ is in the log")
	}
}
