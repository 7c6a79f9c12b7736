package storage

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// I/O accounting (kaon io stat): the bytes and files this server served
// by user, group and application, as the capability names them (the
// namespace put them there), counted since it started and reported in
// every heartbeat; the namespace server turns the counters into rates.

type accountKey struct {
	uid, gid uint32
	app      string
}

// account counts one key's I/O.
type account struct{ readBytes, writeBytes, reads, writes atomic.Int64 }

type accounting struct {
	m sync.Map     // accountKey -> *account
	n atomic.Int64 // accounts in m
}

// maxAccounts bounds the accounts a server keeps (and reports in every
// heartbeat): clients name their application, so beyond it new ones
// count as application "other".
const maxAccounts = 1024

// of is the account of capability c's client.
func (a *accounting) of(c *capability.Capability) *account {
	k := accountKey{c.UID, c.GID, c.App}
	if v, ok := a.m.Load(k); ok {
		return v.(*account)
	}
	if a.n.Load() >= maxAccounts {
		k.app = "other"
		if v, ok := a.m.Load(k); ok {
			return v.(*account)
		}
	}
	v, loaded := a.m.LoadOrStore(k, &account{})
	if !loaded {
		a.n.Add(1)
	}
	return v.(*account)
}

// report is every account's counters.
func (a *accounting) report() []message.IOAccount {
	var out []message.IOAccount
	a.m.Range(func(k, v any) bool {
		key, acc := k.(accountKey), v.(*account)
		out = append(out, message.IOAccount{UID: key.uid, GID: key.gid, App: key.app, ReadBytes: acc.readBytes.Load(),
			WriteBytes: acc.writeBytes.Load(), Reads: acc.reads.Load(), Writes: acc.writes.Load()})
		return true
	})
	sort.Slice(out, func(i, j int) bool {
		return out[i].UID < out[j].UID || out[i].UID == out[j].UID && out[i].App < out[j].App
	})
	return out
}

// Served accounts n bytes of client file f (Open's) its caller served
// without reading them through f's ReadAt (sendfile from its OSFile).
func Served(f File, n int64) {
	switch c := f.(type) {
	case *clientFile:
		c.acc.readBytes.Add(n)
	case clientOSFile:
		c.acc.readBytes.Add(n)
	}
}
