package health

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestFsckFindsAndRepairs damages stripes and replicas on disk in every
// way fsck knows (deleted, truncated, corrupted bytes and frames, wrong
// metadata), adds a copy on a filesystem the namespace does not register,
// an orphan stripe, and stripes whose namespace entry was removed; on a
// namespace server with two storage servers. `fsck report` must list each
// under its class with the file's path and the physical file; `fsck
// repair` must restore every file byte-exact (every stripe file equal to
// what it was), drop orphans only once the grace time has passed, and
// leave a clean report.
func TestFsckFindsAndRepairs(t *testing.T) {
	const grace = 15 * time.Second
	m, _ := cluster(t, 2, 3, "--fsck-orphan-grace", grace.String())
	m.MustKaon("mkdir", "/r")
	m.MustKaon("attr", "set", "/r", "sys.forced.layout=replica:2")
	m.MustKaon("mkdir", "/ec")
	m.MustKaon("attr", "set", "/ec", "sys.forced.layout=ec:4+2:65536")
	names := []string{"/r/missing", "/r/trunc", "/r/corrupt", "/r/nssize", "/r/nssum", "/r/unreg", "/r/gone",
		"/ec/missing", "/ec/corrupt", "/ec/stripe", "/r/clean", "/ec/clean"}
	data := map[string][]byte{}
	saved := map[string]physFile{} // every stripe file as uploaded
	st := map[string][]stripe{}
	for i, n := range names {
		data[n] = randomBytes(t, 300<<10+i*1000)
		put(t, m, n, data[n])
		st[n] = stripes(t, m, n)
		for _, s := range st[n] {
			saved[s.phys] = readPhys(t, s.phys)
		}
	}
	roots := fsRoots(t, m)

	// The damage, and the finding each must give: class, path, physical file.
	type want struct{ class, path, phys string }
	var wants []want
	os.Remove(st["/r/missing"][1].phys)
	wants = append(wants, want{"rep_missing_n", "/r/missing", st["/r/missing"][1].phys})
	os.Truncate(st["/r/trunc"][0].phys, 1000)
	wants = append(wants, want{"d_mem_sz_diff", "/r/trunc", st["/r/trunc"][0].phys})
	flip(t, st["/r/corrupt"][1].phys, 5000) // a block failing its crc32c
	wants = append(wants, want{"blockxs_err", "/r/corrupt", st["/r/corrupt"][1].phys})
	setXattr(t, st["/r/nssize"][0].phys, "user.kaon.size", "12")
	wants = append(wants, want{"m_mem_sz_diff", "/r/nssize", st["/r/nssize"][0].phys},
		want{"d_mem_sz_diff", "/r/nssize", st["/r/nssize"][0].phys})
	// Wrong checksums in a replica's metadata: they differ from the
	// namespace's, and (the scan re-reads the data) from its bytes.
	setXattr(t, st["/r/nssum"][1].phys, "user.kaon.checksums", "adler32=00000001,crc32c=00000001")
	wants = append(wants, want{"m_cx_diff", "/r/nssum", st["/r/nssum"][1].phys}, want{"d_cx_diff", "/r/nssum", st["/r/nssum"][1].phys})
	os.Remove(st["/ec/missing"][0].phys)
	os.Truncate(st["/ec/missing"][5].phys, 70000)
	wants = append(wants, want{"rep_missing_n", "/ec/missing", st["/ec/missing"][0].phys},
		want{"d_mem_sz_diff", "/ec/missing", st["/ec/missing"][5].phys})
	flip(t, st["/ec/corrupt"][2].phys, 100)
	wants = append(wants, want{"blockxs_err", "/ec/corrupt", st["/ec/corrupt"][2].phys})
	setXattr(t, st["/ec/stripe"][3].phys, "user.kaon.stripe", "1")
	wants = append(wants, want{"stripe_err", "/ec/stripe", st["/ec/stripe"][3].phys})
	// A copy of a replica on a filesystem the file is not registered on.
	var other string
	for id := range roots {
		if id != st["/r/unreg"][0].fsid && id != st["/r/unreg"][1].fsid {
			other = id
			break
		}
	}
	rel, _ := filepath.Rel(roots[st["/r/unreg"][0].fsid], st["/r/unreg"][0].phys)
	unreg := filepath.Join(roots[other], rel)
	writePhys(t, unreg, saved[st["/r/unreg"][0].phys])
	wants = append(wants, want{"unreg_n", "/r/unreg", unreg}, want{"rep_diff_n", "/r/unreg", unreg})
	// An orphan: a stripe of a fid the namespace never handed out (9999,
	// in its bucket), carrying /r/unreg's metadata otherwise.
	orphan := filepath.Join(filepath.Dir(unreg), fmt.Sprintf("%08x", 9999))
	o := saved[st["/r/unreg"][0].phys]
	o.attrs = maps.Clone(o.attrs)
	o.attrs["user.kaon.fid"] = "9999"
	writePhys(t, orphan, o)
	wants = append(wants, want{"orphans_n", "/r/unreg", orphan})
	// A namespace entry removed while its stripes stay: they are orphans
	// (named by the path they were written under).
	m.MustKaon("rm", "/r/gone")
	harness.WaitFor(t, 30*time.Second, "the stripes of /r/gone to be deleted", func() bool {
		return !exists(st["/r/gone"][0].phys) && !exists(st["/r/gone"][1].phys)
	})
	var orphans []string
	for _, s := range st["/r/gone"] {
		writePhys(t, s.phys, saved[s.phys])
		orphans = append(orphans, s.phys)
		wants = append(wants, want{"orphans_n", "/r/gone", s.phys})
	}
	orphans = append(orphans, orphan)

	m.MustKaon("fsck", "run", "--scrub", "--wait", "--timeout", "2m")
	report := m.MustKaon("fsck", "report")
	lines := strings.Split(strings.TrimSpace(report), "\n")
	for _, w := range wants {
		found := slices.ContainsFunc(lines, func(l string) bool {
			return strings.HasPrefix(l, w.class+" ") && strings.Contains(l, " path="+w.path+" phys="+w.phys+": ")
		})
		if !found {
			t.Errorf("fsck report has no %s finding for %s (%s):\n%s", w.class, w.path, w.phys, report)
		}
	}
	if len(lines) != len(wants) {
		t.Errorf("fsck report has %d findings, want %d:\n%s", len(lines), len(wants), report)
	}
	for _, l := range lines {
		if strings.Contains(l, "/clean") {
			t.Errorf("healthy file reported: %s", l)
		}
	}
	if out := m.MustKaon("fsck", "report", "--class", "blockxs_err"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "/r/corrupt") {
		t.Errorf("fsck report --class blockxs_err:\n%s", out)
	}
	stat := m.MustKaon("fsck", "stat")
	for class, n := range map[string]int{"rep_missing_n": 2, "d_mem_sz_diff": 3, "orphans_n": 3, "blockxs_err": 2, "d_cx_diff": 1} {
		if !regexpLine(stat, class, strconv.Itoa(n)) {
			t.Errorf("fsck stat: want %d %s:\n%s", n, class, stat)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Repair class by class. Orphans were found just now: kept.
	for _, class := range []string{"blockxs_err", "stripe_err", "d_mem_sz_diff", "m_mem_sz_diff", "d_cx_diff", "m_cx_diff",
		"unreg_n", "rep_missing_n", "rep_diff_n", "orphans_n"} {
		out := m.MustKaon("fsck", "repair", "--class", class)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case l == "":
			case class == "orphans_n":
				if !strings.HasPrefix(l, "skipped ") || !strings.Contains(l, "grace time") {
					t.Errorf("repair --class orphans_n right after the scan: %s", l)
				}
			case !strings.HasPrefix(l, "repaired ") && !strings.HasPrefix(l, "dropped "):
				t.Errorf("repair --class %s: %s", class, l)
			}
		}
	}
	for _, p := range orphans {
		if !exists(p) {
			t.Errorf("orphan %s removed before the grace time", p)
		}
	}
	harness.WaitFor(t, grace+30*time.Second, "repair to drop the orphans after the grace time", func() bool {
		out := m.MustKaon("fsck", "repair", "--class", "orphans_n")
		return strings.Count("\n"+out, "\ndropped orphans_n ") == len(orphans) ||
			(out == "" && strings.TrimSpace(m.MustKaon("fsck", "report", "--class", "orphans_n")) == "")
	})
	harness.WaitFor(t, 30*time.Second, fmt.Sprintf("the dropped copies %v to be deleted from disk", append(orphans, unreg)), func() bool {
		return !slices.ContainsFunc(append(orphans, unreg), exists)
	})

	// Every file reads back byte-exact, every stripe file is what it was,
	// and a new scan (re-reading the data) finds nothing.
	for _, n := range names {
		if n == "/r/gone" {
			continue
		}
		if b, ok := get(t, m, n); !ok || !bytes.Equal(b, data[n]) {
			t.Errorf("%s after repair: ok=%v, %d bytes, equal=%v", n, ok, len(b), bytes.Equal(b, data[n]))
		}
		for _, s := range st[n] {
			got := readPhys(t, s.phys)
			if want := saved[s.phys]; !bytes.Equal(got.data, want.data) || fmt.Sprint(attrText(got)) != fmt.Sprint(attrText(want)) {
				t.Errorf("%s stripe %s (%s) after repair: %d bytes (want %d), equal=%v, xattrs %v (want %v)", n, s.index, s.phys,
					len(got.data), len(want.data), bytes.Equal(got.data, want.data), got.attrs, want.attrs)
			}
		}
	}
	m.MustKaon("fsck", "run", "--scrub", "--wait", "--timeout", "2m")
	if out := m.MustKaon("fsck", "report"); out != "" {
		t.Errorf("fsck report after repair:\n%s", out)
	}
	// One filesystem alone; mistakes name what is wrong.
	m.MustKaon("fsck", "run", "--fs", "2", "--wait", "--timeout", "1m")
	if _, errs, code := m.Kaon("fsck", "run", "--fs", "99"); code == 0 || !strings.Contains(errs, "fs 99") {
		t.Errorf("fsck run --fs 99: exit %d: %s", code, errs)
	}
	if _, errs, code := m.Kaon("fsck", "repair", "--class", "bogus"); code == 0 || !strings.Contains(errs, "orphans_n") {
		t.Errorf("fsck repair --class bogus: exit %d: %s", code, errs)
	}
	if _, _, code := m.Kaon("fsck", "repair"); code != 2 {
		t.Errorf("fsck repair without a class: exit %d", code)
	}
}

// regexpLine reports whether text has a line starting with the fields
// first and second.
func regexpLine(text, first, second string) bool {
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == first && f[1] == second {
			return true
		}
	}
	return false
}

// attrText is a stripe's xattrs with the checksum list sorted (it is
// written in no particular order).
func attrText(pf physFile) map[string]string {
	out := maps.Clone(pf.attrs)
	sums := strings.Split(out["user.kaon.checksums"], ",")
	slices.Sort(sums)
	out["user.kaon.checksums"] = strings.Join(sums, ",")
	return out
}
