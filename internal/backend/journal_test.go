package backend

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

type buf struct{ b []byte }

func (m *buf) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *buf) Truncate(size int64) error {
	if size <= int64(len(m.b)) {
		m.b = m.b[:size]
	} else {
		m.b = append(m.b, make([]byte, size-int64(len(m.b)))...)
	}
	return nil
}

// TestReplayAfterPartialApply: a journal replayed whole over a stripe a
// crash left partly updated (any prefix of its operations applied) ends
// exactly as one replay over the untouched stripe does, so rolling a
// journal forward again after a crash is always right.
func TestReplayAfterPartialApply(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		base := make([]byte, r.IntN(3000))
		for i := range base {
			base[i] = byte(r.Uint32())
		}
		var ops [][]byte
		for n := r.IntN(12); len(ops) < n; {
			if r.IntN(4) == 0 {
				ops = append(ops, EncodeTruncate(nil, int64(r.IntN(4000))))
				continue
			}
			p := make([]byte, 1+r.IntN(500))
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			ops = append(ops, EncodeWrite(nil, int64(r.IntN(4000)), p))
		}
		all := bytes.Join(ops, nil)
		want := &buf{b: bytes.Clone(base)}
		if err := ReplayOps(bytes.NewReader(all), want); err != nil {
			t.Fatal(err)
		}
		for k := 0; k <= len(ops); k++ {
			got := &buf{b: bytes.Clone(base)}
			if err := ReplayOps(bytes.NewReader(bytes.Join(ops[:k], nil)), got); err != nil {
				t.Fatal(err)
			}
			if err := ReplayOps(bytes.NewReader(all), got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.b, want.b) {
				t.Fatalf("round %d: %d operations applied, then all: %d bytes, one replay %d", round, k, len(got.b), len(want.b))
			}
		}
	}
}

// TestReplayRefusesDamage: a journal cut off inside an operation or with
// an unknown one is an error, never a shorter update.
func TestReplayRefusesDamage(t *testing.T) {
	ops := EncodeWrite(nil, 5, []byte("hello"))
	for _, bad := range [][]byte{ops[:len(ops)-1], ops[:5], append(bytes.Clone(ops), 'X'), EncodeTruncate(nil, 9)[:4]} {
		if err := ReplayOps(bytes.NewReader(bad), &buf{}); err == nil {
			t.Errorf("replay of %q succeeded", bad)
		}
	}
}
