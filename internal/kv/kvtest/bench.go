package kvtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"testing"

	"github.com/kaon-storage/kaon/internal/kv"
)

// Bench measures an engine with 8 clients per CPU; sync is passed to batch
// commits (transactions follow the engine's own setting):
//
//	Put                 one key per batch
//	Batch10             ten keys per batch
//	BatchCreate         a create as the namespace does it today: under one
//	                    writer lock, read the directory and the name, apply a
//	                    3-key batch, wait for durability outside the lock
//	TxnCreate           the same create as a transaction, no lock; each client
//	                    in its own directory
//	TxnCreateSharedDir  every client in one directory: all conflict on it
//
// ops/s counts completed operations; transactions also report attempts/op
// and gaveup/op (kerr.Busy after kv.TxnAttempts conflicts).
func Bench(b *testing.B, open func(b *testing.B) kv.Engine, sync bool) {
	var seq atomic.Int64
	name := func() string { return strconv.FormatInt(seq.Add(1), 36) }
	value := make([]byte, 150) // about an inode record
	var attempts, gaveUp atomic.Int64
	run := func(b *testing.B, e kv.Engine, op func(ctx context.Context, client string) error) {
		ctx := context.Background()
		attempts.Store(0)
		gaveUp.Store(0)
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			client := name()
			for pb.Next() {
				err := op(ctx, client)
				if errors.Is(err, kv.ErrConflict) {
					gaveUp.Add(1) // contention the retry bound did not absorb
				} else if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(int64(b.N)-gaveUp.Load())/b.Elapsed().Seconds(), "ops/s")
		if n := attempts.Load(); n > 0 {
			b.ReportMetric(float64(n)/float64(b.N), "attempts/op")
			b.ReportMetric(float64(gaveUp.Load())/float64(b.N), "gaveup/op")
		}
	}
	b.Run("Put", func(b *testing.B) {
		e := open(b)
		run(b, e, func(context.Context, string) error {
			bt := e.NewBatch()
			bt.Put([]byte("k/"+name()), value)
			return bt.Commit(sync)
		})
	})
	b.Run("Batch10", func(b *testing.B) {
		e := open(b)
		run(b, e, func(context.Context, string) error {
			bt := e.NewBatch()
			for i := 0; i < 10; i++ {
				bt.Put([]byte("k/"+name()), value)
			}
			return bt.Commit(sync)
		})
	})
	b.Run("BatchCreate", func(b *testing.B) {
		e := open(b)
		var mu gosync.Mutex
		run(b, e, func(_ context.Context, client string) error {
			dir, entry := []byte("d/"+client), []byte("e/"+client+"/"+name())
			mu.Lock()
			if _, err := e.Get(dir); err != nil && !errors.Is(err, kv.ErrNotFound) {
				mu.Unlock()
				return err
			}
			if _, err := e.Get(entry); !errors.Is(err, kv.ErrNotFound) {
				mu.Unlock()
				return fmt.Errorf("entry exists: %v", err)
			}
			bt := e.NewBatch()
			bt.Put(entry, value[:8])
			bt.Put([]byte("i/"+name()), value)
			bt.Put(dir, append([]byte(name()), value[:100]...))
			wait, err := bt.Apply(sync)
			mu.Unlock()
			if err != nil {
				return err
			}
			return wait()
		})
	})
	create := func(ctx context.Context, e kv.Engine, client string) error {
		return e.Txn(ctx, func(tx kv.Tx) error {
			attempts.Add(1)
			dir, entry := []byte("d/"+client), []byte("e/"+client+"/"+name())
			if _, err := tx.Get(dir); err != nil && !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			if _, err := tx.Get(entry); !errors.Is(err, kv.ErrNotFound) {
				return fmt.Errorf("entry exists: %v", err)
			}
			tx.Put(entry, value[:8])
			tx.Put([]byte("i/"+name()), value)
			tx.Put(dir, append([]byte(name()), value[:100]...)) // a new mtime
			return nil
		})
	}
	b.Run("TxnCreate", func(b *testing.B) {
		e := open(b)
		run(b, e, func(ctx context.Context, client string) error { return create(ctx, e, client) })
	})
	b.Run("TxnCreateSharedDir", func(b *testing.B) {
		e := open(b)
		run(b, e, func(ctx context.Context, _ string) error { return create(ctx, e, "shared") })
	})
}
