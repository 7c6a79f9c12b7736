// Package rados is the backend.Store of a RADOS pool: the stripes of one
// filesystem are objects in an object namespace of their own in the pool,
// reached with librados through github.com/ceph/go-ceph. It needs the C
// library, so the store is built only with the `ceph` build tag (`go
// build -tags ceph ./cmd/kaon`, librados-dev installed); without it the
// package has only the naming and parsing below, and Available is false.
//
// A filesystem's place is a URL:
//
//	rados://[USER@]POOL/NAMESPACE[?conf=FILE]
//
// USER is the Ceph client id (client.USER; default: the storage server's
// --ceph-user), FILE the ceph.conf naming the monitors and the keyring
// (default: the storage server's --ceph-conf, else Ceph's default).
//
// Objects in the namespace (format version 1):
//
//	kaon.fsid                  identity marker, "fsid=N\nuuid=U\n" (as posix)
//	<%016x fid>                stripe fid, bytes [0, S): its head object
//	<%016x fid>.<%08x n>       stripe fid, bytes [n*S, (n+1)*S), n >= 1
//
// S is the object size the stripe was written with (Settings.ObjectSize,
// default 4 MiB; 4, 16 and 64 MiB are the sizes the EOS-on-Ceph study
// compared). The head is created exclusively when the stripe is, so a
// stripe is written at most once; its metadata goes into xattrs of the
// head in one operation when the stripe is finished (xattrs, not omap:
// erasure-coded pools have no omap), so a head without kaon.fid is a
// stripe being written or left by a crash:
//
//	kaon.fid kaon.stripe kaon.layout kaon.size kaon.checksums kaon.path
//	                           backend.Meta, as posix's user.kaon.* xattrs
//	kaon.length                bytes in the stripe (decimal)
//	kaon.objsize               S (decimal)
package rados

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/backend"
)

// Place is where a RADOS filesystem lives.
type Place struct {
	User      string // Ceph client id ("" = the storage server's default)
	Pool      string
	Namespace string
	Conf      string // ceph.conf ("" = the storage server's default)
}

// ParsePlace reads rados://[USER@]POOL/NAMESPACE[?conf=FILE].
func ParsePlace(s string) (Place, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "rados" {
		return Place{}, fmt.Errorf("%q is not a RADOS place (rados://[USER@]POOL/NAMESPACE[?conf=FILE])", s)
	}
	p := Place{Pool: u.Host, Namespace: strings.Trim(u.Path, "/"), Conf: u.Query().Get("conf")}
	if u.User != nil {
		p.User = u.User.Username()
	}
	if p.Pool == "" || p.Namespace == "" || strings.Contains(p.Namespace, "/") {
		return Place{}, fmt.Errorf("%q: need a pool and one namespace (rados://[USER@]POOL/NAMESPACE[?conf=FILE])", s)
	}
	return p, nil
}

// markerObject is the identity marker's object.
const markerObject = "kaon.fsid"

// DefaultObjectSize is the object size of stripes when no setting says.
const DefaultObjectSize = 4 << 20

// headName is the name of the first object of stripe fid.
func headName(fid uint64) string { return fmt.Sprintf("%016x", fid) }

// objectName is the name of object n of stripe fid.
func objectName(fid uint64, n int64) string {
	if n == 0 {
		return headName(fid)
	}
	return fmt.Sprintf("%016x.%08x", fid, n)
}

// parseHead returns the fid of a head object's name.
func parseHead(name string) (uint64, bool) {
	if len(name) != 16 {
		return 0, false
	}
	fid, err := strconv.ParseUint(name, 16, 64)
	return fid, err == nil && headName(fid) == name
}

// PhysName names stripe fid of the filesystem at place (for `file info`).
func PhysName(place string, fid uint64) string {
	p, err := ParsePlace(place)
	if err != nil {
		return place + "/" + headName(fid)
	}
	return fmt.Sprintf("rados://%s/%s/%s", p.Pool, p.Namespace, headName(fid))
}

// The head's xattrs.
const (
	xaFid       = "kaon.fid"
	xaStripe    = "kaon.stripe"
	xaLayout    = "kaon.layout"
	xaSize      = "kaon.size"
	xaChecksums = "kaon.checksums"
	xaPath      = "kaon.path"
	xaLength    = "kaon.length"
	xaObjSize   = "kaon.objsize"
)

// encodeMeta is the head's xattrs for a finished stripe.
func encodeMeta(m backend.Meta, length, objSize int64) map[string][]byte {
	var sums []string
	for k, v := range m.Checksums {
		sums = append(sums, k+"="+v)
	}
	return map[string][]byte{
		xaFid: []byte(strconv.FormatUint(m.Fid, 10)), xaStripe: []byte(strconv.Itoa(m.Stripe)),
		xaLayout: []byte(m.Layout), xaSize: []byte(strconv.FormatInt(m.Size, 10)),
		xaChecksums: []byte(strings.Join(sums, ",")), xaPath: []byte(m.Path),
		xaLength: []byte(strconv.FormatInt(length, 10)), xaObjSize: []byte(strconv.FormatInt(objSize, 10)),
	}
}

// errNoMeta: a head without kaon.fid (being written, or left by a crash).
var errNoMeta = fmt.Errorf("no %s xattr (being written, or damaged)", xaFid)

// decodeMeta reads the head's xattrs: the stripe's metadata, its length
// and object size.
func decodeMeta(xa map[string][]byte) (m backend.Meta, length, objSize int64, err error) {
	v, ok := xa[xaFid]
	if !ok {
		return m, 0, 0, errNoMeta
	}
	if m.Fid, err = strconv.ParseUint(string(v), 10, 64); err != nil {
		return m, 0, 0, fmt.Errorf("bad %s %q", xaFid, v)
	}
	m.Stripe, _ = strconv.Atoi(string(xa[xaStripe]))
	m.Size, _ = strconv.ParseInt(string(xa[xaSize]), 10, 64)
	m.Layout, m.Path = string(xa[xaLayout]), string(xa[xaPath])
	m.Checksums = map[string]string{}
	for _, kv := range strings.Split(string(xa[xaChecksums]), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m.Checksums[k] = v
		}
	}
	if length, err = strconv.ParseInt(string(xa[xaLength]), 10, 64); err != nil || length < 0 {
		return m, 0, 0, fmt.Errorf("bad %s %q", xaLength, xa[xaLength])
	}
	if objSize, err = strconv.ParseInt(string(xa[xaObjSize]), 10, 64); err != nil || objSize <= 0 {
		return m, 0, 0, fmt.Errorf("bad %s %q", xaObjSize, xa[xaObjSize])
	}
	return m, length, objSize, nil
}

// marker text, as the posix store writes it.
func encodeMarker(id backend.Identity) []byte {
	return fmt.Appendf(nil, "fsid=%d\nuuid=%s\n", id.FsID, id.UUID)
}

func decodeMarker(b []byte) (backend.Identity, error) {
	var id backend.Identity
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "fsid":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return id, fmt.Errorf("bad fsid in %s", markerObject)
			}
			id.FsID = uint32(n)
		case "uuid":
			id.UUID = v
		}
	}
	if id.FsID == 0 {
		return id, fmt.Errorf("no fsid in %s", markerObject)
	}
	return id, nil
}
