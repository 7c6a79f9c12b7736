package core

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestChecksumsOnRequest: md5 and sha-256 are not computed while writing by
// default; the first Want-Digest for them computes them from the stored
// data, records them (they survive a restart) and refuses to answer from
// damaged data. A directory can ask for them to be computed in the stream.
func TestChecksumsOnRequest(t *testing.T) {
	k := harness.Up(t)
	local, data := randomFile(t, 3<<20+17)
	want := sumsOf(data)
	mustPut(t, k, local, "/f")
	if info := k.MustKaon("file", "info", "/f"); strings.Contains(info, "md5") || !strings.Contains(info, "adler32: "+want.adler) {
		t.Fatalf("default upload should store adler32 and crc32c only:\n%s", info)
	}
	if got := curl(t, "-I", "-H", "Want-Digest: md5", k.EP.HTTP+"/f").header("Digest"); got != "md5="+want.md5b64 {
		t.Fatalf("Want-Digest md5: %q, want md5=%s", got, want.md5b64)
	}
	// An acceptable recorded type is answered without reading the data,
	// even when the client weighs an uncomputed one higher (RFC 3230 lets
	// the server choose).
	if got := curl(t, "-I", "-H", "Want-Digest: adler32;q=0.3, sha-256;q=0.9", k.EP.HTTP+"/f").header("Digest"); got != "adler32="+want.adler {
		t.Fatalf("Want-Digest adler32 or sha-256: %q", got)
	}
	if got := curl(t, "-I", "-H", "Want-Digest: sha-256", k.EP.HTTP+"/f").header("Digest"); got != "sha-256="+want.shab64 {
		t.Fatalf("Want-Digest sha-256: %q", got)
	}
	k.Restart()
	if info := k.MustKaon("file", "info", "/f"); !strings.Contains(info, "md5: ") || !strings.Contains(info, "sha256: ") {
		t.Fatalf("checksums computed on request not recorded across restart:\n%s", info)
	}
	// The redirected GET carries the recorded value too.
	if got := get(t, k, "/f", "-H", "Want-Digest: md5").header("Digest"); got != "md5="+want.md5b64 {
		t.Fatalf("GET Want-Digest md5 after restart: %q", got)
	}

	// Many clients asking at once share one computation and all get it right.
	mustPut(t, k, local, "/h")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = curl(t, "-I", "-H", "Want-Digest: sha-256", k.EP.HTTP+"/h").header("Digest")
		}()
	}
	wg.Wait()
	for i, g := range got {
		if g != "sha-256="+want.shab64 {
			t.Fatalf("concurrent request %d: Digest %q", i, g)
		}
	}

	// Damaged data: its block fails its crc32c (before the stored adler32
	// could be compared), so no md5 is derived from it, and nothing is
	// recorded.
	mustPut(t, k, local, "/g")
	corrupt(t, stripeColumn(t, k, "/g", 3)[0], 1000)
	r := curl(t, "-sS", "-X", "GET", "-H", "Want-Digest: md5", k.EP.HTTP+"/g")
	if r.code < 500 || !strings.Contains(string(r.body), "/g") || !strings.Contains(string(r.body), "crc32c") || r.header("Digest") != "" {
		t.Fatalf("damaged file: status %d digest %q body %q", r.code, r.header("Digest"), r.body)
	}
	if info := k.MustKaon("file", "info", "/g"); strings.Contains(info, "md5") {
		t.Fatalf("md5 recorded for damaged data:\n%s", info)
	}

	// A directory asking for md5 gets it computed in the stream.
	k.MustKaon("mkdir", "/strict")
	k.MustKaon("attr", "set", "/strict", "sys.forced.checksums=adler32,md5")
	mustPut(t, k, local, "/strict/f")
	if info := k.MustKaon("file", "info", "/strict/f"); !strings.Contains(info, "md5: ") || strings.Contains(info, "crc32c") {
		t.Fatalf("sys.forced.checksums=adler32,md5 not honoured:\n%s", info)
	}
}

// TestReprDigest: RFC 9530 beside RFC 3230. Want-Repr-Digest is answered
// with Repr-Digest (":base64:" byte sequences, registry names: adler),
// on HEAD and on the redirected GET, computing an unrecorded type like
// Want-Digest does; both headers in one request get both answers; a
// weight of 0 is "not wanted".
func TestReprDigest(t *testing.T) {
	k := harness.Up(t)
	local, data := randomFile(t, 1<<20+3)
	want := sumsOf(data)
	mustPut(t, k, local, "/f")
	adlerRaw, _ := hex.DecodeString(want.adler)
	adler := "adler=:" + base64.StdEncoding.EncodeToString(adlerRaw) + ":"

	r := curl(t, "-I", "-H", "Want-Repr-Digest: adler=3", k.EP.HTTP+"/f")
	if got := r.header("Repr-Digest"); got != adler || r.header("Digest") != "" {
		t.Fatalf("HEAD Want-Repr-Digest adler=3: Repr-Digest %q (want %q), Digest %q", got, adler, r.header("Digest"))
	}
	if got := curl(t, "-I", "-H", "Want-Repr-Digest: sha-256=10, adler=1", k.EP.HTTP+"/f").header("Repr-Digest"); got != adler {
		// adler is recorded: answered without reading the data, as for Want-Digest.
		t.Fatalf("HEAD Want-Repr-Digest sha-256=10, adler=1: %q", got)
	}
	if got := curl(t, "-I", "-H", "Want-Repr-Digest: sha-256=10", k.EP.HTTP+"/f").header("Repr-Digest"); got != "sha-256=:"+want.shab64+":" {
		t.Fatalf("HEAD Want-Repr-Digest sha-256 (computed on request): %q", got)
	}
	g := get(t, k, "/f", "-H", "Want-Repr-Digest: md5=5", "-H", "Want-Digest: adler32")
	if g.header("Repr-Digest") != "md5=:"+want.md5b64+":" || g.header("Digest") != "adler32="+want.adler {
		t.Fatalf("GET with both headers: Repr-Digest %q Digest %q", g.header("Repr-Digest"), g.header("Digest"))
	}
	if got := curl(t, "-I", "-H", "Want-Repr-Digest: adler=0", k.EP.HTTP+"/f").header("Repr-Digest"); got != "" {
		t.Fatalf("adler=0 (not wanted) answered: %q", got)
	}
}
