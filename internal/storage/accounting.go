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

type accounting struct{ m sync.Map } // accountKey -> *account

// of is the account of capability c's client.
func (a *accounting) of(c *capability.Capability) *account {
	k := accountKey{c.UID, c.GID, c.App}
	if v, ok := a.m.Load(k); ok {
		return v.(*account)
	}
	v, _ := a.m.LoadOrStore(k, &account{})
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
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID || out[i].UID == out[j].UID && out[i].App < out[j].App })
	return out
}

// accountedFile counts what is read from a File, and the file once closed.
type accountedFile struct {
	File
	acc *account
}

func (f accountedFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.acc.readBytes.Add(int64(n))
	return n, err
}

func (f accountedFile) Close() error {
	f.acc.reads.Add(1)
	return f.File.Close()
}
