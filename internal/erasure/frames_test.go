package erasure

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// TestFrameChecker: every shard of every size checks out whatever pieces
// it arrives in; a flipped byte (data or crc), a missing tail or extra
// bytes do not, and the error names the frame or the lengths.
func TestFrameChecker(t *testing.T) {
	for _, l := range testLayouts {
		for _, size := range testSizes(l) {
			shards := encode(t, l, randBytes(uint64(size)+5, size))
			for i, s := range shards {
				c, err := NewFrameChecker(l, size)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(i), 3))
				for rest := s; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(2*l.Unit))
					c.Write(rest[:n])
					rest = rest[n:]
				}
				if err := c.Err(); err != nil {
					t.Fatalf("%v size %d shard %d: %v", l, size, i, err)
				}
			}
		}
		size := 2*l.RowSize() + 10
		s := encode(t, l, randBytes(9, size))[1]
		check := func(b []byte) error {
			c, _ := NewFrameChecker(l, size)
			c.Write(b)
			return c.Err()
		}
		for _, tc := range []struct {
			name string
			b    []byte
			want string
		}{
			{"data", flip(s, int(l.FrameSize())+7), "frame 1"},
			{"crc", flip(s, int(l.FrameSize())-1), "frame 0"},
			{"short", s[:len(s)-1], "needs"},
			{"long", append(bytes.Clone(s), 0), "needs"},
		} {
			if err := check(tc.b); !kerr.Is(err, kerr.IO) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v %s: %v", l, tc.name, err)
			}
		}
	}
}

func flip(b []byte, at int) []byte {
	c := bytes.Clone(b)
	c[at] ^= 0x40
	return c
}
