package core

import (
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
