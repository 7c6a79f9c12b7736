package namespace

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestDump: every file below the path, once, depth first in name order,
// across more entries than one batch; version folders and the recycle bin
// left out; a file dumps as itself; a missing path is NotFound.
func TestDump(t *testing.T) {
	ns := tickingNS(t)
	ns.Mkdir(Root, "/d/big", 0o755, true)
	ns.Mkdir(Root, "/d/a/b", 0o755, true)
	ns.Mkdir(Root, "/d/empty", 0o755, true)
	ns.Mkdir(Root, "/other", 0o755, true)
	add := func(p string) {
		t.Helper()
		if _, err := ns.CreateEmpty(Root, p, CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/d/a/b/x", "/d/a/y", "/d/top"} {
		add(p)
	}
	big := make([]string, dumpBatch+10)
	for i := range big {
		big[i] = fmt.Sprintf("/d/big/f%05d", i)
		add(big[i])
	}
	add("/other/no")
	// Files of a directory first, then its subdirectories, each in name order.
	want := append([]string{"/d/top", "/d/a/y", "/d/a/b/x"}, big...)
	ns.SetXAttr(Root, "/d/a", "sys.versioning", "2")
	create(t, ns, "/d/a/y", 1) // the old /d/a/y becomes a version: not listed
	ns.SetXAttr(Root, "/d", nsapi.AttrRecycle, "on")
	add("/d/gone")
	if err := ns.Remove(Root, "/d/gone", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := ns.Dump(Root, "/d/", func(p string) error { got = append(got, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("dump of /d: %d paths, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	got = nil
	ns.Dump(Root, "/", func(p string) error { got = append(got, p); return nil })
	if len(got) != len(want)+1 || !slices.Contains(got, "/other/no") {
		t.Fatalf("dump of /: %d paths (want %d), bin or versions listed?", len(got), len(want)+1)
	}
	got = nil
	if err := ns.Dump(Root, "/d/top", func(p string) error { got = append(got, p); return nil }); err != nil || !slices.Equal(got, []string{"/d/top"}) {
		t.Fatalf("dump of a file: %v %v", got, err)
	}
	mustKind(t, ns.Dump(Root, "/nowhere", func(string) error { return nil }), kerr.NotFound)
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestDumpRate measures Dump over KAON_DUMP_ENTRIES files (1000 per
// directory) in a namespace on Pebble (the engine of a single namespace
// server), in process; skipped without the variable:
//
//	KAON_DUMP_ENTRIES=1000000 go test -run TestDumpRate -v ./internal/namespace
func TestDumpRate(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KAON_DUMP_ENTRIES"))
	if n <= 0 {
		t.Skip("KAON_DUMP_ENTRIES not set")
	}
	eng, err := pebblekv.Open(t.TempDir(), pebblekv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ns, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if i%1000 == 0 {
			ns.Mkdir(Root, fmt.Sprintf("/rucio/d%04d/%04d", i/1000%100, i/100000), 0o755, true)
		}
		if _, err := ns.CreateEmpty(Root, fmt.Sprintf("/rucio/d%04d/%04d/file.%09d", i/1000%100, i/100000, i), CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("created %d files in %v", n, time.Since(start))
	start = time.Now()
	count := 0
	if err := ns.Dump(Root, "/rucio", func(string) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("dumped %d paths in %v: %.0f paths/s, 10 M in %v", count, el, float64(count)/el.Seconds(), time.Duration(float64(el)*1e7/float64(count)))
	if count != n {
		t.Fatalf("dumped %d, want %d", count, n)
	}
}
