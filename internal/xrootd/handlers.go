package xrootd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// dispatch handles one request, by family: session setup (setup) runs
// inline on the reader goroutine, as it changes connection state; the
// requests on an open file (onHandle) and those naming a path (onPath)
// run concurrently, each holding an inflight slot. It returns false when
// the connection must be dropped.
func (c *conn) dispatch(h *reqHeader, body []byte, release func()) bool {
	if isSetup(h.ReqID) {
		defer release()
		return c.setup(h, body)
	}
	if why := c.refusal(); why != "" {
		release()
		return c.sendErr(h.StreamID, kXR_NotAuthorized, reqName(h.ReqID)+": "+why) == nil
	}
	// Take the inflight slot before pinning any handle: an operation that
	// close/sync may wait for is then always one that can run, so a client
	// cannot wedge its connection by filling the slots with waiters.
	s := c.takeSlot()
	defer s.giveBack()
	hh := *h
	if handled, ok := c.onHandle(&hh, body, release, s); handled {
		return ok
	}
	s.spawn(func() {
		defer release()
		c.onPath(&hh, body)
	})
	return true
}

// isSetup says whether request id sets the session up.
func isSetup(id uint16) bool {
	switch id {
	case kXR_protocol, kXR_login, kXR_bind, kXR_ping, kXR_endsess, kXR_auth:
		return true
	}
	return false
}

// setup serves a session-setup request.
func (c *conn) setup(h *reqHeader, body []byte) bool {
	switch h.ReqID {
	case kXR_protocol:
		return c.doProtocol(h) == nil
	case kXR_login:
		c.loginPID = decodeLoginPID(h)
		return c.doLogin(h, body)
	case kXR_bind:
		return c.doBind(h)
	case kXR_ping:
		return c.send(h.StreamID, kXR_ok) == nil
	case kXR_endsess:
		return c.doEndsess(h)
	}
	return c.doAuth(h, body)
}

// refusal is why the connection's requests beyond setup are refused
// ("": they are not).
func (c *conn) refusal() string {
	switch {
	case c.sess == nil:
		return "login required"
	case c.sess.pending.Load():
		return "authentication required"
	case c.sess.ident.Err != nil:
		return c.sess.ident.Err.Error()
	}
	return ""
}

// slot is a request's inflight slot (conn.slots): the goroutine spawn
// starts gives it back when it ends, giveBack when nothing was spawned.
type slot struct {
	c       *conn
	spawned bool
}

func (c *conn) takeSlot() *slot {
	c.slots <- struct{}{}
	return &slot{c: c}
}

// spawn runs fn on its own goroutine, holding the slot.
func (s *slot) spawn(fn func()) {
	s.spawned = true
	s.c.wg.Add(1)
	go func() {
		defer func() {
			<-s.c.slots
			s.c.wg.Done()
		}()
		fn()
	}()
}

// inlineWrite is the largest write served on the reader goroutine when
// it is the connection's only request in flight (a client writing one
// block at a time waits for each answer; a goroutine per write was most
// of a 4 KiB write's cost). Larger writes, and writes among other
// requests, get their own goroutine.
const inlineWrite = 64 << 10

func (s *slot) giveBack() {
	if !s.spawned {
		<-s.c.slots
	}
}

// onHandle serves the requests on an open file (read, write, readv,
// close, sync, truncate of a handle): it pins the file and spawns the
// operation, or answers at once when the handle is not open. handled is
// false for the other requests.
func (c *conn) onHandle(h *reqHeader, body []byte, release func(), s *slot) (handled, ok bool) {
	sid := h.StreamID
	switch h.ReqID {
	case kXR_read, kXR_pgread:
		fh := decodeFH(h)
		f, seq := c.sess.file(fh)
		if f == nil {
			release()
			return true, c.badHandle(sid, reqName(h.ReqID), fh)
		}
		s.spawn(func() {
			defer f.done(seq)
			if h.ReqID == kXR_read {
				c.doRead(h, body, f, release)
			} else {
				c.doPgread(h, body, f, release)
			}
		})
	case kXR_write, kXR_pgwrite:
		fh := decodeFH(h)
		f, seq := c.sess.file(fh)
		if f == nil {
			release()
			return true, c.badHandle(sid, reqName(h.ReqID), fh)
		}
		run := func() {
			defer f.done(seq)
			defer release()
			if h.ReqID == kXR_write {
				c.doWrite(h, body, f)
			} else {
				c.doPgwrite(h, body, f)
			}
		}
		if h.Dlen <= inlineWrite && len(c.slots) == 1 {
			run()
			return true, true
		}
		s.spawn(run)
	case kXR_readv:
		elems, err := decodeReadv(body)
		release()
		if err != nil {
			return true, c.sendErr(sid, kXR_ArgInvalid, "readv: "+err.Error()) == nil
		}
		files, bad := c.readvFiles(elems)
		if bad != nil {
			return true, c.badHandle(sid, "readv", *bad)
		}
		s.spawn(func() {
			defer func() {
				for _, pf := range files {
					pf.f.done(pf.seq)
				}
			}()
			c.doReadv(sid, elems, files)
		})
	case kXR_close:
		fh := decodeFH(h)
		f := c.sess.take(fh)
		release()
		if f == nil {
			return true, c.badHandle(sid, "close", fh)
		}
		seq := f.begin() // after everything sent before the close
		s.spawn(func() { c.doClose(sid, f, seq) })
	case kXR_sync:
		fh := decodeFH(h)
		f, seq := c.sess.file(fh)
		release()
		if f == nil {
			return true, c.badHandle(sid, "sync", fh)
		}
		s.spawn(func() { c.doSync(sid, f, seq) })
	case kXR_truncate:
		t := decodeTruncate(h, body)
		if len(cstring(t.Path)) != 0 {
			return false, true // a path: the namespace's
		}
		release()
		f, seq := c.sess.file(t.FH)
		if f == nil {
			return true, c.badHandle(sid, "truncate", t.FH)
		}
		s.spawn(func() { c.doTruncateHandle(sid, f, seq, t.Offset) })
	default:
		return false, true
	}
	return true, true
}

// doSync syncs an open file once what was sent before has run.
func (c *conn) doSync(sid [2]byte, f *openFile, seq uint64) {
	defer f.done(seq)
	f.waitBefore(seq)
	if err := f.df.Sync(); err != nil {
		c.fail(sid, "sync", f.path, err)
		return
	}
	c.send(sid, kXR_ok)
}

// doTruncateHandle truncates an open file once what was sent before has
// run.
func (c *conn) doTruncateHandle(sid [2]byte, f *openFile, seq uint64, size int64) {
	defer f.done(seq)
	f.waitBefore(seq)
	if size < 0 {
		c.sendErr(sid, kXR_ArgInvalid, "truncate "+f.path+": negative size")
		return
	}
	if err := f.df.Truncate(size); err != nil {
		c.fail(sid, "truncate", f.path, err)
		return
	}
	c.send(sid, kXR_ok)
}

func (c *conn) badHandle(sid [2]byte, op string, fh fhandle) bool {
	return c.sendErr(sid, kXR_FileNotOpen, fmt.Sprintf("%s: file handle %#08x is not open", op, fh.id())) == nil
}

// pinned is an open file with one registered operation.
type pinned struct {
	f   *openFile
	seq uint64
}

// readvFiles pins every distinct handle of a readv list.
func (c *conn) readvFiles(elems []readvElem) (map[uint32]pinned, *fhandle) {
	files := map[uint32]pinned{}
	for i := range elems {
		id := elems[i].FH.id()
		if _, ok := files[id]; ok {
			continue
		}
		f, seq := c.sess.file(elems[i].FH)
		if f == nil {
			for _, g := range files {
				g.f.done(g.seq)
			}
			return nil, &elems[i].FH
		}
		files[id] = pinned{f, seq}
	}
	return files, nil
}

// fail answers err for op on path with the mapped kXR code (kXR_wait for
// transient conditions).
func (c *conn) fail(sid [2]byte, op, path string, err error) {
	if rd := (*RedirectError)(nil); errors.As(err, &rd) {
		c.sendRedirect(sid, rd.Host, rd.Port, "")
		return
	}
	k := kindOf(err)
	msg := errMessage(op, path, err)
	if k == kerr.Busy {
		c.sendWait(sid, 1, msg)
		return
	}
	if k == kerr.Internal {
		c.srv.log.Warn("xrootd: request failed", "op", op, "path", path, "client", c.host, "err", err)
	} else {
		c.srv.log.Debug("xrootd: request failed", "op", op, "path", path, "client", c.host, "err", err)
	}
	c.sendErr(sid, xrdCode(k), msg)
}

func (c *conn) reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, requestTimeout)
}

// --- session setup ---

func (c *conn) doProtocol(h *reqHeader) error {
	var b [8]byte
	putU32(b[0:], protocolVersion)
	flags := uint32(kXR_isServer | kXR_supposc)
	if c.srv.cfg.PageChecksums {
		flags |= kXR_suppgrw
	}
	tlsFlags, upgrade := c.protocolTLS(h.Params[4])
	putU32(b[4:], flags|tlsFlags)
	if err := c.send(h.StreamID, kXR_ok, b[:]); err != nil || !upgrade {
		return err
	}
	return c.startTLS()
}

func (c *conn) doLogin(h *reqHeader, body []byte) bool {
	if c.sess != nil {
		return c.sendErr(h.StreamID, kXR_InvalidRequest, "login: already logged in") == nil
	}
	if refused, ok := c.requireTLS(h.StreamID, "login"); refused {
		return ok
	}
	name := decodeLoginUser(h)
	if name == "" {
		name = "nobody"
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if !(ch == '_' || ch == '-' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			return c.sendErr(h.StreamID, kXR_ArgInvalid, "login: invalid user name "+strconv.Quote(name)) == nil
		}
	}
	ss, err := c.srv.newSession(c, c.srv.identifyConn(name, c))
	if err != nil {
		return c.sendErr(h.StreamID, kXR_Overloaded, "login: "+err.Error()) == nil
	}
	c.sess = ss
	sec := c.loginSecurity()
	if sec != "" {
		ss.pending.Store(true)
	}
	return c.send(h.StreamID, kXR_ok, ss.id[:], []byte(sec)) == nil
}

func (c *conn) doBind(h *reqHeader) bool {
	var id [16]byte
	copy(id[:], h.Params[:])
	if c.sess != nil {
		return c.sendErr(h.StreamID, kXR_InvalidRequest, "bind: connection already has a session") == nil
	}
	if refused, ok := c.requireTLS(h.StreamID, "bind"); refused {
		return ok
	}
	ss := c.srv.findSession(id)
	if ss == nil || ss.host != c.host || ss.pending.Load() {
		return c.sendErr(h.StreamID, kXR_NotFound, "bind: session not found") == nil
	}
	p, ok := ss.bind(c)
	if !ok {
		return c.sendErr(h.StreamID, kXR_Overloaded, "bind: too many bound connections") == nil
	}
	c.sess, c.pathID = ss, p
	return c.send(h.StreamID, kXR_ok, []byte{p}) == nil
}

func (c *conn) doEndsess(h *reqHeader) bool {
	var id [16]byte
	copy(id[:], h.Params[:])
	if c.sess != nil && id == c.sess.id {
		return c.send(h.StreamID, kXR_ok) == nil
	}
	if ss := c.srv.findSession(id); ss != nil {
		if c.sess == nil || ss.ident.User != c.sess.ident.User || ss.host != c.host {
			return c.sendErr(h.StreamID, kXR_NotAuthorized, "endsess: session belongs to another client") == nil
		}
		ss.mu.Lock()
		main := ss.paths[0]
		ss.mu.Unlock()
		main.nc.Close() // its reader ends the session
	}
	return c.send(h.StreamID, kXR_ok) == nil
}

// --- data path ---

// ioBuffer reserves n bytes of the connection's and the server's I/O
// budgets and returns a buffer of that size; done returns all three. ok is
// false when the connection is closing.
func (c *conn) ioBuffer(n int64) (buf []byte, done func(), ok bool) {
	t := c.budget.acquire(n)
	if t < 0 {
		return nil, nil, false
	}
	g := c.srv.global.acquire(n)
	buf = getBuf(int(n))
	return buf, func() {
		putBuf(buf)
		c.srv.global.release(g)
		c.budget.release(t)
	}, true
}

func (c *conn) doRead(h *reqHeader, body []byte, f *openFile, release func()) {
	r := decodeRead(h, body)
	release()
	if r.Rlen < 0 || r.Offset < 0 {
		c.sendErr(h.StreamID, kXR_ArgInvalid, "read "+f.path+": negative offset or length")
		return
	}
	out := c.sess.pathConn(r.PathID, c)
	left := int64(r.Rlen)
	if left == 0 {
		out.send(h.StreamID, kXR_ok)
		return
	}
	buf, done, ok := c.ioBuffer(min(left, out.ioChunk()))
	if !ok {
		return
	}
	defer done()
	off := r.Offset
	for {
		want := min(left, int64(len(buf)))
		got, err := readFull(f.df, buf[:want], off)
		if err != nil {
			c.fail(h.StreamID, "read", f.path, err)
			return
		}
		left -= int64(got)
		off += int64(got)
		last := left == 0 || int64(got) < want
		st := uint16(kXR_oksofar)
		if last {
			st = kXR_ok
		}
		if out.send(h.StreamID, st, buf[:got]) != nil || last {
			return
		}
	}
}

// readFull reads until p is full or EOF; EOF is not an error (short read).
func readFull(df DataFile, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := df.ReadAt(p[n:], off+int64(n))
		n += m
		if err != nil {
			if isEOF(err) {
				return n, nil
			}
			return n, err
		}
		if m == 0 {
			return n, nil
		}
	}
	return n, nil
}

func (c *conn) doWrite(h *reqHeader, body []byte, f *openFile) {
	w := decodeWrite(h)
	if !f.write {
		c.sendErr(h.StreamID, kXR_FileNotOpen, "write "+f.path+": file is not open for writing")
		return
	}
	if w.Offset < 0 {
		c.sendErr(h.StreamID, kXR_ArgInvalid, "write "+f.path+": negative offset")
		return
	}
	if len(body) > 0 {
		if _, err := f.df.WriteAt(body, w.Offset); err != nil {
			c.fail(h.StreamID, "write", f.path, err)
			return
		}
	}
	c.sess.pathConn(w.PathID, c).send(h.StreamID, kXR_ok)
}

// streamWrite handles a kXR_write whose body exceeds the frame limit, or any
// large one over TLS, on the reader goroutine: the body is copied to the
// file in ioChunk pieces under the usual byte budgets. An unknown handle or
// a failed write still drains the body, so the stream stays in sync. A
// body cut off after some of it was written aborts the upload. It
// returns false when the connection must be dropped.
func (c *conn) streamWrite(h *reqHeader) bool {
	w := decodeWrite(h)
	left := int64(h.Dlen)
	f, seq := c.sess.file(w.FH)
	if f != nil {
		defer f.done(seq)
	}
	var failErr error
	var failCode uint32
	switch {
	case f == nil:
		failCode = kXR_FileNotOpen
	case !f.write:
		failCode, failErr = kXR_FileNotOpen, errors.New("file is not open for writing")
	case w.Offset < 0:
		failCode, failErr = kXR_ArgInvalid, errors.New("negative offset")
	}
	buf, done, ok := c.ioBuffer(min(left, c.ioChunk()))
	if !ok {
		return false
	}
	defer done()
	off := w.Offset
	for left > 0 {
		m := min(left, int64(len(buf)))
		c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
		if _, err := io.ReadFull(c.br, buf[:m]); err != nil {
			if off > w.Offset {
				// Part of this write is in the file and the rest will
				// never come: no close may commit it.
				f.df.Abort()
			}
			return false
		}
		left -= m
		if failCode != 0 || failErr != nil {
			continue // drain
		}
		if _, err := f.df.WriteAt(buf[:m], off); err != nil {
			failErr = err
			continue
		}
		off += m
	}
	c.srv.bytesIn.Add(int64(h.Dlen))
	switch {
	case f == nil:
		return c.badHandle(h.StreamID, "write", w.FH)
	case failCode != 0:
		return c.sendErr(h.StreamID, failCode, "write "+f.path+": "+failErr.Error()) == nil
	case failErr != nil:
		c.fail(h.StreamID, "write", f.path, failErr)
		return true
	}
	return c.sess.pathConn(w.PathID, c).send(h.StreamID, kXR_ok) == nil
}

const (
	maxReadvElems = 1024
	maxReadvElem  = 2097136
	readvBatch    = 2 << 20
)

func (c *conn) doReadv(sid [2]byte, elems []readvElem, files map[uint32]pinned) {
	if len(elems) > maxReadvElems {
		c.sendErr(sid, kXR_ArgTooLong, fmt.Sprintf("readv: %d elements exceed the limit of %d", len(elems), maxReadvElems))
		return
	}
	for _, e := range elems {
		if e.Len < 0 || e.Len > maxReadvElem || e.Offset < 0 {
			c.sendErr(sid, kXR_ArgInvalid, fmt.Sprintf("readv: invalid element (offset %d, length %d)", e.Offset, e.Len))
			return
		}
	}
	t := c.budget.acquire(readvBatch + maxReadvElem + readvElemLen)
	if t < 0 {
		return
	}
	defer c.budget.release(t)
	buf := getBuf(int(t))
	defer putBuf(buf)
	n := 0
	for i, e := range elems {
		f := files[e.FH.id()].f
		hdr := buf[n : n+readvElemLen]
		got, err := readFull(f.df, buf[n+readvElemLen:n+readvElemLen+int(e.Len)], e.Offset)
		if err != nil {
			c.fail(sid, "readv", f.path, err)
			return
		}
		copy(hdr[0:4], e.FH[:])
		putU32(hdr[4:8], uint32(got))
		putU64(hdr[8:16], uint64(e.Offset))
		n += readvElemLen + got
		last := i == len(elems)-1
		if last {
			c.send(sid, kXR_ok, buf[:n])
			return
		}
		if n >= readvBatch {
			if c.send(sid, kXR_oksofar, buf[:n]) != nil {
				return
			}
			n = 0
		}
	}
	c.send(sid, kXR_ok, buf[:n]) // empty list
}

func (c *conn) doClose(sid [2]byte, f *openFile, seq uint64) {
	defer f.done(seq)
	f.waitBefore(seq)
	if err := f.df.Close(); err != nil {
		c.fail(sid, "close", f.path, err)
		return
	}
	c.send(sid, kXR_ok)
}

// --- everything with a path ---

// onPath serves the requests naming a path: open, stat and query on any
// listener; the namespace's (dirlist, mkdir, rm, rmdir, chmod, mv,
// truncate, locate) on a listener with a namespace, sent to the manager
// by the others.
func (c *conn) onPath(h *reqHeader, body []byte) {
	sid := h.StreamID
	switch h.ReqID {
	case kXR_open:
		c.doOpen(h, body)
		return
	case kXR_query:
		c.doQuery(h, body)
		return
	case kXR_stat:
		c.doStat(h, body)
		return
	case kXR_dirlist, kXR_mkdir, kXR_rm, kXR_rmdir, kXR_chmod, kXR_mv, kXR_locate, kXR_truncate:
	case kXR_sigver:
		c.sendErr(sid, kXR_Unsupported, reqName(h.ReqID)+": this server requires no authentication")
		return
	default:
		c.sendErr(sid, kXR_Unsupported, reqName(h.ReqID)+" is not supported by this server")
		return
	}
	ns := c.srv.cfg.Namespace
	if ns == nil {
		c.redirectToManager(sid, reqName(h.ReqID))
		return
	}
	ctx, cancel := c.reqCtx()
	defer cancel()
	switch h.ReqID {
	case kXR_dirlist:
		c.doDirlist(ctx, ns, h, body)
	case kXR_mkdir:
		c.doMkdir(ctx, ns, h, body)
	case kXR_rm, kXR_rmdir:
		c.doRemove(ctx, ns, h, body)
	case kXR_chmod:
		c.doChmod(ctx, ns, h, body)
	case kXR_mv:
		c.doMv(ctx, ns, h, body)
	case kXR_truncate:
		c.doTruncatePath(ctx, ns, h, body)
	case kXR_locate:
		c.doLocate(ctx, ns, h, body)
	}
}

func (c *conn) doDirlist(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid, id := h.StreamID, c.sess.ident
	opts, raw := decodeDirlist(h, body)
	p, _, err := splitPath("dirlist", raw)
	if err != nil {
		c.fail(sid, "dirlist", "", err)
		return
	}
	list, err := ns.List(ctx, id, p)
	if err != nil {
		c.fail(sid, "dirlist", p, err)
		return
	}
	var sb strings.Builder
	if opts&(kXR_dstat|kXR_dcksm) != 0 {
		sb.WriteString(".\n0 0 0 0")
		for _, e := range list {
			sb.WriteByte('\n')
			sb.WriteString(e.Name)
			sb.WriteByte('\n')
			sb.WriteString(statString(e))
			if opts&kXR_dcksm != 0 { // xrdfs ls -C: " [ adler32:<hex>|none ]"
				sum := "none"
				if !e.IsDir {
					if v, err := ns.Checksum(ctx, id, path.Join(p, e.Name), "adler32"); err == nil && v != "" {
						sum = v
					}
				}
				sb.WriteString(" [ adler32:" + sum + " ]")
			}
		}
	} else {
		for i, e := range list {
			if i > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(e.Name)
		}
	}
	sb.WriteByte(0)
	c.send(sid, kXR_ok, []byte(sb.String()))
}

func (c *conn) doMkdir(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid := h.StreamID
	m := decodeMkdir(h, body)
	p, _, err := splitPath("mkdir", m.Path)
	if err != nil {
		c.fail(sid, "mkdir", "", err)
		return
	}
	mode := uint32(m.Mode) & 0o7777
	if mode == 0 {
		mode = 0o755
	}
	if err := ns.Mkdir(ctx, c.sess.ident, p, mode, m.Options&kXR_mkdirpath != 0); err != nil {
		c.fail(sid, "mkdir", p, err)
		return
	}
	c.send(sid, kXR_ok)
}

// doRemove serves kXR_rm and kXR_rmdir.
func (c *conn) doRemove(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid := h.StreamID
	op := reqName(h.ReqID)
	p, _, err := splitPath(op, body)
	if err != nil {
		c.fail(sid, op, "", err)
		return
	}
	if p == "/" {
		c.sendErr(sid, kXR_NotAuthorized, op+" /: the root cannot be removed")
		return
	}
	if h.ReqID == kXR_rm {
		err = ns.Remove(ctx, c.sess.ident, p)
	} else {
		err = ns.Rmdir(ctx, c.sess.ident, p)
	}
	if err != nil {
		c.fail(sid, op, p, err)
		return
	}
	c.send(sid, kXR_ok)
}

func (c *conn) doChmod(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid := h.StreamID
	p, _, err := splitPath("chmod", body)
	if err != nil {
		c.fail(sid, "chmod", "", err)
		return
	}
	if err := ns.Chmod(ctx, c.sess.ident, p, uint32(decodeChmodMode(h))&0o7777); err != nil {
		c.fail(sid, "chmod", p, err)
		return
	}
	c.send(sid, kXR_ok)
}

func (c *conn) doMv(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid := h.StreamID
	rf, rt, err := decodeMv(h, body)
	if err != nil {
		c.sendErr(sid, kXR_ArgMissing, "mv: "+err.Error())
		return
	}
	from, _, err := splitPath("mv", rf)
	if err != nil {
		c.fail(sid, "mv", "", err)
		return
	}
	to, _, err := splitPath("mv", rt)
	if err != nil {
		c.fail(sid, "mv", "", err)
		return
	}
	if err := ns.Rename(ctx, c.sess.ident, from, to); err != nil {
		c.fail(sid, "mv", from, err)
		return
	}
	c.send(sid, kXR_ok)
}

// doTruncatePath serves kXR_truncate of a path (onHandle serves that of
// an open file).
func (c *conn) doTruncatePath(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid := h.StreamID
	t := decodeTruncate(h, body)
	p, _, err := splitPath("truncate", t.Path)
	if err != nil {
		c.fail(sid, "truncate", "", err)
		return
	}
	if t.Offset < 0 {
		c.sendErr(sid, kXR_ArgInvalid, "truncate "+p+": negative size")
		return
	}
	if err := ns.Truncate(ctx, c.sess.ident, p, t.Offset); err != nil {
		c.fail(sid, "truncate", p, err)
		return
	}
	c.send(sid, kXR_ok)
}

func (c *conn) doLocate(ctx context.Context, ns Namespace, h *reqHeader, body []byte) {
	sid, id := h.StreamID, c.sess.ident
	_, raw := decodeLocate(h, body)
	for len(raw) > 0 && raw[0] == '*' { // "*path": any server able to serve path
		raw = raw[1:]
	}
	p, _, err := splitPath("locate", raw)
	if err != nil {
		c.fail(sid, "locate", "", err)
		return
	}
	fi, err := ns.Stat(ctx, id, p)
	if err != nil {
		c.fail(sid, "locate", p, err)
		return
	}
	var locs []string
	if !fi.IsDir {
		if locs, err = ns.Locate(ctx, id, p); err != nil {
			c.fail(sid, "locate", p, err)
			return
		}
	}
	if len(locs) == 0 { // directories (and files without replicas) are served here
		locs = []string{c.nc.LocalAddr().String()}
	}
	var sb strings.Builder
	for i, l := range locs {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("Sw")
		sb.WriteString(l)
	}
	sb.WriteByte(0)
	c.send(sid, kXR_ok, []byte(sb.String()))
}

// redirectToManager sends namespace requests arriving at a data listener to
// the manager.
func (c *conn) redirectToManager(sid [2]byte, op string) {
	host, port, err := SplitHostPort(c.srv.cfg.Manager)
	if err != nil {
		c.sendErr(sid, kXR_Unsupported, op+": not served by this data server and no manager is configured")
		return
	}
	c.sendRedirect(sid, host, port, "")
}

// SplitHostPort splits a host:port whose port is a valid TCP port.
func SplitHostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, errors.New("bad port")
	}
	return h, n, nil
}

func (c *conn) doOpen(h *reqHeader, body []byte) {
	sid := h.StreamID
	o := decodeOpen(h, body)
	p, opaque, err := splitPath("open", o.Path)
	if err != nil {
		c.fail(sid, "open", "", err)
		return
	}
	req := OpenRequest{Mode: uint32(o.Mode) & 0o7777, Opaque: opaque}
	opt := o.Options
	req.Read = opt&(kXR_open_read|kXR_open_updt) != 0 || opt&(kXR_open_wrto|kXR_new|kXR_delete) == 0
	req.Write = opt&(kXR_open_updt|kXR_open_wrto|kXR_new|kXR_delete|kXR_open_apnd) != 0
	req.Create = opt&(kXR_new|kXR_delete) != 0
	req.Truncate = opt&kXR_delete != 0
	req.Exclusive = opt&kXR_new != 0 && opt&kXR_delete == 0
	// xrootd creates missing parents of a new file even without kXR_mkpath
	// (xrdcp without -p relies on it), so creation implies MkPath.
	req.MkPath = opt&kXR_mkpath != 0 || req.Create
	req.POSC = opt&kXR_posc != 0
	if req.Create && req.Mode == 0 {
		req.Mode = 0o644
	}
	ctx, cancel := c.reqCtx()
	defer cancel()
	// A destination pulling a third-party copy from here (tpc.go).
	if tpc, err := c.tpcSourceOpen(ctx, p, &req); tpc && err != nil {
		c.fail(sid, "open", p, err)
		return
	}
	ns, ds := c.srv.cfg.Namespace, c.srv.cfg.Data
	if ns != nil {
		rd, err := ns.Open(ctx, c.sess.ident, p, req)
		if err != nil {
			c.fail(sid, "open", p, err)
			return
		}
		if rd.Host != "" || ds == nil {
			if rd.Host == "" || rd.Port <= 0 {
				c.sendErr(sid, kXR_ServerError, "open "+p+": no storage server available")
				return
			}
			c.sendRedirect(sid, rd.Host, rd.Port, rd.Opaque)
			return
		}
		// Combined listener: the namespace granted access here.
		for k, vs := range parseOpaque(rd.Opaque) {
			req.Opaque[k] = vs
		}
	} else if ds == nil {
		c.sendErr(sid, kXR_ServerError, "open "+p+": listener has neither namespace nor data")
		return
	} else if c.srv.cfg.Manager != "" && !req.Opaque.Has(c.srv.cfg.CapabilityOpaque) {
		c.redirectToManager(sid, "open") // the manager checks access and mints a capability
		return
	}
	df, err := ds.Open(ctx, c.sess.ident, p, req)
	if err != nil {
		c.fail(sid, "open", p, err)
		return
	}
	if df, err = c.tpcOpened(p, req, df); err != nil { // third-party copy (tpc.go)
		if req.Write {
			df.Abort()
		} else {
			df.Close()
		}
		c.fail(sid, "open", p, err)
		return
	}
	f := newOpenFile(p, df, req.Write)
	fh, ok := c.sess.addFile(f, c.srv.cfg.MaxOpenFiles)
	if !ok {
		if req.Write {
			df.Abort()
		} else {
			df.Close()
		}
		c.sendErr(sid, kXR_Overloaded, "open "+p+": too many open files in this session")
		return
	}
	resp := make([]byte, 12, 128)
	hd := handleOf(fh)
	copy(resp, hd[:])
	if opt&kXR_retstat != 0 {
		fi, err := df.Stat()
		if err != nil {
			c.sess.take(hd)
			df.Abort()
			c.fail(sid, "open", p, err)
			return
		}
		resp = append(resp, statString(fi)...)
		resp = append(resp, 0)
	}
	c.send(sid, kXR_ok, resp)
}

func (c *conn) doStat(h *reqHeader, body []byte) {
	sid := h.StreamID
	r := decodeStat(h, body)
	if len(cstring(r.Path)) == 0 { // stat on an open handle
		f, seq := c.sess.file(r.FH)
		if f == nil {
			c.badHandle(sid, "stat", r.FH)
			return
		}
		defer f.done(seq)
		fi, err := f.df.Stat()
		if err != nil {
			c.fail(sid, "stat", f.path, err)
			return
		}
		c.send(sid, kXR_ok, append([]byte(statString(fi)), 0))
		return
	}
	p, _, err := splitPath("stat", r.Path)
	if err != nil {
		c.fail(sid, "stat", "", err)
		return
	}
	ns := c.srv.cfg.Namespace
	if ns == nil {
		c.redirectToManager(sid, "stat")
		return
	}
	ctx, cancel := c.reqCtx()
	defer cancel()
	if r.Options&kXR_vfs != 0 {
		fs, err := ns.StatFS(ctx, c.sess.ident, p)
		if err != nil {
			c.fail(sid, "statvfs", p, err)
			return
		}
		c.send(sid, kXR_ok, append([]byte(vfsString(fs)), 0))
		return
	}
	fi, err := ns.Stat(ctx, c.sess.ident, p)
	if err != nil {
		c.fail(sid, "stat", p, err)
		return
	}
	c.send(sid, kXR_ok, append([]byte(statString(fi)), 0))
}

// statString renders the extended stat line 5.x clients parse:
// "id size flags mtime ctime atime mode owner group".
func statString(fi FileInfo) string {
	flags := 0
	if fi.IsDir {
		flags |= kXR_isDir
	}
	if fi.Mode&0o444 != 0 {
		flags |= kXR_readable
	}
	if fi.Mode&0o222 != 0 {
		flags |= kXR_writable
	}
	if fi.Mode&0o111 != 0 || fi.IsDir {
		flags |= kXR_xset
	}
	owner, group := token(fi.Owner), token(fi.Group)
	mt := unixOr0(fi.MTime)
	ct, at := unixOr0(fi.CTime), unixOr0(fi.ATime)
	if ct == 0 {
		ct = mt
	}
	if at == 0 {
		at = mt
	}
	return fmt.Sprintf("%d %d %d %d %d %d %04o %s %s", fi.ID, max(fi.Size, 0), flags, mt, ct, at, fi.Mode&0o7777, owner, group)
}

func unixOr0(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// token makes a name safe for the space-separated stat line.
func token(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// vfsString renders kXR_vfs: "nodesRW freeMB util% nodesStaging freeMB util%".
func vfsString(fs StatFS) string {
	nodes := fs.Filesystems
	if nodes <= 0 {
		nodes = 1
	}
	free := fs.MaxFree
	if free == 0 {
		free = fs.Free
	}
	util := 0
	if fs.Total > 0 && fs.Free <= fs.Total {
		util = int((fs.Total - fs.Free) * 100 / fs.Total)
	}
	return fmt.Sprintf("%d %d %d 0 0 0", nodes, free>>20, util)
}

func (c *conn) doQuery(h *reqHeader, body []byte) {
	sid := h.StreamID
	q := decodeQuery(h, body)
	ns := c.srv.cfg.Namespace
	switch q.InfoType {
	case kXR_Qconfig:
		c.send(sid, kXR_ok, []byte(c.srv.configAnswer(cstring(q.Args))))
		return
	case kXR_QStats:
		c.send(sid, kXR_ok, append([]byte(c.srv.statsXML(c.nc.LocalAddr())), 0))
		return
	case kXR_Qcksum, kXR_Qspace:
	default:
		c.sendErr(sid, kXR_Unsupported, fmt.Sprintf("query type %d is not supported by this server", q.InfoType))
		return
	}
	if len(cstring(q.Args)) == 0 && q.InfoType == kXR_Qcksum { // checksum of an open handle
		f, seq := c.sess.file(q.FH)
		if f == nil {
			c.badHandle(sid, "query checksum", q.FH)
			return
		}
		defer f.done(seq)
		f.waitBefore(seq)
		sum, err := f.df.Checksum("adler32")
		if err != nil {
			c.fail(sid, "query checksum", f.path, err)
			return
		}
		c.send(sid, kXR_ok, []byte("adler32 "+sum+"\x00"))
		return
	}
	op := "query checksum"
	if q.InfoType == kXR_Qspace {
		op = "query space"
	}
	p, opaque, err := splitPath(op, q.Args)
	if err != nil {
		c.fail(sid, op, "", err)
		return
	}
	if ns == nil {
		c.redirectToManager(sid, op)
		return
	}
	ctx, cancel := c.reqCtx()
	defer cancel()
	if q.InfoType == kXR_Qspace {
		fs, err := ns.StatFS(ctx, c.sess.ident, p)
		if err != nil {
			c.fail(sid, op, p, err)
			return
		}
		space := fs.Space
		if space == "" {
			space = "default"
		}
		maxf := fs.MaxFree
		if maxf == 0 {
			maxf = fs.Free
		}
		quota := fs.Quota
		if quota == 0 {
			quota = -1
		}
		used := uint64(0)
		if fs.Total > fs.Free {
			used = fs.Total - fs.Free
		}
		s := fmt.Sprintf("oss.cgroup=%s&oss.space=%d&oss.free=%d&oss.maxf=%d&oss.used=%d&oss.quota=%d\x00",
			space, fs.Total, fs.Free, maxf, used, quota)
		c.send(sid, kXR_ok, []byte(s))
		return
	}
	algo := strings.ToLower(opaque.Get("cks.type"))
	if algo == "" {
		algo = "adler32"
	}
	sum, err := ns.Checksum(ctx, c.sess.ident, p, algo)
	if err != nil {
		c.fail(sid, op, p, err)
		return
	}
	c.send(sid, kXR_ok, []byte(algo+" "+sum+"\x00"))
}

// configAnswer answers kXR_Qconfig: one line per requested name; unknown
// names are echoed back, which is how clients recognise "not set".
func (s *Server) configAnswer(args string) string {
	var sb strings.Builder
	for _, k := range strings.Fields(args) {
		v := k
		switch k {
		case "readv_iov_max":
			v = strconv.Itoa(maxReadvElems)
		case "readv_ior_max":
			v = strconv.Itoa(maxReadvElem)
		case "chksum":
			v = "0:adler32"
		case "bind_max":
			v = "255"
		case "pio_max":
			v = "5"
		case "version":
			v = "kaon-xrootd-v5"
		case "role":
			if s.cfg.Namespace != nil {
				v = "manager"
			} else {
				v = "server"
			}
		case "cms":
			v = "none|"
		case "sitename":
			v = "kaon"
		case "tpc": // third-party copy (tpc.go): a data server can be a source
			if s.cfg.Data != nil {
				v = "1"
			}
		}
		sb.WriteString(v)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func (s *Server) statsXML(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	now := time.Now().Unix()
	return fmt.Sprintf(`<statistics tod="%d" ver="kaon" src="%s" tos="%d" pgm="kaon" ins="kaon" pid="0" site="">`+
		`<stats id="info"><host>%s</host><port>%s</port><name>kaon</name></stats>`+
		`<stats id="link"><num>%d</num><in>%d</in><out>%d</out></stats>`+
		`<stats id="xrootd"><num>%d</num><err>%d</err><rdr>%d</rdr></stats></statistics>`,
		now, addr.String(), s.start.Unix(), host, port,
		s.nConns.Load(), s.bytesIn.Load(), s.bytesOut.Load(), s.nReqs.Load(), s.nErrs.Load(), s.nRedirs.Load())
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }
