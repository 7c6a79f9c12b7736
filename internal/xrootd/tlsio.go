package xrootd

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// The data path over TLS. crypto/tls encrypts each Write in records of at
// most 16 KiB, one write(2) each, and cannot vector: net.Buffers handed to
// a *tls.Conn become one record per buffer (a kXR_pgread answer, a 4-byte
// CRC then a 4 KiB page, would be two records and two system calls per
// page). A TLS connection therefore writes its frames through a 16 KiB
// buffer, so small parts share records and a frame's header rides with
// its data.
//
// Below crypto/tls, the TCP connection is wrapped too (tlsWire): crypto/tls
// hands each sealed record to its own write(2) and reads about one record
// per read(2), so 1 GiB costs some 65,000 system calls each way. tlsWire
// reads ahead tlsReadAhead bytes per call, and while a large frame is being
// written it gathers the frame's records and sends them tlsBatch bytes at a
// time.
//
// Decryption and encryption also touch every byte once more than
// plaintext does, so over TLS the data moves in pieces that stay in the
// CPU cache: read answers are framed in tlsChunk pieces (kXR_oksofar, as
// xrootd frames its answers in 2 MiB pieces), and a kXR_write body larger
// than tlsChunk is copied to the file piece by piece as it is decrypted
// (streamWrite) instead of being decrypted into an 8 MiB buffer that the
// checksums and the disk writer then read back from memory. Measured in
// docs/DESIGN-NOTES.md (TLS data path).

const (
	tlsRecord = 16 << 10  // TLS's largest record payload
	tlsChunk  = 256 << 10 // read answers and write pieces over TLS

	tlsReadAhead = 64 << 10  // tlsWire's read buffer
	tlsBatch     = 256 << 10 // records gathered per write(2) in a large frame
)

// write sends one frame (its buffers in order) under the write lock; a
// failed write kills the connection.
func (c *conn) write(bufs net.Buffers) error {
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	var err error
	if c.bw != nil {
		batch := frameLen(bufs) >= tlsBatch/2
		if batch {
			c.wire.batch()
		}
		for _, b := range bufs {
			if _, err = c.bw.Write(b); err != nil {
				break
			}
		}
		if err == nil {
			err = c.bw.Flush()
		}
		if batch {
			if ferr := c.wire.flush(); err == nil {
				err = ferr
			}
		}
	} else {
		_, err = bufs.WriteTo(c.nc) // writev on a TCP connection
	}
	c.wmu.Unlock()
	if err != nil {
		c.dead.Store(true)
		c.nc.Close()
	}
	return err
}

func frameLen(bufs net.Buffers) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// ioChunk is the largest piece of file data one read answer carries, and
// the piece a streamed write is copied in.
func (c *conn) ioChunk() int64 {
	if c.tlsData.Load() {
		return tlsChunk
	}
	return readChunk
}

// tlsWire is the TCP side of a TLS connection: reads go through a
// read-ahead buffer, and writes between batch and flush are gathered into
// writes of up to tlsBatch bytes. Outside a batch a write goes straight to
// the connection, so handshake and alert records (crypto/tls writes some
// on its own, from the reading goroutine too) are never held back.
type tlsWire struct {
	net.Conn
	r *bufio.Reader

	mu   sync.Mutex
	on   bool   // between batch and flush
	pend []byte // gathered records; a pooled buffer while on
	err  error  // a failed gathered write, reported to every later write
}

func newTLSWire(nc net.Conn) *tlsWire {
	return &tlsWire{Conn: nc, r: bufio.NewReaderSize(nc, tlsReadAhead)}
}

func (w *tlsWire) Read(p []byte) (int, error) { return w.r.Read(p) }

func (w *tlsWire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	if !w.on {
		return w.Conn.Write(p)
	}
	if len(w.pend)+len(p) > tlsBatch {
		if err := w.sendLocked(); err != nil {
			return 0, err
		}
	}
	w.pend = append(w.pend, p...)
	return len(p), nil
}

// batch starts gathering writes.
func (w *tlsWire) batch() {
	w.mu.Lock()
	w.on = true
	if w.pend == nil {
		w.pend = getBuf(tlsBatch)[:0]
	}
	w.mu.Unlock()
}

// flush sends what was gathered and stops gathering.
func (w *tlsWire) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on = false
	err := w.sendLocked()
	putBuf(w.pend)
	w.pend = nil
	return err
}

func (w *tlsWire) sendLocked() error {
	if w.err != nil || len(w.pend) == 0 {
		return w.err
	}
	_, w.err = w.Conn.Write(w.pend)
	w.pend = w.pend[:0]
	return w.err
}
