package cfsd_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/fusetest"
)

// TestFSX runs the fsx-style exerciser (fusetest.FSX: reads, writes at
// offsets, truncates, mmap reads and writes, fsync, checked against its
// model) through cfsd with kernel passthrough (the default) and through
// the daemon's own data path. Lean in CI (300 operations);
// KAON_FSX_OPS=3000 for a long run, KAON_FSX_SEED to replay a failure.
func TestFSX(t *testing.T) {
	ops, seed := 300, time.Now().UnixNano()
	if v, err := strconv.Atoi(os.Getenv("KAON_FSX_OPS")); err == nil {
		ops = v
	}
	if v, err := strconv.ParseInt(os.Getenv("KAON_FSX_SEED"), 10, 64); err == nil {
		seed = v
	}
	for _, v := range []struct {
		name string
		args []string
	}{{"passthrough", nil}, {"daemon", []string{"--no-passthrough"}}} {
		t.Run(v.name, func(t *testing.T) {
			m := newMount(t, "", v.args...)
			fusetest.FSX{Roots: []string{m.mp}, Name: "fsx", Ops: ops, Seed: seed}.Run(t)
		})
	}
}
