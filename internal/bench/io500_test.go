package bench

import (
	"bytes"
	"math"
	osexec "os/exec"
	"strings"
	"testing"
)

// TestIO500Score: the bandwidth score is the geometric mean of the
// bandwidth phases, the metadata score that of the rest, the score the
// geometric mean of both; a phase of zero zeroes its score.
func TestIO500Score(t *testing.T) {
	phases := []IO500Phase{
		{Name: "ior-easy-write", BW: true, Value: 8}, {Name: "ior-easy-read", BW: true, Value: 2},
		{Name: "ior-hard-write", BW: true, Value: 1}, {Name: "ior-hard-read", BW: true, Value: 4},
		{Name: "mdtest-easy-write", Value: 9}, {Name: "find", Value: 1}, {Name: "mdtest-hard-stat", Value: 3},
	}
	bw, md, score := IO500Score(phases)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("bandwidth score", bw, math.Pow(8*2*1*4, 0.25)) // 2.828...
	near("metadata score", md, 3)                        // (9*1*3)^(1/3)
	near("score", score, math.Sqrt(math.Pow(64, 0.25)*3))
	phases[5].Value = 0
	if _, md, score := IO500Score(phases); md != 0 || score != 0 {
		t.Errorf("a metadata phase of 0: md %v score %v, want 0 and 0", md, score)
	}
}

// TestIO500Smoke runs every phase on a temp dir with tiny sizes: each
// phase moves what it was asked to, and the table lists all twelve.
func TestIO500Smoke(t *testing.T) {
	if _, err := osexec.LookPath("fio"); err != nil {
		t.Skip("fio not installed (scripts/deps.sh installs it)")
	}
	cfg := IO500Config{Dir: t.TempDir(), Procs: 2, EasyBytes: 4 << 20, HardWrites: 20, EasyFiles: 50, HardFiles: 30}
	res, err := IO500(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"ior-easy-write": 2 * 4 << 20, "ior-easy-read": 2 * 4 << 20,
		"ior-hard-write": 2 * 20 * 47008, "ior-hard-read": 2 * 20 * 47008,
		"mdtest-easy-write": 100, "mdtest-easy-stat": 100, "mdtest-easy-delete": 100,
		"mdtest-hard-write": 60, "mdtest-hard-stat": 60, "mdtest-hard-read": 60, "mdtest-hard-delete": 60,
	}
	for _, p := range res.Phases {
		if p.Name == "find" {
			// the tree: root, 4 phase dirs, 2 proc dirs, 2 easy files, 1 hard file, 100 + 60 mdtest files
			if p.Ops != 1+4+2+2+1+100+60 {
				t.Errorf("find looked at %d entries, want %d", p.Ops, 1+4+2+2+1+100+60)
			}
			continue
		}
		if p.Ops != want[p.Name] {
			t.Errorf("%s moved %d, want %d", p.Name, p.Ops, want[p.Name])
		}
		delete(want, p.Name)
	}
	if len(want) != 0 {
		t.Errorf("phases missing: %v", want)
	}
	var b bytes.Buffer
	PrintIO500(&b, cfg, res)
	if n := strings.Count(b.String(), "[RESULT]"); n != 12 || !strings.Contains(b.String(), "[SCORE ]") || res.Score <= 0 {
		t.Errorf("table has %d results (want 12), score %v:\n%s", n, res.Score, b.String())
	}
}
