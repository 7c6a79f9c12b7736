// Package rados is the backend.Store of a RADOS pool: the stripes of one
// filesystem are objects in an object namespace of their own in the pool,
// reached with librados through github.com/ceph/go-ceph. It needs the C
// library, so the store is built only with the `ceph` build tag (`go
// build -tags ceph ./cmd/kaon`, librados-dev installed); without it the
// package has only the place grammar and the stripes' names below
// (objects.go, the rest of the format, is built with the store), and
// Available is false.
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
//	kaon.damaged               why the stripe is known damaged, if it is
//	                           (set by MarkDamaged, removed by Rewrite)
//
// Stripes carry no block sums of Kaon's (unlike posix's): BlueStore sums
// every block it stores with crc32c and verifies it on every read, a
// block that fails reading as EIO (and Ceph's own scrub repairs it from
// the pool's other copies).
package rados

import (
	"fmt"
	"net/url"
	"strings"
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

// DefaultObjectSize is the object size of stripes when no setting says.
const DefaultObjectSize = 4 << 20

// headName is the name of the first object of stripe fid.
func headName(fid uint64) string { return fmt.Sprintf("%016x", fid) }

// PhysName names stripe fid of the filesystem at place (for `file info`).
func PhysName(place string, fid uint64) string {
	p, err := ParsePlace(place)
	if err != nil {
		return place + "/" + headName(fid)
	}
	return fmt.Sprintf("rados://%s/%s/%s", p.Pool, p.Namespace, headName(fid))
}
