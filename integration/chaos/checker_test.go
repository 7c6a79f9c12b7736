package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestSplitBrainChecker checks the checker (it runs without
// -chaos.seconds): histories where each term has one server pass; two
// servers accepting writes in one term, or a write with no term, are
// violations that name the term, the servers and the paths.
func TestSplitBrainChecker(t *testing.T) {
	at := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	a := func(server int, term uint64, path string) accepted {
		at = at.Add(time.Second)
		return accepted{server: server, term: term, op: "commit", path: path, at: at}
	}
	for _, tc := range []struct {
		name string
		acc  []accepted
		want []string // substrings, one per violation
	}{
		{"one server per term, handed over and back", []accepted{a(0, 5, "/a"), a(0, 5, "/b"), a(1, 9, "/c"), a(0, 12, "/d")}, nil},
		{"a deposed server writes in its successor's term", []accepted{a(0, 5, "/a"), a(1, 9, "/b"), a(0, 9, "/c")},
			[]string{"term 9: namespace server 1 accepted commit /b"}},
		{"two servers in one term, back and forth", []accepted{a(0, 5, "/a"), a(1, 5, "/b"), a(0, 5, "/c")},
			[]string{"term 5: namespace server 0 accepted commit /a", "term 5: namespace server 1 accepted commit /b"}},
		{"a write with no term", []accepted{a(0, 5, "/a"), a(1, 0, "/b")}, []string{"namespace server 1 accepted commit /b"}},
	} {
		got := splitBrain(tc.acc)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: violations %q, want %d", tc.name, got, len(tc.want))
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Fatalf("%s: violation %q does not say %q", tc.name, got[i], w)
			}
		}
	}
}
