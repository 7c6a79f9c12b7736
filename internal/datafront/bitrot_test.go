package datafront

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend/posix"
)

// flip inverts the byte at off of the stripe file p, behind the store's
// back, as rot on a disk does.
func flip(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// fetch fetches url; err is what reading the body ended with (nil for a
// clean end).
func fetch(t *testing.T, url string, hdr ...string) (int, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// within polls cond until it holds, failing with step after d.
func within(t *testing.T, d time.Duration, step string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", step, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stripeData reads the data of stripe fid of the filesystem at root, and
// whether every block verified.
func stripeData(root string, fid uint64) ([]byte, error) {
	r, err := posix.New(root, posix.Options{}).Open(fid)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
}

// TestDataBitrot: stripes rot on disk (a byte flipped in the middle and
// in the last block). A plain file: a GET whose first piece is bad is
// refused before the status line, one that has started is cut off
// (never a clean end), neither sends a byte of a bad block, and once the
// copy is known damaged every GET fails at once naming the file. A
// replica:3 file two of whose copies rotted: whole and
// ranged GETs are byte-exact and the copies are mended on disk. An
// ec:4+2 file: byte-exact, and the rotten stripe is rebuilt as it was.
func TestDataBitrot(t *testing.T) {
	fx := start(t)
	data := make([]byte, 3<<20+4321)
	rand.Read(data)
	put := func(fid uint64, layout string, n int) (string, string) {
		w := fx.writeCap(fid, layout, n)
		if resp, b := do(t, http.MethodPut, fx.dataURL(w), data); resp.StatusCode != 201 {
			t.Fatalf("PUT %s: %d %s", layout, resp.StatusCode, b)
		}
		return fx.dataURL(fx.readCap(t, w, int64(len(data)))), w.Path
	}
	last := int64(len(data) - 1)

	// Plain, rotten in the middle (past the first 1 MiB piece) and at the end.
	url, path := put(200, "plain", 1)
	phys := posix.PhysPath(fx.roots[0], 200)
	flip(t, phys, 2<<20+100)
	flip(t, phys, last)
	code, b, err := fetch(t, url)
	if code != 200 || err == nil || !bytes.Equal(b, data[:len(b)]) || int64(len(b)) > 2<<20 {
		t.Fatalf("GET of a plain file rotten mid-way: %d, %d bytes (a prefix of the file: %v), end %v; want 200 cut off before the bad block",
			code, len(b), bytes.Equal(b, data[:min(len(b), len(data))]), err)
	}
	within(t, 10*time.Second, "the rotten plain file to be refused at once", func() bool {
		code, b, _ := fetch(t, url)
		return code == 500 && strings.Contains(string(b), path) && strings.Contains(string(b), "damaged beyond repair")
	})
	if code, b, _ := fetch(t, url, "Range", "bytes=0-99"); code != 500 || !strings.Contains(string(b), "damaged") {
		t.Fatalf("ranged GET of a plain file known damaged: %d %s", code, b)
	}

	// Plain, rotten in its first block: refused before the status line.
	url, path = put(201, "plain", 1)
	flip(t, posix.PhysPath(fx.roots[0], 201), 1000)
	if code, b, _ := fetch(t, url); code != 500 || !strings.Contains(string(b), path) || !strings.Contains(string(b), "crc32c") {
		t.Fatalf("GET of a plain file rotten in its first block: %d %s", code, b)
	}
	// A range over a bad block of a third one, and one beside it.
	url, _ = put(202, "plain", 1)
	flip(t, posix.PhysPath(fx.roots[0], 202), 1<<20+10)
	if code, b, _ := fetch(t, url, "Range", "bytes=1048576-1048675"); code != 500 || !strings.Contains(string(b), "crc32c") {
		t.Fatalf("ranged GET of a rotten block: %d %s", code, b)
	}
	if code, b, err := fetch(t, url, "Range", "bytes=0-99"); code != 206 || err != nil || !bytes.Equal(b, data[:100]) {
		t.Fatalf("ranged GET of a good block of a rotten file: %d %v", code, err)
	}

	// replica:3, copies 0 and 1 rotten in one block (the third serves
	// it), copy 0 in its last block too (mended all the same).
	url, _ = put(203, "replica:3", 3)
	flip(t, posix.PhysPath(fx.roots[0], 203), 2<<20+100)
	flip(t, posix.PhysPath(fx.roots[0], 203), last)
	flip(t, posix.PhysPath(fx.roots[1], 203), 2<<20+5000)
	if code, b, err := fetch(t, url); code != 200 || err != nil || !bytes.Equal(b, data) {
		t.Fatalf("GET of a replica:3 file with rotten copies: %d, %d bytes, equal %v, %v", code, len(b), bytes.Equal(b, data), err)
	}
	if code, b, err := fetch(t, url, "Range", "bytes=2097000-2098000,3145000-"); code != 206 || err != nil ||
		!bytes.Contains(b, data[2097000:2098001]) || !bytes.Contains(b, data[3145000:]) {
		t.Fatalf("multi-range GET of a replica:3 file with rotten copies: %d %v", code, err)
	}
	if code, b, err := fetch(t, url, "Range", "bytes=0-999"); code != 206 || err != nil || !bytes.Equal(b, data[:1000]) {
		t.Fatalf("ranged GET of a replica:3 file with rotten copies: %d %v", code, err)
	}
	for i := range 2 {
		within(t, 10*time.Second, "the rotten replicas to be mended on disk", func() bool {
			got, err := stripeData(fx.roots[i], 203)
			return err == nil && bytes.Equal(got, data)
		})
	}

	// ec:4+2, stripe 0 rotten: served whole, rebuilt as it was.
	url, _ = put(204, "ec:4+2:65536", 6)
	ec0 := posix.PhysPath(fx.roots[0], 204)
	orig, _ := os.ReadFile(ec0)
	flip(t, ec0, 70000)
	if code, b, err := fetch(t, url); code != 200 || err != nil || !bytes.Equal(b, data) {
		t.Fatalf("GET of an ec file with a rotten frame: %d, equal %v, %v", code, bytes.Equal(b, data), err)
	}
	within(t, 10*time.Second, "the rotten ec stripe to be rebuilt", func() bool {
		got, err := os.ReadFile(ec0)
		return err == nil && bytes.Equal(got, orig)
	})
}
