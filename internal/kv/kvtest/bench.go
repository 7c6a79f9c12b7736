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
func Bench(b *testing.B, open func(b *testing.B) kv.Engine, sync bool) {
	var seq atomic.Int64
	name := func() string { return strconv.FormatInt(seq.Add(1), 36) }
	value := make([]byte, 150) // about an inode record
	run := func(b *testing.B, e kv.Engine, op func(ctx context.Context, client string) error) {
		ctx := context.Background()
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			client := name()
			for pb.Next() {
				if err := op(ctx, client); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
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
			bt.Put(dir, value)
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
			dir, entry := []byte("d/"+client), []byte("e/"+client+"/"+name())
			if _, err := tx.Get(dir); err != nil && !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			if _, err := tx.Get(entry); !errors.Is(err, kv.ErrNotFound) {
				return fmt.Errorf("entry exists: %v", err)
			}
			tx.Put(entry, value[:8])
			tx.Put([]byte("i/"+name()), value)
			tx.Put(dir, value) // mtime
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
