package etcdtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestPartitionByNetns: members run inside a network namespace the test
// made; a client that reaches them through a link of its own is cut off
// when that link goes down (its requests hang, they do not fail at once)
// while the test's own link still works, and is served again once the
// link is up.
func TestPartitionByNetns(t *testing.T) {
	ns := harness.NewNetns(t)
	own, other := ns.Link(), ns.Link()
	c := StartWith(t, 3, Options{Wrap: ns.Wrap, Host: own.Inside})
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.EndpointsAt(other.Inside), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(v string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := cli.Put(ctx, "/k", v)
		return err
	}
	if err := put("1", 10*time.Second); err != nil {
		t.Fatalf("put through link %s: %v", other.Inside, err)
	}
	other.SetUp(false)
	start := time.Now()
	if err := put("2", 2*time.Second); err == nil || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Fatalf("put through the link taken down: %v after %v, want it to hang until its deadline", err, time.Since(start))
	}
	if v := string(c.Get("/k")); v != "1" {
		t.Fatalf("through the test's own link /k = %q, want 1", v)
	}
	other.SetUp(true)
	harness.WaitFor(t, 30*time.Second, "a put through the link up again", func() bool { return put("3", 2*time.Second) == nil })
	if v := string(c.Get("/k")); v != "3" {
		t.Fatalf("/k = %q after the link came back, want 3", v)
	}
}
