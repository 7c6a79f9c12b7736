// Package xrootd_test drives the real kaon binary ("kaon up") over root://
// with the real XRootD 5.5 clients: xrdcp, xrdfs and the Python bindings,
// and checks that root:// and http:// see the same files.
package xrootd_test

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/xrootd/clienttest"
)

var (
	rootURL string // root://127.0.0.1:PORT
	rootHP  string // 127.0.0.1:PORT
	httpURL string
	fstURL  string // the storage server's own root:// listener
	logPath string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		tmp, err := os.MkdirTemp("", "kaon-xrd-it-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		_, file, _, _ := runtime.Caller(0)
		repo := filepath.Join(filepath.Dir(file), "..", "..")
		bin := filepath.Join(tmp, "kaon")
		build := exec.Command("go", "build", "-o", bin, "./cmd/kaon")
		build.Dir = repo
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build kaon:", err)
			return 1
		}
		data := filepath.Join(tmp, "data")
		os.Mkdir(data, 0o755)
		logPath = filepath.Join(tmp, "kaon.log")
		logf, _ := os.Create(logPath)
		cmd := exec.Command(bin, "up", "--data", data, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "start kaon:", err)
			return 1
		}
		defer func() {
			cmd.Process.Kill()
			cmd.Wait()
		}()
		var ep struct {
			HTTP, XRootD string
			FST          string `json:"fst_xrootd"`
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(data, "endpoints.json")); err == nil && json.Unmarshal(b, &ep) == nil && ep.XRootD != "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ep.XRootD == "" {
			b, _ := os.ReadFile(logPath)
			fmt.Fprintf(os.Stderr, "kaon up did not publish a root:// endpoint in endpoints.json\n%s\n", b)
			return 1
		}
		rootURL, httpURL = strings.TrimRight(ep.XRootD, "/"), strings.TrimRight(ep.HTTP, "/")
		rootHP = strings.TrimPrefix(rootURL, "root://")
		fstURL = strings.TrimRight(ep.FST, "/")
		code := m.Run()
		if code != 0 {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			fmt.Fprintf(os.Stderr, "---- kaon log (tail) ----\n%s\n", b)
		}
		return code
	}())
}

func fails(t *testing.T, code string, name string, args ...string) string {
	t.Helper()
	out, rc := run(t, name, args...)
	if rc == 0 || !strings.Contains(out, code) {
		t.Fatalf("%s %s: want failure containing %q, got exit %d\n%s", name, strings.Join(args, " "), code, rc, out)
	}
	return out
}

func randFile(t *testing.T, dir, name string, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func adlerHex(b []byte) string { return fmt.Sprintf("%08x", adler32.Checksum(b)) }

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d bytes expected", path, len(got), len(want))
	}
}

func TestXrdcpSizesAndChecksums(t *testing.T) {
	tmp := t.TempDir()
	for _, size := range []int{0, 1, 65536, 3<<20 + 7, 200 << 20} {
		name := fmt.Sprintf("sz%d", size)
		src, data := randFile(t, tmp, name, size)
		mustRun(t, "xrdcp", "-s", "--cksum", "adler32", src, rootURL+"//it/sizes/"+name)
		out := mustRun(t, "xrdfs", rootHP, "query", "checksum", "/it/sizes/"+name)
		if !strings.Contains(out, "adler32 "+adlerHex(data)) {
			t.Fatalf("%s: server checksum %q, want adler32 %s", name, out, adlerHex(data))
		}
		back := filepath.Join(tmp, name+".back")
		mustRun(t, "xrdcp", "-s", "--cksum", "adler32:source", rootURL+"//it/sizes/"+name, back)
		sameFile(t, back, data)
		if out := mustRun(t, "xrdfs", rootHP, "stat", "/it/sizes/"+name); !strings.Contains(out, fmt.Sprintf("Size:   %d\n", size)) {
			t.Fatalf("stat %s: %s", name, out)
		}
	}
}

func TestXrdcpFlags(t *testing.T) {
	tmp := t.TempDir()
	src, data := randFile(t, tmp, "a", 1<<20)
	dst := rootURL + "//it/flags/deep/er/a"
	mustRun(t, "xrdcp", "-s", "-p", src, dst)
	fails(t, "exists", "xrdcp", "-s", src, dst)
	src2, data2 := randFile(t, tmp, "b", 5000)
	mustRun(t, "xrdcp", "-s", "-f", src2, dst)
	mustRun(t, "xrdcp", "-s", "-f", dst, filepath.Join(tmp, "b.back"))
	sameFile(t, filepath.Join(tmp, "b.back"), data2)
	_ = data

	// -S 4 parallel streams, both ways, with end-to-end checksum.
	big, bigData := randFile(t, tmp, "big", 40<<20+3)
	mustRun(t, "xrdcp", "-s", "-S", "4", "--cksum", "adler32", big, rootURL+"//it/flags/big")
	mustRun(t, "xrdcp", "-s", "-S", "4", "--cksum", "adler32:source", rootURL+"//it/flags/big", filepath.Join(tmp, "big.back"))
	sameFile(t, filepath.Join(tmp, "big.back"), bigData)

	// Recursive up and down.
	os.MkdirAll(filepath.Join(tmp, "tree", "sub", "subsub"), 0o755)
	os.WriteFile(filepath.Join(tmp, "tree", "top"), []byte("top"), 0o644)
	os.WriteFile(filepath.Join(tmp, "tree", "sub", "mid"), []byte("mid"), 0o644)
	os.WriteFile(filepath.Join(tmp, "tree", "sub", "subsub", "low"), []byte("low"), 0o644)
	mustRun(t, "xrdfs", rootHP, "mkdir", "-p", "/it/rec")
	mustRun(t, "xrdcp", "-s", "-r", filepath.Join(tmp, "tree"), rootURL+"//it/rec")
	out := mustRun(t, "xrdfs", rootHP, "ls", "-R", "/it/rec")
	for _, p := range []string{"/it/rec/tree/top", "/it/rec/tree/sub/mid", "/it/rec/tree/sub/subsub/low"} {
		if !strings.Contains(out, p+"\n") {
			t.Fatalf("ls -R lacks %s:\n%s", p, out)
		}
	}
	down := filepath.Join(tmp, "down")
	os.Mkdir(down, 0o755)
	mustRun(t, "xrdcp", "-s", "-r", rootURL+"//it/rec/tree", down)
	if b, _ := os.ReadFile(filepath.Join(down, "tree", "sub", "subsub", "low")); string(b) != "low" {
		t.Fatalf("recursive download: %q", b)
	}
	fails(t, "[3011]", "xrdcp", "-s", rootURL+"//it/flags/missing", filepath.Join(tmp, "m"))
}

func TestXrdfs(t *testing.T) {
	h := rootHP
	fs := func(args ...string) string { t.Helper(); return mustRun(t, "xrdfs", append([]string{h}, args...)...) }
	bad := func(code string, args ...string) {
		t.Helper()
		fails(t, "["+code+"]", "xrdfs", append([]string{h}, args...)...)
	}

	fs("mkdir", "-p", "/it/fs/a/b")
	bad("3018", "mkdir", "/it/fs/a")
	tmp := t.TempDir()
	content := []byte("hello from xrdfs\n")
	os.WriteFile(filepath.Join(tmp, "f"), content, 0o644)
	mustRun(t, "xrdcp", "-s", filepath.Join(tmp, "f"), rootURL+"//it/fs/a/f")

	if out := fs("ls", "/it/fs/a"); out != "/it/fs/a/b\n/it/fs/a/f\n" {
		t.Fatalf("ls: %q", out)
	}
	out := fs("ls", "-l", "/it/fs/a")
	if !strings.Contains(out, "/it/fs/a/f") || !strings.HasPrefix(out, "d") || !strings.Contains(out, fmt.Sprint(len(content))) {
		t.Fatalf("ls -l: %q", out)
	}
	if out := fs("ls", "-R", "/it/fs"); !strings.Contains(out, "/it/fs/a/b\n") || !strings.Contains(out, "/it/fs/a/f\n") {
		t.Fatalf("ls -R: %q", out)
	}
	if out := fs("stat", "/it/fs/a/f"); !strings.Contains(out, fmt.Sprintf("Size:   %d", len(content))) {
		t.Fatalf("stat: %q", out)
	}
	if out := fs("stat", "/it/fs/a"); !strings.Contains(out, "IsDir") {
		t.Fatalf("stat dir: %q", out)
	}
	if out := fs("cat", "/it/fs/a/f"); out != string(content) {
		t.Fatalf("cat: %q", out)
	}
	if out := fs("tail", "-c", "6", "/it/fs/a/f"); out != "xrdfs\n" {
		t.Fatalf("tail: %q", out)
	}
	if out := fs("query", "checksum", "/it/fs/a/f"); !strings.Contains(out, "adler32 "+adlerHex(content)) {
		t.Fatalf("query checksum: %q", out)
	}
	// md5 is not computed while writing by default: computed on request.
	if out, m := fs("query", "checksum", "/it/fs/a/f?cks.type=md5"), md5.Sum(content); !strings.Contains(out, "md5 "+hex.EncodeToString(m[:])) {
		t.Fatalf("query checksum md5: %q", out)
	}
	if out := fs("locate", "/it/fs/a/f"); !strings.Contains(out, "Server") {
		t.Fatalf("locate: %q", out)
	}
	if out := fs("spaceinfo", "/"); !strings.Contains(out, "Total:") || !strings.Contains(out, "Free:") {
		t.Fatalf("spaceinfo: %q", out)
	}
	if out := fs("statvfs", "/"); !strings.Contains(out, "Nodes with RW space:") {
		t.Fatalf("statvfs: %q", out)
	}
	fs("chmod", "/it/fs/a/f", "rw-------")
	if out := fs("stat", "/it/fs/a/f"); !strings.Contains(out, "Mode:   0600") {
		t.Fatalf("chmod not visible: %q", out)
	}
	// A committed file is truncated in place to any size (issue 22).
	fs("truncate", "/it/fs/a/f", "5")
	if out := fs("stat", "/it/fs/a/f"); !strings.Contains(out, "Size:   5\n") {
		t.Fatalf("after truncate to 5: %q", out)
	}
	fs("mv", "/it/fs/a/f", "/it/fs/g")
	bad("3011", "stat", "/it/fs/a/f")
	if out := fs("cat", "/it/fs/g"); out != string(content[:5]) {
		t.Fatalf("after truncate and mv: %q, want %q", out, content[:5])
	}
	fs("truncate", "/it/fs/g", "0")
	if out := fs("stat", "/it/fs/g"); !strings.Contains(out, "Size:   0\n") {
		t.Fatalf("after truncate to 0: %q", out)
	}
	bad("3011", "rm", "/it/fs/nope")
	bad("3011", "cat", "/it/fs/nope")
	bad("3011", "query", "checksum", "/it/fs/nope")
	bad("3011", "ls", "/it/fs/nope")
	bad("3016", "cat", "/it/fs/a")
	bad("3005", "rmdir", "/it/fs/a") // not empty
	bad("3000", "stat", "/it/../etc")
	fs("rm", "/it/fs/g")
	fs("rmdir", "/it/fs/a/b")
	fs("rmdir", "/it/fs/a")
	bad("3011", "stat", "/it/fs/a")
}

const pyScript = clienttest.PyPrelude + `
ok("mkdir", fs.mkdir("/it/py/sub", MkDirFlags.MAKEPATH)[0])
data = bytes(range(256)) * 4096 * 3
f = client.File()
ok("open-w", f.open(url + "//it/py/sub/f.bin", OpenFlags.NEW)[0])
ok("write", f.write(data, 0)[0])
ok("write2", f.write(b"tail", len(data))[0])
ok("sync", f.sync()[0])
ok("close-w", f.close()[0])
f = client.File()
ok("open-r", f.open(url + "//it/py/sub/f.bin", OpenFlags.READ)[0])
st, d = f.read(0, 10); ok("read", st); assert d == data[:10], d
st, vr = f.vector_read([(0, 10), (5000, 20), (len(data), 4)]); ok("vector_read", st)
assert [c.buffer for c in vr.chunks] == [data[:10], data[5000:5020], b"tail"]
st, info = f.stat(True); ok("fstat", st); assert info.size == len(data) + 4, info.size
st, d = f.read(); ok("readall", st); assert d == data + b"tail"
ok("close-r", f.close()[0])
st, info = fs.stat("/it/py/sub/f.bin"); ok("stat", st); assert info.size == len(data) + 4, info.size
st, ls = fs.dirlist("/it/py/sub", DirListFlags.STAT); ok("dirlist", st)
assert [(e.name, e.statinfo.size) for e in ls] == [("f.bin", len(data) + 4)], [(e.name, e.statinfo.size) for e in ls]
st, r = fs.query(QueryCode.CHECKSUM, "/it/py/sub/f.bin"); ok("cksum", st)
assert r.rstrip(b"\0").split()[1].decode() == sys.argv[2], r
ok("chmod", fs.chmod("/it/py/sub/f.bin", AccessMode.UR | AccessMode.UW)[0])
st, info = fs.stat("/it/py/sub/f.bin"); ok("stat2", st)
ok("mv", fs.mv("/it/py/sub/f.bin", "/it/py/g.bin")[0])
f = client.File(); ok("open-r2", f.open(url + "//it/py/g.bin")[0])
st, d = f.read(); ok("readall2", st); assert d == data + b"tail", len(d)
f.close()
ok("fs-truncate", fs.truncate("/it/py/g.bin", 0)[0])
st, info = fs.stat("/it/py/g.bin"); ok("stat3", st); assert info.size == 0, info.size
ok("rm", fs.rm("/it/py/g.bin")[0])
st, _ = fs.rm("/it/py/g.bin"); assert st.errno == 3011, st
ok("rmdir", fs.rmdir("/it/py/sub")[0])
` + clienttest.PyBigFile

func TestPythonBindings(t *testing.T) {
	data := bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 4096*3)
	out := mustRun(t, "/usr/bin/python3", "-c", pyScript, rootURL, adlerHex(append(data, "tail"...)))
	if !strings.Contains(out, "PYTHON-OK") {
		t.Fatalf("python: %s", out)
	}
}

func TestParallel64(t *testing.T) {
	tmp := t.TempDir()
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan string, 2*n)
	sem := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("p%02d", i)
			src, data := randFile(t, tmp, name, 512<<10+i*4099)
			url := rootURL + "//it/par/" + name
			if out, code := run(t, "xrdcp", "-s", "--cksum", "adler32", src, url); code != 0 {
				errs <- name + " upload: " + out
				return
			}
			back := src + ".back"
			if out, code := run(t, "xrdcp", "-s", url, back); code != 0 {
				errs <- name + " download: " + out
				return
			}
			if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
				errs <- name + ": content mix-up"
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestCrossProtocol(t *testing.T) {
	tmp := t.TempDir()
	// root:// -> http://
	src, data := randFile(t, tmp, "x1", 3<<20+11)
	mustRun(t, "xrdcp", "-s", src, rootURL+"//it/cross/x1")
	got := filepath.Join(tmp, "x1.http")
	mustRun(t, "curl", "-sSfL", "-o", got, httpURL+"/it/cross/x1")
	sameFile(t, got, data)
	hdr := mustRun(t, "curl", "-sSfL", "-I", "-H", "Want-Digest: adler32", httpURL+"/it/cross/x1")
	if !strings.Contains(strings.ToLower(hdr), "adler32="+adlerHex(data)) {
		t.Fatalf("HTTP digest differs from content adler32 %s:\n%s", adlerHex(data), hdr)
	}
	// http:// -> root://
	src2, data2 := randFile(t, tmp, "x2", 2<<20+5)
	mustRun(t, "curl", "-sSfL", "-T", src2, httpURL+"/it/cross/x2")
	back := filepath.Join(tmp, "x2.root")
	mustRun(t, "xrdcp", "-s", "--cksum", "adler32:source", rootURL+"//it/cross/x2", back)
	sameFile(t, back, data2)
	if out := mustRun(t, "xrdfs", rootHP, "query", "checksum", "/it/cross/x2"); !strings.Contains(out, adlerHex(data2)) {
		t.Fatalf("root:// checksum of HTTP upload: %q want %s", out, adlerHex(data2))
	}
}

// A client that dies in the middle of an upload leaves nothing visible:
// the dropped connection aborts the upload.
func TestKilledUploadLeavesNothing(t *testing.T) {
	tmp := t.TempDir()
	src, _ := randFile(t, tmp, "slow", 64<<20)
	cmd := exec.Command("xrdcp", "-s", "--xrate", "4M", src, rootURL+"//it/killed/slow")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // ~8 MiB in flight at 4 MB/s
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, code := run(t, "xrdfs", rootHP, "stat", "/it/killed/slow")
		if code != 0 && strings.Contains(out, "[3011]") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partial upload visible after the client died:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The name is free for a new upload.
	small, data := randFile(t, tmp, "small", 1000)
	mustRun(t, "xrdcp", "-s", small, rootURL+"//it/killed/slow")
	mustRun(t, "xrdcp", "-s", "-f", rootURL+"//it/killed/slow", filepath.Join(tmp, "back"))
	sameFile(t, filepath.Join(tmp, "back"), data)
}

// Clients pointed at a storage server directly are sent to the namespace
// server for metadata and for a capability, and then served.
func TestDataServerEndpoint(t *testing.T) {
	if fstURL == "" {
		t.Fatal("endpoints.json has no fst_xrootd")
	}
	tmp := t.TempDir()
	src, data := randFile(t, tmp, "d", 300000)
	mustRun(t, "xrdcp", "-s", "--cksum", "adler32", src, fstURL+"//it/fst/d")
	mustRun(t, "xrdcp", "-s", fstURL+"//it/fst/d", filepath.Join(tmp, "back"))
	sameFile(t, filepath.Join(tmp, "back"), data)
	fhp := strings.TrimPrefix(fstURL, "root://")
	if out := mustRun(t, "xrdfs", fhp, "ls", "-l", "/it/fst"); !strings.Contains(out, "/it/fst/d") {
		t.Fatalf("ls via storage server: %q", out)
	}
	if out := mustRun(t, "xrdfs", fhp, "query", "checksum", "/it/fst/d"); !strings.Contains(out, adlerHex(data)) {
		t.Fatalf("checksum via storage server: %q", out)
	}
}

// The real clients are run through clienttest (shared with the other suite).
var (
	run     = clienttest.Run
	mustRun = clienttest.MustRun
)

// A write that rewrites bytes an upload already wrote is refused, and it
// voids the upload: the close fails too and the file it would replace is
// left as it was (before, the close committed the first data over it).
func TestRefusedRewriteVoidsUpload(t *testing.T) {
	tmp := t.TempDir()
	src, data := randFile(t, tmp, "old", 300000)
	mustRun(t, "xrdcp", "-s", src, rootURL+"//it/rewrite/f")
	out := mustRun(t, "/usr/bin/python3", "-c", `
import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1] + "//it/rewrite/f", OpenFlags.DELETE)
assert st.ok, st.message
st, _ = f.write(b"first" * 200, 0)
assert st.ok, st.message
st, _ = f.write(b"again", 0)
print("rewrite", st.ok, st.message)
st, _ = f.close()
print("close", st.ok, st.message)
`, rootURL)
	if !strings.Contains(out, "rewrite False") || !strings.Contains(out, "rewriting already written bytes") {
		t.Fatalf("the rewrite was not refused with its reason:\n%s", out)
	}
	if !strings.Contains(out, "close False") || strings.Count(out, "rewriting already written bytes") != 2 {
		t.Fatalf("the close after a refused rewrite did not fail with the reason:\n%s", out)
	}
	back := filepath.Join(tmp, "back")
	mustRun(t, "xrdcp", "-s", "-f", rootURL+"//it/rewrite/f", back)
	sameFile(t, back, data)
}
