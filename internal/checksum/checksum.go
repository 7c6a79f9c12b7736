// Package checksum computes file checksums while bytes stream and speaks
// the HTTP digest headers (RFC 3230 Want-Digest/Digest, as used by XRootD,
// davix and gfal).
//
// Values are lowercase hex. adler32 and crc32c are 8 hex digits of the
// big-endian 32-bit value, exactly as xrdadler32 and xrdcp print them;
// xxhash64 is 16 hex digits of the big-endian 64-bit value.
package checksum

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"io"
	"runtime"
	"sort"

	"github.com/cespare/xxhash/v2"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Checksum type names, as stored in the namespace and shown to users.
const (
	Adler32  = "adler32"
	CRC32C   = "crc32c"
	MD5      = "md5"
	SHA256   = "sha256"
	XXHash64 = "xxhash64"
)

// Types lists every supported type.
var Types = []string{Adler32, CRC32C, MD5, SHA256, XXHash64}

// DefaultTypes is the set computed while writing unless a directory asks
// for others: the cheap ones (0.3 ms of CPU per MB together). md5 and
// sha256 cost 2 ms per MB more and are computed on request instead.
var DefaultTypes = []string{Adler32, CRC32C}

// Valid reports whether name is a supported checksum type.
func Valid(name string) bool {
	switch name {
	case Adler32, CRC32C, MD5, SHA256, XXHash64:
		return true
	}
	return false
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// New returns a fresh hash for a checksum type.
func New(name string) (hash.Hash, error) {
	switch name {
	case Adler32:
		return newAdler32(), nil
	case CRC32C:
		return crc32.New(castagnoli), nil
	case MD5:
		return md5.New(), nil
	case SHA256:
		return sha256.New(), nil
	case XXHash64:
		return xxhash.New(), nil
	}
	return nil, kerr.New(kerr.Invalid, "checksum", name, "unknown checksum type")
}

// CRC32CSum returns the Castagnoli CRC of b (hardware accelerated).
func CRC32CSum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Multi feeds every configured hash from one Write. It is not safe for
// concurrent use.
//
// Large writes are hashed on up to two goroutines: the hashes are split
// into two groups of about equal cost (md5 alone versus the rest for the
// default set), which nearly doubles one stream's rate (md5 is the
// bottleneck) and measured no loss with every core busy
// (BenchmarkMultiParallel). Small writes stay on the caller's goroutine,
// where the hand-off would cost more than it saves.
type Multi struct {
	names    []string
	hashes   []hash.Hash
	groups   [][]hash.Hash // groups[0] runs on the caller
	parallel bool
	n        int64
}

// ParallelMin is the smallest Write that Multi splits across goroutines.
const ParallelMin = 128 << 10

// cost is the measured single-core time per byte (ns, AMD EPYC, 1 MiB
// writes), used only to balance the groups.
var cost = map[string]float64{MD5: 1.35, SHA256: 0.6, Adler32: 0.35, XXHash64: 0.1, CRC32C: 0.05}

// NewMulti builds a Multi for the given types (DefaultTypes when none are
// given). Duplicates are ignored.
func NewMulti(types ...string) (*Multi, error) {
	if len(types) == 0 {
		types = DefaultTypes
	}
	m := &Multi{parallel: runtime.GOMAXPROCS(0) > 1}
	seen := map[string]bool{}
	for _, t := range types {
		if seen[t] {
			continue
		}
		seen[t] = true
		h, err := New(t)
		if err != nil {
			return nil, err
		}
		m.names = append(m.names, t)
		m.hashes = append(m.hashes, h)
	}
	// Longest-first greedy split into two groups.
	order := make([]int, len(m.hashes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cost[m.names[order[a]]] > cost[m.names[order[b]]] })
	var load [2]float64
	m.groups = make([][]hash.Hash, 2)
	for _, i := range order {
		g := 0
		if load[1] < load[0] {
			g = 1
		}
		load[g] += cost[m.names[i]]
		m.groups[g] = append(m.groups[g], m.hashes[i])
	}
	if len(m.groups[1]) == 0 {
		m.parallel = false
	}
	return m, nil
}

// SetParallel enables or disables hashing large writes on two goroutines.
func (m *Multi) SetParallel(on bool) { m.parallel = on && len(m.groups[1]) > 0 }

// Write feeds p to every hash. It never fails.
func (m *Multi) Write(p []byte) (int, error) {
	if m.parallel && len(p) >= ParallelMin {
		done := make(chan struct{})
		go func() {
			for _, h := range m.groups[1] {
				h.Write(p)
			}
			close(done)
		}()
		for _, h := range m.groups[0] {
			h.Write(p)
		}
		<-done
	} else {
		for _, h := range m.hashes {
			h.Write(p)
		}
	}
	m.n += int64(len(p))
	return len(p), nil
}

// Len returns the number of bytes written so far.
func (m *Multi) Len() int64 { return m.n }

// Types returns the configured types in order.
func (m *Multi) Types() []string { return append([]string(nil), m.names...) }

// Sums returns the lowercase hex value per type for the bytes so far.
func (m *Multi) Sums() map[string]string {
	out := make(map[string]string, len(m.hashes))
	for i, h := range m.hashes {
		out[m.names[i]] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

// Reset forgets all bytes written.
func (m *Multi) Reset() {
	for _, h := range m.hashes {
		h.Reset()
	}
	m.n = 0
}

// Sum computes one checksum of b in hex (a convenience for tests and
// small buffers).
func Sum(name string, b []byte) (string, error) {
	h, err := New(name)
	if err != nil {
		return "", err
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SortedTypes returns the keys of sums in a stable order (for printing).
func SortedTypes(sums map[string]string) []string {
	ks := make([]string, 0, len(sums))
	for k := range sums {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Recompute reads r to its end and returns the value of typ, recomputing
// every type in stored on the way. bad names a stored type whose recorded
// value no longer matches the data (the data is damaged and value must not
// be trusted); n is the number of bytes read.
func Recompute(r io.Reader, typ string, stored map[string]string) (value, bad string, n int64, err error) {
	types := []string{typ}
	for _, t := range SortedTypes(stored) {
		if stored[t] != "" && t != typ {
			types = append(types, t)
		}
	}
	m, err := NewMulti(types...)
	if err != nil {
		return "", "", 0, err
	}
	// Large reads let Multi hash on two cores (see ParallelMin).
	if n, err = io.CopyBuffer(m, struct{ io.Reader }{r}, make([]byte, 1<<20)); err != nil {
		return "", "", n, err
	}
	got := m.Sums()
	for _, t := range types[1:] {
		if got[t] != stored[t] {
			return "", t, n, nil
		}
	}
	return got[typ], "", n, nil
}

// EmptySum is the checksum of zero bytes for type t ("" for an unknown
// type).
func EmptySum(t string) string {
	m, err := NewMulti(t)
	if err != nil {
		return ""
	}
	return m.Sums()[t]
}
