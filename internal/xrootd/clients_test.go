package xrootd_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"hash/adler32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/clienttest"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// These tests drive the real XRootD 5.5 clients (xrdcp, xrdfs, Python
// bindings) against the server over the xrdtest backend.

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

func TestXrdcpRoundTrip(t *testing.T) {
	need(t, "xrdcp")
	c := startCluster(t)
	tmp := t.TempDir()
	url := "root://" + c.MgrAddr + "/"
	for _, size := range []int{0, 1, 4096, 1<<20 + 17, 20 << 20} {
		name := fmt.Sprintf("f%d", size)
		src, data := randFile(t, tmp, name, size)
		mustRun(t, "xrdcp", "-s", "--cksum", "adler32", src, url+"/up/"+name)
		onDisk, err := os.ReadFile(filepath.Join(c.Root, "up", name))
		if err != nil || !bytes.Equal(onDisk, data) {
			t.Fatalf("upload %s: stored content differs (err %v)", name, err)
		}
		back := filepath.Join(tmp, name+".back")
		mustRun(t, "xrdcp", "-s", "--cksum", "adler32:source", url+"/up/"+name, back)
		got, _ := os.ReadFile(back)
		if !bytes.Equal(got, data) {
			t.Fatalf("download %s differs", name)
		}
	}
	// -S 4 both ways on a larger file.
	src, data := randFile(t, tmp, "big", 24<<20+5)
	mustRun(t, "xrdcp", "-s", "-S", "4", "--cksum", "adler32", src, url+"/big")
	mustRun(t, "xrdcp", "-s", "-S", "4", "-f", url+"/big", filepath.Join(tmp, "big.back"))
	if got, _ := os.ReadFile(filepath.Join(tmp, "big.back")); !bytes.Equal(got, data) {
		t.Fatal("-S 4 round trip differs")
	}
	// Existing target without -f fails, with -f succeeds.
	if out, code := run(t, "xrdcp", "-s", src, url+"/big"); code == 0 || !strings.Contains(out, "exists") {
		t.Fatalf("overwrite without -f: exit %d %s", code, out)
	}
	small, _ := randFile(t, tmp, "small", 10)
	mustRun(t, "xrdcp", "-s", "-f", small, url+"/big")
	if fi, _ := os.Stat(filepath.Join(c.Root, "big")); fi.Size() != 10 {
		t.Fatalf("-f did not replace: size %d", fi.Size())
	}
	// -p and recursive copies.
	mustRun(t, "xrdcp", "-s", "-p", small, url+"/deep/er/path/small")
	os.MkdirAll(filepath.Join(tmp, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(tmp, "tree", "a"), []byte("A"), 0o644)
	os.WriteFile(filepath.Join(tmp, "tree", "sub", "b"), []byte("BB"), 0o644)
	mustRun(t, "xrdfs", c.MgrAddr, "mkdir", "/r")
	mustRun(t, "xrdcp", "-s", "-r", filepath.Join(tmp, "tree"), url+"/r")
	down := filepath.Join(tmp, "down")
	os.Mkdir(down, 0o755)
	mustRun(t, "xrdcp", "-s", "-r", url+"/r", down)
	if b, _ := os.ReadFile(filepath.Join(down, "r", "tree", "sub", "b")); string(b) != "BB" {
		t.Fatalf("recursive download: %q", b)
	}
	// Missing source names the path and the reason.
	if out, code := run(t, "xrdcp", "-s", url+"/nope", filepath.Join(tmp, "x")); code == 0 || !strings.Contains(out, "[3011]") || !strings.Contains(out, "/nope") {
		t.Fatalf("missing source: exit %d %s", code, out)
	}
}

func TestXrdfsCommands(t *testing.T) {
	need(t, "xrdfs")
	c := startCluster(t)
	h := c.MgrAddr
	fs := func(args ...string) string { return mustRun(t, "xrdfs", append([]string{h}, args...)...) }
	fails := func(code string, args ...string) {
		t.Helper()
		out, rc := run(t, "xrdfs", append([]string{h}, args...)...)
		if rc == 0 || !strings.Contains(out, "["+code+"]") {
			t.Fatalf("xrdfs %v: want error %s, got exit %d: %s", args, code, rc, out)
		}
	}
	fs("mkdir", "-p", "/a/b/c")
	fails("3018", "mkdir", "/a")
	fails("3011", "mkdir", "/x/y")
	os.WriteFile(filepath.Join(c.Root, "a", "f"), []byte("hello world\n"), 0o644)
	if out := fs("ls", "/a"); out != "/a/b\n/a/f\n" {
		t.Fatalf("ls: %q", out)
	}
	if out := fs("ls", "-l", "/a"); !strings.Contains(out, "-rw-r--r-- kaon kaon") || !strings.Contains(out, "12 ") || !strings.HasPrefix(out, "d") {
		t.Fatalf("ls -l: %q", out)
	}
	if out := fs("ls", "-C", "/a"); !strings.Contains(out, "adler32:"+adlerHex([]byte("hello world\n"))+" ") || !strings.Contains(out, "adler32:none") {
		t.Fatalf("ls -C: %q", out)
	}
	if out := fs("ls", "-R", "/a"); !strings.Contains(out, "/a/b/c\n") {
		t.Fatalf("ls -R: %q", out)
	}
	if out := fs("stat", "/a/f"); !strings.Contains(out, "Size:   12") || !strings.Contains(out, "IsReadable") {
		t.Fatalf("stat: %q", out)
	}
	if out := fs("cat", "/a/f"); out != "hello world\n" {
		t.Fatalf("cat: %q", out)
	}
	if out := fs("tail", "-c", "6", "/a/f"); out != "world\n" {
		t.Fatalf("tail: %q", out)
	}
	if out := fs("query", "checksum", "/a/f"); !strings.Contains(out, "adler32 "+adlerHex([]byte("hello world\n"))) {
		t.Fatalf("checksum: %q", out)
	}
	if out := fs("locate", "/a/f"); !strings.Contains(out, c.DataAddr) {
		t.Fatalf("locate: %q", out)
	}
	if out := fs("spaceinfo", "/"); !strings.Contains(out, "Total:") {
		t.Fatalf("spaceinfo: %q", out)
	}
	if out := fs("statvfs", "/"); !strings.Contains(out, "Nodes with RW space:                1") {
		t.Fatalf("statvfs: %q", out)
	}
	fs("truncate", "/a/f", "5")
	fs("chmod", "/a/f", "rw-------")
	if out := fs("stat", "/a/f"); !strings.Contains(out, "Size:   5") || !strings.Contains(out, "Mode:   0600") {
		t.Fatalf("after truncate/chmod: %q", out)
	}
	fs("mv", "/a/f", "/a/g")
	fails("3011", "stat", "/a/f")
	fails("3016", "cat", "/a/b")
	fails("3016", "rm", "/a/b")
	fails("3005", "rmdir", "/a/b")
	fails("3005", "rmdir", "/a/g")
	fails("3011", "rm", "/a/f")
	fails("3011", "query", "checksum", "/nope")
	fs("rm", "/a/g")
	fs("rmdir", "/a/b/c")
	if out := fs("ls", "/a/b"); out != "" {
		t.Fatalf("empty dir listing: %q", out)
	}
}

const pyScript = clienttest.PyPrelude + `
ok("mkdir", fs.mkdir("/py/sub", MkDirFlags.MAKEPATH)[0])
f = client.File()
ok("open", f.open(url + "//py/sub/f.bin", OpenFlags.DELETE | OpenFlags.UPDATE)[0])
data = bytes(range(256)) * 4096 * 3
ok("write", f.write(data, 0)[0])
ok("write2", f.write(b"tail", len(data))[0])
ok("sync", f.sync()[0])
st, d = f.read(0, 10); ok("read", st); assert d == data[:10], d
st, vr = f.vector_read([(0, 10), (5000, 20), (len(data), 4)]); ok("vector_read", st)
assert [c.buffer for c in vr.chunks] == [data[:10], data[5000:5020], b"tail"]
st, info = f.stat(True); ok("fstat", st); assert info.size == len(data) + 4, info.size
ok("truncate", f.truncate(100)[0])
ok("close", f.close()[0])
st, info = fs.stat("/py/sub/f.bin"); ok("stat", st); assert info.size == 100
st, ls = fs.dirlist("/py/sub", DirListFlags.STAT); ok("dirlist", st)
assert [(e.name, e.statinfo.size) for e in ls] == [("f.bin", 100)]
st, r = fs.query(QueryCode.CHECKSUM, "/py/sub/f.bin"); ok("cksum", st)
assert r.rstrip(b"\0").split()[1].decode() == sys.argv[2], r
ok("chmod", fs.chmod("/py/sub/f.bin", AccessMode.UR | AccessMode.UW)[0])
ok("mv", fs.mv("/py/sub/f.bin", "/py/g.bin")[0])
f = client.File(); ok("open-r", f.open(url + "//py/g.bin")[0])
st, d = f.read(); ok("readall", st); assert d == data[:100]
f.close()
ok("rm", fs.rm("/py/g.bin")[0])
st, _ = fs.rm("/py/g.bin"); assert st.errno == 3011, st
ok("rmdir", fs.rmdir("/py/sub")[0])
` + clienttest.PyBigFile

func TestPythonBindings(t *testing.T) {
	need(t, "/usr/bin/python3")
	c := startCluster(t)
	data := bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 4096*3)
	out := mustRun(t, "/usr/bin/python3", "-c", pyScript, "root://"+c.MgrAddr, adlerHex(data[:100]))
	if !strings.Contains(out, "PYTHON-OK") {
		t.Fatalf("python: %s", out)
	}
}

func TestParallelXrdcpNoMixups(t *testing.T) {
	need(t, "xrdcp")
	c := startCluster(t)
	tmp := t.TempDir()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("p%02d", i)
			src, data := randFile(t, tmp, name, 256<<10+i*1000)
			url := "root://" + c.MgrAddr + "//par/" + name
			if out, code := run(t, "xrdcp", "-s", src, url); code != 0 {
				errs <- out
				return
			}
			back := src + ".back"
			if out, code := run(t, "xrdcp", "-s", url, back); code != 0 {
				errs <- out
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

// With PageChecksums the server advertises kXR_suppgrw and xrdcp downloads
// with kXR_pgread, verifying every page CRC32C the server computed.
func TestXrdcpPgread(t *testing.T) {
	need(t, "xrdcp")
	c, err := xrdtest.Start(t.TempDir(), xrootd.Config{PageChecksums: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tmp := t.TempDir()
	src, data := randFile(t, tmp, "pg", 20<<20+4097)
	url := "root://" + c.MgrAddr + "//pg"
	mustRun(t, "xrdcp", "-s", src, url)
	logf := filepath.Join(tmp, "xrdcl.log")
	cmd := exec.Command("xrdcp", "-s", "-S", "2", "--cksum", "adler32:source", url, filepath.Join(tmp, "back"))
	cmd.Env = append(os.Environ(), "XRD_LOGLEVEL=Dump", "XRD_LOGFILE="+logf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgread download: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(tmp, "back")); !bytes.Equal(got, data) {
		t.Fatal("pgread download differs")
	}
	if lg, _ := os.ReadFile(logf); !bytes.Contains(lg, []byte("kXR_pgread")) {
		t.Fatal("client did not use kXR_pgread")
	}
}

// The real clients are run through clienttest (shared with the other suite).
var (
	need    = clienttest.Need
	run     = clienttest.Run
	mustRun = clienttest.MustRun
)
