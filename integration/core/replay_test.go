package core

import (
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestWriteCapabilityReplay: a write capability from a redirect is good
// for exactly one upload. Replayed over HTTP or root:// after its upload
// committed, it is refused and the committed file keeps its bytes, size
// and checksums.
func TestWriteCapabilityReplay(t *testing.T) {
	k := harness.Up(t)
	first, data := randomFile(t, 300000)
	second, _ := randomFile(t, 200000)
	writeCap := func(p string) *url.URL {
		t.Helper()
		r := curl(t, "-T", first, k.EP.HTTP+p)
		if r.code != 307 {
			t.Fatalf("PUT %s without -L: %d %s", p, r.code, r.body)
		}
		u, err := url.Parse(r.header("Location"))
		if err != nil || u.Query().Get("cap") == "" {
			t.Fatalf("PUT %s: no capability in %q", p, r.header("Location"))
		}
		return u
	}
	intact := func(p, when string) {
		t.Helper()
		mustGetEqual(t, k, p, data)
		if r := curl(t, "-I", "-L", "-H", "Want-Digest: adler32", k.EP.HTTP+p); !strings.Contains(r.headers, "adler32="+sumsOf(data).adler) {
			t.Fatalf("%s: %s: checksum changed:\n%s", p, when, r.headers)
		}
	}
	for _, layout := range []string{"plain", "replica:2", "ec:4+2"} {
		dir := "/" + strings.NewReplacer(":", "", "+", "").Replace(layout)
		layoutDir(t, k, dir, layout)
		// HTTP: the second PUT to the same URL is refused, nothing changes.
		loc := writeCap(dir + "/http")
		if r := curl(t, "-T", first, loc.String()); r.code != 201 {
			t.Fatalf("%s: first upload: %d %s", layout, r.code, r.body)
		}
		if r := curl(t, "-T", second, loc.String()); r.code != 403 || !strings.Contains(string(r.body), "already used") {
			t.Fatalf("%s: replayed PUT: %d %s", layout, r.code, r.body)
		}
		intact(dir+"/http", "after HTTP replay")

		// root://: the same capability as opaque data of a data-server URL.
		loc = writeCap(dir + "/xrd")
		xurl := k.EP.FSTXrd + "/" + dir + "/xrd?kaon.cap=" + url.QueryEscape(loc.Query().Get("cap"))
		if out, err := exec.Command("xrdcp", "-s", "-f", first, xurl).CombinedOutput(); err != nil {
			t.Fatalf("%s: first root:// upload: %v %s", layout, err, out)
		}
		out, err := exec.Command("xrdcp", "-s", "-f", second, xurl).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "already used") {
			t.Fatalf("%s: replayed root:// upload: %v %s", layout, err, out)
		}
		intact(dir+"/xrd", "after root:// replay")
		// ... and an HTTP replay of a capability used over root://.
		if r := curl(t, "-T", second, loc.String()); r.code != 403 {
			t.Fatalf("%s: HTTP replay of a root:// capability: %d %s", layout, r.code, r.body)
		}
		intact(dir+"/xrd", "after cross-protocol replay")
	}
	// Stripe endpoints are for storage servers only: a client capability
	// cannot reach a stripe directly.
	loc := writeCap("/plain/direct")
	stripe := strings.Replace(loc.String(), "/kaon/v1/data/", "/kaon/v1/stripe/", 1)
	stripe = strings.Replace(stripe, "?cap=", "/0?cap=", 1)
	if r := curl(t, "-T", second, stripe); r.code != 403 {
		t.Fatalf("client PUT to a stripe endpoint: %d %s", r.code, r.body)
	}
}
