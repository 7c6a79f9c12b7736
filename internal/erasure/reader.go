package erasure

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/klauspost/reedsolomon"
)

// ShardReader reads one shard file; *os.File satisfies it. A nil entry in
// a shard list means the shard is missing.
type ShardReader interface {
	ReadAt(p []byte, off int64) (int, error)
}

// cacheRows is how many decoded rows a Reader keeps: the row being read,
// the one being read ahead, and one for a concurrent reader. Memory is at
// most cacheRows*(K+M)*(Unit+4) bytes, usually cacheRows*K*Unit because
// parity frames are only fetched when a data frame is bad.
const cacheRows = 3

// ReaderMemory is what a Reader of layout l usually holds (data frames of
// its cached rows; parity frames are only fetched to repair).
func ReaderMemory(l Layout) int64 { return int64(cacheRows*l.K) * l.FrameSize() }

// frame states within a cached row.
const (
	fUnknown = iota // not read yet
	fValid          // read with a good crc, or reconstructed
	fBad            // missing, short or corrupt in this row
)

// Why a frame is bad, for error messages and BadShards.
const (
	whyMissing   = "missing"
	whyTruncated = "truncated"
	whyCorrupt   = "crc mismatch"
	whyError     = "read error"
)

type cachedRow struct {
	mu     sync.Mutex // held while fetching frames
	row    int64      // -1 when empty
	refs   int        // users; guarded by Reader.mu
	used   uint64     // LRU clock; guarded by Reader.mu
	frames [][]byte   // K+M, nil until first needed
	state  []int8
	why    []string
}

// Reader reads a striped file back: io.ReaderAt over the logical bytes,
// plus WriteRange for streaming. Data frames are read in parallel and
// checked against their crc32c; a bad one (missing, short, corrupt) is an
// erasure: parity frames are fetched and the data reconstructed. It never
// returns bytes that did not pass a crc or come from a reconstruction from
// crc-valid frames. It is safe for concurrent use.
type Reader struct {
	l      Layout
	size   int64
	rows   int64
	enc    reedsolomon.Encoder
	shards []ShardReader
	name   string

	mu       sync.Mutex
	cache    []*cachedRow
	clock    uint64
	dead     []bool   // shard unusable for every row (nil, missing file, I/O error)
	bad      []string // reason per shard found bad, "" if none
	lastEnd  int64    // end of the last ReadAt, to detect sequential reads
	prefetch int64    // last row a read-ahead was started for
	closed   bool
	ahead    sync.WaitGroup // read-aheads in flight
}

// NewReader opens a striped file of logical size size from its K+M shard
// readers (nil = missing).
func NewReader(l Layout, size int64, shards []ShardReader) (*Reader, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(shards) != l.Shards() {
		return nil, kerr.New(kerr.Invalid, "ec read", l.String(),
			fmt.Sprintf("need %d shard readers, got %d", l.Shards(), len(shards)))
	}
	if size < 0 {
		return nil, kerr.New(kerr.Invalid, "ec read", l.String(), "negative size")
	}
	enc, err := encoderFor(l)
	if err != nil {
		return nil, err
	}
	r := &Reader{l: l, size: size, rows: l.Rows(size), enc: enc,
		shards: append([]ShardReader(nil), shards...),
		dead:   make([]bool, l.Shards()), bad: make([]string, l.Shards()),
		lastEnd: -1, prefetch: -1}
	for i, s := range shards {
		if s == nil {
			r.dead[i] = true
			r.bad[i] = whyMissing
		}
	}
	return r, nil
}

// SetName sets the file name used in error messages.
func (r *Reader) SetName(name string) { r.name = name }

// Size returns the logical size.
func (r *Reader) Size() int64 { return r.size }

// BadShards returns the indices of shards found missing, short or corrupt
// so far, ascending.
func (r *Reader) BadShards() []int {
	var out []int
	for i := range r.Damage() {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// Corrupt reports whether why, a reason Damage gives, says the shard is
// there but its bytes are wrong (a frame failing its crc32c, or the shard
// cut short), which rebuilding it mends, rather than missing or
// unreadable.
func Corrupt(why string) bool { return why == whyCorrupt || why == whyTruncated }

// Damage returns why each shard found missing, short or corrupt so far is
// bad, by shard index (nil when all were good).
func (r *Reader) Damage() map[int]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[int]string
	for i, why := range r.bad {
		if why != "" {
			if out == nil {
				out = map[int]string{}
			}
			out[i] = why
		}
	}
	return out
}

// Close waits for read-aheads in flight and releases cached buffers; the
// shard readers are not closed (close them after this returns).
func (r *Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.ahead.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cache {
		if c.refs == 0 {
			r.releaseRow(c)
		}
	}
	r.cache = nil
	return nil
}

func (r *Reader) releaseRow(c *cachedRow) {
	for i, f := range c.frames {
		if f != nil {
			putFrame(r.l.Unit, f)
			c.frames[i] = nil
		}
	}
}

// acquire returns the cache entry for row, pinned; the least recently used
// idle entry is recycled, or a private one is made when all are busy.
func (r *Reader) acquire(row int64) *cachedRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	var victim *cachedRow
	for _, c := range r.cache {
		if c.row == row {
			c.refs++
			c.used = r.clock
			return c
		}
		if c.refs == 0 && (victim == nil || c.used < victim.used) {
			victim = c
		}
	}
	if victim == nil {
		n := r.l.Shards()
		victim = &cachedRow{frames: make([][]byte, n), state: make([]int8, n), why: make([]string, n)}
		if len(r.cache) < cacheRows {
			r.cache = append(r.cache, victim)
		} else {
			victim.used = ^uint64(0) // private: dropped on release
		}
	}
	victim.row = row
	clear(victim.state)
	clear(victim.why)
	victim.refs++
	if victim.used != ^uint64(0) {
		victim.used = r.clock
	}
	return victim
}

func (r *Reader) release(c *cachedRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.refs--
	if c.refs == 0 && c.used == ^uint64(0) {
		r.releaseRow(c)
	}
}

// readFrame reads and checks frame i of c.row into c.frames[i]; it runs
// concurrently for different i of the same row (c.mu is held by the
// caller, which owns the slices).
func (r *Reader) readFrame(c *cachedRow, i int) {
	if c.frames[i] == nil {
		c.frames[i] = getFrame(r.l.Unit)
	}
	f := c.frames[i]
	n, err := r.shards[i].ReadAt(f, c.row*r.l.FrameSize())
	unit := r.l.Unit
	switch {
	case n == len(f):
		if binary.LittleEndian.Uint32(f[unit:]) == checksum.CRC32CSum(f[:unit]) {
			c.state[i] = fValid
			return
		}
		c.why[i] = whyCorrupt
	case err == nil || err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		c.why[i] = whyTruncated
	case errors.Is(err, fs.ErrNotExist):
		c.why[i] = whyMissing
	default:
		c.why[i] = whyError + ": " + err.Error()
	}
	c.state[i] = fBad
}

// fetch makes the data frames flagged in need valid for c.row, reading
// parity and reconstructing when some are bad. c.mu must be held.
func (r *Reader) fetch(c *cachedRow, need []bool) error {
	k, n := r.l.K, r.l.Shards()
	// Shards known dead are skipped without I/O, reported with the reason
	// they died for.
	r.mu.Lock()
	dead := make([]string, n)
	for i, d := range r.dead {
		if d {
			dead[i] = r.bad[i]
		}
	}
	r.mu.Unlock()

	var todo []int
	missing := false
	for j := 0; j < k; j++ {
		if !need[j] || c.state[j] == fValid {
			continue
		}
		missing = true
		if c.state[j] == fUnknown {
			if dead[j] != "" {
				c.state[j], c.why[j] = fBad, dead[j]
			} else {
				todo = append(todo, j)
			}
		}
	}
	if !missing {
		return nil
	}
	r.readFrames(c, todo)
	// Enough good frames for a reconstruction? Fetch more, data first,
	// until K are valid or none are left to try.
	for {
		valid, lack := 0, false
		for j := 0; j < k; j++ {
			if need[j] && c.state[j] != fValid {
				lack = true
			}
		}
		if !lack {
			break
		}
		var untried []int
		for i := 0; i < n; i++ {
			switch {
			case c.state[i] == fValid:
				valid++
			case c.state[i] == fUnknown && dead[i] != "":
				c.state[i], c.why[i] = fBad, dead[i]
			case c.state[i] == fUnknown:
				untried = append(untried, i)
			}
		}
		if valid >= k {
			if err := r.reconstruct(c, need); err != nil {
				return err
			}
			break
		}
		if len(untried) == 0 {
			return r.lostRow(c, valid)
		}
		r.readFrames(c, untried[:min(len(untried), k-valid)])
	}
	r.noteBad(c)
	return nil
}

// readFrames reads frames idx of c in parallel.
func (r *Reader) readFrames(c *cachedRow, idx []int) {
	switch len(idx) {
	case 0:
		return
	case 1:
		r.readFrame(c, idx[0])
	default:
		var wg sync.WaitGroup
		for _, i := range idx[1:] {
			wg.Add(1)
			go func() { defer wg.Done(); r.readFrame(c, i) }()
		}
		r.readFrame(c, idx[0])
		wg.Wait()
	}
}

// reconstruct rebuilds the needed data frames of c from its valid ones.
func (r *Reader) reconstruct(c *cachedRow, need []bool) error {
	unit := r.l.Unit
	views := make([][]byte, r.l.Shards())
	// required spans all shards (parity false): v1.12.4 indexes it past
	// DataShards when given only K entries.
	required := make([]bool, r.l.Shards())
	for i := range views {
		switch {
		case c.state[i] == fValid:
			views[i] = c.frames[i][:unit]
		case i < r.l.K && need[i]:
			if c.frames[i] == nil {
				c.frames[i] = getFrame(unit)
			}
			views[i] = c.frames[i][:0]
			required[i] = true
		}
	}
	if err := r.enc.ReconstructSome(views, required); err != nil {
		return kerr.Wrap(kerr.IO, "ec reconstruct", r.name, err)
	}
	for j, req := range required {
		if req {
			if &views[j][0] != &c.frames[j][0] { // the codec allocated
				copy(c.frames[j][:unit], views[j])
			}
			c.state[j] = fValid
		}
	}
	return nil
}

// noteBad records the bad frames of c in the Reader-wide view.
func (r *Reader) noteBad(c *cachedRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, why := range c.why {
		if why == "" {
			continue
		}
		if r.bad[i] == "" {
			r.bad[i] = why
		}
		if why == whyMissing || strings.HasPrefix(why, whyError) {
			r.dead[i] = true
		}
	}
}

func (r *Reader) lostRow(c *cachedRow, valid int) error {
	r.noteBad(c)
	var parts []string
	for i, why := range c.why {
		if why != "" {
			parts = append(parts, fmt.Sprintf("shard %d %s", i, why))
		}
	}
	sort.Strings(parts)
	return &kerr.Error{Kind: kerr.IO, Op: "ec read", Path: r.name,
		Msg: fmt.Sprintf("row %d unrecoverable: %d of %d shards valid, need %d (%s)",
			c.row, valid, r.l.Shards(), r.l.K, strings.Join(parts, ", "))}
}

// row returns row with the data frames covering [lo, hi) (offsets within
// the row) valid, pinned; the caller must release it.
func (r *Reader) row(row int64, lo, hi int64) (*cachedRow, error) {
	need := make([]bool, r.l.K)
	unit := int64(r.l.Unit)
	for j := lo / unit; j*unit < hi; j++ {
		need[j] = true
	}
	c := r.acquire(row)
	c.mu.Lock()
	err := r.fetch(c, need)
	c.mu.Unlock()
	if err != nil {
		r.release(c)
		return nil, err
	}
	return c, nil
}

// readAhead loads the data frames of row in the background, once.
func (r *Reader) readAhead(row int64) {
	if row >= r.rows {
		return
	}
	r.mu.Lock()
	if r.prefetch == row || r.closed {
		r.mu.Unlock()
		return
	}
	r.prefetch = row
	r.ahead.Add(1)
	r.mu.Unlock()
	hi := min(r.l.RowSize(), r.size-row*r.l.RowSize())
	go func() {
		defer r.ahead.Done()
		if c, err := r.row(row, 0, hi); err == nil {
			r.release(c)
		}
	}()
}

// Read-ahead policies for span.
const (
	aheadNone   = iota
	aheadInside // only rows the requested range reaches
	aheadAlways // also the row after the range (sequential ReadAt)
)

// span calls fn for each row piece of [off, off+n): the cached row and
// the range [lo, hi) within it.
func (r *Reader) span(off, n int64, ahead int, fn func(c *cachedRow, lo, hi int64) error) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return kerr.New(kerr.Invalid, "ec read", r.name, "reader is closed")
	}
	rs := r.l.RowSize()
	for n > 0 {
		row, lo := off/rs, off%rs
		hi := min(rs, lo+n, r.size-row*rs)
		if ahead == aheadAlways || ahead == aheadInside && n > hi-lo {
			r.readAhead(row + 1)
		}
		c, err := r.row(row, lo, hi)
		if err != nil {
			return err
		}
		err = fn(c, lo, hi)
		r.release(c)
		if err != nil {
			return err
		}
		off += hi - lo
		n -= hi - lo
	}
	return nil
}

// copyOut calls fn with the logical bytes [lo, hi) of row c in frame-sized
// pieces.
func (r *Reader) copyOut(c *cachedRow, lo, hi int64, fn func([]byte) error) error {
	unit := int64(r.l.Unit)
	for lo < hi {
		j, o := lo/unit, lo%unit
		e := min(unit, o+hi-lo)
		if err := fn(c.frames[j][o:e]); err != nil {
			return err
		}
		lo += e - o
	}
	return nil
}

// ReadAt reads len(p) logical bytes at off (io.ReaderAt semantics).
// Sequential callers get the next row read ahead.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, kerr.New(kerr.Invalid, "ec read", r.name, "negative offset")
	}
	if off >= r.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	r.mu.Lock()
	ahead := aheadInside
	if r.lastEnd == off {
		ahead = aheadAlways
	}
	r.lastEnd = off + n
	r.mu.Unlock()
	done := 0
	err := r.span(off, n, ahead, func(c *cachedRow, lo, hi int64) error {
		return r.copyOut(c, lo, hi, func(b []byte) error {
			done += copy(p[done:], b)
			return nil
		})
	})
	if err != nil {
		return done, err
	}
	if done < len(p) {
		return done, io.EOF
	}
	return done, nil
}

// WriteRange writes the logical bytes [off, off+n) to w, reading the next
// row ahead while the current one is written. If the range runs past the
// end of the file it writes what exists and returns io.EOF.
func (r *Reader) WriteRange(w io.Writer, off, n int64) (int64, error) {
	if off < 0 || n < 0 {
		return 0, kerr.New(kerr.Invalid, "ec read", r.name, "negative offset or length")
	}
	var eof error
	if off+n > r.size {
		n = max(0, r.size-off)
		eof = io.EOF
	}
	var done int64
	err := r.span(off, n, aheadInside, func(c *cachedRow, lo, hi int64) error {
		return r.copyOut(c, lo, hi, func(b []byte) error {
			m, err := w.Write(b)
			done += int64(m)
			if err == nil && m < len(b) {
				err = io.ErrShortWrite
			}
			return err
		})
	})
	if err != nil {
		return done, err
	}
	return done, eof
}
