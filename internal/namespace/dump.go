package namespace

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// dumpBatch is how many directory entries Dump reads under one hold of
// the namespace lock: writers wait for one batch, never for a client
// reading the dump.
const dumpBatch = 4096

// Dump calls fn with the path of every file below the directory at path
// (or of path itself when it is a file), depth first: a directory's
// files in name order, then its subdirectories in name order; version
// folders, the recycle bin and symbolic links (no data of their own) are
// left out (what a namespace dump for Rucio's consistency checks lists). It
// reads the directory entries' keys only (no record is decoded) a batch
// at a time, so a dump runs beside the writes it does not block and is
// not a snapshot: a file created or removed while it runs may be listed
// or not. An error of fn ends the dump with that error.
func (ns *Namespace) Dump(c Caller, path string, fn func(path string) error) error {
	ns.mu.RLock()
	p, n, _, err := ns.lookup(c, "ns dump", path)
	ns.mu.RUnlock()
	switch {
	case err != nil:
		return err
	case n == nil:
		return kerr.New(kerr.NotFound, "ns dump", p, "no such file or directory")
	case n.IsLink():
		return nil
	case !n.IsDir:
		return fn(p)
	}
	type dir struct {
		path string
		id   uint64
	}
	stack := []dir{{strings.TrimSuffix(p, "/"), n.ID}}
	var names []string
	var subdirs []dir
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		prefix := dentryPrefix(d.id)
		from, end := prefix, kv.PrefixEnd(prefix)
		subdirs = subdirs[:0]
		for from != nil {
			names = names[:0]
			var last []byte
			seen := 0
			ns.mu.RLock()
			err := ns.eng.Scan(from, end, func(k, v []byte) bool {
				name := string(k[len(prefix):])
				if seen++; seen == dumpBatch {
					last = slices.Clone(k) // the scan's buffer is not ours after it
				}
				if len(v) >= 9 && v[0] == 'd' {
					if cid := binary.BigEndian.Uint64(v[1:9]); !IsVersionDir(name) && !ns.isBin(cid) {
						subdirs = append(subdirs, dir{d.path + "/" + name, cid})
					}
				} else if !isLinkEntry(v) {
					names = append(names, name)
				}
				return seen < dumpBatch
			})
			ns.mu.RUnlock()
			if err != nil {
				return kerr.Wrap(kerr.Internal, "ns dump", d.path, err)
			}
			from = nil
			if seen == dumpBatch {
				from = append(last, 0)
			}
			for _, name := range names {
				if err := fn(d.path + "/" + name); err != nil {
					return err
				}
			}
		}
		// Depth first, in name order: push the subdirectories reversed.
		for i := len(subdirs) - 1; i >= 0; i-- {
			stack = append(stack, subdirs[i])
		}
	}
	return nil
}
