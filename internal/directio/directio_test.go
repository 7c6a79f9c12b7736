package directio

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestWriteReadBack writes sizes around the buffer and alignment edges in
// uneven chunks and reads back exactly what was written, on the test's
// temp dir and on tmpfs.
func TestWriteReadBack(t *testing.T) {
	dirs := []string{t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "directio")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(shm) })
			dirs = append(dirs, shm)
		}
	}
	sizes := []int{0, 1, Align - 1, Align, Align + 1, BufSize - 1, BufSize, BufSize + 1, 3*BufSize + 12345}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dir := range dirs {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			t.Fatal(err)
		}
		for i, size := range sizes {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			p := filepath.Join(dir, fmt.Sprintf("f%d", i))
			f, err := Create(p, 0o600, i%2 == 0)
			if err != nil {
				t.Fatal(err)
			}
			switch fs.Type {
			case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC:
				if !f.Direct() {
					t.Errorf("%s: O_DIRECT not used on a filesystem that supports it", dir)
				}
			}
			for rest := data; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(3*Align+7))
				if rng.IntN(8) == 0 {
					n = min(len(rest), 2*BufSize+1)
				}
				if w, err := f.Write(rest[:n]); err != nil || w != n {
					t.Fatalf("write: %d %v", w, err)
				}
				rest = rest[n:]
			}
			if err := f.Finish(); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s size %d: read back %d bytes, equal %v, err %v", dir, size, len(got), bytes.Equal(got, data), err)
			}
		}
	}
}

// TestCloseWithoutFinish drops buffered bytes and does not leak or hang.
func TestCloseWithoutFinish(t *testing.T) {
	f, err := Create(filepath.Join(t.TempDir(), "f"), 0o600, true)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, BufSize+10))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCreateNeverOverwrites: Create refuses an existing file and leaves
// its bytes alone (a stripe is written once).
func TestCreateNeverOverwrites(t *testing.T) {
	p := filepath.Join(t.TempDir(), "stripe")
	if err := os.WriteFile(p, []byte("committed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := Create(p, 0o600, true); err == nil || !errors.Is(err, os.ErrExist) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("Create over an existing file: %v", err)
	}
	if f, err := CreateBuffered(p, 0o600); err == nil || !errors.Is(err, os.ErrExist) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("CreateBuffered over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "committed" {
		t.Fatalf("existing file changed: %q", b)
	}
}

// TestWriteFromFrames appends frames of an unaligned size the way the
// erasure writer does (frame r at r*size modulo Align into an aligned
// buffer, the bytes before it scratch), with a plain Write and a frame
// at a wrong lead in between, and reads back exactly the frames. On a
// filesystem with O_DIRECT the frames at the right lead are written
// from their buffers: never more than Align bytes are staged after one.
func TestWriteFromFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, size := range []int{Align + 4, 64<<10 + 4, BufSize + 4, 3*BufSize/2 + 4} {
		p := filepath.Join(t.TempDir(), "frames")
		f, err := Create(p, 0o600, false)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		buf := make([]byte, size+2*Align)
		skip := int(-uintptr(unsafe.Pointer(&buf[0])) & (Align - 1))
		buf = buf[skip : skip+size+Align]
		for r := range 7 {
			frame := make([]byte, size)
			for i := range frame {
				frame[i] = byte(rng.Uint32())
			}
			if r == 3 { // an ordinary write in between
				if _, err := f.Write(frame[:100]); err != nil {
					t.Fatal(err)
				}
				want = append(want, frame[:100]...)
			}
			lead := len(want) % Align
			if r == 5 {
				lead = (lead + 8) % Align // a lead that does not match
			}
			for i := range buf[:lead] {
				buf[i] = 0xAA // scratch: must not end up in the file
			}
			copy(buf[lead:], frame)
			n, err := f.WriteFrom(buf[:lead+size], lead)
			if err != nil || n != size {
				t.Fatalf("size %d frame %d: WriteFrom = %d, %v", size, r, n, err)
			}
			want = append(want, frame...)
			if f.Direct() && r != 3 && r != 5 && f.n >= Align {
				t.Fatalf("size %d frame %d: %d bytes staged after WriteFrom at the right lead (copied, not written from the frame)", size, r, f.n)
			}
		}
		if err := f.Finish(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: read back %d bytes, wrote %d, equal %v", size, len(got), len(want), bytes.Equal(got, want))
		}
	}
}
