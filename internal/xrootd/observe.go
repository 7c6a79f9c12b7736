package xrootd

import (
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"time"
)

// A request is timed from the moment its header and body were read to
// the moment its final answer was written (Config.Observe): kXR_ok, an
// error, a redirect, a kXR_wait, or a kXR_status final result; kXR_oksofar
// and partial kXR_status answers do not end it. Answers may leave on
// another connection of the session than the request came in on
// (kXR_bind), so requests of a session are kept by the session, and
// those before login by their connection.

// started is a request being served.
type started struct {
	req uint16
	at  time.Time
}

// requestTimes are the requests in flight of a session or a connection,
// by stream id.
type requestTimes struct {
	mu sync.Mutex
	m  map[[2]byte]started
}

func (t *requestTimes) begin(sid [2]byte, req uint16, at time.Time) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[[2]byte]started{}
	}
	t.m[sid] = started{req, at}
	t.mu.Unlock()
}

func (t *requestTimes) end(sid [2]byte) (started, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[sid]
	if ok {
		delete(t.m, sid)
	}
	return s, ok
}

// begin notes that request req on stream sid arrived (when observed).
func (c *conn) begin(sid [2]byte, req uint16) {
	if c.srv.cfg.Observe == nil {
		return
	}
	if s := c.sess; s != nil {
		s.times.begin(sid, req, time.Now())
		return
	}
	c.times.begin(sid, req, time.Now())
}

// answered observes the request a final answer on stream sid ends;
// bufs are the answer's frame (header first).
func (c *conn) answered(bufs net.Buffers) {
	obs := c.srv.cfg.Observe
	if obs == nil || len(bufs) == 0 || len(bufs[0]) < respHeaderLen {
		return
	}
	hdr := bufs[0]
	sid := [2]byte{hdr[0], hdr[1]}
	status := binary.BigEndian.Uint16(hdr[2:4])
	code := "ok"
	switch status {
	case kXR_oksofar:
		return
	case kXR_status:
		// The status body follows the header in the same buffer
		// (statusHeader); byte 7 of it is the result type.
		if len(hdr) > respHeaderLen+7 && hdr[respHeaderLen+7] != kXR_FinalResult {
			return
		}
	case kXR_error:
		code = "kXR_error"
		if len(bufs) > 1 && len(bufs[1]) >= 4 {
			code = errName(binary.BigEndian.Uint32(bufs[1]))
		}
	case kXR_redirect:
		code = "kXR_redirect"
	case kXR_wait:
		code = "kXR_wait"
	}
	var st started
	ok := false
	if s := c.sess; s != nil {
		st, ok = s.times.end(sid)
	}
	if !ok {
		st, ok = c.times.end(sid)
	}
	if ok {
		name, known := reqNames[st.req]
		if !known {
			name = "other"
		}
		obs(name, code, time.Since(st.at))
	}
}

// errNames are the kXR_* names of error codes, as metrics label them.
var errNames = map[uint32]string{
	kXR_ArgInvalid: "kXR_ArgInvalid", kXR_ArgMissing: "kXR_ArgMissing", kXR_ArgTooLong: "kXR_ArgTooLong",
	kXR_FileLocked: "kXR_FileLocked", kXR_FileNotOpen: "kXR_FileNotOpen", kXR_FSError: "kXR_FSError",
	kXR_InvalidRequest: "kXR_InvalidRequest", kXR_IOError: "kXR_IOError", kXR_NoMemory: "kXR_NoMemory",
	kXR_NoSpace: "kXR_NoSpace", kXR_NotAuthorized: "kXR_NotAuthorized", kXR_NotFound: "kXR_NotFound",
	kXR_ServerError: "kXR_ServerError", kXR_Unsupported: "kXR_Unsupported", kXR_noserver: "kXR_noserver",
	kXR_NotFile: "kXR_NotFile", kXR_isDirectory: "kXR_isDirectory", kXR_Cancelled: "kXR_Cancelled",
	kXR_ItExists: "kXR_ItExists", kXR_ChkSumErr: "kXR_ChkSumErr", kXR_inProgress: "kXR_inProgress",
	kXR_overQuota: "kXR_overQuota", kXR_Overloaded: "kXR_Overloaded", kXR_fsReadOnly: "kXR_fsReadOnly",
}

func errName(code uint32) string {
	if n, ok := errNames[code]; ok {
		return n
	}
	return "kXR_error_" + strconv.FormatUint(uint64(code), 10)
}
