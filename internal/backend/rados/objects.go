//go:build ceph

package rados

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/backend"
)

// The objects and xattrs of the format in the package doc (format.go)
// that only the store itself reads and writes, so built with it.

// markerObject is the identity marker's object.
const markerObject = "kaon.fsid"

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
	xaDamaged   = "kaon.damaged" // why the stripe is known damaged (MarkDamaged)
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
