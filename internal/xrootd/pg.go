package xrootd

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
)

// kXR_pgread / kXR_pgwrite: data travels in 4 KiB pages (the first one cut
// at the next page boundary of the file offset), each preceded by its
// CRC32C. Answers use kXR_status, whose 16-byte body carries its own CRC32C
// over the rest of the body and the info that follows (the offset).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	kXR_FinalResult   = 0
	kXR_PartialResult = 1
	kXR_ChkSumErrCode = kXR_ChkSumErr
)

// pageSpan returns the length of the page starting at file offset off with
// at most left bytes remaining.
func pageSpan(off int64, left int) int {
	n := pgPageSize - int(off%pgPageSize)
	if n > left {
		n = left
	}
	return n
}

// unpackPages verifies every page CRC of a pgwrite body and compacts the
// data in place (removing the CRCs); it returns the data, or the file offset
// of the first bad page.
func unpackPages(body []byte, off int64) ([]byte, int64, error) {
	w, r := 0, 0
	cur := off
	for r < len(body) {
		if len(body)-r <= pgCksSize {
			return nil, cur, fmt.Errorf("truncated page at offset %d", cur)
		}
		want := binary.BigEndian.Uint32(body[r:])
		r += pgCksSize
		n := pageSpan(cur, len(body)-r)
		page := body[r : r+n]
		if crc32.Checksum(page, castagnoli) != want {
			return nil, cur, fmt.Errorf("page checksum mismatch at offset %d", cur)
		}
		copy(body[w:], page)
		w += n
		r += n
		cur += int64(n)
	}
	return body[:w], 0, nil
}

// statusHeader builds the 8-byte header, the 16-byte status body and the
// 8-byte offset info of a kXR_status answer to request reqID.
func statusHeader(sid [2]byte, reqID uint16, resptype byte, off int64, bulk int) []byte {
	b := make([]byte, respHeaderLen+statusBodyLen+pgBodyLen)
	respHeader(b, sid, kXR_status, statusBodyLen+pgBodyLen) // bulk is counted in the body's dlen
	s := b[respHeaderLen:]
	copy(s[4:6], sid[:])
	s[6] = byte(reqID - 3000)
	s[7] = resptype
	binary.BigEndian.PutUint32(s[12:16], uint32(bulk))
	binary.BigEndian.PutUint64(s[16:24], uint64(off))
	binary.BigEndian.PutUint32(s[0:4], crc32.Checksum(s[4:24], castagnoli))
	return b
}

// sendRaw writes pre-framed buffers.
func (c *conn) sendRaw(bufs net.Buffers) error {
	n := frameLen(bufs)
	c.answered(bufs) // before writing: the write consumes bufs
	if err := c.write(bufs); err != nil {
		return err
	}
	c.srv.bytesOut.Add(int64(n))
	return nil
}

func (c *conn) doPgwrite(h *reqHeader, body []byte, f *openFile) {
	w := decodePgwrite(h)
	out := c.sess.pathConn(w.PathID, c)
	if !f.write {
		c.sendErr(h.StreamID, kXR_FileNotOpen, "pgwrite "+f.path+": file is not open for writing")
		return
	}
	if w.Offset < 0 {
		c.sendErr(h.StreamID, kXR_ArgInvalid, "pgwrite "+f.path+": negative offset")
		return
	}
	data, _, err := unpackPages(body, w.Offset)
	if err != nil {
		c.sendErr(h.StreamID, kXR_ChkSumErrCode, "pgwrite "+f.path+": "+err.Error())
		return
	}
	if len(data) > 0 {
		if _, err := f.df.WriteAt(data, w.Offset); err != nil {
			c.fail(h.StreamID, "pgwrite", f.path, err)
			return
		}
	}
	out.sendRaw(net.Buffers{statusHeader(h.StreamID, kXR_pgwrite, kXR_FinalResult, w.Offset, 0)})
}

func (c *conn) doPgread(h *reqHeader, body []byte, f *openFile, release func()) {
	r := decodePgread(h, body)
	release()
	if r.Rlen <= 0 || r.Offset < 0 {
		c.sendErr(h.StreamID, kXR_ArgInvalid, "pgread "+f.path+": invalid offset or length")
		return
	}
	out := c.sess.pathConn(r.PathID, c)
	left := int64(r.Rlen)
	chunk := out.ioChunk()
	buf, done, ok := c.ioBuffer(min(left, chunk))
	if !ok {
		return
	}
	defer done()
	crcs := make([]byte, (chunk/pgPageSize+2)*pgCksSize)
	off := r.Offset
	for {
		// Chunks end on page boundaries of the file so every answer but the
		// first starts with a whole page.
		want := min(left, int64(len(buf)))
		if end := (off + want) &^ (pgPageSize - 1); end > off && off+want < r.Offset+int64(r.Rlen) {
			want = end - off
		}
		got, err := readFull(f.df, buf[:want], off)
		if err != nil {
			c.fail(h.StreamID, "pgread", f.path, err)
			return
		}
		last := int64(got) < want || left-int64(got) == 0
		bufs := make(net.Buffers, 1, 2+2*(got/pgPageSize+2))
		bulk := 0
		for p, k, cur := 0, 0, off; p < got; k++ {
			sz := pageSpan(cur, got-p)
			cb := crcs[k*pgCksSize : (k+1)*pgCksSize]
			binary.BigEndian.PutUint32(cb, crc32.Checksum(buf[p:p+sz], castagnoli))
			bufs = append(bufs, cb, buf[p:p+sz])
			bulk += pgCksSize + sz
			p += sz
			cur += int64(sz)
		}
		rt := byte(kXR_PartialResult)
		if last {
			rt = kXR_FinalResult
		}
		bufs[0] = statusHeader(h.StreamID, kXR_pgread, rt, off, bulk)
		if out.sendRaw(bufs) != nil || last {
			return
		}
		left -= int64(got)
		off += int64(got)
	}
}
