package ha

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// startHandingOver runs a node whose service is a namespace that hands
// its uploads in flight over as nsserver does: adopted when handed, all
// aborted when not.
func startHandingOver(t *testing.T, remote kv.Engine, id string) *server {
	t.Helper()
	n, err := New(Config{Remote: remote, Local: memkv.New(), Lease: time.Second, Logger: testLog,
		Self: Member{ID: id, HTTP: "http://" + id},
		Serve: func(ctx context.Context, s kv.Store, _ uint64, handed []byte) (any, error) {
			ns, err := namespace.Open(s, namespace.Options{Sync: true})
			if err != nil {
				return nil, err
			}
			if handed == nil {
				_, err = ns.AbortStale(time.Now())
				return ns, err
			}
			var in namespace.InFlight
			if err := json.Unmarshal(handed, &in); err != nil {
				return nil, err
			}
			_, err = ns.Adopt(in)
			return ns, err
		},
		HandOver: func(svc any) []byte {
			b, _ := json.Marshal(svc.(*namespace.Namespace).HandOver())
			return b
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{node: n, cancel: cancel, done: make(chan struct{})}
	go func() { n.Run(ctx); close(s.done) }()
	t.Cleanup(s.stop)
	return s
}

func onFs1(l layout.Layout, _ string) ([]uint32, error) { return make([]uint32, l.Stripes()), nil }

// A step-down hands the uploads in flight over: the successor keeps them
// pending and claimed, and their storage servers commit them there. A
// takeover without handover (the active server's lease lapsed) aborts
// them.
func TestStepDownHandsUploadsInFlightOver(t *testing.T) {
	remote := memkv.New()
	a := startHandingOver(t, remote, "a")
	nsA := waitActive(t, a, "a becomes active")
	b := startHandingOver(t, remote, "b")
	within(t, "b is a standby", func() bool { return b.node.View().Active.ID == "a" })
	f, err := nsA.BeginCreate(namespace.Root, "/up", namespace.CreateOptions{}, onFs1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nsA.ClaimUpload(f.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.node.StepDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	nsB := waitActive(t, b, "b takes over after the step-down")
	if _, err := nsB.ClaimUpload(f.ID); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("claim of the handed-over upload on b: %v, want refused (claimed on a)", err)
	}
	if _, err := nsB.Commit(f.ID, 3, nil); err != nil {
		t.Fatalf("commit of the upload in flight on b: %v", err)
	}
	if _, err := remote.Get([]byte(handoverKey)); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("the hand-over record is still there after b took it: %v", err)
	}

	// b's lease lapses on the engine's side: a takes over without a
	// handover and aborts b's upload in flight.
	within(t, "a is a standby", func() bool { return a.node.View().Active.ID == "b" })
	g, err := nsB.BeginCreate(namespace.Root, "/lost", namespace.CreateOptions{}, onFs1)
	if err != nil {
		t.Fatal(err)
	}
	del := remote.NewBatch()
	del.Delete(b.node.pipe.guard.Key)
	if err := del.Commit(true); err != nil {
		t.Fatal(err)
	}
	nsA2 := waitActive(t, a, "a takes over from the lapsed b")
	if _, err := nsA2.Pending(g.ID); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("the upload in flight on the lapsed server is still pending: %v", err)
	}
	if st, err := nsA2.Stat(namespace.Root, "/up"); err != nil || st.Size != 3 {
		t.Fatalf("/up: %+v %v", st, err)
	}
}

// A new active server uses a hand-over record only if the server that
// wrote it held the role last, removes it either way, and touches nothing
// unless its guard holds.
func TestTakeHandOver(t *testing.T) {
	ctx := context.Background()
	remote := memkv.New()
	put := func(k, v string) {
		b := remote.NewBatch()
		b.Put([]byte(k), []byte(v))
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	guard := kv.Cond{Key: []byte("guard"), Value: []byte("me")}
	put("guard", "me")
	put(termKey, `{"id":"x","rev":7}`)

	put(handoverKey, `{"term":6,"data":"b2xk"}`)
	if got, err := takeHandOver(ctx, remote, guard); err != nil || got != nil {
		t.Fatalf("record of an older term: %q %v, want nothing", got, err)
	}
	if _, err := remote.Get([]byte(handoverKey)); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("record of an older term left in place: %v", err)
	}

	put(handoverKey, `{"term":7,"data":"bGFzdA=="}`)
	if got, err := takeHandOver(ctx, remote, kv.Cond{Key: []byte("guard"), Value: []byte("other")}); !errors.Is(err, kv.ErrCondFailed) || got != nil {
		t.Fatalf("without the guard: %q %v, want nothing and cond failed", got, err)
	}
	if got, err := takeHandOver(ctx, remote, guard); err != nil || string(got) != "last" {
		t.Fatalf("record of the last term: %q %v, want \"last\"", got, err)
	}
	if got, err := takeHandOver(ctx, remote, guard); err != nil || got != nil {
		t.Fatalf("taken twice: %q %v", got, err)
	}
}
