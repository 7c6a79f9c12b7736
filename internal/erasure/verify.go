package erasure

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Report is the outcome of Check.
type Report struct {
	Bad  map[int]string // shard index -> first problem found
	Lost []int64        // rows with fewer than K valid frames (data loss)
	// Ambiguous lists rows whose frames all pass their crc but whose
	// parity does not match the data, without a single shard to blame
	// (possible with M = 1 or several stale shards).
	Ambiguous []int64
}

// BadShards returns the bad shard indices ascending.
func (rep *Report) BadShards() []int {
	out := make([]int, 0, len(rep.Bad))
	for i := range rep.Bad {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// Verify reads every frame of every shard of a file of logical size size
// and returns the shards that are missing, short, too long or corrupt, or
// that disagree with the parity of an otherwise valid row (a stale shard).
// err is a kerr.IO error when some row cannot be recovered or a parity
// mismatch cannot be pinned on one shard; bad is valid either way.
func Verify(l Layout, size int64, shards []ShardReader) (bad []int, err error) {
	rep, err := Check(l, size, shards)
	if rep == nil {
		return nil, err
	}
	return rep.BadShards(), err
}

// Check is Verify with the reasons.
func Check(l Layout, size int64, shards []ShardReader) (*Report, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(shards) != l.Shards() || size < 0 {
		return nil, kerr.New(kerr.Invalid, "ec verify", l.String(),
			fmt.Sprintf("need %d shard readers and a size >= 0", l.Shards()))
	}
	enc, err := encoderFor(l)
	if err != nil {
		return nil, err
	}
	n, unit := l.Shards(), l.Unit
	rep := &Report{Bad: map[int]string{}}
	note := func(i int, why string) {
		if _, ok := rep.Bad[i]; !ok {
			rep.Bad[i] = why
		}
	}
	// A throwaway Reader gives frame reading and classification.
	rd, err := NewReader(l, size, shards)
	if err != nil {
		return nil, err
	}
	c := &cachedRow{frames: make([][]byte, n), state: make([]int8, n), why: make([]string, n)}
	defer rd.releaseRow(c)
	views := make([][]byte, n)
	scratch := make([]byte, unit)
	rows := l.Rows(size)
	for row := int64(0); row < rows; row++ {
		c.row = row
		clear(c.state)
		clear(c.why)
		var idx []int
		for i := range n {
			if shards[i] == nil {
				c.state[i], c.why[i] = fBad, whyMissing
			} else {
				idx = append(idx, i)
			}
		}
		rd.readFrames(c, idx)
		valid := 0
		for i := range n {
			if c.state[i] == fValid {
				valid++
			} else {
				note(i, fmt.Sprintf("row %d: %s", row, c.why[i]))
			}
		}
		switch {
		case valid < l.K:
			rep.Lost = append(rep.Lost, row)
		case valid == n:
			for i := range n {
				views[i] = c.frames[i][:unit]
			}
			if ok, _ := enc.Verify(views); ok {
				continue
			}
			// Blame the one shard whose reconstruction from the others
			// makes the row consistent.
			var blame []int
			for i := range n {
				for j := range n {
					views[j] = c.frames[j][:unit]
				}
				views[i] = scratch[:0]
				if enc.Reconstruct(views) != nil {
					continue
				}
				if ok, _ := enc.Verify(views); ok {
					blame = append(blame, i)
				}
			}
			if len(blame) == 1 {
				note(blame[0], fmt.Sprintf("row %d: disagrees with parity", row))
			} else {
				rep.Ambiguous = append(rep.Ambiguous, row)
			}
		}
	}
	// A shard longer than the size implies is stale or belongs elsewhere.
	var wg sync.WaitGroup
	var mu sync.Mutex
	end := rows * l.FrameSize()
	for i, s := range shards {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			if m, _ := s.ReadAt(b[:], end); m == 1 {
				mu.Lock()
				note(i, fmt.Sprintf("longer than %d bytes", end))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var msgs []string
	if len(rep.Lost) > 0 {
		msgs = append(msgs, fmt.Sprintf("%d rows unrecoverable (first %d)", len(rep.Lost), rep.Lost[0]))
	}
	if len(rep.Ambiguous) > 0 {
		msgs = append(msgs, fmt.Sprintf("%d rows with parity mismatch not attributable to one shard (first %d)",
			len(rep.Ambiguous), rep.Ambiguous[0]))
	}
	if len(msgs) > 0 {
		return rep, kerr.New(kerr.IO, "ec verify", l.String(), strings.Join(msgs, "; "))
	}
	return rep, nil
}
