package erasure

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Repair rebuilds the shards listed in targets (index -> fresh, empty
// writer) from the other shards of a file of logical size size, row by
// row: it reads every non-target frame, reconstructs the target frames
// from K valid ones and appends them with their crc. Memory is one row.
// Frames of non-target shards found bad are reported in alsoBad (they
// need a repair too); a row with fewer than K valid frames fails the
// repair with a kerr.IO error. The target writers are not closed.
func Repair(l Layout, size int64, shards []ShardReader, targets map[int]io.Writer) (alsoBad []int, err error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	n, unit := l.Shards(), l.Unit
	if len(shards) != n || size < 0 || len(targets) == 0 || len(targets) > l.M {
		return nil, kerr.New(kerr.Invalid, "ec repair", l.String(),
			fmt.Sprintf("need %d shard readers, a size >= 0 and 1..%d targets", n, l.M))
	}
	for i, w := range targets {
		if i < 0 || i >= n || w == nil {
			return nil, kerr.New(kerr.Invalid, "ec repair", l.String(), fmt.Sprintf("bad target shard %d", i))
		}
	}
	rd, err := NewReader(l, size, shards)
	if err != nil {
		return nil, err
	}
	c := &cachedRow{frames: make([][]byte, n), state: make([]int8, n), why: make([]string, n)}
	defer rd.releaseRow(c)
	for i := range c.frames {
		c.frames[i] = getFrame(unit)
	}
	views := make([][]byte, n)
	required := make([]bool, n)
	req := make([]bool, n)
	others := map[int]bool{}
	for row := int64(0); row < l.Rows(size); row++ {
		c.row = row
		clear(c.state)
		clear(c.why)
		var idx []int
		for i := range n {
			required[i] = targets[i] != nil
			switch {
			case required[i]:
			case shards[i] == nil:
				c.state[i], c.why[i] = fBad, whyMissing
			default:
				idx = append(idx, i)
			}
		}
		rd.readFrames(c, idx)
		valid := 0
		for i := range n {
			switch {
			case required[i]:
				views[i] = c.frames[i][:0]
			case c.state[i] == fValid:
				views[i] = c.frames[i][:unit]
				valid++
			default:
				views[i] = nil
				others[i] = true
			}
		}
		if valid < l.K {
			return sortedKeys(others), rd.lostRow(c, valid)
		}
		// Parity is computed from all data shards, so a lost non-target
		// data frame must be rebuilt too (into its scratch buffer).
		copy(req, required)
		for i := l.K; i < n; i++ {
			if required[i] {
				for j := range l.K {
					if views[j] == nil {
						views[j], req[j] = c.frames[j][:0], true
					}
				}
				break
			}
		}
		if err := rd.enc.ReconstructSome(views, req); err != nil {
			return sortedKeys(others), kerr.Wrap(kerr.IO, "ec repair", l.String(), err)
		}
		for i, w := range targets {
			f := c.frames[i]
			if &views[i][0] != &f[0] {
				copy(f[:unit], views[i])
			}
			binary.LittleEndian.PutUint32(f[unit:], checksum.CRC32CSum(f[:unit]))
			if m, err := w.Write(f); err != nil || m != len(f) {
				if err == nil {
					err = io.ErrShortWrite
				}
				return sortedKeys(others), &kerr.Error{Kind: kerr.IO, Op: "ec repair", Path: l.String(),
					Msg: fmt.Sprintf("shard %d", i), Err: &ShardError{Shard: i, Row: row, Err: err}}
			}
		}
	}
	return sortedKeys(others), nil
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
