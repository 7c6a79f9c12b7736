package erasure

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kaon-storage/kaon/internal/bufmem"
	"github.com/kaon-storage/kaon/internal/directio"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/klauspost/reedsolomon"
)

const testUnit = 4096

var testLayouts = []Layout{{4, 2, testUnit}, {8, 2, testUnit}, {16, 2, testUnit}}

func testSizes(l Layout) []int64 {
	u, rs := int64(l.Unit), l.RowSize()
	return []int64{0, 1, u - 1, u, rs, rs + 1, 3*rs + u + 777}
}

func randBytes(seed uint64, n int64) []byte {
	rng := rand.New(rand.NewPCG(seed, 99))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// encode stripes data through a Writer, writing in random-sized pieces.
func encode(t testing.TB, l Layout, data []byte) [][]byte {
	t.Helper()
	bufs := make([]*bytes.Buffer, l.Shards())
	ws := make([]io.Writer, l.Shards())
	for i := range bufs {
		bufs[i] = new(bytes.Buffer)
		ws[i] = bufs[i]
	}
	w, err := NewWriter(l, ws)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(len(data)), 7))
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(3*l.Unit))
		if m, err := w.Write(rest[:n]); err != nil || m != n {
			t.Fatalf("Write = %d, %v", m, err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, l.Shards())
	for i, b := range bufs {
		out[i] = b.Bytes()
		if int64(len(out[i])) != l.ShardSize(int64(len(data))) {
			t.Fatalf("shard %d is %d bytes, want %d", i, len(out[i]), l.ShardSize(int64(len(data))))
		}
	}
	return out
}

// Damage modes applied to a shard.
type damage int

const (
	dMissing damage = iota
	dTruncate
	dCorrupt
	dCorruptCRC
	dENOENT
)

func (d damage) String() string {
	return [...]string{"missing", "truncated", "corrupt", "corrupt-crc", "ENOENT"}[d]
}

type errShard struct{ err error }

func (e errShard) ReadAt([]byte, int64) (int, error) { return 0, e.err }

// readers builds shard readers, damaging the listed shards. Truncation
// cuts the shard in the middle of its last frame (or empties a one-frame
// shard); corruption flips a byte in every frame.
func readers(l Layout, shards [][]byte, bad map[int]damage) []ShardReader {
	out := make([]ShardReader, len(shards))
	fs := int(l.FrameSize())
	for i, s := range shards {
		d, isBad := bad[i]
		if !isBad {
			out[i] = bytes.NewReader(s)
			continue
		}
		c := slices.Clone(s)
		switch d {
		case dMissing:
			continue
		case dENOENT:
			out[i] = errShard{syscall.ENOENT}
			continue
		case dTruncate:
			if len(c) > fs {
				c = c[:len(c)-fs/2]
			} else {
				c = c[:len(c)/3]
			}
		case dCorrupt:
			for f := 0; f+fs <= len(c); f += fs {
				c[f+(i*131+f/fs*977)%l.Unit] ^= 0x5a
			}
		case dCorruptCRC:
			for f := 0; f+fs <= len(c); f += fs {
				c[f+fs-1] ^= 1
			}
		}
		out[i] = bytes.NewReader(c)
	}
	return out
}

func readAll(t testing.TB, l Layout, size int64, rs []ShardReader) ([]byte, *Reader, error) {
	t.Helper()
	r, err := NewReader(l, size, rs)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size+10)
	n, err := r.ReadAt(got, 0)
	if err == io.EOF && int64(n) == size {
		err = nil
	}
	return got[:n], r, err
}

func TestValidate(t *testing.T) {
	if l := FromLayout(layout.MustParse("ec:8+2:64K")); l != (Layout{8, 2, 64 << 10}) || l.Validate() != nil {
		t.Errorf("FromLayout: %+v %v", l, l.Validate())
	}
	if err := (Layout{4, 2, 100}).Validate(); !kerr.Is(err, kerr.Invalid) {
		t.Errorf("Validate accepted unit 100: %v", err)
	}
}

// TestShardFormat checks the documented on-disk format byte by byte
// against an independent encoding.
func TestShardFormat(t *testing.T) {
	l := Layout{3, 2, testUnit}
	size := 2*l.RowSize() + 5000
	data := randBytes(1, size)
	shards := encode(t, l, data)
	rows := l.Rows(size)
	if rows != 3 {
		t.Fatalf("rows = %d", rows)
	}
	enc, _ := reedsolomon.New(3, 2)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	padded := make([]byte, rows*l.RowSize())
	copy(padded, data)
	for r := int64(0); r < rows; r++ {
		units := make([][]byte, 5)
		for j := 0; j < 3; j++ {
			o := r*l.RowSize() + int64(j*l.Unit)
			units[j] = padded[o : o+int64(l.Unit)]
		}
		units[3], units[4] = make([]byte, l.Unit), make([]byte, l.Unit)
		if err := enc.Encode(units); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			frame := shards[i][r*l.FrameSize() : (r+1)*l.FrameSize()]
			if !bytes.Equal(frame[:l.Unit], units[i]) {
				t.Fatalf("row %d shard %d: data differs", r, i)
			}
			if got := binary.LittleEndian.Uint32(frame[l.Unit:]); got != crc32.Checksum(units[i], castagnoli) {
				t.Fatalf("row %d shard %d: crc %08x", r, i, got)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, l := range testLayouts {
		for _, size := range testSizes(l) {
			data := randBytes(uint64(size), size)
			shards := encode(t, l, data)
			got, r, err := readAll(t, l, size, readers(l, shards, nil))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%v size %d: err %v, equal %v", l, size, err, bytes.Equal(got, data))
			}
			if bad := r.BadShards(); len(bad) != 0 {
				t.Fatalf("%v size %d: healthy read reports bad shards %v", l, size, bad)
			}
			var buf bytes.Buffer
			if n, err := r.WriteRange(&buf, 0, size); err != nil || n != size || !bytes.Equal(buf.Bytes(), data) {
				t.Fatalf("%v size %d: WriteRange = %d, %v", l, size, n, err)
			}
			if bad, err := Verify(l, size, readers(l, shards, nil)); err != nil || len(bad) != 0 {
				t.Fatalf("%v size %d: Verify = %v, %v", l, size, bad, err)
			}
		}
	}
}

// subsets returns every subset of {0..n-1} with 1..k elements.
func subsets(n, k int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) > 0 {
			out = append(out, slices.Clone(cur))
		}
		if len(cur) == k {
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

// TestDegraded4p2AllCombinations damages every set of up to M=2 shards of
// ec:4+2 with every damage mode (and mixed modes), for every test size.
func TestDegraded4p2AllCombinations(t *testing.T) {
	l := Layout{4, 2, testUnit}
	for _, size := range testSizes(l) {
		data := randBytes(uint64(size)+5, size)
		shards := encode(t, l, data)
		for _, set := range subsets(l.Shards(), l.M) {
			for mode := dMissing; mode <= dENOENT; mode++ {
				bad := map[int]damage{}
				for n, i := range set {
					bad[i] = (mode + damage(n)) % (dENOENT + 1) // mix modes within a set
				}
				checkDegraded(t, l, size, data, shards, bad)
			}
		}
	}
}

func checkDegraded(t *testing.T, l Layout, size int64, data []byte, shards [][]byte, bad map[int]damage) {
	t.Helper()
	got, r, err := readAll(t, l, size, readers(l, shards, bad))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%v size %d bad %v: err %v, equal %v", l, size, bad, err, bytes.Equal(got, data))
	}
	// The reader only reads parity when it needs it, so it may not see a
	// bad parity shard; every shard it reports must really be bad, and
	// every bad data shard holding file bytes must be reported.
	reported := r.BadShards()
	for _, i := range reported {
		if _, ok := bad[i]; !ok {
			t.Fatalf("%v size %d bad %v: reader blames healthy shard %d", l, size, bad, i)
		}
	}
	lastRowBytes := size - (l.Rows(size)-1)*l.RowSize() // truncation hits the last row only
	for i, d := range bad {
		holds := int64(i*l.Unit) < size
		if d == dTruncate && size > 0 {
			holds = int64(i*l.Unit) < lastRowBytes
		}
		if i < l.K && holds && !slices.Contains(reported, i) {
			t.Fatalf("%v size %d bad %v: reader missed bad data shard %d (reported %v)", l, size, bad, i, reported)
		}
	}
	// Verify must name exactly the damaged shards (when there is a frame
	// to damage).
	if size > 0 {
		vb, err := Verify(l, size, readers(l, shards, bad))
		want := make([]int, 0, len(bad))
		for i := range bad {
			want = append(want, i)
		}
		slices.Sort(want)
		if err != nil || !slices.Equal(vb, want) {
			t.Fatalf("%v size %d bad %v: Verify = %v, %v; want %v", l, size, bad, vb, err, want)
		}
	}
}

func TestDegradedWide(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, l := range testLayouts[1:] {
		for _, size := range testSizes(l) {
			data := randBytes(uint64(size)+9, size)
			shards := encode(t, l, data)
			for range 12 {
				bad := map[int]damage{}
				for len(bad) < l.M {
					bad[rng.IntN(l.Shards())] = damage(rng.IntN(int(dENOENT) + 1))
				}
				checkDegraded(t, l, size, data, shards, bad)
			}
			// All data shards healthy but every parity gone, and the
			// first M data shards gone.
			checkDegraded(t, l, size, data, shards, map[int]damage{l.K: dMissing, l.K + 1: dCorrupt})
			checkDegraded(t, l, size, data, shards, map[int]damage{0: dCorrupt, 1: dTruncate})
		}
	}
}

// TestTooManyBad: with more than M bad shards the reader fails with a
// kerr.IO error naming the row and shards, and never returns wrong bytes.
func TestTooManyBad(t *testing.T) {
	for _, l := range testLayouts {
		size := 3*l.RowSize() + 100
		data := randBytes(11, size)
		shards := encode(t, l, data)
		for _, set := range [][]int{{0, 1, 2}, {0, l.K, l.K + 1}, {1, 2, l.K + 1}} {
			bad := map[int]damage{set[0]: dMissing, set[1]: dCorrupt, set[2]: dENOENT}
			r, _ := NewReader(l, size, readers(l, shards, bad))
			r.SetName("/eos/test/file.root")
			p := make([]byte, size)
			n, err := r.ReadAt(p, 0)
			var ke *kerr.Error
			if !errors.As(err, &ke) || ke.Kind != kerr.IO {
				t.Fatalf("%v bad %v: err %v, want kerr.IO", l, set, err)
			}
			msg := err.Error()
			for _, want := range []string{"/eos/test/file.root", "row 0", fmt.Sprintf("shard %d", set[0]), "need"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%v bad %v: error %q lacks %q", l, set, msg, want)
				}
			}
			if !bytes.Equal(p[:n], data[:n]) {
				t.Fatalf("%v bad %v: returned wrong bytes before the error", l, set)
			}
			var sink bytes.Buffer
			if _, err := r.WriteRange(&sink, 0, size); !kerr.Is(err, kerr.IO) {
				t.Fatalf("%v: WriteRange err %v", l, err)
			}
			if !bytes.Equal(sink.Bytes(), data[:sink.Len()]) {
				t.Fatalf("%v: WriteRange wrote wrong bytes", l)
			}
			if _, err := Verify(l, size, readers(l, shards, bad)); !kerr.Is(err, kerr.IO) {
				t.Fatalf("%v: Verify err %v, want kerr.IO", l, err)
			}
		}
	}
}

// TestOneRowLost: damage confined to one row only fails reads of that row.
func TestOneRowLost(t *testing.T) {
	l := Layout{4, 2, testUnit}
	size := 3 * l.RowSize()
	data := randBytes(12, size)
	shards := encode(t, l, data)
	fs := l.FrameSize()
	rs := make([]ShardReader, l.Shards())
	for i, s := range shards {
		c := slices.Clone(s)
		if i < 3 {
			c[fs+10] ^= 1 // row 1 of shards 0..2
		}
		rs[i] = bytes.NewReader(c)
	}
	r, _ := NewReader(l, size, rs)
	p := make([]byte, 100)
	for _, row := range []int64{0, 2} {
		if _, err := r.ReadAt(p, row*l.RowSize()+50); err != nil || !bytes.Equal(p, data[row*l.RowSize()+50:][:100]) {
			t.Fatalf("row %d: %v", row, err)
		}
	}
	if _, err := r.ReadAt(p, l.RowSize()+50); !kerr.Is(err, kerr.IO) || !strings.Contains(err.Error(), "row 1") {
		t.Fatalf("row 1: err %v", err)
	}
	rep, err := Check(l, size, rs)
	if !kerr.Is(err, kerr.IO) || !slices.Equal(rep.Lost, []int64{1}) || !slices.Equal(rep.BadShards(), []int{0, 1, 2}) {
		t.Fatalf("Check = %+v, %v", rep, err)
	}
}

func TestRandomRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, l := range testLayouts {
		size := 5*l.RowSize() + 1234
		data := randBytes(13, size)
		shards := encode(t, l, data)
		for _, bad := range []map[int]damage{nil, {0: dCorrupt, l.K - 1: dMissing}, {2: dTruncate}} {
			r, _ := NewReader(l, size, readers(l, shards, bad))
			var wg sync.WaitGroup
			for g := range 4 { // concurrent readers share the row cache
				seed := rng.Uint64()
				wg.Add(1)
				go func() {
					defer wg.Done()
					rr := rand.New(rand.NewPCG(seed, uint64(g)))
					for range 60 {
						off := rr.Int64N(size + 10)
						n := rr.Int64N(2*l.RowSize() + 3)
						p := make([]byte, n)
						m, err := r.ReadAt(p, off)
						end := min(off+n, size)
						wantN := max(0, end-off)
						if int64(m) != wantN || (wantN < n) != (err == io.EOF) || (wantN == n && err != nil) {
							t.Errorf("%v ReadAt(%d, %d) = %d, %v", l, n, off, m, err)
							return
						}
						if !bytes.Equal(p[:m], data[min(off, size):end]) {
							t.Errorf("%v ReadAt(%d, %d): wrong bytes", l, n, off)
							return
						}
						var buf bytes.Buffer
						w, err := r.WriteRange(&buf, off, n)
						if w != wantN || (wantN < n) != (err == io.EOF) || (wantN == n && err != nil) ||
							!bytes.Equal(buf.Bytes(), data[min(off, size):end]) {
							t.Errorf("%v WriteRange(%d, %d) = %d, %v", l, off, n, w, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// Sequential small reads (FUSE style) across the whole file.
			var out []byte
			p := make([]byte, 1500)
			for off := int64(0); ; {
				m, err := r.ReadAt(p, off)
				out = append(out, p[:m]...)
				off += int64(m)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(out, data) {
				t.Fatalf("%v bad %v: sequential read differs", l, bad)
			}
			r.Close()
			if _, err := r.ReadAt(p, 0); !kerr.Is(err, kerr.Invalid) {
				t.Fatalf("ReadAt after Close: %v", err)
			}
		}
	}
}

type failWriter struct {
	left int
	err  error
}

func (f *failWriter) Write(p []byte) (int, error) {
	if f.left < len(p) {
		return 0, f.err
	}
	f.left -= len(p)
	return len(p), nil
}

func TestWriterShardError(t *testing.T) {
	l := Layout{4, 2, testUnit}
	for _, tc := range []struct {
		err  error
		kind kerr.Kind
	}{{errors.New("connection reset"), kerr.IO}, {syscall.ENOSPC, kerr.NoSpace}} {
		ws := make([]io.Writer, l.Shards())
		for i := range ws {
			ws[i] = io.Discard
		}
		ws[5] = &failWriter{left: 2 * int(l.FrameSize()), err: tc.err}
		w, err := NewWriter(l, ws)
		if err != nil {
			t.Fatal(err)
		}
		w.SetName("/f")
		data := randBytes(1, 10*l.RowSize())
		var werr error
		for off := 0; off < len(data) && werr == nil; off += 1000 {
			_, werr = w.Write(data[off:min(off+1000, len(data))])
		}
		cerr := w.Close()
		for _, e := range []error{werr, cerr} {
			if e == nil {
				continue
			}
			if shard, ok := ErrShard(e); !ok || shard != 5 || !kerr.Is(e, tc.kind) || !strings.Contains(e.Error(), "shard 5") {
				t.Fatalf("error %v: shard %d kind %v", e, shard, kerr.KindOf(e))
			}
		}
		if cerr == nil {
			t.Fatal("Close hid the shard error")
		}
		if _, err := w.Write([]byte("x")); err == nil {
			t.Fatal("Write after Close succeeded")
		}
	}
	// Abort writes no partial row and stops the pipeline.
	var sb bytes.Buffer
	ws := []io.Writer{&sb, io.Discard, io.Discard, io.Discard, io.Discard, io.Discard}
	w, _ := NewWriter(l, ws)
	w.Write(randBytes(2, l.RowSize()+10))
	w.Abort()
	if sb.Len() > int(l.FrameSize()) {
		t.Fatalf("aborted writer wrote %d bytes to shard 0", sb.Len())
	}
	if _, err := NewWriter(l, make([]io.Writer, 5)); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("wrong shard count: %v", err)
	}
	if _, err := NewReader(l, 10, make([]ShardReader, 7)); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("wrong shard count: %v", err)
	}
}

func TestVerifyStaleAndLong(t *testing.T) {
	l := Layout{4, 2, testUnit}
	size := 2*l.RowSize() + 300
	data := randBytes(21, size)
	shards := encode(t, l, data)
	// A stale shard: frames with valid crcs from a different file.
	other := encode(t, l, randBytes(22, size))
	rs := readers(l, shards, nil)
	rs[2] = bytes.NewReader(other[2])
	bad, err := Verify(l, size, rs)
	if err != nil || !slices.Equal(bad, []int{2}) {
		t.Fatalf("stale shard: Verify = %v, %v", bad, err)
	}
	// A shard longer than the size implies.
	rs = readers(l, shards, nil)
	rs[4] = bytes.NewReader(append(slices.Clone(shards[4]), 0))
	if bad, err := Verify(l, size, rs); err != nil || !slices.Equal(bad, []int{4}) {
		t.Fatalf("long shard: Verify = %v, %v", bad, err)
	}
	// With M=1 a stale shard cannot be pinned down: report it as an error.
	l1 := Layout{3, 1, testUnit}
	s1 := encode(t, l1, data)
	o1 := encode(t, l1, randBytes(23, size))
	rs = readers(l1, s1, nil)
	rs[1] = bytes.NewReader(o1[1])
	if _, err := Verify(l1, size, rs); !kerr.Is(err, kerr.IO) {
		t.Fatalf("ambiguous parity: err %v", err)
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(uint32(5000), uint8(0), uint8(1), int64(3), int64(100))
	f.Add(uint32(70000), uint8(3), uint8(5), int64(16000), int64(40000))
	f.Fuzz(func(t *testing.T, size uint32, b1, b2 uint8, off, n int64) {
		l := Layout{4, 2, testUnit}
		sz := int64(size % (20 * testUnit))
		data := randBytes(uint64(size), sz)
		shards := encode(t, l, data)
		bad := map[int]damage{int(b1) % 6: damage(b1/6) % 5, int(b2) % 6: damage(b2/6) % 5}
		r, _ := NewReader(l, sz, readers(l, shards, bad))
		if off < 0 {
			off = -off
		}
		if n < 0 {
			n = -n
		}
		off, n = off%(sz+2), n%(3*l.RowSize())
		p := make([]byte, n)
		m, err := r.ReadAt(p, off)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(p[:m], data[min(off, sz):min(off+n, sz)]) {
			t.Fatal("wrong bytes")
		}
	})
}

func TestRepair(t *testing.T) {
	for _, l := range testLayouts {
		size := 3*l.RowSize() + 999
		data := randBytes(31, size)
		shards := encode(t, l, data)
		for _, targets := range [][]int{{0}, {l.K}, {1, l.K + 1}, {l.K - 1, 0}} {
			bad := map[int]damage{}
			for n, i := range targets {
				bad[i] = damage(n) * 2 // missing / corrupt
			}
			outs := map[int]io.Writer{}
			bufs := map[int]*bytes.Buffer{}
			for _, i := range targets {
				bufs[i] = new(bytes.Buffer)
				outs[i] = bufs[i]
			}
			also, err := Repair(l, size, readers(l, shards, bad), outs)
			if err != nil || len(also) != 0 {
				t.Fatalf("%v repair %v: %v, also %v", l, targets, err, also)
			}
			for i, b := range bufs {
				if !bytes.Equal(b.Bytes(), shards[i]) {
					t.Fatalf("%v: repaired shard %d differs from the original", l, i)
				}
			}
		}
		// One target plus M other bad shards: some row is lost.
		bad := map[int]damage{0: dMissing, 1: dMissing, 2: dCorrupt}
		if _, err := Repair(l, size, readers(l, shards, bad), map[int]io.Writer{0: io.Discard}); !kerr.Is(err, kerr.IO) {
			t.Fatalf("%v: repair with too many bad shards: %v", l, err)
		}
		// A second bad shard that is not a target is reported.
		bad = map[int]damage{0: dMissing, l.K: dCorrupt}
		also, err := Repair(l, size, readers(l, shards, bad), map[int]io.Writer{0: io.Discard})
		if err != nil || !slices.Equal(also, []int{l.K}) {
			t.Fatalf("%v: also = %v, %v", l, also, err)
		}
		// Rebuilding parity while a data shard is also bad.
		bad = map[int]damage{1: dCorrupt, l.K: dMissing}
		var pb bytes.Buffer
		also, err = Repair(l, size, readers(l, shards, bad), map[int]io.Writer{l.K: &pb})
		if err != nil || !slices.Equal(also, []int{1}) || !bytes.Equal(pb.Bytes(), shards[l.K]) {
			t.Fatalf("%v: parity repair with bad data shard: also %v, %v, equal %v", l, also, err, bytes.Equal(pb.Bytes(), shards[l.K]))
		}
	}
}

// bufThenFail keeps what it was given until it has taken limit bytes,
// then fails, like a shard on a server that went away mid-transfer.
type bufThenFail struct {
	bytes.Buffer
	limit int
}

func (b *bufThenFail) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		return 0, errors.New("connection reset by peer")
	}
	return b.Buffer.Write(p)
}

func TestWriterTolerance(t *testing.T) {
	l := Layout{4, 2, testUnit}
	size := 6*l.RowSize() + 10
	data := randBytes(41, size)
	for _, tolerance := range []int{2, 1} {
		bufs := make([]*bufThenFail, l.Shards())
		ws := make([]io.Writer, l.Shards())
		for i := range bufs {
			bufs[i] = &bufThenFail{limit: 1 << 30}
			ws[i] = bufs[i]
		}
		bufs[1].limit = 2 * int(l.FrameSize())
		bufs[4].limit = 4 * int(l.FrameSize())
		w, _ := NewWriter(l, ws)
		w.SetTolerance(tolerance)
		_, werr := w.Write(data)
		cerr := w.Close()
		failed, errs := w.FailedShards()
		slices.Sort(failed)
		if tolerance == 1 {
			if cerr == nil || len(failed) != 2 {
				t.Fatalf("tolerance 1, two failures: Write %v Close %v failed %v", werr, cerr, failed)
			}
			continue
		}
		if werr != nil || cerr != nil || !slices.Equal(failed, []int{1, 4}) || len(errs) != 2 {
			t.Fatalf("tolerance 2: Write %v Close %v failed %v", werr, cerr, failed)
		}
		rs := make([]ShardReader, l.Shards())
		for i, b := range bufs {
			rs[i] = bytes.NewReader(b.Bytes())
		}
		got, _, err := readAll(t, l, size, rs)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("degraded write reads back wrong: %v", err)
		}
		if bad, err := Verify(l, size, rs); err != nil || !slices.Equal(bad, []int{1, 4}) {
			t.Fatalf("Verify after degraded write = %v, %v", bad, err)
		}
	}
}

// TestWriterStopsGoroutines: Close and Abort leave no pipeline goroutine
// behind (a storage server opens thousands of writers).
func TestWriterStopsGoroutines(t *testing.T) {
	l := Layout{8, 2, testUnit}
	settle := func(want int) int {
		n := runtime.NumGoroutine()
		for i := 0; i < 200 && n > want; i++ {
			time.Sleep(5 * time.Millisecond)
			n = runtime.NumGoroutine()
		}
		return n
	}
	base := settle(0)
	for _, abort := range []bool{false, true} {
		ws := make([]io.Writer, l.Shards())
		for i := range ws {
			ws[i] = io.Discard
		}
		w, _ := NewWriter(l, ws)
		if runtime.NumGoroutine() < base+l.Shards()+1 {
			t.Fatal("pipeline goroutines not started")
		}
		w.Write(randBytes(3, 3*l.RowSize()+5))
		if abort {
			w.Abort()
		} else if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if n := settle(base); n > base {
			t.Fatalf("abort=%v: %d goroutines left, had %d", abort, n, base)
		}
	}
}

// alignedShard is an AlignedWriter that checks what the Writer hands it
// (an aligned buffer, the lead a shard written from offset 0 has) and
// scribbles over the scratch bytes before the frame, as a direct-I/O
// file does when it copies its pending tail there.
type alignedShard struct {
	t     *testing.T
	buf   bytes.Buffer
	calls int
}

func (a *alignedShard) Write(p []byte) (int, error) { return a.buf.Write(p) }

func (a *alignedShard) WriteFrom(b []byte, lead int) (int, error) {
	a.calls++
	if addr := uintptr(unsafe.Pointer(&b[0])); addr%directio.Align != 0 {
		a.t.Errorf("frame buffer at %#x is not %d-aligned", addr, directio.Align)
	}
	if want := a.buf.Len() % directio.Align; lead != want {
		a.t.Errorf("lead %d, the shard's unaligned tail is %d bytes", lead, want)
	}
	for i := range b[:lead] {
		b[i] = 0xEE
	}
	return a.buf.Write(b[lead:])
}

// TestAlignedShardWriters: shard writers that can write frames from the
// Writer's buffers get every frame that way, at the lead their offset
// needs, and the shards are byte for byte those of plain writers.
func TestAlignedShardWriters(t *testing.T) {
	l := Layout{4, 2, testUnit}
	for _, size := range []int64{1, l.RowSize(), 7*l.RowSize() + 1234} {
		data := randBytes(uint64(size)+5, size)
		want := encode(t, l, data)
		shards := make([]*alignedShard, l.Shards())
		ws := make([]io.Writer, l.Shards())
		for i := range shards {
			shards[i] = &alignedShard{t: t}
			ws[i] = shards[i]
		}
		w, err := NewWriter(l, ws)
		if err != nil {
			t.Fatal(err)
		}
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 3000)
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		for i, s := range shards {
			if s.calls != int(l.Rows(size)) {
				t.Errorf("size %d shard %d: %d frames written from the Writer's buffers, %d rows", size, i, s.calls, l.Rows(size))
			}
			if !bytes.Equal(s.buf.Bytes(), want[i]) {
				t.Fatalf("size %d shard %d: %d bytes differ from a plain writer's %d", size, i, s.buf.Len(), len(want[i]))
			}
		}
	}
}

// failingAligned fails every frame written from the Writer's buffers and
// remembers them.
type failingAligned struct{ seen []*byte }

func (f *failingAligned) Write(p []byte) (int, error) { return 0, errors.New("not used") }
func (f *failingAligned) WriteFrom(b []byte, lead int) (int, error) {
	f.seen = append(f.seen, &b[0])
	return 0, syscall.EIO
}

// TestFailedShardBuffersNotRecycled: a shard write that failed may be
// one a guard stopped waiting for, still running on a hung disk and
// copying into its buffer; the Writer must not hand that buffer out
// again.
func TestFailedShardBuffersNotRecycled(t *testing.T) {
	l := Layout{4, 2, testUnit}
	bad := &failingAligned{}
	ws := make([]io.Writer, l.Shards())
	for i := range ws {
		ws[i] = &alignedShard{t: t}
	}
	ws[5] = bad
	w, err := NewWriter(l, ws)
	if err != nil {
		t.Fatal(err)
	}
	w.SetTolerance(1)
	if _, err := w.Write(randBytes(9, 3*l.RowSize())); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(bad.seen) == 0 {
		t.Fatal("the failing shard was never given a frame")
	}
	pool := bufmem.Aligned(alignedFrameSize(l), directio.Align)
	var got [][]byte
	for range 4 * writeDepth * l.Shards() {
		b := pool.Get()
		got = append(got, b)
		for _, p := range bad.seen {
			if &b[0] == p {
				t.Fatal("a buffer given to a shard write that failed was recycled")
			}
		}
	}
	for _, b := range got {
		pool.Put(b)
	}
}

// TestDataCRC32C: the crc32c the Writer folds from its data frames is
// that of the bytes written so far, in the middle of a row, at row ends
// and after Close, for every test size.
func TestDataCRC32C(t *testing.T) {
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, l := range testLayouts {
		for _, size := range testSizes(l) {
			data := randBytes(uint64(size)+11, size)
			ws := make([]io.Writer, l.Shards())
			for i := range ws {
				ws[i] = io.Discard
			}
			w, err := NewWriter(l, ws)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(size), 3))
			for off := 0; off < len(data); {
				n := min(len(data)-off, 1+rng.IntN(2*l.Unit))
				if rng.IntN(4) == 0 { // up to a row's end
					n = min(len(data)-off, int(l.RowSize())-off%int(l.RowSize()))
				}
				if _, err := w.Write(data[off : off+n]); err != nil {
					t.Fatal(err)
				}
				off += n
				if got, want := w.DataCRC32C(), crc32.Checksum(data[:off], castagnoli); got != want {
					t.Fatalf("%v size %d after %d bytes: %08x want %08x", l, size, off, got, want)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got, want := w.DataCRC32C(), crc32.Checksum(data, castagnoli); got != want {
				t.Fatalf("%v size %d after Close: %08x want %08x", l, size, got, want)
			}
		}
	}
}
