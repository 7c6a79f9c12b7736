package pebblekv

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvtest"
)

func TestSuite(t *testing.T) {
	dirs := map[kv.Engine]string{}
	open := func(t *testing.T) kv.Engine {
		dir := t.TempDir()
		e, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		dirs[e] = dir
		return e
	}
	reopen := func(t *testing.T, e kv.Engine) kv.Engine {
		dir := dirs[e]
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e2, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e2.Close() })
		return e2
	}
	kvtest.Run(t, open, reopen)
}
