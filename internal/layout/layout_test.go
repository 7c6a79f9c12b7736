package layout

import (
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
)

func TestParseRoundTrip(t *testing.T) {
	for in, want := range map[string]Layout{
		"plain":           {Kind: Plain},
		"replica:3":       {Kind: Replica, N: 3},
		"ec:4+2":          {Kind: EC, K: 4, M: 2, Unit: DefaultUnit},
		"ec:8+2:64K":      {Kind: EC, K: 8, M: 2, Unit: 64 << 10},
		"ec:16+2:65536":   {Kind: EC, K: 16, M: 2, Unit: 65536},
		"ec:2+1:4m":       {Kind: EC, K: 2, M: 1, Unit: 4 << 20},
		" EC:10+4:64MiB ": {Kind: EC, K: 10, M: 4, Unit: 64 << 20},
		"ec:30+2:256KiB":  {Kind: EC, K: 30, M: 2, Unit: 256 << 10},
		"ec:1+1:4096":     {Kind: EC, K: 1, M: 1, Unit: 4096},
	} {
		l, err := Parse(in)
		if err != nil || l != want {
			t.Fatalf("Parse(%q) = %+v, %v", in, l, err)
		}
		if back, err := Parse(l.String()); err != nil || back != l {
			t.Fatalf("%q: String %q does not parse back: %+v %v", in, l.String(), back, err)
		}
		if l.Stripes() != map[Kind]int{Plain: 1, Replica: l.N, EC: l.K + l.M}[l.Kind] {
			t.Fatalf("%q: %d stripes", in, l.Stripes())
		}
	}
	for _, bad := range []string{"", "raid5", "replica:0", "replica:17", "replica:x", "ec:", "ec:4", "ec:4+", "ec:+2",
		"ec:4+0", "ec:0+2", "ec:-1+2", "ec:30+3", "ec:4+2:100", "ec:4+2:4000", "ec:4+2:4100", "ec:4+2:65537",
		"ec:4+2:128M", "ec:4+2:1G", "ec:4+2:", "ec:4+2:x", "ec:4+2:1M:x", "ec:a+b", "ec:4+2:99999999999999999999"} {
		if _, err := Parse(bad); !kerr.Is(err, kerr.Invalid) || !strings.Contains(err.Error(), bad) {
			t.Fatalf("Parse(%q) = %v, want an invalid-argument error naming the string", bad, err)
		}
	}
}
