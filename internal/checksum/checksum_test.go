package checksum

import (
	"bytes"
	"crypto/rand"
	"io"
	"slices"
	"testing"
)

// Expected values were produced by real tools on the same bytes:
// xrdadler32, xrdcrc32c, md5sum, sha256sum and python xxhash.xxh64.
var vectors = []struct {
	name string
	data func() []byte
	sums map[string]string
}{
	{"empty", func() []byte { return nil }, map[string]string{
		Adler32: "00000001", CRC32C: "00000000",
		MD5:      "d41d8cd98f00b204e9800998ecf8427e",
		SHA256:   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		XXHash64: "ef46db3751d8e999"}},
	{"hello world\\n", func() []byte { return []byte("hello world\n") }, map[string]string{
		Adler32: "1e720467", CRC32C: "f0ff7292",
		MD5:      "6f5902ac237024bdd0c176cb93063dc4",
		SHA256:   "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447",
		XXHash64: "5215e13b207d6d8c"}},
	{"3e6 x 'a'", func() []byte { return bytes.Repeat([]byte("a"), 3000000) }, map[string]string{
		Adler32: "debd52f8", CRC32C: "019a6e90",
		MD5:      "99ddc9a3a46ea62c95652bdf937a1fb8",
		SHA256:   "2a152c894398719c0570f83fac34ac03a0f6e8e474b995c2403aa5434f7b9dd4",
		XXHash64: "3448ce532243bcd2"}},
	{"0..255 x 4096", func() []byte {
		b := make([]byte, 256*4096)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}, map[string]string{
		Adler32: "46a47789", CRC32C: "7d25b26d",
		MD5:      "c35cc7d8d91728a0cb052831bc4ef372",
		SHA256:   "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83",
		XXHash64: "44ec7540579dd3f0"}},
}

func TestMultiKnownVectors(t *testing.T) {
	for _, v := range vectors {
		data := v.data()
		// Feed in odd-sized pieces so streaming state is exercised.
		m, err := NewMulti(Types...)
		if err != nil {
			t.Fatal(err)
		}
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 12345)
			m.Write(rest[:n])
			rest = rest[n:]
		}
		got := m.Sums()
		if len(got) != len(Types) {
			t.Fatalf("%s: got %d sums, want %d", v.name, len(got), len(Types))
		}
		for typ, want := range v.sums {
			if got[typ] != want {
				t.Errorf("%s %s: got %s want %s", v.name, typ, got[typ], want)
			}
			one, err := Sum(typ, data)
			if err != nil || one != want {
				t.Errorf("Sum(%s, %s) = %s, %v; want %s", typ, v.name, one, err, want)
			}
		}
		if m.Len() != int64(len(data)) {
			t.Errorf("%s: Len %d want %d", v.name, m.Len(), len(data))
		}
	}
}

func TestCRC32CCheckValue(t *testing.T) {
	// The published CRC-32C check value (RFC 3720 / iSCSI).
	if got := CRC32CSum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("crc32c check value %08x", got)
	}
}

func TestNewMultiDefaultsAndErrors(t *testing.T) {
	m, err := NewMulti()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Types(); !slices.Equal(got, DefaultTypes) {
		t.Fatalf("default types %v", got)
	}
	if _, err := NewMulti("adler32", "whirlpool"); err == nil {
		t.Fatal("unknown type accepted")
	}
	m, _ = NewMulti("md5", "md5")
	if len(m.Sums()) != 1 {
		t.Fatal("duplicate type not collapsed")
	}
	for _, typ := range Types {
		if !Valid(typ) {
			t.Errorf("Valid(%q) false", typ)
		}
	}
	if Valid("ADLER32") || Valid("") || Valid("sha-256") {
		t.Error("Valid accepts a non-canonical name")
	}
}

func TestMultiReset(t *testing.T) {
	m, _ := NewMulti(Adler32, MD5)
	m.Write([]byte("junk"))
	m.Reset()
	m.Write([]byte("hello world\n"))
	if s := m.Sums(); s[Adler32] != "1e720467" || s[MD5] != "6f5902ac237024bdd0c176cb93063dc4" {
		t.Fatalf("after reset: %v", s)
	}
}

func TestMultiIsWriter(t *testing.T) {
	var _ io.Writer = (*Multi)(nil)
	b := make([]byte, 5<<20)
	rand.Read(b)
	m, _ := NewMulti(Adler32)
	io.Copy(m, bytes.NewReader(b))
	want, _ := Sum(Adler32, b)
	if m.Sums()[Adler32] != want {
		t.Fatal("io.Copy through Multi differs from one-shot sum")
	}
}

func TestMultiSplitMatchesSequential(t *testing.T) {
	b := make([]byte, 3*ParallelMin+17)
	rand.Read(b)
	seq, _ := NewMulti(Types...)
	seq.SetParallel(false)
	par, _ := NewMulti(Types...)
	par.SetParallel(true)
	for _, w := range []io.Writer{seq, par} {
		w.Write(b[:ParallelMin])                // split path
		w.Write(b[ParallelMin : ParallelMin+5]) // small path
		w.Write(b[ParallelMin+5:])              // split path
	}
	s, p := seq.Sums(), par.Sums()
	for _, typ := range Types {
		want, _ := Sum(typ, b)
		if s[typ] != want || p[typ] != want {
			t.Errorf("%s: sequential %s split %s want %s", typ, s[typ], p[typ], want)
		}
	}
}

func TestRecompute(t *testing.T) {
	data := []byte("Hello World")
	stored := map[string]string{Adler32: "180b041d", CRC32C: ""}
	v, bad, n, err := Recompute(bytes.NewReader(data), MD5, stored)
	if err != nil || bad != "" || n != int64(len(data)) || v != "b10a8db164e0754105b7a99be72e3fe5" {
		t.Fatalf("Recompute md5 = %q bad %q n %d err %v", v, bad, n, err)
	}
	// Damaged data: the stored adler32 no longer matches and no value is given.
	v, bad, _, err = Recompute(bytes.NewReader([]byte("Hello world")), MD5, stored)
	if err != nil || bad != Adler32 || v != "" {
		t.Fatalf("damaged data: value %q bad %q err %v", v, bad, err)
	}
	if _, _, _, err := Recompute(bytes.NewReader(data), "whirlpool", nil); err == nil {
		t.Fatal("unknown type accepted")
	}
}
