package erasure

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/kaon-storage/kaon/internal/bufmem"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/directio"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/klauspost/reedsolomon"
)

// writeDepth is the number of rows a Writer keeps in flight: one being
// filled by Write while the other is encoded and written to the shards.
// Memory is writeDepth*(K+M)*(Unit+4) bytes. A third row measured no
// gain (shard writes are copies into directio buffers).
const writeDepth = 2

// WriterMemory is the most a Writer of layout l holds in buffers.
func WriterMemory(l Layout) int64 { return int64(writeDepth*l.Shards()) * int64(alignedFrameSize(l)) }

// AlignedWriter is a shard writer that writes a frame straight from the
// Writer's buffer (directio.File.WriteFrom): b starts on a
// directio.Align boundary, the frame is b[lead:] and b[:lead] is scratch
// the writer may fill with the unaligned tail it holds from the frames
// before. The Writer places row r's frames at lead = r*FrameSize() modulo
// Align, where a shard written from offset 0 has exactly that tail
// pending; a writer in any other state must write b[lead:] as Write does.
type AlignedWriter interface {
	WriteFrom(b []byte, lead int) (int, error)
}

// alignedFrameSize is the size of a Writer's frame buffers: a frame and
// the room for a lead of up to Align-1 bytes before it.
func alignedFrameSize(l Layout) int { return l.Unit + crcSize + directio.Align }

// stripe is one row's frames, K data then M parity, each Unit+4 bytes,
// at lead bytes into their aligned buffers bufs.
type stripe struct {
	row     int64
	fill    int // logical bytes in the row (less than RowSize in the last)
	lead    int
	bufs    [][]byte
	frames  [][]byte
	pending atomic.Int32 // shard writes still to do
}

// place puts s's frames where row's frames start in a shard, modulo
// Align, within their buffers (the lead an AlignedWriter expects).
func (s *stripe) place(l Layout, row int64) {
	s.lead = int(row * l.FrameSize() % directio.Align)
	for i, b := range s.bufs {
		s.frames[i] = b[s.lead : s.lead+int(l.FrameSize())]
	}
}

// ShardError names the shard whose I/O failed; it is the cause (Err) of
// the *kerr.Error a Writer returns.
type ShardError struct {
	Shard int
	Row   int64
	Err   error
}

func (e *ShardError) Error() string {
	return fmt.Sprintf("shard %d row %d: %v", e.Shard, e.Row, e.Err)
}
func (e *ShardError) Unwrap() error { return e.Err }

// Writer stripes a byte stream over K+M shard writers.
//
// Write fills a row buffer; a full row is handed to an encoder goroutine
// (parity + crc32c) and then to one goroutine per shard that appends the
// frame, so copying, encoding and shard I/O of consecutive rows overlap
// and slow (remote) shards are written concurrently.
type Writer struct {
	l      Layout
	enc    reedsolomon.Encoder
	shards []io.Writer
	name   string

	cur   *stripe // row being filled, nil before the first byte
	fill  int     // bytes of cur filled
	rows  int64   // rows handed to the pipeline
	alloc int     // stripes allocated (<= writeDepth)

	free   chan *stripe
	encq   chan *stripe
	shardq []chan *stripe
	wg     sync.WaitGroup

	tolerance int
	failMu    sync.Mutex
	failed    []int
	failErrs  []error

	errOnce sync.Once
	err     atomic.Pointer[error]
	closed  bool

	// The crc32c of the logical bytes of the rows encoded so far, folded
	// from the data frames' crc32c in row order (DataCRC32C).
	crcMu   sync.Mutex
	crcCond sync.Cond
	encoded int64 // rows folded in (or skipped after an error)
	dataCRC uint32
	shift   uint32 // checksum.CRC32CShift(Unit)
}

// NewWriter returns a Writer that writes the shards of a new file; shards
// must have K+M entries. Close (or Abort) must be called: it flushes the
// last row and stops the pipeline goroutines; it does not close the shard
// writers.
func NewWriter(l Layout, shards []io.Writer) (*Writer, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(shards) != l.Shards() {
		return nil, kerr.New(kerr.Invalid, "ec write", l.String(),
			fmt.Sprintf("need %d shard writers, got %d", l.Shards(), len(shards)))
	}
	for i, s := range shards {
		if s == nil {
			return nil, kerr.New(kerr.Invalid, "ec write", l.String(), fmt.Sprintf("shard writer %d is nil", i))
		}
	}
	enc, err := encoderFor(l)
	if err != nil {
		return nil, err
	}
	w := &Writer{
		l: l, enc: enc, shards: shards,
		free:   make(chan *stripe, writeDepth),
		encq:   make(chan *stripe, writeDepth),
		shardq: make([]chan *stripe, l.Shards()),
		shift:  checksum.CRC32CShift(int64(l.Unit)),
	}
	w.crcCond.L = &w.crcMu
	for i := range w.shardq {
		w.shardq[i] = make(chan *stripe, writeDepth)
		w.wg.Add(1)
		go w.shardLoop(i)
	}
	w.wg.Add(1)
	go w.encodeLoop()
	return w, nil
}

// SetName sets the file name used in error messages.
func (w *Writer) SetName(name string) { w.name = name }

// Rows returns the number of rows written so far (complete after Close).
func (w *Writer) Rows() int64 { return w.rows }

func (w *Writer) setErr(err error) {
	w.errOnce.Do(func() { w.err.Store(&err) })
}

func (w *Writer) firstErr() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// nextStripe returns an empty stripe, allocating up to writeDepth of them
// and otherwise waiting for the pipeline to release one.
func (w *Writer) nextStripe() *stripe {
	select {
	case s := <-w.free:
		return s
	default:
	}
	if w.alloc < writeDepth {
		w.alloc++
		s := &stripe{frames: make([][]byte, w.l.Shards()), bufs: make([][]byte, w.l.Shards())}
		pool := bufmem.Aligned(alignedFrameSize(w.l), directio.Align)
		for i := range s.bufs {
			s.bufs[i] = pool.Get()
		}
		return s
	}
	return <-w.free
}

// Write appends p to the file.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, kerr.New(kerr.Invalid, "ec write", w.name, "write after close")
	}
	n := 0
	unit := w.l.Unit
	rowSize := w.l.K * unit
	for len(p) > 0 {
		if err := w.firstErr(); err != nil {
			return n, err
		}
		if w.cur == nil {
			w.cur = w.nextStripe()
			w.cur.place(w.l, w.rows)
			w.fill = 0
		}
		j, off := w.fill/unit, w.fill%unit
		c := copy(w.cur.frames[j][off:unit], p)
		w.fill += c
		n += c
		p = p[c:]
		if w.fill == rowSize {
			w.submit()
		}
	}
	return n, w.firstErr()
}

func (w *Writer) submit() {
	w.cur.row, w.cur.fill = w.rows, w.fill
	w.rows++
	w.encq <- w.cur
	w.cur = nil
}

func (w *Writer) encodeLoop() {
	defer w.wg.Done()
	defer func() {
		for _, q := range w.shardq {
			close(q)
		}
	}()
	views := make([][]byte, w.l.Shards())
	unit := w.l.Unit
	for s := range w.encq {
		if w.firstErr() != nil {
			w.fold(nil)
			w.free <- s
			continue
		}
		for i, f := range s.frames {
			views[i] = f[:unit]
		}
		if err := w.enc.Encode(views); err != nil {
			w.setErr(kerr.Wrap(kerr.Internal, "ec encode", w.name, err))
			w.fold(nil)
			w.free <- s
			continue
		}
		for _, f := range s.frames {
			binary.LittleEndian.PutUint32(f[unit:], checksum.CRC32CSum(f[:unit]))
		}
		w.fold(s)
		s.pending.Store(int32(len(s.frames)))
		for _, q := range w.shardq {
			q <- s
		}
	}
}

// fold adds the logical bytes of s (the next row; nil: a row skipped
// after an error) to the running crc32c: a full data frame's crc32c is
// its frame's, a part of one (the last row) is summed again.
func (w *Writer) fold(s *stripe) {
	w.crcMu.Lock()
	defer w.crcMu.Unlock()
	if s != nil {
		unit := w.l.Unit
		for j := 0; j < w.l.K && s.fill > j*unit; j++ {
			if n := s.fill - j*unit; n < unit {
				w.dataCRC = checksum.CRC32CCombine(w.dataCRC, checksum.CRC32CSum(s.frames[j][:n]), checksum.CRC32CShift(int64(n)))
			} else {
				w.dataCRC = checksum.CRC32CCombine(w.dataCRC, binary.LittleEndian.Uint32(s.frames[j][unit:]), w.shift)
			}
		}
	}
	w.encoded++
	w.crcCond.Broadcast()
}

// DataCRC32C is the crc32c of every byte written so far, from the data
// frames' crc32c (no second pass over the bytes): the sum of what the
// shards hold, so an end-to-end comparison with the client's checks the
// stored bytes, not only the received ones. It waits for the rows handed
// to the encoder; it must not be called concurrently with Write or
// Close. Meaningless once the Writer failed.
func (w *Writer) DataCRC32C() uint32 {
	w.crcMu.Lock()
	for w.encoded < w.rows {
		w.crcCond.Wait()
	}
	crc := w.dataCRC
	w.crcMu.Unlock()
	if w.cur != nil { // the row being filled
		unit := w.l.Unit
		for j := 0; j*unit < w.fill; j++ {
			n := min(unit, w.fill-j*unit)
			crc = checksum.CRC32CCombine(crc, checksum.CRC32CSum(w.cur.frames[j][:n]), checksum.CRC32CShift(int64(n)))
		}
	}
	return crc
}

func (w *Writer) shardLoop(i int) {
	defer w.wg.Done()
	failed := false
	for s := range w.shardq[i] {
		if !failed && w.firstErr() == nil {
			var n int
			var err error
			if aw, ok := w.shards[i].(AlignedWriter); ok {
				n, err = aw.WriteFrom(s.bufs[i][:s.lead+len(s.frames[i])], s.lead)
			} else {
				n, err = w.shards[i].Write(s.frames[i])
			}
			if err == nil && n != len(s.frames[i]) {
				err = io.ErrShortWrite
			}
			if err != nil {
				k := kerr.KindOf(err)
				if k == kerr.Internal {
					k = kerr.IO
				}
				kerrErr := &kerr.Error{Kind: k, Op: "ec write", Path: w.name,
					Msg: fmt.Sprintf("shard %d", i), Err: &ShardError{Shard: i, Row: s.row, Err: err}}
				w.failMu.Lock()
				w.failed = append(w.failed, i)
				w.failErrs = append(w.failErrs, kerrErr)
				over := len(w.failed) > w.tolerance
				w.failMu.Unlock()
				if over {
					w.setErr(kerrErr)
				}
				failed = true // this shard gets no more frames
			}
		}
		if s.pending.Add(-1) == 0 {
			w.free <- s
		}
	}
}

// SetTolerance lets up to n (<= M) shard writers fail without failing the
// write: their frames are dropped and FailedShards names them, so the
// caller can record the file as degraded and have it repaired. It must be
// called before the first Write. The default is 0: any shard error fails
// the write.
func (w *Writer) SetTolerance(n int) { w.tolerance = max(0, min(n, w.l.M)) }

// FailedShards returns the shards whose writer failed, in failure order
// (complete after Close), and their errors.
func (w *Writer) FailedShards() ([]int, []error) {
	w.failMu.Lock()
	defer w.failMu.Unlock()
	return append([]int(nil), w.failed...), append([]error(nil), w.failErrs...)
}

// Close writes the final, zero-padded row and waits until every frame is
// written. It returns the first error of any shard. The shard writers are
// not closed.
func (w *Writer) Close() error {
	if w.closed {
		return w.firstErr()
	}
	w.closed = true
	if w.cur != nil && w.fill > 0 && w.firstErr() == nil {
		unit := w.l.Unit
		for j := w.fill / unit; j < w.l.K; j++ {
			start := 0
			if j == w.fill/unit {
				start = w.fill % unit
			}
			clear(w.cur.frames[j][start:unit])
		}
		w.submit()
	}
	close(w.encq)
	w.wg.Wait()
	// Every stripe is idle now; give the buffers back.
	if w.cur != nil {
		w.release(w.cur)
		w.cur = nil
	}
	for done := false; !done; {
		select {
		case s := <-w.free:
			w.release(s)
		default:
			done = true
		}
	}
	return w.firstErr()
}

// Abort stops the pipeline without writing the rows not yet written (an
// upload that was cancelled). The shards are left partial.
func (w *Writer) Abort() {
	if w.closed {
		return
	}
	w.setErr(kerr.New(kerr.IO, "ec write", w.name, "aborted"))
	w.Close()
}

func (w *Writer) release(s *stripe) {
	pool := bufmem.Aligned(alignedFrameSize(w.l), directio.Align)
	w.failMu.Lock()
	tainted := len(w.failed) > 0
	w.failMu.Unlock()
	for _, b := range s.bufs {
		if tainted {
			// A shard write that failed (a guard that stopped waiting on a
			// hung disk) may still touch its frame: never hand it out again.
			pool.Drop(b)
		} else {
			pool.Put(b)
		}
	}
	s.bufs, s.frames = nil, nil
}

// ErrShard extracts the failing shard index from an error returned by a
// Writer, Reader or Verify.
func ErrShard(err error) (int, bool) {
	var se *ShardError
	if errors.As(err, &se) {
		return se.Shard, true
	}
	return -1, false
}
