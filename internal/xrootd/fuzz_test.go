package xrootd

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// frame builds one request frame for seeds.
func frame(req uint16, params []byte, body []byte) []byte {
	b := make([]byte, 24)
	b[1] = 1
	binary.BigEndian.PutUint16(b[2:], req)
	copy(b[4:20], params)
	binary.BigEndian.PutUint32(b[20:], uint32(len(body)))
	return append(b, body...)
}

func seedFrames() [][]byte {
	fh := []byte{0, 0, 0, 1}
	rd := append(append([]byte{}, fh...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0)
	el := append(append([]byte{}, fh...), 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0)
	return [][]byte{
		frame(kXR_login, []byte{0, 0, 0, 1, 'u', 's', 'e', 'r'}, []byte("xrd.cc=us")),
		frame(kXR_stat, nil, []byte("/a/b?x=y")),
		frame(kXR_stat, []byte{kXR_vfs}, []byte("/")),
		frame(kXR_open, []byte{1, 0xa4, 0, 0x22}, []byte("/f?oss.asize=10")),
		frame(kXR_read, rd, []byte{1, 0, 0, 0, 0, 0, 0, 0}),
		frame(kXR_readv, nil, append(el, el...)),
		frame(kXR_write, fh, []byte("data")),
		frame(kXR_pgwrite, fh, []byte{0x12, 0x34, 0x56, 0x78, 'x'}),
		frame(kXR_mv, []byte{13: 0, 14: 0, 15: 2}, []byte("/a /b")),
		frame(kXR_query, []byte{0, kXR_Qconfig}, []byte("readv_iov_max chksum")),
		frame(kXR_dirlist, []byte{15: kXR_dstat}, []byte("/")),
		frame(kXR_truncate, fh, []byte("/%2e%2e/x")),
		frame(kXR_mkdir, []byte{kXR_mkdirpath, 14: 1, 15: 0xed}, []byte("/d/e")),
		frame(kXR_locate, nil, []byte("*/")),
		frame(kXR_bind, bytes.Repeat([]byte{7}, 16), nil),
		{0, 0, 0, 0, 0x0b, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff},
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader and every body
// decoder: none may panic, and no allocation may exceed the frame limit.
func FuzzReadFrame(f *testing.F) {
	for _, s := range seedFrames() {
		f.Add(s)
	}
	f.Add(bytes.Join(seedFrames(), nil))
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var hdr [reqHeaderLen]byte
		for i := 0; i < 64; i++ {
			h, body, err := readFrame(r, hdr[:], limit, func(n int) []byte {
				if n > limit {
					t.Fatalf("allocation of %d beyond limit", n)
				}
				return make([]byte, n)
			})
			if err != nil {
				if err == errFrameTooLarge && h.Dlen >= 0 && int(h.Dlen) <= limit {
					t.Fatalf("frame of %d refused", h.Dlen)
				}
				return
			}
			decodeOpen(&h, body)
			decodeRead(&h, body)
			decodeWrite(&h)
			decodeReadv(body)
			decodeStat(&h, body)
			decodeMkdir(&h, body)
			decodeMv(&h, body)
			decodeQuery(&h, body)
			decodeTruncate(&h, body)
			decodeDirlist(&h, body)
			decodeLocate(&h, body)
			decodeLoginUser(&h)
			decodePgwrite(&h)
			decodePgread(&h, body)
			if p, _, err := splitPath("fuzz", body); err == nil {
				if !bytes.HasPrefix([]byte(p), []byte("/")) || bytes.Contains([]byte(p), []byte("/../")) ||
					bytes.HasSuffix([]byte(p), []byte("/..")) || bytes.IndexByte([]byte(p), 0) >= 0 {
					t.Fatalf("unconfined path %q from %q", p, body)
				}
			}
			cp := append([]byte(nil), body...)
			unpackPages(cp, int64(len(body)))
			checkHandshake(body)
		}
	})
}

func FuzzSplitPath(f *testing.F) {
	for _, s := range []string{"/a/b", "/a/../b", "/%2e%2e/x", "/a?b=c&d", "//x//y/", "/a\x00b", "/%25%32%65"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, _, err := splitPath("fuzz", []byte(s))
		if err != nil {
			return
		}
		if len(p) == 0 || p[0] != '/' || len(p) > maxPathLen {
			t.Fatalf("bad clean path %q", p)
		}
		if p == "/" {
			return
		}
		for _, part := range bytes.Split([]byte(p)[1:], []byte("/")) {
			d := fullyUnescape(string(part))
			if string(part) == ".." || d == ".." || d == "." || len(part) == 0 || len(part) > maxNameLen {
				t.Fatalf("component %q of %q escapes", part, p)
			}
		}
	})
}

// readFrame reads one request as the server does: header, then body. The body length is checked
// against max before any allocation, so a hostile length costs nothing. alloc
// supplies the body buffer (a pool, or make).
func readFrame(r io.Reader, hdr []byte, max int, alloc func(int) []byte) (reqHeader, []byte, error) {
	if _, err := io.ReadFull(r, hdr[:reqHeaderLen]); err != nil {
		return reqHeader{}, nil, err
	}
	h := parseReqHeader(hdr)
	body, err := readBody(r, &h, max, alloc)
	return h, body, err
}
