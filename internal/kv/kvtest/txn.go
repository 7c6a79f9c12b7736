package kvtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// testCtx bounds every step of a test: a hang fails with the step's name
// instead of stalling the suite.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var (
	errAbort      = errors.New("fn aborted")
	errConstraint = errors.New("constraint: at least one of x, y must stay 1")
	errTaken      = errors.New("lock already taken")
	errNotEmpty   = errors.New("directory not empty")
)

func runTxn(t *testing.T, open func(t *testing.T) kv.Engine) {
	t.Run("TxnReadYourWrites", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		put(t, e, "a", "1")
		put(t, e, "c", "3")
		err := e.Txn(ctx, func(tx kv.Tx) error {
			tx.Put([]byte("b"), []byte("2"))
			if v, err := tx.Get([]byte("b")); err != nil || string(v) != "2" {
				return fmt.Errorf("own put not visible: %q %v", v, err)
			}
			tx.Delete([]byte("a"))
			if _, err := tx.Get([]byte("a")); !errors.Is(err, kv.ErrNotFound) {
				return fmt.Errorf("own delete not visible: %v", err)
			}
			tx.Put([]byte("c"), []byte("33"))
			if got := scanAll(t, tx, "", ""); got != "b=2 c=33" {
				return fmt.Errorf("scan merges own writes: %q, want %q", got, "b=2 c=33")
			}
			tx.Put([]byte("a0"), []byte("new"))
			n := 0
			if err := tx.Scan(nil, nil, func(k, v []byte) bool { n++; return false }); err != nil || n != 1 {
				return fmt.Errorf("early stop over buffered keys: %d callbacks, %v", n, err)
			}
			v, _ := tx.Get([]byte("c"))
			v[0] = 'X' // the caller owns what Get returns
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := scanAll(t, e, "", ""); got != "a0=new b=2 c=33" {
			t.Fatalf("after commit: %q", got)
		}
		err = e.Txn(ctx, func(tx kv.Tx) error {
			tx.Put([]byte("z"), []byte("1"))
			return errAbort
		})
		if !errors.Is(err, errAbort) {
			t.Fatalf("fn error: got %v, want %v", err, errAbort)
		}
		if _, err := e.Get([]byte("z")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal("writes of a failed fn were applied")
		}
	})

	// N goroutines each add 1 M times to one counter: any lost update
	// (a commit that did not see the previous one) leaves it short of the
	// commits acknowledged, and a transaction that gave up (kerr.Busy
	// wrapping ErrConflict after TxnAttempts lost races, which a loaded
	// machine makes possible) must have left no trace, as Jepsen's counter
	// checker compares what clients were told against what is stored.
	t.Run("TxnCounterNoLostUpdate", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		const N, M = 8, 25
		var calls, acked, gaveUp atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < N; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < M; i++ {
					err := e.Txn(ctx, func(tx kv.Tx) error {
						calls.Add(1)
						n := 0
						if v, err := tx.Get([]byte("counter")); err == nil {
							n, _ = strconv.Atoi(string(v))
						} else if !errors.Is(err, kv.ErrNotFound) {
							return err
						}
						runtime.Gosched() // let others read the same value
						tx.Put([]byte("counter"), []byte(strconv.Itoa(n+1)))
						return nil
					})
					switch {
					case err == nil:
						acked.Add(1)
					case errors.Is(err, kv.ErrConflict):
						gaveUp.Add(1)
					default:
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if acked.Load() == 0 {
			t.Fatalf("no transaction of %d committed", N*M)
		}
		v, err := e.Get([]byte("counter"))
		if err != nil || string(v) != strconv.FormatInt(acked.Load(), 10) {
			t.Fatalf("counter = %q (%v), want %d acknowledged increments (%d gave up)", v, err, acked.Load(), gaveUp.Load())
		}
		t.Logf("%d commits (%d gave up) took %d attempts", acked.Load(), gaveUp.Load(), calls.Load())
	})

	// Write skew: two on-call doctors x and y, at least one must stay. Each
	// transaction reads both and takes one off; the second to commit must
	// see the first (its read of y changed) and refuse.
	t.Run("TxnWriteSkewDetected", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		put(t, e, "x", "1")
		put(t, e, "y", "1")
		offDuty := func(tx kv.Tx, take string) error {
			x, err1 := tx.Get([]byte("x"))
			y, err2 := tx.Get([]byte("y"))
			if err := errors.Join(err1, err2); err != nil {
				return err
			}
			if string(x) != "1" || string(y) != "1" {
				return errConstraint
			}
			tx.Put([]byte(take), []byte("0"))
			return nil
		}
		attempts := 0
		err := e.Txn(ctx, func(tx kv.Tx) error {
			attempts++
			if attempts == 1 {
				// Read first, then let a concurrent transaction commit.
				if _, err := tx.Get([]byte("y")); err != nil {
					return err
				}
				if err := e.Txn(ctx, func(t2 kv.Tx) error { return offDuty(t2, "y") }); err != nil {
					return fmt.Errorf("concurrent txn: %w", err)
				}
			}
			return offDuty(tx, "x")
		})
		if !errors.Is(err, errConstraint) || attempts != 2 {
			t.Fatalf("got %v after %d attempts, want %v after 2 (conflict on y detected, then refused)", err, attempts, errConstraint)
		}
		if got := scanAll(t, e, "", ""); got != "x=1 y=0" {
			t.Fatalf("state %q, want x=1 y=0", got)
		}
	})

	// Reading an absent key is a read too: create-if-absent must not let
	// two transactions both create.
	t.Run("TxnAbsentReadConflict", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		attempts := 0
		err := e.Txn(ctx, func(tx kv.Tx) error {
			attempts++
			if _, err := tx.Get([]byte("lock")); err == nil {
				return errTaken
			} else if !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			if attempts == 1 {
				put(t, e, "lock", "other")
			}
			tx.Put([]byte("lock"), []byte("me"))
			return nil
		})
		if !errors.Is(err, errTaken) || attempts != 2 {
			t.Fatalf("got %v after %d attempts, want %v after 2", err, attempts, errTaken)
		}
		if v, _ := e.Get([]byte("lock")); string(v) != "other" {
			t.Fatalf("lock = %q, want other", v)
		}
	})

	// A scanned range conflicts with keys inserted into it, deleted from
	// it or changed in it (up to where the scan stopped).
	t.Run("TxnScanRangeConflict", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		// rmdir: the directory must still be empty at commit.
		attempts := 0
		err := e.Txn(ctx, func(tx kv.Tx) error {
			attempts++
			empty := true
			if err := tx.Scan([]byte("d/"), kv.PrefixEnd([]byte("d/")), func(k, v []byte) bool { empty = false; return false }); err != nil {
				return err
			}
			if !empty {
				return errNotEmpty
			}
			if attempts == 1 {
				put(t, e, "d/child", "x") // a concurrent create in the directory
			}
			tx.Put([]byte("d"), []byte("removed"))
			return nil
		})
		if !errors.Is(err, errNotEmpty) || attempts != 2 {
			t.Fatalf("insert into scanned range: got %v after %d attempts, want %v after 2", err, attempts, errNotEmpty)
		}
		// A count of entries must see a concurrent delete.
		put(t, e, "e/a", "1")
		put(t, e, "e/b", "1")
		attempts = 0
		if err := e.Txn(ctx, func(tx kv.Tx) error {
			attempts++
			n := 0
			if err := tx.Scan([]byte("e/"), kv.PrefixEnd([]byte("e/")), func(k, v []byte) bool { n++; return true }); err != nil {
				return err
			}
			if attempts == 1 {
				del(t, e, "e/b")
			}
			tx.Put([]byte("count"), []byte(strconv.Itoa(n)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if v, _ := e.Get([]byte("count")); string(v) != "1" || attempts != 2 {
			t.Fatalf("delete in scanned range: count = %q after %d attempts, want 1 after 2", v, attempts)
		}
		// An early-stopped scan still covers the keys it saw.
		put(t, e, "f/a", "1")
		put(t, e, "f/b", "1")
		attempts = 0
		if err := e.Txn(ctx, func(tx kv.Tx) error {
			attempts++
			var first string
			if err := tx.Scan([]byte("f/"), nil, func(k, v []byte) bool { first = string(k) + "=" + string(v); return false }); err != nil {
				return err
			}
			if attempts == 1 {
				put(t, e, "f/a", "2")
			}
			tx.Put([]byte("first"), []byte(first))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if v, _ := e.Get([]byte("first")); string(v) != "f/a=2" || attempts != 2 {
			t.Fatalf("change in stopped scan: first = %q after %d attempts, want f/a=2 after 2", v, attempts)
		}
	})

	t.Run("TxnRetryBound", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		calls := 0
		err := e.Txn(ctx, func(tx kv.Tx) error {
			calls++
			if _, err := tx.Get([]byte("hot")); err != nil && !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			put(t, e, "hot", strconv.Itoa(calls)) // every attempt loses
			tx.Put([]byte("out"), []byte("x"))
			return nil
		})
		if !errors.Is(err, kv.ErrConflict) || !kerr.Is(err, kerr.Busy) {
			t.Fatalf("got %v, want a Busy error wrapping kv.ErrConflict", err)
		}
		if calls != kv.TxnAttempts {
			t.Fatalf("fn ran %d times, want %d", calls, kv.TxnAttempts)
		}
		if _, err := e.Get([]byte("out")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal("a transaction that gave up applied its writes")
		}
		t.Logf("error after the bound: %v", err)
	})

	t.Run("TxnContextCanceled", func(t *testing.T) {
		e := open(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		called := false
		err := e.Txn(ctx, func(tx kv.Tx) error { called = true; tx.Put([]byte("k"), []byte("v")); return nil })
		if !errors.Is(err, context.Canceled) || called {
			t.Fatalf("canceled context: %v (fn called: %v)", err, called)
		}
	})
}

// scanAll renders [start, end) as "k=v k=v" ("" means unbounded).
func scanAll(t *testing.T, r kv.Reader, start, end string) string {
	t.Helper()
	var s, e []byte
	if start != "" {
		s = []byte(start)
	}
	if end != "" {
		e = []byte(end)
	}
	out := ""
	if err := r.Scan(s, e, func(k, v []byte) bool {
		if out != "" {
			out += " "
		}
		out += string(k) + "=" + string(v)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func del(t *testing.T, e kv.Engine, k string) {
	t.Helper()
	b := e.NewBatch()
	b.Delete([]byte(k))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
}
