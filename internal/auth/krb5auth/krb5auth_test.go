package krb5auth

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

const realm = "KAON.TEST"

// serviceKeytab is a keytab of xrootd/localhost@realm made from password.
func serviceKeytab(t *testing.T, password string) *keytab.Keytab {
	t.Helper()
	kt := keytab.New()
	if err := kt.AddEntry("xrootd/localhost", realm, password, time.Now(), 1, etypeID.AES256_CTS_HMAC_SHA1_96); err != nil {
		t.Fatal(err)
	}
	return kt
}

// mintAPReq mints an AP-REQ of client cname@crealm for xrootd/localhost with a
// ticket sealed by kt, valid from start to end.
func mintAPReq(t *testing.T, kt *keytab.Keytab, cname, crealm string, start, end time.Time) []byte {
	t.Helper()
	cn := types.NewPrincipalName(nametype.KRB_NT_PRINCIPAL, cname)
	sn := types.NewPrincipalName(nametype.KRB_NT_SRV_INST, "xrootd/localhost")
	tkt, key, err := messages.NewTicket(cn, crealm, sn, realm, types.NewKrbFlags(), kt, etypeID.AES256_CTS_HMAC_SHA1_96, 1, start, start, end, end)
	if err != nil {
		t.Fatal(err)
	}
	a, err := types.NewAuthenticator(crealm, cn)
	if err != nil {
		t.Fatal(err)
	}
	req, err := messages.NewAPReq(tkt, key, a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKrb5Method(t *testing.T) {
	kt := serviceKeytab(t, "service-secret")
	m, err := fromKeytab(kt, "test")
	if err != nil {
		t.Fatal(err)
	}
	if m.Service != "xrootd/localhost@"+realm || m.Realm != realm {
		t.Fatalf("service %q realm %q", m.Service, m.Realm)
	}
	m.lookup = func(name string) (auth.Principal, error) {
		if name != "alice" {
			return auth.Principal{}, errors.New("no such local user")
		}
		return auth.Principal{UID: 1001, GID: 1001, Name: "alice", Method: "krb5"}, nil
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}
	now := time.Now()
	do := func(cred []byte) (auth.Principal, bool, error) {
		return m.Authenticate(context.Background(), &auth.Request{Remote: remote, Kerberos: cred})
	}
	if _, ok, err := do(nil); ok || err != nil {
		t.Fatalf("no credential: applies=%v err=%v", ok, err)
	}
	good := mintAPReq(t, kt, "alice", realm, now.Add(-time.Minute), now.Add(time.Hour))
	p, ok, err := do(good)
	if err != nil || !ok || p.Name != "alice" || p.UID != 1001 || p.Method != "krb5" {
		t.Fatalf("valid ticket: %+v %v %v", p, ok, err)
	}
	// The same authenticator again is a replay.
	if _, _, err := do(good); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("replay: %v", err)
	}
	for _, c := range []struct {
		name string
		cred []byte
		kind kerr.Kind
		want string
	}{
		{"expired", mintAPReq(t, kt, "alice", realm, now.Add(-3*time.Hour), now.Add(-2*time.Hour)), kerr.Unauthenticated, "the ticket has expired"},
		{"forged", mintAPReq(t, serviceKeytab(t, "rogue KDC's key"), "alice", realm, now, now.Add(time.Hour)), kerr.Unauthenticated, "is not sealed with this server's keys"},
		{"other realm", mintAPReq(t, kt, "alice", "OTHER.TEST", now, now.Add(time.Hour)), kerr.Permission, "realm OTHER.TEST is not this server's (KAON.TEST)"},
		{"instance", mintAPReq(t, kt, "alice/admin", realm, now, now.Add(time.Hour)), kerr.Permission, "only user@KAON.TEST principals map"},
		{"no local user", mintAPReq(t, kt, "mallory", realm, now, now.Add(time.Hour)), kerr.Permission, "maps to \"mallory\": no such local user"},
		{"garbage", []byte{0x6e, 1, 2, 3}, kerr.Unauthenticated, "malformed AP-REQ"},
		{"not kerberos", []byte("NTLMSSP\x00"), kerr.Unauthenticated, "not an AP-REQ"},
	} {
		p, ok, err := do(c.cred)
		if !ok || err == nil || kerr.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.want) || p.Name != "nobody" {
			t.Errorf("%s: %+v applies=%v err=%v (kind %v), want %v %q", c.name, p, ok, err, kerr.KindOf(err), c.kind, c.want)
		}
	}
}

func TestLocalUserNeverRoot(t *testing.T) {
	if _, err := localUser("root"); err == nil || !strings.Contains(err.Error(), "superuser") {
		t.Fatalf("root: %v", err)
	}
}

// BenchmarkVerify: one AP-REQ verified and mapped (a new authenticator
// each time, minted outside the timer; the local user is daemon).
func BenchmarkVerify(b *testing.B) {
	t := &testing.T{}
	kt := serviceKeytab(t, "service-secret")
	m, _ := fromKeytab(kt, "bench")
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}
	now := time.Now()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cred := mintAPReq(t, kt, "daemon", realm, now, now.Add(time.Hour))
		b.StartTimer()
		if _, _, err := m.Authenticate(context.Background(), &auth.Request{Remote: remote, Kerberos: cred}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReplayAfterRestart: an authenticator accepted before a restart is
// refused as a replay after it (the replay cache is on disk); a fresh one
// is taken, and an entry older than the clock skew is dropped on open.
func TestReplayAfterRestart(t *testing.T) {
	kt := serviceKeytab(t, "service-secret")
	file := filepath.Join(t.TempDir(), "krb5-replay")
	open := func() *Method {
		m, err := fromKeytab(kt, "test")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.OpenReplayCache(file); err != nil {
			t.Fatal(err)
		}
		m.lookup = func(string) (auth.Principal, error) {
			return auth.Principal{UID: 1001, Name: "alice", Method: "krb5"}, nil
		}
		return m
	}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4000}
	now := time.Now()
	good := mintAPReq(t, kt, "alice", realm, now.Add(-time.Minute), now.Add(time.Hour))
	m := open()
	if _, _, err := m.Authenticate(context.Background(), &auth.Request{Remote: remote, Kerberos: good}); err != nil {
		t.Fatalf("first use: %v", err)
	}
	m.Close()
	// A restart: the process's in-memory cache is gone.
	service.GetReplayCache(MaxSkew).ClearOldEntries(-time.Hour)
	m = open()
	defer m.Close()
	if _, _, err := m.Authenticate(context.Background(), &auth.Request{Remote: remote, Kerberos: good}); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("the same AP-REQ after a restart: %v", err)
	}
	fresh := mintAPReq(t, kt, "alice", realm, now.Add(-time.Minute), now.Add(time.Hour))
	if _, _, err := m.Authenticate(context.Background(), &auth.Request{Remote: remote, Kerberos: fresh}); err != nil {
		t.Fatalf("a fresh authenticator after a restart: %v", err)
	}
}
