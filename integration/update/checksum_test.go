package update

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/adler32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// sums are a content's checksums as each protocol spells them.
type sums struct{ adler, md5hex, md5b64, shab64 string }

func sumsOf(b []byte) sums {
	m, s := md5.Sum(b), sha256.Sum256(b)
	return sums{adler: fmt.Sprintf("%08x", adler32.Checksum(b)), md5hex: hex.EncodeToString(m[:]),
		md5b64: base64.StdEncoding.EncodeToString(m[:]), shab64: base64.StdEncoding.EncodeToString(s[:])}
}

// curlOut runs curl (-sS) and returns what it printed.
func curlOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-sS", "-L"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// digest is the Digest header of a HEAD asking for typ.
func digest(t *testing.T, url, typ string) string {
	t.Helper()
	for _, l := range strings.Split(curlOut(t, "-I", "-H", "Want-Digest: "+typ, url), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Digest") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestChecksumsAfterUpdates: a file whose adler32, md5 and sha-256 were
// all recorded is updated in place (a ranged PUT, then kXR_open_apnd):
// no front end ever presents a checksum of the old content again.
// Right after the update `kaon file info` and PROPFIND show none of the
// old values (the update could not combine them: they are out of date,
// not shown); HEAD Want-Digest and kXR_Qcksum compute the new content's
// on request, and those are recorded and shown from then on.
func TestChecksumsAfterUpdates(t *testing.T) {
	k := harness.Up(t, "--fs", "4")
	hostport := strings.TrimPrefix(k.EP.XRootD, "root://")
	src := t.TempDir()
	for _, l := range []string{"replica:2", "ec:2+1:4096"} {
		dir := "/" + strings.NewReplacer(":", "", "+", "").Replace(l)
		k.MustKaon("mkdir", dir)
		k.MustKaon("attr", "set", dir, "sys.forced.layout="+l)
		p := dir + "/f"
		url := k.EP.HTTP + p
		content := make([]byte, 100<<10+3)
		rand.Read(content)
		local := filepath.Join(src, "content")
		os.WriteFile(local, content, 0o644)
		curlOut(t, "-f", "-T", local, url)
		old := sumsOf(content)
		for typ, want := range map[string]string{"adler32": "adler32=" + old.adler, "md5": "md5=" + old.md5b64, "sha-256": "sha-256=" + old.shab64} {
			if got := digest(t, url, typ); got != want {
				t.Fatalf("%s before the update: Digest %q, want %q", p, got, want)
			}
		}
		noOld := func(step, what, text string) {
			t.Helper()
			for _, v := range []string{old.adler, old.md5hex, old.md5b64, old.shab64} {
				if strings.Contains(text, v) {
					t.Fatalf("%s %s: %s shows the old content's checksum %s:\n%s", p, step, what, v, text)
				}
			}
		}

		patch := make([]byte, 5000)
		rand.Read(patch)
		os.WriteFile(filepath.Join(src, "patch"), patch, 0o644)
		curlOut(t, "-f", "-T", filepath.Join(src, "patch"), "-H", "Content-Range: bytes 4096-9095/*", url)
		copy(content[4096:], patch)
		info := k.MustKaon("file", "info", p)
		noOld("after a ranged PUT", "kaon file info", info)
		noOld("after a ranged PUT", "PROPFIND", curlOut(t, "-X", "PROPFIND", "-H", "Depth: 0", url))
		now := sumsOf(content)
		// kXR_Qcksum first: the adler32 of the new content, computed now.
		if out, err := exec.Command("xrdfs", hostport, "query", "checksum", p).CombinedOutput(); err != nil || !strings.Contains(string(out), "adler32 "+now.adler) {
			t.Fatalf("%s: kXR_Qcksum after a ranged PUT: %v %q, want adler32 %s", p, err, out, now.adler)
		}
		if got := digest(t, url, "md5"); got != "md5="+now.md5b64 {
			t.Fatalf("%s: Digest md5 after a ranged PUT: %q, want md5=%s", p, got, now.md5b64)
		}
		if got := digest(t, url, "sha-256"); got != "sha-256="+now.shab64 {
			t.Fatalf("%s: Digest sha-256 after a ranged PUT: %q, want sha-256=%s", p, got, now.shab64)
		}
		if info := k.MustKaon("file", "info", p); !strings.Contains(info, "adler32: "+now.adler) || !strings.Contains(info, "md5: "+now.md5hex) {
			t.Fatalf("%s: the checksums computed after the update are not recorded:\n%s", p, info)
		}
		if prop := curlOut(t, "-X", "PROPFIND", "-H", "Depth: 0", url); !strings.Contains(prop, "adler32:"+now.adler) {
			t.Fatalf("%s: PROPFIND after the update shows no adler32 %s:\n%s", p, now.adler, prop)
		}

		// An append over root:// makes those out of date in turn.
		prev := now
		tail := []byte("appended by kXR_open_apnd\n")
		os.WriteFile(filepath.Join(src, "tail"), tail, 0o644)
		appendScript := `import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1], OpenFlags.UPDATE | 0x0200)  # kXR_open_apnd, not named in the bindings
assert st.ok, st.message
st, info = f.stat()
assert st.ok, st.message
st, _ = f.write(open(sys.argv[2], "rb").read(), info.size)
assert st.ok, st.message
st, _ = f.close()
assert st.ok, st.message
`
		cmd := exec.Command("/usr/bin/python3", "-c", appendScript, k.EP.XRootD+"/"+p, filepath.Join(src, "tail"))
		cmd.Env = append(os.Environ(), "XRD_REQUESTTIMEOUT=60", "XRD_CONNECTIONRETRY=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: append over root://: %v\n%s", p, err, out)
		}
		content = append(content, tail...)
		now = sumsOf(content)
		info = k.MustKaon("file", "info", p)
		for _, v := range []string{prev.adler, prev.md5hex} {
			if strings.Contains(info, v) {
				t.Fatalf("%s after an append: kaon file info shows the previous content's checksum %s:\n%s", p, v, info)
			}
		}
		if got := digest(t, url, "adler32"); got != "adler32="+now.adler {
			t.Fatalf("%s: Digest adler32 after an append: %q, want adler32=%s", p, got, now.adler)
		}
		if got := digest(t, url, "md5"); got != "md5="+now.md5b64 {
			t.Fatalf("%s: Digest md5 after an append: %q, want md5=%s", p, got, now.md5b64)
		}
	}
}
