package checksum

import (
	"slices"
	"testing"
)

var hwSums = map[string]string{
	Adler32: "1e720467", CRC32C: "f0ff7292",
	MD5:    "6f5902ac237024bdd0c176cb93063dc4",
	SHA256: "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447",
}

func TestDigestHeaderValue(t *testing.T) {
	// base64 values computed with: md5sum|xxd -r -p|base64 (same for sha256).
	const md5b64 = "b1kCrCNwJL3QwXbLkwY9xA=="
	const sha256b64 = "qUiQTy8PR5uPgZdpSzAYSw0u0cHNKh7A+4XSmaGSpEc="
	cases := []struct {
		want, got string
		ok        bool
	}{
		{"adler32", "adler32=1e720467", true},
		{"ADLER32", "adler32=1e720467", true},
		{"crc32c", "crc32c=f0ff7292", true},
		{"MD5", "md5=" + md5b64, true},
		{"sha-256", "sha-256=" + sha256b64, true},
		{"SHA256", "sha-256=" + sha256b64, true},
		{"md5;q=0.3, adler32;q=0.9", "adler32=1e720467", true},
		{"adler32;q=0.2,sha-256;q=0.8,md5;q=0.5", "sha-256=" + sha256b64, true},
		{"md5, adler32", "md5=" + md5b64, true}, // equal weight: first listed
		{"UNIXcksum", "", false},
		{"UNIXcksum;q=1, adler32;q=0.1", "adler32=1e720467", true},
		{"sha-512, sha", "", false},
		{"adler32;q=0", "", false},
		{"", "", false},
		{" , ;q=1", "", false},
	}
	for _, c := range cases {
		got, ok := DigestHeaderValue(c.want, hwSums)
		if got != c.got || ok != c.ok {
			t.Errorf("DigestHeaderValue(%q) = %q, %v; want %q, %v", c.want, got, ok, c.got, c.ok)
		}
	}
	// An algorithm we support but did not compute for this file.
	if _, ok := DigestHeaderValue("md5", map[string]string{Adler32: "1e720467"}); ok {
		t.Error("answered md5 without an md5 sum")
	}
}

func TestParseDigestHeaderRoundTrip(t *testing.T) {
	for _, want := range []string{"adler32", "crc32c", "md5", "sha-256"} {
		v, ok := DigestHeaderValue(want, hwSums)
		if !ok {
			t.Fatal(want)
		}
		got := ParseDigestHeader(v)
		typ, _ := digestAlg(want)
		if len(got) != 1 || got[typ] != hwSums[typ] {
			t.Errorf("ParseDigestHeader(%q) = %v", v, got)
		}
	}
}

func TestParseDigestHeaderForms(t *testing.T) {
	got := ParseDigestHeader("ADLER32=1E720467, MD5=6f5902ac237024bdd0c176cb93063dc4,UNIXcksum=123, sha-256=qUiQTy8PR5uPgZdpSzAYSw0u0cHNKh7A+4XSmaGSpEc=, crc32c=bogus")
	if got[Adler32] != hwSums[Adler32] || got[MD5] != hwSums[MD5] || got[SHA256] != hwSums[SHA256] {
		t.Fatalf("got %v", got)
	}
	if _, ok := got[CRC32C]; ok || len(got) != 3 {
		t.Fatalf("kept undecodable or unknown entries: %v", got)
	}
	// RFC 9530 (Repr-Digest): structured-field byte sequences.
	got = ParseDigestHeader("sha-256=:qUiQTy8PR5uPgZdpSzAYSw0u0cHNKh7A+4XSmaGSpEc=:, adler=:HnIEZw==:")
	if got[SHA256] != hwSums[SHA256] || got[Adler32] != hwSums[Adler32] || len(got) != 2 {
		t.Fatalf("Repr-Digest form: %v", got)
	}
	// Leading zeros dropped by some servers.
	if got := ParseDigestHeader("adler32=ab"); got[Adler32] != "000000ab" {
		t.Fatalf("short adler: %v", got)
	}
}

func TestWantedTypes(t *testing.T) {
	cases := map[string][]string{
		"md5;q=0.3, adler32;q=0.9, sha-256;q=0.9": {Adler32, SHA256, MD5},
		"adler32;q=0, UNIXcksum, crc32c":          {CRC32C},
		"md5, MD5":                                {MD5},
		"":                                        {},
	}
	for in, want := range cases {
		if got := WantedTypes(in); !slices.Equal(got, want) {
			t.Errorf("WantedTypes(%q) = %v, want %v", in, got, want)
		}
	}
}
