package cluster

import (
	"errors"
	"github.com/kaon-storage/kaon/internal/bufmem"
	"io"
	"net/http"
	"time"
)

// ServeContent answers r with the size bytes of rd as http.ServeContent
// does (ranges, multipart ranges, conditional requests), for a reader
// that verifies what it returns and may refuse a range (a block failing
// its checksum on every copy, a copy gone): no byte it refused is sent.
// The answer's status line waits for the first bytes of the body, so a
// read that fails before any byte went out is answered with the error's
// status instead; one that fails later aborts the answer
// (http.ErrAbortHandler: the connection is closed, or the HTTP/2 stream
// reset), so the client sees a body cut off, never a clean end. Bodies go
// out in 1 MiB pieces, each read whole before it is written. Both the
// client data endpoint (httpfront) and the stripe endpoint between
// storage servers use it.
func ServeContent(w http.ResponseWriter, r *http.Request, rd io.ReaderAt, size int64) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/octet-stream") // no sniffing read
	}
	dw := &deferredWriter{w: w}
	src := &failingReader{r: rd, size: size}
	http.ServeContent(dw, r, "", time.Time{}, src)
	switch {
	case src.err == nil:
		dw.send()
	case !dw.sent:
		h := w.Header()
		for _, k := range []string{"Content-Length", "Content-Range", "Content-Type", "Accept-Ranges", "Etag"} {
			h.Del(k)
		}
		WriteError(w, src.err)
	default:
		panic(http.ErrAbortHandler)
	}
}

// failingReader is rd as the io.ReadSeeker http.ServeContent reads,
// remembering the first error a read met.
type failingReader struct {
	r    io.ReaderAt
	size int64
	off  int64
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.off >= f.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), f.size-f.off)]
	n, err := f.r.ReadAt(p, f.off)
	f.off += int64(n)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		f.err = err
	}
	return n, err
}

func (f *failingReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += f.off
	case io.SeekEnd:
		off += f.size
	default:
		return 0, errors.New("bad whence")
	}
	if off < 0 {
		return 0, errors.New("negative position")
	}
	f.off = off
	return off, nil
}

// deferredWriter holds back the status until the first body bytes (or
// the end of the handler, send) are written.
type deferredWriter struct {
	w    http.ResponseWriter
	code int
	sent bool
}

func (d *deferredWriter) Header() http.Header { return d.w.Header() }

func (d *deferredWriter) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

func (d *deferredWriter) send() {
	if !d.sent {
		d.sent = true
		if d.code != 0 {
			d.w.WriteHeader(d.code)
		}
	}
}

func (d *deferredWriter) Write(p []byte) (int, error) {
	d.send()
	return d.w.Write(p)
}

// ReadFrom copies r in pieces of a whole buffer: each is read (and
// verified) before any of it is written.
func (d *deferredWriter) ReadFrom(r io.Reader) (int64, error) {
	piece := servePieces.Get()
	defer servePieces.Put(piece)
	var n int64
	for {
		m, err := io.ReadFull(r, piece)
		if m > 0 {
			if _, werr := d.Write(piece[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return n, nil // the end of a LimitReader, or of the content
		default:
			return n, err
		}
	}
}

// servePieces are the pieces verified reads are served in (1 MiB; the
// storage server counts one per verified stream in its budget).
var servePieces = bufmem.Sized(1 << 20)
