package xrootd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/adler32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// TestClientRead: the client opens a file at the manager, follows the
// redirect to the data listener with its capability, reads it with
// concurrent requests (out of order, ranges larger than one answer) and
// closes it; a missing file is kXR_NotFound.
func TestClientRead(t *testing.T) {
	c := startCluster(t)
	data := make([]byte, 20<<20+17)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(c.Root, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := xrootd.Dial(ctx, "tester@"+c.MgrAddr, xrootd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := cl.OpenRead(ctx, "/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != int64(len(data)) {
		t.Fatalf("size %d, want %d", f.Size, len(data))
	}
	got := make([]byte, len(data))
	const chunk = 9 << 20 // more than the server's largest answer
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for off := int64(0); off < int64(len(data)); off += chunk {
		wg.Add(1)
		go func(off int64) {
			defer wg.Done()
			end := min(off+chunk, int64(len(data)))
			if n, err := f.ReadAt(ctx, got[off:end], off); err != nil || int64(n) != end-off {
				errs <- errors.Join(err, errors.New("short read"))
			}
		}(off)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes read differ from the file")
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Conn().Close()
	_, err = cl.OpenRead(ctx, "/missing")
	var se *xrootd.ServerError
	if !errors.As(err, &se) || !se.NotFound() {
		t.Fatalf("open of a missing file: %v", err)
	}
}

// TestClientIPv6Redirect: on [::1] the manager redirects with the
// bracketed address (as XRootD servers do) and the client follows it.
func TestClientIPv6Redirect(t *testing.T) {
	c, err := xrdtest.StartAt(t.TempDir(), "::1", xrootd.Config{})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(c.Close)
	if err := os.WriteFile(filepath.Join(c.Root, "f"), []byte("over ipv6"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := xrootd.Dial(ctx, c.MgrAddr, xrootd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := cl.OpenRead(ctx, "/f")
	if err != nil {
		t.Fatalf("open through the redirect to %s: %v", c.DataAddr, err)
	}
	defer f.Close(ctx)
	b := make([]byte, f.Size)
	if n, err := f.ReadAt(ctx, b, 0); err != nil || string(b[:n]) != "over ipv6" {
		t.Fatalf("read: %q %v", b[:n], err)
	}
	if got := xrootd.RedirectHost("::1"); got != "[::1]" || xrootd.RedirectHost("10.0.0.1") != "10.0.0.1" || xrootd.RedirectHost("[::1]") != "[::1]" {
		t.Fatalf("RedirectHost: %q", got)
	}
}

// TestClientNamespace: the client's writes and namespace requests, each
// checked against the cluster's tree on disk. An upload (Create, several
// kXR_write frames, close) lands only on close; an update writes in
// place; stat, dirlist, checksum, mv, rm and rmdir do what they say, and
// their failures carry the server's kXR_* code. Requests sent to the
// data listener follow its redirect to the manager.
func TestClientNamespace(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := xrootd.Dial(ctx, "tester@"+c.MgrAddr, xrootd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	disk := func(p string) string { return filepath.Join(c.Root, filepath.FromSlash(p)) }
	code := func(step string, err error, want uint32) {
		t.Helper()
		var se *xrootd.ServerError
		if !errors.As(err, &se) || se.Code != want {
			t.Fatalf("%s: %v, want kXR code %d", step, err, want)
		}
	}

	// upload: more than one kXR_write, into a directory made on the way
	data := make([]byte, 9<<20+5)
	rand.Read(data)
	f, err := cl.Create(ctx, "/d/e/f.bin", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(disk("/d/e/f.bin")); err == nil {
		t.Fatal("the upload is visible before its close")
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Conn().Close()
	if got, err := os.ReadFile(disk("/d/e/f.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the uploaded file differs (%v)", err)
	}

	// update in place at an offset
	f, err = cl.OpenUpdate(ctx, "/d/e/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAt(ctx, []byte("patch"), 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Conn().Close()
	copy(data[100:], "patch")
	if got, _ := os.ReadFile(disk("/d/e/f.bin")); !bytes.Equal(got, data) {
		t.Fatal("the updated file differs")
	}
	_, err = cl.OpenUpdate(ctx, "/d/missing")
	code("update of a missing file", err, 3011) // kXR_NotFound

	// stat, dirlist, checksum
	st, err := cl.Stat(ctx, "/d/e/f.bin")
	if err != nil || st.Size != int64(len(data)) || st.IsDir() {
		t.Fatalf("stat of the file: %+v, %v", st, err)
	}
	if st, err := cl.Stat(ctx, "/d/e"); err != nil || !st.IsDir() {
		t.Fatalf("stat of the directory: %+v, %v", st, err)
	}
	_, err = cl.Stat(ctx, "/nope")
	code("stat of a missing path", err, 3011)
	if err := cl.Mkdir(ctx, "/d/e/sub", 0o755, false); err != nil {
		t.Fatal(err)
	}
	names, err := cl.Dirlist(ctx, "/d/e")
	sort.Strings(names)
	if err != nil || strings.Join(names, ",") != "f.bin,sub" {
		t.Fatalf("dirlist: %q, %v", names, err)
	}
	sum, err := cl.Checksum(ctx, "/d/e/f.bin", "adler32")
	if want := fmt.Sprintf("%08x", adler32.Checksum(data)); err != nil || sum != want {
		t.Fatalf("checksum %q, %v; want %s", sum, err, want)
	}

	// mkdir, mv, rm, rmdir and their refusals
	code("mkdir of an existing directory", cl.Mkdir(ctx, "/d/e/sub", 0, false), 3018) // kXR_ItExists
	if err := cl.Mkdir(ctx, "/p/q/r", 0, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(disk("/p/q/r")); err != nil || !fi.IsDir() {
		t.Fatalf("mkdir with parents: %v", err)
	}
	if err := cl.Mv(ctx, "/d/e/f.bin", "/p/g.bin"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(disk("/p/g.bin")); !bytes.Equal(got, data) {
		t.Fatal("mv: the file is not at its new name")
	}
	code("rmdir of a non-empty directory", cl.Rmdir(ctx, "/p/q"), 3005) // kXR_FSError
	if err := cl.Rm(ctx, "/p/g.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(disk("/p/g.bin")); !os.IsNotExist(err) {
		t.Fatalf("rm: the file is still there (%v)", err)
	}
	code("rm of a missing file", cl.Rm(ctx, "/p/g.bin"), 3011)
	if err := cl.Rmdir(ctx, "/p/q/r"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(disk("/p/q/r")); !os.IsNotExist(err) {
		t.Fatalf("rmdir: the directory is still there (%v)", err)
	}

	// the data listener sends namespace requests to the manager
	dc, err := xrootd.Dial(ctx, c.DataAddr, xrootd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.Mkdir(ctx, "/via-data", 0, false); err != nil {
		t.Fatal(err)
	}
	if st, err := dc.Stat(ctx, "/via-data"); err != nil || !st.IsDir() {
		t.Fatalf("stat through the data listener: %+v, %v", st, err)
	}
}
