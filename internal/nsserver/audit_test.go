package nsserver

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// stuckFile is an audit file on a disk that does not answer until
// released.
type stuckFile struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
	closed  bool
}

func (f *stuckFile) Write(p []byte) (int, error) {
	<-f.release
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *stuckFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// Requests do not wait for the audit log's disk: uploads are opened and
// directories made while the file does not answer; once it does, every
// record is in it, in order, when the log is closed.
func TestAuditDoesNotWaitForTheDisk(t *testing.T) {
	f := &stuckFile{release: make(chan struct{})}
	log := newAuditLog(f)
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, err := New(Config{Engine: memkv.New(), Key: key, Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	register(t, s, 1, 1)
	done := make(chan error)
	go func() {
		for _, d := range []string{"/a", "/a/b", "/a/b/c"} {
			if err := s.Mkdir(context.Background(), root, d, 0o755, false); err != nil {
				done <- err
				return
			}
		}
		_, err := s.Open(context.Background(), root, "/a/b/c/f", nsapi.OpenRequest{Write: true, Create: true})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("requests waited for the audit log's file (not done within 10 s)")
	}
	close(f.release)
	if err := log.Close(); err != nil || !f.closed {
		t.Fatalf("close: %v, file closed %v", err, f.closed)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(f.buf.String()), "\n") {
		var r AuditRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		got = append(got, r.Op+" "+r.Path)
	}
	if want := "mkdir /a,mkdir /a/b,mkdir /a/b/c,write /a/b/c/f"; strings.Join(got, ",") != want {
		t.Fatalf("audit log %v, want %s", got, want)
	}
}

// Every record names the HA term of the server that decided, so that
// records of two servers can be told apart by term (the chaos suite's
// split-brain check); an embedded engine (term 0) leaves it out.
func TestAuditRecordsTerm(t *testing.T) {
	for _, term := range []uint64{0, 7} {
		var buf bytes.Buffer
		key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
		s, err := New(Config{Engine: memkv.New(), Key: key, Audit: &buf, Term: term})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Mkdir(context.Background(), root, "/a", 0o755, false); err != nil {
			t.Fatal(err)
		}
		line := strings.TrimSpace(buf.String())
		var r AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Op != "mkdir" || r.Term != term {
			t.Fatalf("term %d: audit line %q (%v): want mkdir with term %d", term, line, err, term)
		}
		if term == 0 && strings.Contains(line, `"term"`) {
			t.Fatalf("embedded engine: audit line %q names a term", line)
		}
	}
}
