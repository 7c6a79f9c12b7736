package core

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// curlResult is what one real curl invocation returned.
type curlResult struct {
	code    int
	body    []byte
	headers string
	stderr  string
}

// curl runs the real curl binary; -w prints the status code last.
func curl(t *testing.T, args ...string) curlResult {
	t.Helper()
	hdr := filepath.Join(t.TempDir(), "hdr")
	full := append([]string{"-sS", "-D", hdr, "-w", "\n%{http_code}"}, args...)
	cmd := exec.Command("curl", full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	b := out.Bytes()
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		t.Fatalf("curl %v: no status: %s", args, errb.String())
	}
	code, _ := strconv.Atoi(string(b[i+1:]))
	h, _ := os.ReadFile(hdr)
	return curlResult{code: code, body: b[:i], headers: string(h), stderr: errb.String()}
}

// header returns the value of the last response's header name.
func (r curlResult) header(name string) string {
	var v string
	for _, line := range strings.Split(r.headers, "\r\n") {
		if k, val, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), name) {
			v = strings.TrimSpace(val)
		}
	}
	return v
}

func randomFile(t *testing.T, size int64) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	p := filepath.Join(t.TempDir(), fmt.Sprintf("data-%d", size))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func put(t *testing.T, k *harness.Process, local, remote string) curlResult {
	t.Helper()
	return curl(t, "-L", "-T", local, k.EP.HTTP+remote)
}

func mustPut(t *testing.T, k *harness.Process, local, remote string) {
	t.Helper()
	if r := put(t, k, local, remote); r.code != 201 {
		t.Fatalf("PUT %s: %d %s %s", remote, r.code, r.body, r.stderr)
	}
}

func get(t *testing.T, k *harness.Process, remote string, extra ...string) curlResult {
	t.Helper()
	return curl(t, append([]string{"-L", k.EP.HTTP + remote}, extra...)...)
}

func mustGetEqual(t *testing.T, k *harness.Process, remote string, want []byte) {
	t.Helper()
	r := get(t, k, remote)
	if r.code != 200 || !bytes.Equal(r.body, want) {
		t.Fatalf("GET %s: status %d, %d bytes (want %d), equal=%v: %s", remote, r.code, len(r.body), len(want), bytes.Equal(r.body, want), r.stderr)
	}
}

type sums struct{ adler, crc, md5b64, shab64 string }

func sumsOf(b []byte) sums {
	m := md5.Sum(b)
	s := sha256.Sum256(b)
	return sums{
		adler:  fmt.Sprintf("%08x", adler32.Checksum(b)),
		crc:    fmt.Sprintf("%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))),
		md5b64: base64.StdEncoding.EncodeToString(m[:]),
		shab64: base64.StdEncoding.EncodeToString(s[:]),
	}
}

// layoutDir creates dir with the layout policy new files below inherit.
func layoutDir(t *testing.T, k *harness.Process, dir, layout string) {
	t.Helper()
	k.MustKaon("mkdir", dir)
	k.MustKaon("attr", "set", dir, "sys.forced.layout="+layout)
}

// publicFile writes size random bytes to a file other local users can read
// (for tests that act as another user) and returns its path and bytes.
func publicFile(t *testing.T, size int64) (string, []byte) {
	t.Helper()
	_, data := randomFile(t, size)
	f, err := os.CreateTemp("", "kaon-public-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(data)
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	os.Chmod(f.Name(), 0o644)
	return f.Name(), data
}
