package core

import (
	"crypto/rand"
	"fmt"
	"hash/adler32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/bench"
)

// TestLargeFilesStream moves a file larger than 1 GiB up and down through
// plain and ec:4+2 and checks the server streams it: its resident memory
// stays far below the file size, and the bytes come back intact.
func TestLargeFilesStream(t *testing.T) {
	k := harness.Up(t)
	layoutDir(t, k, "/ec", "ec:4+2")
	const size = 1<<30 + 12345
	local := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(local)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 1<<20)
	rand.Read(block)
	h := adler32.New()
	w := io.MultiWriter(f, h)
	for left := int64(size); left > 0; {
		n := int64(len(block))
		if left < n {
			n = left
		}
		block[0]++ // no two MiB alike
		w.Write(block[:n])
		left -= n
	}
	f.Close()
	want := fmt.Sprintf("%08x", h.Sum32())
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			if r := bench.RSS(k.EP.PID); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	for _, p := range []string{"/big", "/ec/big"} {
		mustPut(t, k, local, p)
		if d := curl(t, "-I", "-H", "Want-Digest: adler32", k.EP.HTTP+p).header("Digest"); d != "adler32="+want {
			t.Fatalf("%s digest %q, want adler32=%s", p, d, want)
		}
		cmd := exec.Command("curl", "-sS", "-L", k.EP.HTTP+p)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := adler32.New()
		n, _ := io.Copy(got, out)
		if err := cmd.Wait(); err != nil || n != size || fmt.Sprintf("%08x", got.Sum32()) != want {
			t.Fatalf("GET %s: %d bytes, adler32 %08x, err %v", p, n, got.Sum32(), err)
		}
	}
	close(stop)
	if peak.Load() > 300<<20 {
		t.Fatalf("server RSS peaked at %d MiB while streaming 1 GiB files: bytes are being held", peak.Load()>>20)
	}
	t.Logf("server peak RSS %d MiB", peak.Load()>>20)
}
