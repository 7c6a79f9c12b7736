package namespace

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Quotas. A quota node is a directory with limits on the bytes and files
// stored below it, per user ('u'), per group ('g') and for everybody
// together (project, 'p', id 0). The nearest quota node above a file
// counts it: usage is kept per node and per owner in "U" keys, changed in
// the same batch as the file (so it survives restarts and always matches a
// recount). Uploads book the size their client announced when they begin
// (in memory: a restart aborts every pending upload, a clean handover
// passes the bookings on), and are checked
// again with their real size when they commit; both happen under the
// namespace lock, so racing uploads never take a node above its limit.
// Directories are not counted.

// Quota kinds.
const (
	QuotaUser    = 'u'
	QuotaGroup   = 'g'
	QuotaProject = 'p'
)

// QuotaKey names one limit of a node: a user, a group, or the project.
type QuotaKey struct {
	Kind byte
	ID   uint32
}

func (k QuotaKey) String() string {
	switch k.Kind {
	case QuotaUser:
		return "user " + strconv.FormatUint(uint64(k.ID), 10)
	case QuotaGroup:
		return "group " + strconv.FormatUint(uint64(k.ID), 10)
	}
	return "project"
}

// Amount is bytes and files (a limit, a usage or a booking). A zero
// field of a limit means no limit on it.
type Amount struct {
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"`
}

func (a Amount) add(b Amount) Amount { return Amount{a.Bytes + b.Bytes, a.Files + b.Files} }
func (a Amount) neg() Amount         { return Amount{-a.Bytes, -a.Files} }

// quotaNode is a quota node's state in memory.
type quotaNode struct {
	limits map[QuotaKey]Amount
	used   map[QuotaKey]Amount
	booked map[QuotaKey]Amount // by uploads in flight
}

// QuotaReport is a quota node for `quota ls`.
type QuotaReport struct {
	Path   string
	Limits map[QuotaKey]Amount
	Used   map[QuotaKey]Amount
	Booked map[QuotaKey]Amount
}

// booking is what an upload in flight holds of its quota node.
type booking struct {
	node     uint64
	uid, gid uint32
	amount   Amount
}

func quotaKeyBytes(prefix byte, cid uint64, k QuotaKey) []byte {
	b := u64([]byte{prefix}, cid)
	b = append(b, k.Kind)
	return binary.BigEndian.AppendUint32(b, k.ID)
}

func encodeAmount(a Amount) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(a.Bytes))
	return binary.BigEndian.AppendUint64(b, uint64(a.Files))
}

func decodeAmount(v []byte) Amount {
	if len(v) != 16 {
		return Amount{}
	}
	return Amount{int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))}
}

// loadQuotas reads every quota node's limits and usage.
func (ns *Namespace) loadQuotas() error {
	ns.quota = map[uint64]*quotaNode{}
	node := func(cid uint64) *quotaNode {
		q := ns.quota[cid]
		if q == nil {
			q = &quotaNode{limits: map[QuotaKey]Amount{}, used: map[QuotaKey]Amount{}, booked: map[QuotaKey]Amount{}}
			ns.quota[cid] = q
		}
		return q
	}
	for _, prefix := range []byte{'Q', 'U'} {
		err := ns.eng.Scan([]byte{prefix}, []byte{prefix + 1}, func(k, v []byte) bool {
			if len(k) != 14 {
				return true
			}
			cid := binary.BigEndian.Uint64(k[1:])
			key := QuotaKey{Kind: k[9], ID: binary.BigEndian.Uint32(k[10:])}
			if prefix == 'Q' {
				node(cid).limits[key] = decodeAmount(v)
			} else if q := ns.quota[cid]; q != nil {
				q.used[key] = decodeAmount(v)
			}
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// quotaNodeOf returns the nearest quota node at or above container cid
// (0 if none). Caller holds ns.mu.
func (ns *Namespace) quotaNodeOf(cid uint64) uint64 {
	if len(ns.quota) == 0 {
		return 0
	}
	for {
		if _, ok := ns.quota[cid]; ok {
			return cid
		}
		if cid == RootID || ns.isBin(cid) {
			return 0
		}
		d, err := ns.dir(cid)
		if err != nil {
			return 0
		}
		cid = d.Parent
	}
}

// ownerKeys are the three usages a file of uid/gid counts in.
func ownerKeys(uid, gid uint32) [3]QuotaKey {
	return [3]QuotaKey{{QuotaUser, uid}, {QuotaGroup, gid}, {QuotaProject, 0}}
}

// usage is node q's usage of k including this mutation's changes.
func (tx *txn) usage(q *quotaNode, cid uint64, k QuotaKey) Amount {
	return q.used[k].add(tx.quotaDelta[quotaRef{cid, k}])
}

type quotaRef struct {
	node uint64
	key  QuotaKey
}

// charge counts a change of files owned by uid/gid below container cid
// in its quota node (a no-op without one). The usage keys are written in
// tx; memory follows when tx commits.
func (ns *Namespace) charge(tx *txn, cid uint64, uid, gid uint32, d Amount) {
	node := ns.quotaNodeOf(cid)
	if node == 0 || d == (Amount{}) {
		return
	}
	q := ns.quota[node]
	if tx.quotaDelta == nil {
		tx.quotaDelta = map[quotaRef]Amount{}
	}
	for _, k := range ownerKeys(uid, gid) {
		ref := quotaRef{node, k}
		tx.quotaDelta[ref] = tx.quotaDelta[ref].add(d)
		tx.put(quotaKeyBytes('U', node, k), encodeAmount(tx.usage(q, node, k)))
	}
}

// fits checks that adding want for uid/gid below container cid keeps
// every limit of its quota node, counting uploads in flight (except the
// booking `own`, when the check is for that upload's commit).
func (ns *Namespace) fits(tx *txn, cid uint64, uid, gid uint32, want Amount, path string) error {
	node := ns.quotaNodeOf(cid)
	if node == 0 {
		return nil
	}
	q := ns.quota[node]
	for _, k := range ownerKeys(uid, gid) {
		lim, ok := q.limits[k]
		if !ok {
			continue
		}
		have := tx.usage(q, node, k).add(q.booked[k]).add(tx.bookDelta[quotaRef{node, k}])
		after := have.add(want)
		switch {
		case lim.Bytes > 0 && want.Bytes > 0 && after.Bytes > lim.Bytes:
			return kerr.New(kerr.Quota, "", path, fmt.Sprintf("%s quota exceeded: %d of %d bytes used or booked, %d more needed",
				k, have.Bytes, lim.Bytes, want.Bytes))
		case lim.Files > 0 && want.Files > 0 && after.Files > lim.Files:
			return kerr.New(kerr.Quota, "", path, fmt.Sprintf("%s quota exceeded: %d of %d files", k, have.Files, lim.Files))
		}
	}
	return nil
}

// book reserves a for an upload of fid (uid/gid below container cid) and
// says so in tx; the booking takes effect when tx commits.
func (ns *Namespace) book(tx *txn, fid, cid uint64, uid, gid uint32, a Amount) {
	node := ns.quotaNodeOf(cid)
	if node == 0 {
		return
	}
	if tx.bookDelta == nil {
		tx.bookDelta = map[quotaRef]Amount{}
	}
	for _, k := range ownerKeys(uid, gid) {
		ref := quotaRef{node, k}
		tx.bookDelta[ref] = tx.bookDelta[ref].add(a)
	}
	tx.bookings = append(tx.bookings, bookingChange{fid: fid, b: &booking{node: node, uid: uid, gid: gid, amount: a}})
}

// unbook releases fid's booking when tx commits.
func (ns *Namespace) unbook(tx *txn, fid uint64) {
	b := ns.bookings[fid]
	if b == nil {
		return
	}
	for _, c := range tx.bookings {
		if c.fid == fid && c.b == nil {
			return // already released in this mutation
		}
	}
	if tx.bookDelta == nil {
		tx.bookDelta = map[quotaRef]Amount{}
	}
	for _, k := range ownerKeys(b.uid, b.gid) {
		ref := quotaRef{b.node, k}
		tx.bookDelta[ref] = tx.bookDelta[ref].add(b.amount.neg())
	}
	tx.bookings = append(tx.bookings, bookingChange{fid: fid})
}

type bookingChange struct {
	fid uint64
	b   *booking // nil: released
}

// applyQuota makes a committed mutation's quota changes visible in
// memory. Caller holds ns.mu.
func (ns *Namespace) applyQuota(tx *txn) {
	for ref, d := range tx.quotaDelta {
		if q := ns.quota[ref.node]; q != nil {
			q.used[ref.key] = q.used[ref.key].add(d)
		}
	}
	for ref, d := range tx.bookDelta {
		if q := ns.quota[ref.node]; q != nil {
			q.booked[ref.key] = q.booked[ref.key].add(d)
			if q.booked[ref.key] == (Amount{}) {
				delete(q.booked, ref.key)
			}
		}
	}
	for _, c := range tx.bookings {
		if c.b == nil {
			delete(ns.bookings, c.fid)
		} else {
			ns.bookings[c.fid] = c.b
		}
	}
}

// chargeKeys counts per-key amounts (a moved tree) in quota node node.
func (ns *Namespace) chargeKeys(tx *txn, node uint64, used map[QuotaKey]Amount, sign int64) {
	q := ns.quota[node]
	if q == nil {
		return
	}
	if tx.quotaDelta == nil {
		tx.quotaDelta = map[quotaRef]Amount{}
	}
	for k, a := range used {
		ref := quotaRef{node, k}
		tx.quotaDelta[ref] = tx.quotaDelta[ref].add(Amount{sign * a.Bytes, sign * a.Files})
		tx.put(quotaKeyBytes('U', node, k), encodeAmount(tx.usage(q, node, k)))
	}
}

// fitsKeys checks per-key amounts against node's limits.
func (ns *Namespace) fitsKeys(tx *txn, node uint64, want map[QuotaKey]Amount, path string) error {
	q := ns.quota[node]
	if q == nil {
		return nil
	}
	for k, a := range want {
		lim, ok := q.limits[k]
		if !ok {
			continue
		}
		after := tx.usage(q, node, k).add(q.booked[k]).add(a)
		if (lim.Bytes > 0 && a.Bytes > 0 && after.Bytes > lim.Bytes) || (lim.Files > 0 && a.Files > 0 && after.Files > lim.Files) {
			return kerr.New(kerr.Quota, "", path, fmt.Sprintf("%s quota of the destination exceeded: %d bytes / %d files after the move, limit %d / %d",
				k, after.Bytes, after.Files, lim.Bytes, lim.Files))
		}
	}
	return nil
}

// moveUsage moves the usage of n (a file, or a tree) from the quota node
// of container from to that of container to, checking the destination's
// limits first. Caller holds ns.mu.
func (ns *Namespace) moveUsage(tx *txn, n *Inode, from, to uint64, path string) error {
	src, dst := ns.quotaNodeOf(from), ns.quotaNodeOf(to)
	if src == dst {
		return nil
	}
	var used map[QuotaKey]Amount
	switch {
	case !n.IsDir:
		used = map[QuotaKey]Amount{}
		for _, k := range ownerKeys(n.UID, n.GID) {
			used[k] = Amount{n.Size, 1}
		}
	case ns.quota[n.ID] != nil:
		return nil // a quota node counts its own files wherever it is
	default:
		var err error
		if used, err = ns.countBelow(n); err != nil {
			return kerr.Wrap(kerr.Internal, "mv", path, err)
		}
	}
	if dst != 0 {
		if err := ns.fitsKeys(tx, dst, used, path); err != nil {
			return err
		}
	}
	ns.chargeKeys(tx, src, used, -1)
	ns.chargeKeys(tx, dst, used, 1)
	return nil
}

// dropQuotaNode forgets the quota of directory d being removed.
func (ns *Namespace) dropQuotaNode(tx *txn, d *Inode) {
	q := ns.quota[d.ID]
	if q == nil {
		return
	}
	for k := range q.limits {
		tx.del(quotaKeyBytes('Q', d.ID, k))
		tx.quotaLimit = append(tx.quotaLimit, quotaLimitChange{d.ID, k, Amount{}, true})
	}
	for k := range q.used {
		tx.del(quotaKeyBytes('U', d.ID, k))
	}
}

// SetQuota sets the limit of key on the directory at path (making it a
// quota node; its usage is counted from what is below it now).
func (ns *Namespace) SetQuota(c Caller, path string, key QuotaKey, limit Amount) error {
	if key.Kind != QuotaUser && key.Kind != QuotaGroup && key.Kind != QuotaProject {
		return kerr.New(kerr.Invalid, "quota set", path, "quota kind must be user, group or project")
	}
	if limit.Bytes < 0 || limit.Files < 0 {
		return kerr.New(kerr.Invalid, "quota set", path, "negative limit")
	}
	if key.Kind == QuotaProject {
		key.ID = 0
	}
	return ns.mutate("quota set", func(tx *txn) error {
		p, d, _, err := ns.lookup(c, "quota set", path)
		if err != nil {
			return err
		}
		if d == nil || !d.IsDir {
			return kerr.New(kerr.NotDir, "quota set", p, "quota nodes are directories")
		}
		if IsVersionDir(d.Name) {
			return kerr.New(kerr.Invalid, "quota set", p, "a version folder counts in its file's quota node")
		}
		tx.put(quotaKeyBytes('Q', d.ID, key), encodeAmount(limit))
		if _, ok := ns.quota[d.ID]; !ok {
			used, err := ns.countBelow(d)
			if err != nil {
				return kerr.Wrap(kerr.Internal, "quota set", p, err)
			}
			for k, a := range used {
				tx.put(quotaKeyBytes('U', d.ID, k), encodeAmount(a))
			}
			tx.newQuota = &newQuotaNode{cid: d.ID, used: used}
		}
		tx.quotaLimit = append(tx.quotaLimit, quotaLimitChange{d.ID, key, limit, false})
		return nil
	})
}

// RemoveQuota removes the limit of key from the directory at path; the
// last limit removed makes it an ordinary directory again.
func (ns *Namespace) RemoveQuota(c Caller, path string, key QuotaKey) error {
	if key.Kind == QuotaProject {
		key.ID = 0
	}
	return ns.mutate("quota rm", func(tx *txn) error {
		p, d, _, err := ns.lookup(c, "quota rm", path)
		if err != nil {
			return err
		}
		var q *quotaNode
		if d != nil {
			q = ns.quota[d.ID]
		}
		if q == nil {
			return kerr.New(kerr.NotFound, "quota rm", p, "not a quota node")
		}
		if _, ok := q.limits[key]; !ok {
			return kerr.New(kerr.NotFound, "quota rm", p, "no "+key.String()+" quota here")
		}
		tx.del(quotaKeyBytes('Q', d.ID, key))
		if len(q.limits) == 1 {
			for k := range q.used {
				tx.del(quotaKeyBytes('U', d.ID, k))
			}
		}
		tx.quotaLimit = append(tx.quotaLimit, quotaLimitChange{d.ID, key, Amount{}, true})
		return nil
	})
}

type newQuotaNode struct {
	cid  uint64
	used map[QuotaKey]Amount
}

type quotaLimitChange struct {
	cid     uint64
	key     QuotaKey
	limit   Amount
	removed bool
}

// applyQuotaLimits installs committed limit changes. Caller holds ns.mu.
func (ns *Namespace) applyQuotaLimits(tx *txn) {
	if n := tx.newQuota; n != nil {
		ns.quota[n.cid] = &quotaNode{limits: map[QuotaKey]Amount{}, used: n.used, booked: map[QuotaKey]Amount{}}
	}
	for _, ch := range tx.quotaLimit {
		q := ns.quota[ch.cid]
		if ch.removed {
			delete(q.limits, ch.key)
			if len(q.limits) == 0 {
				delete(ns.quota, ch.cid)
			}
		} else {
			q.limits[ch.key] = ch.limit
		}
	}
}

// countBelow recounts the files below container d that its quota node
// would count (those not below a nested quota node).
func (ns *Namespace) countBelow(d *Inode) (map[QuotaKey]Amount, error) {
	used := map[QuotaKey]Amount{}
	var walk func(d *Inode) error
	walk = func(d *Inode) error {
		var dirs []*Inode
		err := ns.scanDir(d, func(n *Inode) {
			if n.IsDir {
				if _, nested := ns.quota[n.ID]; !nested {
					dirs = append(dirs, n)
				}
				return
			}
			for _, k := range ownerKeys(n.UID, n.GID) {
				used[k] = used[k].add(Amount{n.Size, 1})
			}
		})
		if err != nil {
			return err
		}
		for _, sub := range dirs {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return used, walk(d)
}

// Quotas reports the quota nodes at or below path.
func (ns *Namespace) Quotas(c Caller, path string) ([]QuotaReport, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	p, d, _, err := ns.lookup(c, "quota ls", path)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, kerr.New(kerr.NotFound, "quota ls", p, "no such directory")
	}
	var out []QuotaReport
	for cid, q := range ns.quota {
		qd, err := ns.dir(cid)
		if err != nil {
			continue
		}
		qp, err := ns.pathOf(qd)
		if err != nil || !nsapi.IsAncestor(p, qp) {
			continue
		}
		r := QuotaReport{Path: qp, Limits: map[QuotaKey]Amount{}, Used: map[QuotaKey]Amount{}, Booked: map[QuotaKey]Amount{}}
		for k, v := range q.limits {
			r.Limits[k] = v
		}
		for k, v := range q.used {
			r.Used[k] = v
		}
		for k, v := range q.booked {
			r.Booked[k] = v
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// RecountQuota recounts the usage of the quota node at path from the files
// below it (what the stored counters must equal).
func (ns *Namespace) RecountQuota(c Caller, path string) (map[QuotaKey]Amount, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	p, d, _, err := ns.lookup(c, "quota recount", path)
	if err != nil {
		return nil, err
	}
	if d == nil || ns.quota[d.ID] == nil {
		return nil, kerr.New(kerr.NotFound, "quota recount", p, "not a quota node")
	}
	return ns.countBelow(d)
}
