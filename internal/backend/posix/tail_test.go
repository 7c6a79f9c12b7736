package posix

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/backendtest"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// extension is the head of an append of fid 5 from version from, to a
// stripe of size bytes.
func extension(from uint64, size int64) backend.JournalHead {
	return backend.JournalHead{From: from, Extends: true,
		Meta: backend.Meta{Fid: 5, Layout: "replica:2", Size: size, Path: "/j", Version: from + 1}}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// sidecar is what the sums file of fid 5 says (ok false: none).
func sidecar(t *testing.T, s *Store) (sumsInfo, bool) {
	t.Helper()
	f, err := os.Open(PhysPath(s.root, 5))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, err := sumsOf(f, PhysPath(s.root, 5), false)
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	return x.t, x.side != nil
}

// TestExtensionConvertsOldStripe: a version 2 stripe (sums after its
// data) meeting its first append has its sums moved to its sums file
// and its file cut to its data; the appended bytes go straight into the
// stripe file, past its data, and the journal holds none of them; reads
// see them only once the update applied. A conversion a crash cut short
// (sums file written, trailer still after the data) reads as the stripe
// it was and takes the append.
func TestExtensionConvertsOldStripe(t *testing.T) {
	old := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320 000 bytes: a short last block
	add := bytes.Repeat([]byte("appended "), 50_000)        // 450 000
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash-before-cut=%v", cut), func(t *testing.T) {
			s := journalStore(t, old)
			p := PhysPath(s.root, 5)
			trailer := int64(4*checksum.Blocks(int64(len(old)), checksum.BlockSize) + footerSize)
			if fileSize(t, p) != int64(len(old))+trailer {
				t.Fatalf("a new stripe is %d bytes, want data and trailer (%d)", fileSize(t, p), int64(len(old))+trailer)
			}
			if _, side := sidecar(t, s); side {
				t.Fatal("a new stripe has a sums file")
			}
			if cut {
				// The conversion's first half: the sums file, the trailer kept.
				f, _ := os.Open(p)
				x, err := sumsOf(f, p, false)
				f.Close()
				if err != nil || !x.summed {
					t.Fatal(x, err)
				}
				table := make([]byte, trailer-footerSize)
				f, _ = os.Open(p)
				f.ReadAt(table, int64(len(old)))
				f.Close()
				if err := writeSums(p, x.t, table, func(string) error { return nil }); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(readStripe(t, s, len(old)), old) {
					t.Fatal("a stripe whose conversion stopped half way reads other bytes")
				}
			}
			ops := backend.EncodeWrite(nil, int64(len(old)), add)
			if err := s.Prepare(5, extension(0, int64(len(old)+len(add))), spooled(t, ops, crc32.Checksum(ops, castagnoli))); err != nil {
				t.Fatal(err)
			}
			if got := fileSize(t, p); got != int64(len(old)+len(add)) {
				t.Fatalf("prepared: the stripe file is %d bytes, want its data and the appended bytes (%d)", got, len(old)+len(add))
			}
			if ti, side := sidecar(t, s); !side || ti.len != int64(len(old)) {
				t.Fatalf("prepared: sums file %v of %+v, want one of the old %d bytes", side, ti, len(old))
			}
			if j := fileSize(t, journalPath(s.root, 5)); j > 4096 {
				t.Fatalf("the journal of an append is %d bytes: it holds data", j)
			}
			if !bytes.Equal(readStripe(t, s, len(old)), old) {
				t.Fatal("prepared: reads show the appended bytes before the update applied")
			}
			if h, err := s.Prepared(5); err != nil || !h.Extends || h.Meta.Version != 1 {
				t.Fatalf("Prepared = %+v, %v", h, err)
			}
			if err := s.Apply(5); err != nil {
				t.Fatal(err)
			}
			want := append(bytes.Clone(old), add...)
			if !bytes.Equal(readStripe(t, s, len(want)), want) {
				t.Fatal("applied: the stripe does not hold the old bytes and the appended ones")
			}
			if ti, _ := sidecar(t, s); ti.len != int64(len(want)) || fileSize(t, p) != int64(len(want)) {
				t.Fatalf("applied: sums of %d bytes, file of %d; want %d", ti.len, fileSize(t, p), len(want))
			}
			if m, err := s.ReadMeta(5); err != nil || m.Version != 1 || m.Size != int64(len(want)) {
				t.Fatalf("applied: %+v %v", m, err)
			}
			// Every block verifies: rot in the old short block, summed
			// again with the appended bytes, is found.
			flipByte(t, p, 319_999)
			r, _ := s.Open(5)
			_, err := r.ReadAt(make([]byte, len(want)), 0)
			r.Close()
			if _, ok := checksum.AsBlockError(err); !ok {
				t.Fatalf("rot in the old last block after the append: %v, want a block error", err)
			}
		})
	}
}

// TestExtensionRefusesRotAndNonAppends: the old short last block is
// verified before an append sums it again (rot in it fails the prepare,
// the stripe as it was), an append from a spool whose bytes do not
// match the sum taken as it was written is refused, and an update that
// calls itself an extension but writes below the end is refused.
func TestExtensionRefusesRotAndNonAppends(t *testing.T) {
	old := bytes.Repeat([]byte("x"), 100_000)
	s := journalStore(t, old)
	app := backend.EncodeWrite(nil, 100_000, []byte("appended from a spool"))
	if err := s.Prepare(5, extension(0, 100_021), spooled(t, app, crc32.Checksum(app, castagnoli)^1)); !kerr.Is(err, kerr.IO) {
		t.Fatalf("an append from a spool that changed: %v, want kerr.IO", err)
	}
	if _, err := s.Prepared(5); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("a refused append left a journal: %v", err)
	}
	if !bytes.Equal(readStripe(t, s, len(old)), old) {
		t.Fatal("a refused append changed what the stripe reads")
	}
	ops := backend.EncodeWrite(nil, 99_999, []byte("below the end"))
	if err := s.Prepare(5, extension(0, 100_012), bytes.NewReader(ops)); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("an extension writing below the end: %v, want kerr.Invalid", err)
	}
	flipByte(t, PhysPath(s.root, 5), 70_000)
	ops = backend.EncodeWrite(nil, 100_000, []byte("appended"))
	err := s.Prepare(5, extension(0, 100_008), bytes.NewReader(ops))
	if _, ok := checksum.AsBlockError(err); !ok || !kerr.Is(err, kerr.IO) {
		t.Fatalf("an append over a rotten last block: %v, want kerr.IO with a block error", err)
	}
	if _, err := s.Prepared(5); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("a refused append left a journal: %v", err)
	}
}

// TestExtensionCrashSteps: a crash after the appended bytes are written
// and before the journal leaves a tail no read sees, which a Discard, a
// later append or a later update cuts; a crash in the apply (after the
// new sums file is written, after it is renamed) replays to the update.
func TestExtensionCrashSteps(t *testing.T) {
	old := bytes.Repeat([]byte("o"), 200_000)
	s := journalStore(t, old)
	p := PhysPath(s.root, 5)
	add := bytes.Repeat([]byte("t"), 150_000)
	ops := backend.EncodeWrite(nil, int64(len(old)), add)
	crashPrepare := func() {
		t.Helper()
		s.crashAt = "tail"
		err := s.Prepare(5, extension(0, int64(len(old)+len(add))), bytes.NewReader(ops))
		s.crashAt = ""
		if !errors.Is(err, errCrash) {
			t.Fatalf("Prepare stopped at its tail: %v, want the crash", err)
		}
		if _, err := s.Prepared(5); !kerr.Is(err, kerr.NotFound) {
			t.Fatalf("a prepare that crashed before its journal left one: %v", err)
		}
		if fileSize(t, p) != int64(len(old)+len(add)) {
			t.Fatalf("the crashed prepare left no tail (%d bytes)", fileSize(t, p))
		}
		if !bytes.Equal(readStripe(t, s, len(old)), old) {
			t.Fatal("a tail is read")
		}
	}
	crashPrepare()
	if err := s.Discard(5); err != nil {
		t.Fatal(err)
	}
	if fileSize(t, p) != int64(len(old)) {
		t.Fatalf("Discard left the tail: %d bytes", fileSize(t, p))
	}
	// A write inside (the journal path) over a stripe with a tail.
	crashPrepare()
	in := backend.EncodeWrite(nil, 1000, []byte("inside"))
	h := extension(0, int64(len(old)))
	h.Extends = false
	if err := s.Prepare(5, h, bytes.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(5); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(old)
	copy(want[1000:], "inside")
	if !bytes.Equal(readStripe(t, s, len(want)), want) || fileSize(t, p) != int64(len(want)) {
		t.Fatalf("a write inside over a tail: %d bytes on disk", fileSize(t, p))
	}
	// The apply of an append, crashed at each of its steps, then replayed.
	for _, step := range []string{"sums", "footer"} {
		s.crashAt = step
		err := s.Prepare(5, extension(1, int64(len(want)+len(add))), bytes.NewReader(backend.EncodeWrite(nil, int64(len(want)), add)))
		if err == nil {
			err = s.Apply(5)
		}
		s.crashAt = ""
		if !errors.Is(err, errCrash) {
			t.Fatalf("Apply stopped at %s: %v, want the crash", step, err)
		}
		if m, _ := s.ReadMeta(5); m.Version != 1 {
			t.Fatalf("crash at %s: version %d", step, m.Version)
		}
		if err := s.Apply(5); err != nil {
			t.Fatalf("replay after a crash at %s: %v", step, err)
		}
		next := append(bytes.Clone(want), add...)
		if !bytes.Equal(readStripe(t, s, len(next)), next) {
			t.Fatalf("replay after a crash at %s: other bytes", step)
		}
		if m, _ := s.ReadMeta(5); m.Version != 2 {
			t.Fatalf("replay after a crash at %s: version %d", step, m.Version)
		}
		// Back to version 1 for the next step: a stripe of want.
		s = journalStore(t, old)
		p = PhysPath(s.root, 5)
		h := extension(0, int64(len(want)))
		h.Extends = false
		if err := s.Prepare(5, h, bytes.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(5); err != nil {
			t.Fatal(err)
		}
	}
}

// appendChild, set in the environment, makes TestAppendsKilled's binary
// the process that appends (and gets killed): the store's root.
const appendChild = "KAON_POSIX_APPEND_CHILD"

// appendPiece is the k-th append of TestAppendsKilled: some appends leave
// a hole before their bytes.
func appendPiece(k int) (hole int64, data []byte) {
	r := rand.New(rand.NewPCG(uint64(k), 99))
	data = make([]byte, 1+r.IntN(300_000))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if k%5 == 3 {
		hole = int64(r.IntN(100_000))
	}
	return hole, data
}

// appendModel is the stripe after n appends to old.
func appendModel(old []byte, n int) []byte {
	b := bytes.Clone(old)
	for k := range n {
		hole, data := appendPiece(k)
		b = append(append(b, make([]byte, hole)...), data...)
	}
	return b
}

// TestAppendsKilled: a process appending to a stripe (prepare, apply,
// then "acknowledged k" on its output, as a storage server answers a
// commit) is killed with SIGKILL at a random point; the stripe must hold
// the content of the last acknowledged append or of the one after (its
// apply done, its answer lost), verifying block by block; a journal left
// takes it one further when applied and leaves it when discarded. Then
// the stripe file is cut inside what the unfinished append wrote past
// the end (bytes a power loss did not keep): a journal over them refuses
// to apply, and the stripe still reads as it was.
func TestAppendsKilled(t *testing.T) {
	if root := os.Getenv(appendChild); root != "" {
		runAppender(root)
		return
	}
	old := bytes.Repeat([]byte("base"), 30_000)
	for round, after := range []int{1, 4, 9} {
		t.Run(fmt.Sprintf("kill-after-%d", after), func(t *testing.T) {
			s := journalStore(t, old)
			cmd := exec.Command(os.Args[0], "-test.run=^TestAppendsKilled$", "-test.count=1")
			cmd.Env = append(os.Environ(), appendChild+"="+s.root)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			acked := 0
			lines := make(chan string)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			deadline := time.After(2 * time.Minute)
			for acked < after {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("the appender ended after %d acknowledged appends", acked)
					}
					if n, ok := strings.CutPrefix(l, "acknowledged "); ok {
						acked, _ = strconv.Atoi(n)
					}
				case <-deadline:
					cmd.Process.Kill()
					t.Fatalf("the appender acknowledged %d appends in 2 minutes, waiting for %d", acked, after)
				}
			}
			// Somewhere in the next appends.
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			cmd.Process.Kill()
			for l := range lines {
				if n, ok := strings.CutPrefix(l, "acknowledged "); ok {
					acked, _ = strconv.Atoi(n)
				}
			}
			cmd.Wait()

			s = New(s.root, Options{IO: backend.IOBuffered})
			m, err := s.ReadMeta(5)
			if err != nil {
				t.Fatal(err)
			}
			v := int(m.Version)
			if v != acked && v != acked+1 {
				t.Fatalf("%d appends acknowledged, the stripe is at version %d", acked, v)
			}
			h, jerr := s.Prepared(5)
			p := PhysPath(s.root, 5)
			applied := jerr == nil && h.Meta.Version == uint64(v) // killed before the journal's removal
			if jerr == nil && !applied && (h.From != uint64(v) || h.Meta.Version != uint64(v+1)) {
				t.Fatalf("a journal from %d to %d beside a stripe at %d", h.From, h.Meta.Version, v)
			}
			// The stripe holds its version's bytes, or, killed in the
			// apply after the new sums file and before the version, the
			// next one's: a stripe whose journal the namespace recorded
			// (an apply runs only then), which rolls forward, never back.
			want := appendModel(old, v)
			r, err := s.Open(5)
			if err != nil {
				t.Fatal(err)
			}
			size := r.Size()
			r.Close()
			halfway := jerr == nil && !applied && size != int64(len(want))
			if halfway {
				want = appendModel(old, v+1)
			}
			if !bytes.Equal(readStripe(t, s, len(want)), want) {
				t.Fatalf("the stripe at version %d (%d acknowledged, journal %v) holds neither that version's bytes nor the next one's", v, acked, jerr == nil)
			}
			t.Logf("killed: %d acknowledged, stripe at %d, journal %v, file %d bytes, data %d", acked, v, jerr == nil, fileSize(t, p), len(want))
			ti, _ := sidecar(t, s)
			if size := fileSize(t, p); size > ti.len {
				// The unfinished append's bytes, cut as a power loss may.
				if err := os.Truncate(p, ti.len+(size-ti.len)/2); err != nil {
					t.Fatal(err)
				}
				if jerr == nil {
					if err := s.Apply(5); !kerr.Is(err, kerr.IO) {
						t.Fatalf("a journal over appended bytes that were cut: Apply %v, want kerr.IO", err)
					}
					jerr = kerr.New(kerr.NotFound, "", "", "dropped")
				}
			}
			switch {
			case jerr != nil:
				// No journal: the stripe as it is, and it takes the next append.
			case applied:
				if err := s.Apply(5); err != nil {
					t.Fatalf("Apply of a journal applied before the kill: %v", err)
				}
			case halfway || round%2 == 0:
				if err := s.Apply(5); err != nil {
					t.Fatal(err)
				}
				v++
			default:
				if err := s.Discard(5); err != nil {
					t.Fatal(err)
				}
			}
			want = appendModel(old, v)
			if !bytes.Equal(readStripe(t, s, len(want)), want) {
				t.Fatalf("after the journal's fate: the stripe at %d does not hold that version's bytes", v)
			}
			hole, data := appendPiece(v)
			ops := backend.EncodeWrite(nil, int64(len(want))+hole, data)
			size = int64(len(want)) + hole + int64(len(data))
			if err := s.Prepare(5, extension(uint64(v), size), bytes.NewReader(ops)); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(5); err != nil {
				t.Fatal(err)
			}
			want = appendModel(old, v+1)
			if !bytes.Equal(readStripe(t, s, len(want)), want) || fileSize(t, p) != int64(len(want)) {
				t.Fatal("the append after the crash does not read back")
			}
		})
	}
}

// runAppender appends to stripe 5 under root until it is killed.
func runAppender(root string) {
	s := New(root, Options{IO: backend.IOBuffered})
	m, err := s.ReadMeta(5)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	size := m.Size
	for k := 0; k < 10_000; k++ {
		hole, data := appendPiece(k)
		ops := backend.EncodeWrite(nil, size+hole, data)
		size += hole + int64(len(data))
		if err := s.Prepare(5, extension(uint64(k), size), bytes.NewReader(ops)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := s.Apply(5); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("acknowledged %d\n", k+1)
	}
	os.Exit(0)
}

// TestJournalOverSumsFileCrashReplay: an update through the journal of a
// stripe whose sums are in its sums file (appended to before), crashed
// at each step of its apply and then at each later one on the replays,
// replays to the update's bytes with sums that verify them and find rot
// in what it wrote.
func TestJournalOverSumsFileCrashReplay(t *testing.T) {
	old := bytes.Repeat([]byte("sidecar "), 40_000) // 320 000
	add := bytes.Repeat([]byte("+"), 100_000)
	var ops []byte
	ops = backend.EncodeWrite(ops, 70_000, bytes.Repeat([]byte("w"), 100))
	ops = backend.EncodeWrite(ops, 131_072, bytes.Repeat([]byte("b"), 65_536))
	ops = backend.EncodeTruncate(ops, 262_144)
	ops = backend.EncodeWrite(ops, 400_000, bytes.Repeat([]byte("h"), 5000))
	steps := []string{"cut", "data", "sums", "footer"}
	for i, step := range steps {
		s := journalStore(t, old)
		p := PhysPath(s.root, 5)
		app := backend.EncodeWrite(nil, int64(len(old)), add)
		if err := s.Prepare(5, extension(0, int64(len(old)+len(add))), bytes.NewReader(app)); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(5); err != nil {
			t.Fatal(err)
		}
		want := &backendtest.Model{B: append(bytes.Clone(old), add...)}
		if err := backend.ReplayOps(bytes.NewReader(ops), want); err != nil {
			t.Fatal(err)
		}
		h := extension(1, int64(len(want.B)))
		h.Extends = false
		if err := s.Prepare(5, h, bytes.NewReader(ops)); err != nil {
			t.Fatal(err)
		}
		for _, at := range steps[i:] {
			s.crashAt = at
			err := s.Apply(5)
			s.crashAt = ""
			if !errors.Is(err, errCrash) {
				t.Fatalf("Apply stopped at %s: %v, want the crash", at, err)
			}
			if m, _ := s.ReadMeta(5); m.Version != 1 {
				t.Fatalf("crash at %s: version %d before the apply finished", at, m.Version)
			}
		}
		if err := s.Apply(5); err != nil {
			t.Fatalf("replay after a crash at %s: %v", step, err)
		}
		if !bytes.Equal(readStripe(t, s, len(want.B)), want.B) {
			t.Fatalf("replay after a crash at %s: other bytes", step)
		}
		if ti, side := sidecar(t, s); !side || ti.len != int64(len(want.B)) {
			t.Fatalf("replay after a crash at %s: sums file %v of %d bytes", step, side, ti.len)
		}
		flipByte(t, p, 400_100)
		r, _ := s.Open(5)
		_, err := r.ReadAt(make([]byte, len(want.B)), 0)
		r.Close()
		if _, ok := checksum.AsBlockError(err); !ok {
			t.Fatalf("replay after a crash at %s: rot in written bytes read as %v, want a block error", step, err)
		}
	}
}

// BenchmarkAppendCommit: Prepare and Apply of one commit of 32 appends
// of 1 MiB to a 64 MiB replica, from a spool (as a local session's),
// written straight into the stripe (extension) or through the journal,
// on the disk under $TMPDIR (go test -bench AppendCommit -benchtime 10x).
func BenchmarkAppendCommit(b *testing.B) {
	for _, ext := range []bool{true, false} {
		b.Run(fmt.Sprintf("extension=%v", ext), func(b *testing.B) {
			s := New(b.TempDir()+"/fs", Options{IO: backend.IOBuffered, Sync: true})
			if err := s.Initialize(backend.Identity{FsID: 1, UUID: "bench"}); err != nil {
				b.Fatal(err)
			}
			w, err := s.Create(5, backend.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			w.Write(make([]byte, 64<<20))
			size := int64(64 << 20)
			if err := w.Finish(backend.Meta{Fid: 5, Layout: "replica:2", Size: size}); err != nil {
				b.Fatal(err)
			}
			piece := bytes.Repeat([]byte("a"), 1<<20)
			b.SetBytes(32 << 20)
			for i := 0; i < b.N; i++ {
				var ops []byte
				for range 32 {
					ops = backend.EncodeWrite(ops, size, piece)
					size += 1 << 20
				}
				so := &backend.SpooledOps{N: int64(len(ops)), CRC: crc32.Checksum(ops, castagnoli)}
				f, err := os.CreateTemp(b.TempDir(), "spool")
				if err != nil {
					b.Fatal(err)
				}
				f.Write(ops)
				so.F = f
				h := backend.JournalHead{From: uint64(i), Extends: ext,
					Meta: backend.Meta{Fid: 5, Layout: "replica:2", Size: size, Version: uint64(i + 1)}}
				if err := s.Prepare(5, h, so); err != nil {
					b.Fatal(err)
				}
				if err := s.Apply(5); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// TestSumsFileGoesWithTheStripe: Remove takes an appended stripe's sums
// file with it, and a stripe created again under a fid whose old sums
// file a crash left (Remove stopped between the two) reads as itself,
// not through the old sums.
func TestSumsFileGoesWithTheStripe(t *testing.T) {
	old := bytes.Repeat([]byte("r"), 100_000)
	s := journalStore(t, old)
	p := PhysPath(s.root, 5)
	ops := backend.EncodeWrite(nil, 100_000, []byte("appended"))
	if err := s.Prepare(5, extension(0, 100_008), bytes.NewReader(ops)); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(5); err != nil {
		t.Fatal(err)
	}
	side, err := os.ReadFile(p + ".sums")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(5); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + ".sums"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove left the sums file: %v", err)
	}
	if err := os.WriteFile(p+".sums", side, 0o600); err != nil { // as a crash in Remove leaves it
		t.Fatal(err)
	}
	again := bytes.Repeat([]byte("n"), 70_000)
	w, err := s.Create(5, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(again)
	if err := w.Finish(backend.Meta{Fid: 5, Layout: "replica:2", Size: 70_000}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readStripe(t, s, len(again)), again) {
		t.Fatal("a stripe created again reads through the old sums file")
	}
}
