// Command etcdfloor measures what an etcd cluster absorbs of plain puts
// in guarded transactions, the floor under the namespace on etcd:
// bench/ns/etcd.sh runs it beside `kaon bench ns --meta etcd://...` with
// the puts per create and the bytes per put that run made, so a create
// rate on etcd can be read against what etcd itself allows on the
// machine (issue 27).
//
//	etcdfloor --endpoints H:P,... --puts N --ops 4096 --value-bytes 120 --inflight 1
//
// Each transaction is If(the guard key's create revision is the one read
// at the start).Then(OPS puts of fresh keys), as the active namespace
// server's pipeline commits a group under its leadership guard.
// --inflight 1 commits one transaction at a time (the pipeline's order);
// more send that many at once (what etcd could take from a design that
// overlaps its groups). Prints one line: puts per second.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	endpoints := flag.String("endpoints", "", "etcd client URLs, comma-separated")
	prefix := flag.String("prefix", "/etcdfloor", "key prefix (removed at the end)")
	puts := flag.Int("puts", 300000, "puts in all")
	ops := flag.Int("ops", 4096, "puts per transaction (etcd's --max-txn-ops)")
	keyBytes := flag.Int("key-bytes", 24, "bytes of each key")
	valueBytes := flag.Int("value-bytes", 120, "bytes of each value")
	inflight := flag.Int("inflight", 1, "transactions in flight at once")
	flag.Parse()
	if *endpoints == "" || *puts < 1 || *ops < 1 || *inflight < 1 || *keyBytes < 12 {
		fmt.Fprintln(os.Stderr, "etcdfloor: --endpoints is required; --puts, --ops, --inflight ≥ 1, --key-bytes ≥ 12")
		os.Exit(2)
	}
	if err := run(strings.Split(*endpoints, ","), *prefix, *puts, *ops, *keyBytes, *valueBytes, *inflight); err != nil {
		fmt.Fprintln(os.Stderr, "etcdfloor:", err)
		os.Exit(1)
	}
}

func run(endpoints []string, prefix string, puts, ops, keyBytes, valueBytes, inflight int) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
		MaxCallSendMsgSize: 16 << 20})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	guard := prefix + "/guard"
	if _, err := cli.Put(ctx, guard, "x"); err != nil {
		return fmt.Errorf("put the guard key %s: %w", guard, err)
	}
	g, err := cli.Get(ctx, guard)
	if err != nil || len(g.Kvs) != 1 {
		return fmt.Errorf("read the guard key %s back: %v", guard, err)
	}
	cond := clientv3.Compare(clientv3.CreateRevision(guard), "=", g.Kvs[0].CreateRevision)
	value := strings.Repeat("v", valueBytes)
	var next atomic.Int64 // next transaction's first put
	var wg sync.WaitGroup
	errs := make(chan error, inflight)
	start := time.Now()
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(next.Add(int64(ops))) - ops
				if first >= puts {
					return
				}
				batch := make([]clientv3.Op, 0, ops)
				for i := first; i < min(first+ops, puts); i++ {
					batch = append(batch, clientv3.OpPut(fmt.Sprintf("%s/%0*d", prefix, keyBytes-len(prefix)-1, i), value))
				}
				r, err := cli.Txn(ctx).If(cond).Then(batch...).Commit()
				if err == nil && !r.Succeeded {
					err = fmt.Errorf("the guard %s changed", guard)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("%.0f puts/s (%d puts, %d per transaction, %d in flight, %d+%d bytes each, %.2fs)\n",
		float64(puts)/took.Seconds(), puts, ops, inflight, keyBytes, valueBytes, took.Seconds())
	_, err = cli.Delete(ctx, prefix+"/", clientv3.WithPrefix())
	return err
}
