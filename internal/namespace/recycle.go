package namespace

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// The recycle bin. A directory with sys.recycle set (new directories below
// inherit it) makes deletes below it recoverable: the deleted file or tree
// is moved, whole, into a hidden container (the bin, key "B") under a key,
// and described by a record ("R" key). Its data stays on the storage
// servers and keeps counting against the quota node it came from until it
// is purged (by its owner, by root, or by the lifetime and size limits the
// namespace server enforces); restore moves it back. nsapi.AttrRecycle
// turns it on.

// RecycleEntry describes one recycled file or tree.
type RecycleEntry struct {
	Key   string              `json:"key"`
	Path  string              `json:"path"` // where it was deleted from
	Ino   uint64              `json:"ino"`
	Dir   bool                `json:"dir"`
	UID   uint32              `json:"uid"`
	GID   uint32              `json:"gid"`
	Size  int64               `json:"size"`  // bytes (a tree: all its files)
	Files int64               `json:"files"` // files (a tree: all of them)
	Dirs  int64               `json:"dirs"`  // directories (a tree: with itself)
	Time  int64               `json:"time"`  // deletion, unix ns
	Node  uint64              `json:"node"`  // the quota node it still counts in (0: none)
	Usage map[QuotaKey]Amount `json:"-"`
	Used  []quotaUsageWire    `json:"usage,omitempty"`
}

type quotaUsageWire struct {
	Kind  byte   `json:"k"`
	ID    uint32 `json:"i"`
	Bytes int64  `json:"b"`
	Files int64  `json:"f"`
}

func recycleKey(key string) []byte { return append([]byte{'R'}, key...) }

func (e *RecycleEntry) encode() []byte {
	e.Used = e.Used[:0]
	for k, a := range e.Usage {
		e.Used = append(e.Used, quotaUsageWire{k.Kind, k.ID, a.Bytes, a.Files})
	}
	b, _ := json.Marshal(e)
	return b
}

func decodeRecycle(v []byte) (*RecycleEntry, error) {
	var e RecycleEntry
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, err
	}
	e.Usage = map[QuotaKey]Amount{}
	for _, u := range e.Used {
		e.Usage[QuotaKey{u.Kind, u.ID}] = Amount{u.Bytes, u.Files}
	}
	return &e, nil
}

// bin returns the bin container, creating it in tx if needed. It is its
// own parent, like the root, and no directory entry names it: no path
// reaches it.
func (ns *Namespace) bin(tx *txn) (*Inode, error) {
	if ns.binID == 0 {
		v, err := ns.eng.Get([]byte("B"))
		switch {
		case err == nil && len(v) == 8:
			ns.binID = binary.BigEndian.Uint64(v)
		case errors.Is(err, kv.ErrNotFound) && tx != nil:
			now := ns.opts.Now().UnixNano()
			id := ns.allocID(tx)
			d := &Inode{ID: id, Parent: id, Name: ".kaon-recycle", IsDir: true, Mode: 0o700,
				CTime: now, MTime: now, BTime: now, TreeMTime: now}
			tx.put(inodeKey(d.ID), d.encode(nil))
			tx.put([]byte("B"), u64(nil, d.ID))
			ns.cacheDir(tx, d)
			ns.binID, tx.binCreated = d.ID, true
		case errors.Is(err, kv.ErrNotFound):
			return nil, nil
		default:
			return nil, err
		}
	}
	return ns.dir(ns.binID)
}

// recycling reports whether deletes in container parent are recycled.
func recycling(parent *Inode) bool {
	v := parent.XAttrs[nsapi.AttrRecycle]
	return v != "" && v != "off"
}

// recycle moves n (whose removal was authorized) from parent into the
// bin. Caller holds ns.mu and accounts for the removal from parent.
func (ns *Namespace) recycle(tx *txn, c Caller, parent, n *Inode, p string) error {
	b, err := ns.bin(tx)
	if err != nil {
		return err
	}
	now := ns.opts.Now().UnixNano()
	key := fmt.Sprintf("%016x-%x", now, n.ID)
	e := &RecycleEntry{Key: key, Path: p, Ino: n.ID, Dir: n.IsDir, UID: n.UID, GID: n.GID, Time: now,
		Node: ns.quotaNodeOf(parent.ID), Size: n.Size, Files: 1}
	switch {
	case n.IsDir:
		e.Size, e.Files, e.Dirs = n.TreeSize, n.TreeFiles, n.TreeDirs+1
		if e.Node != 0 && ns.quota[n.ID] == nil {
			if e.Usage, err = ns.countBelow(n); err != nil {
				return err
			}
		}
		ns.uncacheDir(tx, n)
		n.Parent, n.Name = b.ID, key
		ns.cacheDir(tx, n)
		tx.put(inodeKey(n.ID), n.encode(nil))
		tx.put(dentryKey(b.ID, key), u64([]byte{'d'}, n.ID))
		if q := ns.quota[n.ID]; q != nil { // a quota node counts itself: nothing to keep
			e.Node = 0
		}
	default:
		if e.Node != 0 {
			e.Usage = map[QuotaKey]Amount{}
			for _, k := range ownerKeys(n.UID, n.GID) {
				e.Usage[k] = Amount{n.Size, 1}
			}
		}
		n.Parent, n.Name = b.ID, key
		putFile(tx, n)
		tx.put(inodeKey(n.ID), fileIndex(b.ID, key))
	}
	tx.del(dentryKey(parent.ID, path.Base(p)))
	tx.put(recycleKey(key), e.encode())
	tx.emit(Event{Kind: Removed, Ino: n.ID, Parent: parent.ID, Name: path.Base(p), IsDir: n.IsDir})
	return nil
}

// RecycleList returns the recycled entries c may see (root: all; others:
// their own), oldest first.
func (ns *Namespace) RecycleList(c Caller) ([]RecycleEntry, error) {
	var out []RecycleEntry
	var derr error
	err := ns.eng.Scan([]byte{'R'}, []byte{'S'}, func(_, v []byte) bool {
		e, err := decodeRecycle(v)
		if err != nil {
			derr = err
			return false
		}
		if c.UID == 0 || c.UID == e.UID {
			out = append(out, *e)
		}
		return true
	})
	if err = errors.Join(err, derr); err != nil {
		return nil, kerr.Wrap(kerr.Internal, "recycle ls", "", err)
	}
	return out, nil
}

// entry reads recycle entry key and checks c may act on it.
func (ns *Namespace) recycleEntry(c Caller, op, key string) (*RecycleEntry, error) {
	v, err := ns.eng.Get(recycleKey(key))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, kerr.New(kerr.NotFound, op, key, "no such recycle entry")
	}
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, op, key, err)
	}
	e, err := decodeRecycle(v)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, op, key, err)
	}
	if c.UID != 0 && c.UID != e.UID {
		return nil, kerr.New(kerr.Permission, op, key, "only the owner or root may do this")
	}
	return e, nil
}

// RecycleRestore moves entry key back to where it was deleted from (the
// directory must exist and c may write there). An existing entry there is
// never overwritten: with forceRename the restored one is put beside it,
// named NAME.restored-KEY. It returns the path restored to.
func (ns *Namespace) RecycleRestore(c Caller, key string, forceRename bool) (restored string, err error) {
	err = ns.mutate("recycle restore", func(tx *txn) error {
		e, err := ns.recycleEntry(c, "recycle restore", key)
		if err != nil {
			return err
		}
		target := e.Path
		_, old, parent, err := ns.lookup(c, "recycle restore", target)
		if err != nil {
			return err
		}
		if parent == nil || !parent.IsDir {
			return kerr.New(kerr.NotFound, "recycle restore", target, "the directory it was deleted from no longer exists")
		}
		if old != nil {
			if !forceRename {
				return kerr.New(kerr.Exists, "recycle restore", target, "something exists there now (restore with --force-rename to put it beside)")
			}
			target = target + ".restored-" + key
			if o, _ := ns.child(parent.ID, path.Base(target)); o != nil {
				return kerr.New(kerr.Exists, "recycle restore", target, "exists")
			}
		}
		if !ns.permits(c, parent, parent, Write|Search) {
			return kerr.New(kerr.Permission, "recycle restore", target, "write permission denied on parent")
		}
		b, err := ns.bin(nil)
		if err != nil || b == nil {
			return kerr.New(kerr.Internal, "recycle restore", key, "recycle bin missing")
		}
		n, err := ns.child(b.ID, key)
		if err != nil || n == nil {
			return kerr.New(kerr.Internal, "recycle restore", key, "recycled inode missing")
		}
		name := path.Base(target)
		delete(ns.floors, parent.ID) // a version put back may be below its folder's floor
		tx.del(dentryKey(b.ID, key))
		if n.IsDir {
			ns.uncacheDir(tx, n)
			n.Parent, n.Name = parent.ID, name
			ns.cacheDir(tx, n)
			tx.put(inodeKey(n.ID), n.encode(nil))
			tx.put(dentryKey(parent.ID, name), u64([]byte{'d'}, n.ID))
		} else {
			n.Parent, n.Name = parent.ID, name
			putFile(tx, n)
			tx.put(inodeKey(n.ID), fileIndex(parent.ID, name))
		}
		tx.del(recycleKey(key))
		// Quota: it counted where it was deleted; count it where it is now.
		if node := ns.quotaNodeOf(parent.ID); node != e.Node {
			ns.chargeKeys(tx, e.Node, e.Usage, -1)
			if node != 0 && ns.quota[n.ID] == nil {
				used := e.Usage
				if n.IsDir {
					if used, err = ns.countBelow(n); err != nil {
						return kerr.Wrap(kerr.Internal, "recycle restore", target, err)
					}
				}
				ns.chargeKeys(tx, node, used, 1)
			}
		}
		now := ns.opts.Now().UnixNano()
		ns.touch(tx, parent, now)
		if err := ns.account(tx, parent.ID, e.Size, e.Files, e.Dirs, now); err != nil {
			return kerr.Wrap(kerr.Internal, "recycle restore", target, err)
		}
		ev := Event{Kind: Committed, Ino: n.ID, Parent: parent.ID, Name: name, IsDir: n.IsDir, Size: n.Size, MTime: n.MTime}
		if n.IsDir {
			ev.Kind = Mkdir
		}
		tx.emit(ev)
		restored = target
		return nil
	})
	return restored, err
}

// RecyclePurge removes recycle entries for good (their data is queued for
// deletion): key "" means all c may see; olderThan > 0 only those deleted
// longer ago. It returns how many were purged.
func (ns *Namespace) RecyclePurge(c Caller, key string, olderThan time.Duration) (int, error) {
	var keys []string
	if key != "" {
		keys = []string{key}
	} else {
		es, err := ns.RecycleList(c)
		if err != nil {
			return 0, err
		}
		cut := ns.opts.Now().Add(-olderThan).UnixNano()
		for _, e := range es {
			if olderThan <= 0 || e.Time < cut {
				keys = append(keys, e.Key)
			}
		}
	}
	n := 0
	step := 256
	if l, ok := ns.eng.(kv.Limiter); ok { // a replicated store: smaller commits
		step = max(l.Limits().Ops/16, 1)
	}
	for len(keys) > 0 {
		// Bounded batches: a huge bin is purged in several mutations.
		chunk := keys[:min(len(keys), step)]
		keys = keys[len(chunk):]
		err := ns.mutate("recycle purge", func(tx *txn) error {
			for _, k := range chunk {
				e, err := ns.recycleEntry(c, "recycle purge", k)
				if err != nil {
					if key == "" && kerr.Is(err, kerr.NotFound) {
						continue // purged meanwhile
					}
					return err
				}
				if err := ns.purgeEntry(tx, e); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// purgeEntry unlinks recycled entry e for good. Caller holds ns.mu.
func (ns *Namespace) purgeEntry(tx *txn, e *RecycleEntry) error {
	b, err := ns.bin(nil)
	if err != nil || b == nil {
		return kerr.New(kerr.Internal, "recycle purge", e.Key, "recycle bin missing")
	}
	n, err := ns.child(b.ID, e.Key)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "recycle purge", e.Key, err)
	}
	if n != nil {
		if n.IsDir {
			if err := ns.removeTree(Root, tx, b, n); err != nil {
				return err
			}
		} else {
			ns.unlinkFile(tx, b, n)
		}
	}
	ns.chargeKeys(tx, e.Node, e.Usage, -1)
	tx.del(recycleKey(e.Key))
	return nil
}

// RecycleExpire purges entries deleted longer than lifetime ago (if > 0)
// and then the oldest ones while the bin holds more than maxBytes (if > 0).
func (ns *Namespace) RecycleExpire(lifetime time.Duration, maxBytes int64) (int, error) {
	es, err := ns.RecycleList(Root)
	if err != nil || len(es) == 0 {
		return 0, err
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Time < es[j].Time })
	var total int64
	for _, e := range es {
		total += e.Size
	}
	cut := ns.opts.Now().Add(-lifetime).UnixNano()
	purged := 0
	for _, e := range es {
		expired := lifetime > 0 && e.Time < cut
		if !expired && !(maxBytes > 0 && total > maxBytes) {
			break
		}
		if _, err := ns.RecyclePurge(Root, e.Key, 0); err != nil && !kerr.Is(err, kerr.NotFound) {
			return purged, err
		}
		total -= e.Size
		purged++
	}
	return purged, nil
}

// isBin reports whether id is the recycle bin (quota walks stop there).
func (ns *Namespace) isBin(id uint64) bool { return id != 0 && id == ns.binID }
