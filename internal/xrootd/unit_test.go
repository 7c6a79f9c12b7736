package xrootd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

func TestSplitPath(t *testing.T) {
	good := map[string]string{
		"/a/b":              "/a/b",
		"//a//b/":           "/a/b",
		"/a/./b":            "/a/b",
		"/a/b?x=1&y=2":      "/a/b",
		"/a/b\x00\x00":      "/a/b",
		"/":                 "/",
		"/a%20b":            "/a%20b",
		"/a/b?c=d?e=f":      "/a/b",
		"/with space/and+p": "/with space/and+p",
	}
	for in, want := range good {
		got, _, err := splitPath("t", []byte(in))
		if err != nil || got != want {
			t.Errorf("splitPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, v, _ := splitPath("t", []byte("/f?oss.asize=10&kaon.cap=ab+c%2Fd&x"))
	if v.Get("oss.asize") != "10" || v.Get("kaon.cap") != "ab+c/d" || !v.Has("x") {
		t.Errorf("opaque parsed as %v", v)
	}
	bad := map[string]kerr.Kind{
		"":                               kerr.Invalid,
		"?x=1":                           kerr.Invalid,
		"a/b":                            kerr.Invalid,
		"/a/../b":                        kerr.Invalid,
		"/..":                            kerr.Invalid,
		"/a/%2e%2e":                      kerr.Invalid,
		"/a/%2E%2e/b":                    kerr.Invalid,
		"/a/%2e":                         kerr.Invalid,
		"/a/%252e%252e":                  kerr.Invalid,
		"/a/x%2fy":                       kerr.Invalid,
		"/a/x%00y":                       kerr.Invalid,
		"/a\x00/b":                       kerr.Invalid,
		"/a/\x01":                        kerr.Invalid,
		"/" + strings.Repeat("x", 256):   kerr.NameTooLong,
		"/" + strings.Repeat("x/", 2049): kerr.NameTooLong,
	}
	for in, want := range bad {
		_, _, err := splitPath("t", []byte(in))
		if kerr.KindOf(err) != want {
			t.Errorf("splitPath(%q): err %v, want kind %v", in, err, want)
		}
	}
}

func TestErrorMapping(t *testing.T) {
	cases := map[kerr.Kind]uint32{
		kerr.NotFound: kXR_NotFound, kerr.Exists: kXR_ItExists, kerr.Permission: kXR_NotAuthorized,
		kerr.IsDir: kXR_isDirectory, kerr.NotDir: kXR_FSError, kerr.NotEmpty: kXR_FSError,
		kerr.Invalid: kXR_ArgInvalid, kerr.NameTooLong: kXR_ArgTooLong, kerr.NoSpace: kXR_NoSpace,
		kerr.Quota: kXR_overQuota, kerr.Unsupported: kXR_Unsupported, kerr.IO: kXR_IOError,
		kerr.ReadOnly: kXR_fsReadOnly, kerr.Expired: kXR_NotAuthorized, kerr.Internal: kXR_ServerError,
	}
	for k, want := range cases {
		if got := xrdCode(k); got != want {
			t.Errorf("xrdCode(%v) = %d, want %d", k, got, want)
		}
	}
	if m := errMessage("rm", "/x", errors.New("boom")); m != "rm /x: boom" {
		t.Errorf("plain error message %q", m)
	}
	if m := errMessage("rm", "/x", kerr.New(kerr.NotFound, "rm", "/x", "no such file")); m != "rm /x: no such file" {
		t.Errorf("kerr message %q", m)
	}
}

func TestStatString(t *testing.T) {
	mt := time.Unix(1700000000, 0)
	s := statString(FileInfo{ID: 7, Size: 12, Mode: 0o644, MTime: mt, Owner: "alice smith", Group: ""})
	if s != "7 12 48 1700000000 1700000000 1700000000 0644 alice_smith -" {
		t.Errorf("file stat %q", s)
	}
	s = statString(FileInfo{ID: 1, IsDir: true, Size: 4096, Mode: 0o755, MTime: mt, Owner: "a", Group: "b"})
	if s != "1 4096 51 1700000000 1700000000 1700000000 0755 a b" {
		t.Errorf("dir stat %q", s)
	}
	if v := vfsString(StatFS{Total: 100 << 20, Free: 25 << 20}); v != "1 25 75 0 0 0" {
		t.Errorf("vfs %q", v)
	}
}

func TestBudgetBlocksAndReleases(t *testing.T) {
	b := newBudget(100)
	if got := b.acquire(1000); got != 100 {
		t.Fatalf("oversized acquire took %d", got)
	}
	done := make(chan int64)
	go func() { done <- b.acquire(10) }()
	select {
	case <-done:
		t.Fatal("acquire did not block on an exhausted budget")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(100)
	if got := <-done; got != 10 {
		t.Fatalf("acquire after release took %d", got)
	}
	go func() { done <- b.acquire(100) }()
	b.close()
	if got := <-done; got != -1 {
		t.Fatalf("closed budget returned %d", got)
	}
}
