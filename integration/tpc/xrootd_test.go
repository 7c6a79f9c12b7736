package tpc

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// xrdSum is the adler32 a root:// server reports for path.
func xrdSum(t *testing.T, hostport, path string) string {
	t.Helper()
	out := mustRun(t, "query checksum "+hostport+path, time.Minute, "xrdfs", hostport, "query", "checksum", path)
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "adler32" {
		t.Fatalf("checksum answer %q", out)
	}
	return f[1]
}

// xrdGet downloads a root:// URL.
func xrdGet(t *testing.T, url string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "got.bin")
	mustRun(t, "xrdcp download "+url, 2*time.Minute, "xrdcp", "-s", "-f", url, p)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestXRootDTPC runs xrdcp --tpc only with Kaon as source, as destination
// and as both, and against Debian's xrootd on the other side.
func TestXRootDTPC(t *testing.T) {
	a, b := up(t), up(t)
	x1, x2 := xrootdServer(t), xrootdServer(t)
	local, data, sum := randomFile(t, 40<<20+333)
	mustRun(t, "upload to Kaon A", time.Minute, "xrdcp", "-s", local, a.EP.XRootD+"//d/src.bin")
	mustRun(t, "upload to xrootd 1", time.Minute, "xrdcp", "-s", local, "root://"+x1+"//src.bin")

	cases := []struct {
		name     string
		src, dst string // root:// URLs
		dstHost  string // host:port to query the checksum at
		dstPath  string
	}{
		{"kaon to kaon", a.EP.XRootD + "//d/src.bin", b.EP.XRootD + "//k/k2k.bin", hostport(b.EP.XRootD), "/k/k2k.bin"},
		{"kaon to xrootd", a.EP.XRootD + "//d/src.bin", "root://" + x2 + "//fromkaon.bin", x2, "/fromkaon.bin"},
		{"xrootd to kaon", "root://" + x1 + "//src.bin", b.EP.XRootD + "//k/fromxrd.bin", hostport(b.EP.XRootD), "/k/fromxrd.bin"},
	}
	for _, c := range cases {
		out, err := run(t, "xrdcp --tpc only "+c.name, 3*time.Minute, "xrdcp", "--tpc", "only", c.src, c.dst)
		if err != nil {
			t.Fatalf("%s: %v\n%s\nA:\n%s\nB:\n%s", c.name, err, out, a.Logs(), b.Logs())
		}
		if got := xrdSum(t, c.dstHost, c.dstPath); got != sum {
			t.Fatalf("%s: adler32 %s at the destination, source %s", c.name, got, sum)
		}
		if got := xrdGet(t, "root://"+c.dstHost+"/"+c.dstPath); !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes at the destination differ from the %d sent", c.name, len(got), len(data))
		}
	}
	if n := strings.Count(b.Logs(), "xrootd third-party copy done"); n != 2 {
		t.Fatalf("B ran %d pulls, want 2 (kaon and xrootd sources):\n%s", n, b.Logs())
	}
}

// TestXRootDTPCRefusals: a key replayed by someone else, or a source that
// does not exist, fail the copy and leave no file.
func TestXRootDTPCRefusals(t *testing.T) {
	a, b := up(t), up(t)
	out, err := run(t, "xrdcp --tpc only of a missing source", 3*time.Minute, "xrdcp", "--tpc", "only",
		a.EP.XRootD+"//nope.bin", b.EP.XRootD+"//k/x.bin")
	if err == nil {
		t.Fatalf("copy of a missing source succeeded:\n%s", out)
	}
	if _, err := run(t, "stat the failed destination", time.Minute, "xrdfs", hostport(b.EP.XRootD), "stat", "/k/x.bin"); err == nil {
		t.Fatal("a failed copy left a destination file")
	}
	// A destination opening a source with a key nobody registered is
	// refused (after the registration wait).
	local, _, _ := randomFile(t, 1<<20)
	mustRun(t, "upload", time.Minute, "xrdcp", "-s", local, a.EP.XRootD+"//d/src.bin")
	out, err = run(t, "open a source with an unregistered key", 2*time.Minute, "xrdcp", "-s", "-f",
		a.EP.FSTXrd+"//d/src.bin?tpc.key=00112233445566778899aabb&tpc.org=root.1@localhost", filepath.Join(t.TempDir(), "x"))
	if err == nil || !strings.Contains(out, "no tpc authorization") {
		t.Fatalf("open with an unregistered key: %v\n%s", err, out)
	}
}

// TestXRootDTPCFromGSISource: Debian's xrootd as a source that takes only
// gsi (sec.protocol gsi, grid-mapfile required): Kaon's storage server
// logs in with its host certificate, which the source's grid-mapfile maps,
// and pulls the file; a source that does not map Kaon's host refuses it,
// and the copy fails naming the reason, leaving no file.
func TestXRootDTPCFromGSISource(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	local, err := tlsconf.LocalCA(filepath.Join(dir, "kaon", "tls"))
	if err != nil {
		t.Fatal(err)
	}
	grid := x509test.NewRSACA("Grid")
	caDir := filepath.Join(dir, "certificates")
	if err := x509test.WriteCADir(caDir, grid); err != nil {
		t.Fatal(err)
	}
	h, _ := tlsconf.SubjectHash(local.Cert)
	b, _ := os.ReadFile(filepath.Join(local.HashDir, h+".0"))
	os.WriteFile(filepath.Join(caDir, h+".0"), b, 0o644)
	k := harness.Start(t, filepath.Join(dir, "kaon"), "up", "--data", filepath.Join(dir, "kaon"), "--http", "127.0.0.1:0",
		"--xrootd", "127.0.0.1:0", "--tls", "--tls-ca-dir", caDir, "--tpc-allow-loopback")
	k.EP = harness.ReadEndpoints(t, k.Dir)
	gc, err := os.ReadFile(filepath.Join(k.Dir, "tls", "gsicert.pem"))
	if err != nil {
		t.Fatalf("kaon up --tls made no RSA host certificate for gsi: %v", err)
	}
	blk, _ := pem.Decode(gc)
	kc, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kaonDN := x509auth.DN(kc)
	alice := grid.User("Alice")
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := alice.Proxy(x509test.ProxyOpts{}).WriteProxyFile(proxy); err != nil {
		t.Fatal(err)
	}
	source := func(mapKaon bool) string {
		return xrootdServerWith(t, func(d string) string {
			if err := grid.Host("localhost", "127.0.0.1").WriteCertKey(filepath.Join(d, "hostcert.pem"), filepath.Join(d, "hostkey.pem")); err != nil {
				t.Fatal(err)
			}
			gm := `"/DC=org/DC=kaon-test/O=Users/CN=Alice" alice` + "\n"
			if mapKaon {
				gm += `"` + kaonDN + `" kaon` + "\n"
			}
			os.WriteFile(filepath.Join(d, "grid-mapfile"), []byte(gm), 0o644)
			// A copy of the CA directory the xrootd user can read.
			os.MkdirAll(filepath.Join(d, "certificates"), 0o755)
			ents, _ := os.ReadDir(caDir)
			for _, e := range ents {
				b, _ := os.ReadFile(filepath.Join(caDir, e.Name()))
				os.WriteFile(filepath.Join(d, "certificates", e.Name()), b, 0o644)
			}
			return fmt.Sprintf("xrootd.seclib libXrdSec.so\nsec.protocol gsi -certdir:%s/certificates -cert:%s/hostcert.pem -key:%s/hostkey.pem -gridmap:%s/grid-mapfile -gmapopt:2 -crl:0\nsec.protbind * only gsi\n",
				d, d, d, d)
		})
	}
	env := []string{"X509_CERT_DIR=" + caDir, "X509_USER_PROXY=" + proxy}
	localFile, data, sum := randomFile(t, 12<<20+5)
	copyOnce := func(x, dst string) (string, error) {
		_, port, _ := strings.Cut(x, ":")
		src := "root://localhost:" + port + "//src.bin"
		mustRunEnv(t, "upload to the gsi xrootd", time.Minute, env, "xrdcp", "-s", "-f", localFile, src)
		return runEnv(t, "xrdcp --tpc only from the gsi xrootd", 3*time.Minute, env, "xrdcp", "--tpc", "only", src, k.EP.XRootD+"/"+dst)
	}
	x := source(true)
	if out, err := copyOnce(x, "/fromgsi.bin"); err != nil {
		t.Fatalf("copy from a gsi source: %v\n%s\nkaon:\n%s", err, out, k.Logs())
	}
	if got := xrdSum(t, hostport(k.EP.XRootD), "/fromgsi.bin"); got != sum {
		t.Fatalf("adler32 %s at Kaon, source %s", got, sum)
	}
	if got := xrdGet(t, k.EP.XRootD+"//fromgsi.bin"); !bytes.Equal(got, data) {
		t.Fatal("the copy differs from the source")
	}
	y := source(false)
	out, err := copyOnce(y, "/refused.bin")
	if err == nil {
		t.Fatalf("a source that does not map Kaon's host let it copy:\n%s", out)
	}
	if !strings.Contains(k.Logs(), "xrootd third-party copy failed") {
		t.Fatalf("no failed copy in Kaon's log:\n%s", k.Logs())
	}
	if _, err := run(t, "stat the refused copy", time.Minute, "xrdfs", hostport(k.EP.XRootD), "stat", "/refused.bin"); err == nil {
		t.Fatal("a refused copy left a file")
	}
}
