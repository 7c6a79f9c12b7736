package krb5

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/krb5auth"
	"github.com/kaon-storage/kaon/internal/xrootd"
	xrdkrb5 "github.com/kaon-storage/kaon/internal/xrootd/krb5"
)

// TestKrb5KaonClients: Kaon's own clients with a ticket from the test's
// KDC. The kaon CLI, finding no bearer token, authenticates to the https
// namespace API with the ticket (SPNEGO) and is daemon; without a ticket,
// or to a server its KDC has no principal for, it is who its socket says
// (there, with a warning). Kaon's root:// client (internal/xrootd, as the storage
// servers' third-party copies use it) logs in with krb5 to Kaon and to
// Debian's xrootd requiring krb5, and a file it creates is daemon's; with
// a ticket of another realm it is refused (Kaon: every request, with the
// reason).
func TestKrb5KaonClients(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs kaon as root and maps a principal to the local user daemon")
	}
	kdc := newKDC(t, "KAON.TEST", "OTHER.TEST")
	service := kdc.keytab("KAON.TEST", "service", "xrootd/localhost", "HTTP/localhost")
	daemon := kdc.kinit("daemon", kdc.keytab("KAON.TEST", "users", "daemon"), "")
	other := kdc.kinit("daemon@OTHER.TEST", kdc.keytab("OTHER.TEST", "others", "daemon@OTHER.TEST"), "")

	k := harness.Up(t, "--tls", "--auth", "krb5", "--krb5-keytab", service)
	u, _ := url.Parse(k.EP.XRootD)
	xrd := "localhost:" + u.Port()
	h, _ := url.Parse(k.EP.HTTPS)
	https := "https://localhost:" + h.Port()
	k.MustKaon("mkdir", "/krb")
	k.MustKaon("chown", "1:1", "/krb")
	k.MustKaon("chmod", "700", "/krb")

	// The CLI: no bearer token in its environment, a ticket.
	cli := func(cc string, args ...string) (string, error) {
		t.Helper()
		return client(t, kdc.Conf, cc, harness.Binary(t), append(args, "--url", https, "--ca", k.EP.CA)...)
	}
	if out, err := cli(daemon, "whoami"); err != nil || !strings.Contains(out, "name=daemon method=krb5") {
		t.Fatalf("kaon whoami with a ticket: %v\n%s", err, out)
	}
	if out, err := cli(daemon, "mkdir", "/krb/by-cli"); err != nil {
		t.Fatalf("kaon mkdir with a ticket: %v\n%s", err, out)
	}
	if st := k.MustKaon("stat", "/krb/by-cli"); !strings.Contains(st, "Uid: 1 ") {
		t.Fatalf("the CLI's directory is not daemon's:\n%s", st)
	}
	// A server the KDC has no HTTP/ principal for (reached by address)
	// gets the request without a ticket, and the user a warning.
	if out, err := client(t, kdc.Conf, daemon, harness.Binary(t), "whoami", "--url", k.EP.HTTPS, "--ca", k.EP.CA); err != nil ||
		!strings.Contains(out, "method=unix") || !strings.Contains(out, "not using Kerberos: no ticket for HTTP/127.0.0.1") {
		t.Fatalf("kaon whoami with a ticket, to a server without a principal: %v\n%s", err, out)
	}
	// Without a ticket this loopback client is its unix user (root).
	if out, err := cli("FILE:"+filepath.Join(t.TempDir(), "none"), "whoami"); err != nil || !strings.Contains(out, "method=unix") {
		t.Fatalf("kaon whoami without a ticket: %v\n%s", err, out)
	}

	// Kaon's root:// client.
	t.Setenv("KRB5_CONFIG", kdc.Conf)
	login := func(cc, hostport string) (*xrootd.Client, error) {
		t.Helper()
		t.Setenv("KRB5CCNAME", cc)
		krb, ok, err := krb5auth.ClientFromEnv()
		if err != nil || !ok {
			t.Fatalf("the ticket cache %s: ok=%v %v", cc, ok, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return xrootd.Dial(ctx, hostport, xrootd.ClientConfig{Auth: []xrootd.ClientAuth{xrdkrb5.Client{KRB: krb}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := login(daemon, xrd)
	if err != nil {
		t.Fatalf("root:// krb5 login to Kaon: %v", err)
	}
	defer c.Close()
	f, err := c.Create(ctx, "/krb/by-xrootd-client", 0o644)
	if err != nil {
		t.Fatalf("create over root:// krb5: %v", err)
	}
	if err := f.WriteAt(ctx, []byte("krb5\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Conn().Close()
	if st := k.MustKaon("stat", "/krb/by-xrootd-client"); !strings.Contains(st, "Uid: 1 ") || !strings.Contains(st, "Size: 5\n") {
		t.Fatalf("the root:// client's file is not daemon's 5 bytes:\n%s", st)
	}
	// A refused credential: the session refuses every request with the
	// reason (how a 5.5 client learns it).
	oc, err := login(other, xrd)
	if err != nil {
		t.Fatalf("root:// krb5 login with another realm's ticket: %v", err)
	}
	defer oc.Close()
	_, err = oc.Stat(ctx, "/krb")
	var se *xrootd.ServerError
	if !errors.As(err, &se) || !se.NotAuthorized() || !strings.Contains(se.Msg, "realm OTHER.TEST is not this server's") {
		t.Fatalf("stat after a krb5 login with another realm's ticket: %v", err)
	}

	// Debian's xrootd requiring krb5 takes the same client.
	peer := xrootdKrb5(t, kdc, service)
	pc, err := login(daemon, "localhost:"+peer)
	if err != nil {
		t.Fatalf("root:// krb5 login to Debian's xrootd: %v", err)
	}
	defer pc.Close()
	if _, err := pc.Stat(ctx, "/"); err != nil {
		t.Fatalf("stat at Debian's xrootd after a krb5 login: %v", err)
	}
	if oc, err := login(other, "localhost:"+peer); err == nil {
		_, err = oc.Stat(ctx, "/")
		oc.Close()
		if err == nil {
			t.Fatal("Debian's xrootd took daemon@OTHER.TEST from Kaon's client")
		}
	}
}
