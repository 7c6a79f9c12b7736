package client

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// fakeStream is a session stream whose frames the test reads and
// answers.
type fakeStream struct {
	sent chan nsapi.SessionRequest
	pr   *io.PipeReader
	pw   *io.PipeWriter
	dec  *json.Decoder
}

func (f *fakeStream) send(r *nsapi.SessionRequest) error { f.sent <- *r; return nil }
func (f *fakeStream) decoder() *json.Decoder             { return f.dec }
func (f *fakeStream) ping() error                        { return nil }
func (f *fakeStream) close(err error)                    { f.pr.CloseWithError(err) }

// TestCoalescing: a stat made with nothing in flight goes alone; those
// made while it is in flight wait, and go together in one batch when
// its reply comes, each answered by its own reply; a batch the server
// refuses as a whole fails each of its requests.
func TestCoalescing(t *testing.T) {
	pr, pw := io.Pipe()
	fs := &fakeStream{sent: make(chan nsapi.SessionRequest, 16), pr: pr, pw: pw, dec: json.NewDecoder(pr)}
	s := &Session{pending: map[uint64]chan nsapi.SessionMessage{}, frames: map[uint64][]uint64{},
		held: map[lockKey][]nsapi.Lock{}, inv: make(chan Invalidation, 16), done: make(chan struct{}),
		ready: make(chan struct{}), conn: fs, info: nsapi.SessionInfo{Batch: true}}
	close(s.ready)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer s.cancel()
	go s.read(fs)
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	frame := func(what string) nsapi.SessionRequest {
		t.Helper()
		select {
		case r := <-fs.sent:
			return r
		case <-ctx.Done():
			t.Fatalf("waiting for %s: no frame sent", what)
		}
		panic("unreachable")
	}
	answer := func(m nsapi.SessionMessage) {
		t.Helper()
		m.Kind = nsapi.SessionReply
		if err := json.NewEncoder(pw).Encode(m); err != nil {
			t.Fatal(err)
		}
	}
	queued := func(n int, what string) {
		t.Helper()
		for {
			s.mu.Lock()
			q := len(s.queue)
			s.mu.Unlock()
			if q == n {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %d requests queued, want %d", what, q, n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	type result struct {
		what string
		e    nsapi.Entry
		err  error
	}
	results := make(chan result, 8)
	stat := func(p string) { e, err := s.Stat(ctx, p); results <- result{"stat " + p, e, err} }
	got := func(n int) map[string]result {
		t.Helper()
		out := map[string]result{}
		for len(out) < n {
			select {
			case r := <-results:
				out[r.what] = r
			case <-ctx.Done():
				t.Fatalf("waiting for the callers' results: have %v", out)
			}
		}
		return out
	}

	go stat("/a")
	first := frame("the first stat")
	if first.Op != nsapi.SessionStat || first.Paths[0] != "/a" {
		t.Fatalf("the first frame: %+v, want the stat of /a alone", first)
	}
	go stat("/b")
	go func() { e, err := s.Create(ctx, "/c", true, 0); results <- result{"create /c", e, err} }()
	go func() { results <- result{"null", nsapi.Entry{}, s.Null(ctx)} }()
	queued(3, "the requests made while the first is in flight")
	select {
	case r := <-fs.sent:
		t.Fatalf("a frame was sent while one was in flight: %+v", r)
	default:
	}
	answer(nsapi.SessionMessage{ID: first.ID, Entry: &nsapi.Entry{Path: "/a"}})
	batch := frame("the batch")
	if batch.Op != nsapi.SessionBatch || len(batch.Batch) != 3 {
		t.Fatalf("the second frame: %+v, want a batch of the 3 queued requests", batch)
	}
	reply := nsapi.SessionMessage{ID: batch.ID}
	for _, r := range batch.Batch {
		m := nsapi.SessionMessage{Kind: nsapi.SessionReply, ID: r.ID}
		switch r.Op {
		case nsapi.SessionStat:
			m.Entry = &nsapi.Entry{Path: r.Paths[0]}
		case nsapi.SessionCreate:
			m.Error = &nsapi.ErrorBody{Kind: kerr.Exists, Message: "create " + r.Paths[0] + ": exists"}
		}
		reply.Batch = append(reply.Batch, m)
	}
	answer(reply)
	res := got(4)
	if r := res["stat /a"]; r.err != nil || r.e.Path != "/a" {
		t.Errorf("stat /a alone: %+v", r)
	}
	if r := res["stat /b"]; r.err != nil || r.e.Path != "/b" {
		t.Errorf("stat /b in the batch: %+v", r)
	}
	if r := res["create /c"]; !kerr.Is(r.err, kerr.Exists) {
		t.Errorf("create /c in the batch: %+v, want its own exists error", r)
	}
	if r := res["null"]; r.err != nil {
		t.Errorf("null in the batch: %v", r.err)
	}

	// A batch refused as a whole fails each of its requests with why.
	go stat("/d")
	alone := frame("the stat of /d")
	go stat("/e")
	go stat("/f")
	queued(2, "the stats made while /d's is in flight")
	answer(nsapi.SessionMessage{ID: alone.ID, Entry: &nsapi.Entry{Path: "/d"}})
	refused := frame("the batch of /e and /f")
	if refused.Op != nsapi.SessionBatch || len(refused.Batch) != 2 {
		t.Fatalf("the batch of /e and /f: %+v", refused)
	}
	answer(nsapi.SessionMessage{ID: refused.ID, Error: &nsapi.ErrorBody{Kind: kerr.Invalid, Message: "too many"}})
	res = got(3)
	for _, p := range []string{"/e", "/f"} {
		if r := res["stat "+p]; !kerr.Is(r.err, kerr.Invalid) {
			t.Errorf("stat %s in the refused batch: %+v", p, r)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.frames) != 0 || len(s.queue) != 0 || len(s.pending) != 0 {
		t.Errorf("after every reply: %d frames in flight, %d queued, %d pending", len(s.frames), len(s.queue), len(s.pending))
	}
}
