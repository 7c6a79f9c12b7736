package xrootd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire constants of the XRootD protocol v5 (XProtocol.hh), only those used.
const (
	protocolVersion = 0x00000511 // what 5.5 servers announce

	reqHeaderLen  = 24
	respHeaderLen = 8
	handshakeLen  = 20
)

// Request ids.
const (
	kXR_auth     = 3000
	kXR_query    = 3001
	kXR_chmod    = 3002
	kXR_close    = 3003
	kXR_dirlist  = 3004
	kXR_gpfile   = 3005
	kXR_protocol = 3006
	kXR_login    = 3007
	kXR_mkdir    = 3008
	kXR_mv       = 3009
	kXR_open     = 3010
	kXR_ping     = 3011
	kXR_chkpoint = 3012
	kXR_read     = 3013
	kXR_rm       = 3014
	kXR_rmdir    = 3015
	kXR_sync     = 3016
	kXR_stat     = 3017
	kXR_set      = 3018
	kXR_write    = 3019
	kXR_fattr    = 3020
	kXR_prepare  = 3021
	kXR_statx    = 3022
	kXR_endsess  = 3023
	kXR_bind     = 3024
	kXR_readv    = 3025
	kXR_pgwrite  = 3026
	kXR_locate   = 3027
	kXR_truncate = 3028
	kXR_sigver   = 3029
	kXR_pgread   = 3030
	kXR_writev   = 3031
)

// Response status codes.
const (
	kXR_ok       = 0
	kXR_oksofar  = 4000
	kXR_error    = 4003
	kXR_redirect = 4004
	kXR_wait     = 4005
	kXR_status   = 4007
)

// Error codes.
const (
	kXR_ArgInvalid     = 3000
	kXR_ArgMissing     = 3001
	kXR_ArgTooLong     = 3002
	kXR_FileLocked     = 3003
	kXR_FileNotOpen    = 3004
	kXR_FSError        = 3005
	kXR_InvalidRequest = 3006
	kXR_IOError        = 3007
	kXR_NoMemory       = 3008
	kXR_NoSpace        = 3009
	kXR_NotAuthorized  = 3010
	kXR_NotFound       = 3011
	kXR_ServerError    = 3012
	kXR_Unsupported    = 3013
	kXR_noserver       = 3014
	kXR_NotFile        = 3015
	kXR_isDirectory    = 3016
	kXR_Cancelled      = 3017
	kXR_ItExists       = 3018
	kXR_ChkSumErr      = 3019
	kXR_inProgress     = 3020
	kXR_overQuota      = 3021
	kXR_Overloaded     = 3024
	kXR_fsReadOnly     = 3025
)

// kXR_protocol response flags.
const (
	kXR_isServer = 0x00000001
	kXR_supposc  = 0x00100000
	kXR_suppgrw  = 0x00200000
)

// kXR_open options.
const (
	kXR_delete    = 0x0002
	kXR_force     = 0x0004
	kXR_new       = 0x0008
	kXR_open_read = 0x0010
	kXR_open_updt = 0x0020
	kXR_async     = 0x0040
	kXR_mkpath    = 0x0100
	kXR_open_apnd = 0x0200
	kXR_retstat   = 0x0400
	kXR_posc      = 0x1000
	kXR_open_wrto = 0x8000
)

// kXR_stat flags (in responses) and options (in requests).
const (
	kXR_xset     = 1
	kXR_isDir    = 2
	kXR_other    = 4
	kXR_readable = 16
	kXR_writable = 32

	kXR_vfs = 1
)

// kXR_dirlist options, kXR_mkdir options, kXR_query infotypes.
const (
	kXR_online = 1
	kXR_dstat  = 2
	kXR_dcksm  = 4

	kXR_mkdirpath = 1

	kXR_QStats  = 1
	kXR_QPrep   = 2
	kXR_Qcksum  = 3
	kXR_Qxattr  = 4
	kXR_Qspace  = 5
	kXR_Qckscan = 6
	kXR_Qconfig = 7
	kXR_Qvisa   = 8
)

// pgread/pgwrite page geometry.
const (
	pgPageSize = 4096
	pgCksSize  = 4
)

// kXR_status response body sizes (ServerResponseStatus + pg body).
const (
	statusBodyLen = 16 // crc32c, streamID[2], requestid, resptype, reserved[2], dlen
	pgBodyLen     = 8  // offset
)

var (
	errFrameTooLarge = errors.New("xrootd: request body exceeds the frame limit")
	errBadHandshake  = errors.New("xrootd: bad handshake")
)

// reqHeader is the fixed 24-byte client request header.
type reqHeader struct {
	StreamID [2]byte
	ReqID    uint16
	Params   [16]byte
	Dlen     int32
}

func parseReqHeader(b []byte) reqHeader {
	var h reqHeader
	copy(h.StreamID[:], b[0:2])
	h.ReqID = binary.BigEndian.Uint16(b[2:4])
	copy(h.Params[:], b[4:20])
	h.Dlen = int32(binary.BigEndian.Uint32(b[20:24]))
	return h
}

// readBody reads the body announced by h, refusing lengths over max.
func readBody(r io.Reader, h *reqHeader, max int, alloc func(int) []byte) ([]byte, error) {
	if h.Dlen < 0 || int(h.Dlen) > max {
		return nil, errFrameTooLarge
	}
	if h.Dlen == 0 {
		return nil, nil
	}
	body := alloc(int(h.Dlen))
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return body, err
	}
	return body, nil
}

// checkHandshake validates the 20-byte initial client handshake.
func checkHandshake(b []byte) error {
	if len(b) < handshakeLen {
		return errBadHandshake
	}
	v := func(i int) uint32 { return binary.BigEndian.Uint32(b[i*4:]) }
	if v(0) != 0 || v(1) != 0 || v(2) != 0 || v(3) != 4 || v(4) != 2012 {
		return errBadHandshake
	}
	return nil
}

func respHeader(b []byte, sid [2]byte, status uint16, dlen int) []byte {
	b = b[:respHeaderLen]
	copy(b[0:2], sid[:])
	binary.BigEndian.PutUint16(b[2:4], status)
	binary.BigEndian.PutUint32(b[4:8], uint32(dlen))
	return b
}

// Decoded request bodies. Each decoder only reads from the fixed Params
// and the body slice it is given; none of them can index out of range.

type fhandle [4]byte

func (f fhandle) id() uint32 { return binary.BigEndian.Uint32(f[:]) }

func handleOf(id uint32) fhandle {
	var f fhandle
	binary.BigEndian.PutUint32(f[:], id)
	return f
}

type openReq struct {
	Mode    uint16
	Options uint16
	Path    []byte
}

func decodeOpen(h *reqHeader, body []byte) openReq {
	return openReq{
		Mode:    binary.BigEndian.Uint16(h.Params[0:2]),
		Options: binary.BigEndian.Uint16(h.Params[2:4]),
		Path:    body,
	}
}

type readReq struct {
	FH     fhandle
	Offset int64
	Rlen   int32
	PathID byte
}

func decodeRead(h *reqHeader, body []byte) readReq {
	r := readReq{
		Offset: int64(binary.BigEndian.Uint64(h.Params[4:12])),
		Rlen:   int32(binary.BigEndian.Uint32(h.Params[12:16])),
	}
	copy(r.FH[:], h.Params[0:4])
	if len(body) >= 8 { // read_args: pathid, reserved[7], then optional pre-read list
		r.PathID = body[0]
	}
	return r
}

type writeReq struct {
	FH     fhandle
	Offset int64
	PathID byte
}

func decodeWrite(h *reqHeader) writeReq {
	w := writeReq{Offset: int64(binary.BigEndian.Uint64(h.Params[4:12])), PathID: h.Params[12]}
	copy(w.FH[:], h.Params[0:4])
	return w
}

// readvElem is one element of a kXR_readv list.
type readvElem struct {
	FH     fhandle
	Len    int32
	Offset int64
}

const readvElemLen = 16

func decodeReadv(body []byte) ([]readvElem, error) {
	if len(body)%readvElemLen != 0 {
		return nil, fmt.Errorf("readv list length %d is not a multiple of %d", len(body), readvElemLen)
	}
	n := len(body) / readvElemLen
	out := make([]readvElem, n)
	for i := range out {
		b := body[i*readvElemLen:]
		copy(out[i].FH[:], b[0:4])
		out[i].Len = int32(binary.BigEndian.Uint32(b[4:8]))
		out[i].Offset = int64(binary.BigEndian.Uint64(b[8:16]))
	}
	return out, nil
}

type statReq struct {
	Options byte
	FH      fhandle
	Path    []byte
}

func decodeStat(h *reqHeader, body []byte) statReq {
	s := statReq{Options: h.Params[0], Path: body}
	copy(s.FH[:], h.Params[12:16])
	return s
}

type mkdirReq struct {
	Options byte
	Mode    uint16
	Path    []byte
}

func decodeMkdir(h *reqHeader, body []byte) mkdirReq {
	return mkdirReq{Options: h.Params[0], Mode: binary.BigEndian.Uint16(h.Params[14:16]), Path: body}
}

func decodeChmodMode(h *reqHeader) uint16 { return binary.BigEndian.Uint16(h.Params[14:16]) }

// decodeMv splits "old new"; arg1len (if set) gives the length of old.
func decodeMv(h *reqHeader, body []byte) (from, to []byte, err error) {
	n := int(int16(binary.BigEndian.Uint16(h.Params[14:16])))
	if n > 0 && n < len(body) && body[n] == ' ' {
		return body[:n], body[n+1:], nil
	}
	for i, c := range body {
		if c == ' ' {
			return body[:i], body[i+1:], nil
		}
	}
	return nil, nil, errors.New("mv needs a source and a destination separated by a space")
}

type queryReq struct {
	InfoType uint16
	FH       fhandle
	Args     []byte
}

func decodeQuery(h *reqHeader, body []byte) queryReq {
	q := queryReq{InfoType: binary.BigEndian.Uint16(h.Params[0:2]), Args: body}
	copy(q.FH[:], h.Params[4:8])
	return q
}

type truncReq struct {
	FH     fhandle
	Offset int64
	Path   []byte
}

func decodeTruncate(h *reqHeader, body []byte) truncReq {
	t := truncReq{Offset: int64(binary.BigEndian.Uint64(h.Params[4:12])), Path: body}
	copy(t.FH[:], h.Params[0:4])
	return t
}

func decodeFH(h *reqHeader) fhandle {
	var f fhandle
	copy(f[:], h.Params[0:4])
	return f
}

func decodeDirlist(h *reqHeader, body []byte) (options byte, path []byte) {
	return h.Params[15], body
}

func decodeLocate(h *reqHeader, body []byte) (options uint16, path []byte) {
	return binary.BigEndian.Uint16(h.Params[0:2]), body
}

// login: pid[4] username[8] ability2 ability capver role; body = token/cgi.
func decodeLoginUser(h *reqHeader) string {
	u := h.Params[4:12]
	n := 0
	for n < len(u) && u[n] != 0 {
		n++
	}
	return string(u[:n])
}

type pgwriteReq struct {
	FH     fhandle
	Offset int64
	PathID byte
}

func decodePgwrite(h *reqHeader) pgwriteReq {
	w := pgwriteReq{Offset: int64(binary.BigEndian.Uint64(h.Params[4:12])), PathID: h.Params[12]}
	copy(w.FH[:], h.Params[0:4])
	return w
}

type pgreadReq struct {
	FH     fhandle
	Offset int64
	Rlen   int32
	PathID byte
}

func decodePgread(h *reqHeader, body []byte) pgreadReq {
	r := pgreadReq{
		Offset: int64(binary.BigEndian.Uint64(h.Params[4:12])),
		Rlen:   int32(binary.BigEndian.Uint32(h.Params[12:16])),
	}
	copy(r.FH[:], h.Params[0:4])
	if len(body) >= 1 {
		r.PathID = body[0]
	}
	return r
}

var reqNames = map[uint16]string{
	kXR_auth: "auth", kXR_query: "query", kXR_chmod: "chmod", kXR_close: "close",
	kXR_dirlist: "dirlist", kXR_gpfile: "gpfile", kXR_protocol: "protocol", kXR_login: "login",
	kXR_mkdir: "mkdir", kXR_mv: "mv", kXR_open: "open", kXR_ping: "ping", kXR_chkpoint: "chkpoint",
	kXR_read: "read", kXR_rm: "rm", kXR_rmdir: "rmdir", kXR_sync: "sync", kXR_stat: "stat",
	kXR_set: "set", kXR_write: "write", kXR_fattr: "fattr", kXR_prepare: "prepare",
	kXR_statx: "statx", kXR_endsess: "endsess", kXR_bind: "bind", kXR_readv: "readv",
	kXR_pgwrite: "pgwrite", kXR_locate: "locate", kXR_truncate: "truncate", kXR_sigver: "sigver",
	kXR_pgread: "pgread", kXR_writev: "writev",
}

func reqName(id uint16) string {
	if n, ok := reqNames[id]; ok {
		return n
	}
	return fmt.Sprintf("request %d", id)
}
