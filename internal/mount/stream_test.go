package mount

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/client"
)

// fakeData is a namespace server and a storage server for one file
// /f: a whole PUT is an upload, committed only when its body ends
// cleanly; a ranged PUT updates the stored content in place.
type fakeData struct {
	mu              sync.Mutex
	content         []byte
	commits, aborts int
	ranged          int
	received        int64 // bytes of uploads read so far
}

func newFakeData(t *testing.T) (*fakeData, *client.Client) {
	f := &fakeData{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/f":
			http.Redirect(w, r, srv.URL+"/data/f", http.StatusTemporaryRedirect)
		case r.Header.Get("Content-Range") != "":
			var first, last int64
			fmt.Sscanf(r.Header.Get("Content-Range"), "bytes %d-%d/*", &first, &last)
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			f.mu.Lock()
			if end := first + int64(len(b)); end > int64(len(f.content)) {
				f.content = append(f.content, make([]byte, end-int64(len(f.content)))...)
			}
			copy(f.content[first:], b)
			f.ranged++
			f.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		default:
			var body bytes.Buffer
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Body.Read(buf)
				body.Write(buf[:n])
				f.mu.Lock()
				f.received += int64(n)
				f.mu.Unlock()
				if err == io.EOF {
					break
				}
				if err != nil { // a body that did not end cleanly: no commit
					f.mu.Lock()
					f.aborts++
					f.mu.Unlock()
					return
				}
			}
			f.mu.Lock()
			f.content = body.Bytes()
			f.commits++
			f.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(srv.Close)
	return f, client.New(srv.URL)
}

func (f *fakeData) state() (content []byte, commits, aborts, ranged int, received int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.content...), f.commits, f.aborts, f.ranged, f.received
}

// waitUntil polls cond, failing with step after a deadline.
func waitUntil(t *testing.T, step string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", step)
		}
	}
}

func streamingJournal(t *testing.T, c *client.Client, data []byte) *journal {
	t.Helper()
	j, err := newJournal(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.close)
	j.streamable = true
	j.WriteAt(data, 0)
	put := func(ctx context.Context, body io.Reader, size int64) error { return c.Put(ctx, "/f", body, size) }
	j.stream(func() (rewriter, string) { return put, "/f" })
	if j.st == nil {
		t.Fatalf("no stream after %d bytes written from 0", len(data))
	}
	return j
}

// TestStreamCommits: a file written from 0 without a hole is uploaded
// as it is written and committed by the flush, with every byte; the
// journal is then clean.
func TestStreamCommits(t *testing.T) {
	f, c := newFakeData(t)
	want := bytes.Repeat([]byte("0123456789abcdef"), (streamMin+12345)/16)
	j := streamingJournal(t, c, want[:streamMin])
	waitUntil(t, "the upload receives the bytes before the flush", func() bool {
		_, _, _, _, got := f.state()
		return got > 0
	})
	j.WriteAt(want[streamMin:], streamMin)
	if err := j.Flush(context.Background(), c, "/f", nil); err != nil {
		t.Fatal(err)
	}
	got, commits, aborts, ranged, _ := f.state()
	if !bytes.Equal(got, want) || commits != 1 || aborts != 0 || ranged != 0 {
		t.Fatalf("stored %d bytes (equal %v), %d commits, %d aborts, %d ranged PUTs; want %d bytes by one commit",
			len(got), bytes.Equal(got, want), commits, aborts, ranged, len(want))
	}
	if j.Dirty() {
		t.Fatal("dirty after the streamed flush")
	}
}

// TestStreamRewriteFallsBack: a write below what the upload already
// took aborts it — the storage server sees a body that did not end
// cleanly and commits nothing — and the flush replays the journal as
// ranged PUTs: what is stored is every byte as last written.
func TestStreamRewriteFallsBack(t *testing.T) {
	f, c := newFakeData(t)
	want := bytes.Repeat([]byte("x"), streamMin+1)
	j := streamingJournal(t, c, want)
	waitUntil(t, "the upload receives the first bytes", func() bool {
		_, _, _, _, got := f.state()
		return got > 0
	})
	j.WriteAt([]byte("REWRITE"), 0)
	copy(want, "REWRITE")
	waitUntil(t, "the storage server sees the upload aborted", func() bool {
		_, _, aborts, _, _ := f.state()
		return aborts == 1
	})
	if err := j.Flush(context.Background(), c, "/f", nil); err != nil {
		t.Fatal(err)
	}
	got, commits, _, ranged, _ := f.state()
	if !bytes.Equal(got, want) || commits != 0 || ranged == 0 {
		t.Fatalf("stored %d bytes (equal %v), %d commits, %d ranged PUTs; want the journal replayed", len(got), bytes.Equal(got, want), commits, ranged)
	}
}

// TestStreamNotFinishedNotCommitted: a journal closed without a flush
// (its file unlinked, the writer gone) ends its upload without a
// commit: nothing appears at the name.
func TestStreamNotFinishedNotCommitted(t *testing.T) {
	f, c := newFakeData(t)
	j := streamingJournal(t, c, bytes.Repeat([]byte("y"), streamMin))
	waitUntil(t, "the upload receives the first bytes", func() bool {
		_, _, _, _, got := f.state()
		return got > 0
	})
	j.close()
	waitUntil(t, "the storage server sees the upload aborted", func() bool {
		_, _, aborts, _, _ := f.state()
		return aborts == 1
	})
	if _, commits, _, _, _ := f.state(); commits != 0 {
		t.Fatalf("%d commits of a stream never finished", commits)
	}
}
