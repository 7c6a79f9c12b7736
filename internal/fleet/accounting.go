package fleet

import (
	"sort"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Accounting is the storage servers' I/O by user, group and application
// (kaon io stat): each heartbeat reports the counters since the server
// started; the differences between reports go into one-minute slots of
// the last hour, summed over the last 1, 5 and 60 minutes on request.
// Kept in memory only: a namespace server that starts (or takes over)
// counts from the storage servers' next reports on. The zero value is
// ready to use.
type Accounting struct {
	mu     sync.Mutex
	last   map[string]map[ioKey]message.IOAccount // by node: its last report
	series map[ioKey]*[60]ioMinute
}

type ioKey struct {
	uid, gid uint32
	app      string
}

// ioMinute is one minute's I/O of a key.
type ioMinute struct {
	min                                  int64 // unix minute
	readBytes, writeBytes, reads, writes int64
}

// Note records node's report at now.
func (st *Accounting) Note(node string, accounts []message.IOAccount, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last == nil {
		st.last, st.series = map[string]map[ioKey]message.IOAccount{}, map[ioKey]*[60]ioMinute{}
	}
	prev, seen := st.last[node]
	cur := make(map[ioKey]message.IOAccount, len(accounts))
	minute := now.Unix() / 60
	for _, a := range accounts {
		k := ioKey{a.UID, a.GID, a.App}
		cur[k] = a
		if !seen {
			continue // the first report: what it counts happened before this server knew
		}
		p := prev[k]
		if a.ReadBytes < p.ReadBytes || a.WriteBytes < p.WriteBytes || a.Reads < p.Reads || a.Writes < p.Writes {
			p = message.IOAccount{} // the storage server restarted
		}
		d := ioMinute{readBytes: a.ReadBytes - p.ReadBytes, writeBytes: a.WriteBytes - p.WriteBytes, reads: a.Reads - p.Reads, writes: a.Writes - p.Writes}
		if d == (ioMinute{}) {
			continue
		}
		s := st.series[k]
		if s == nil {
			s = &[60]ioMinute{}
			st.series[k] = s
		}
		slot := &s[minute%60]
		if slot.min != minute {
			*slot = ioMinute{min: minute}
		}
		slot.readBytes += d.readBytes
		slot.writeBytes += d.writeBytes
		slot.reads += d.reads
		slot.writes += d.writes
	}
	st.last[node] = cur
}

// ioWindows are the windows io stat sums over.
var ioWindows = []time.Duration{time.Minute, 5 * time.Minute, time.Hour}

// Stat is the I/O by user, group and application over the last minute,
// 5 minutes and hour at now, of uid (negative: every user) and app
// ("": every application), by uid, gid and application.
func (st *Accounting) Stat(uid int64, app string, at time.Time) []nsapi.IORow {
	now := at.Unix() / 60
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []nsapi.IORow
	for k, series := range st.series {
		if (uid >= 0 && int64(k.uid) != uid) || (app != "" && k.app != app) {
			continue
		}
		row := nsapi.IORow{UID: k.uid, GID: k.gid, App: k.app}
		for _, w := range ioWindows {
			iw := nsapi.IOWindow{Seconds: int(w.Seconds())}
			for _, m := range series {
				if age := now - m.min; age >= 0 && age < int64(w/time.Minute) {
					iw.ReadBytes += m.readBytes
					iw.WriteBytes += m.writeBytes
					iw.Reads += m.reads
					iw.Writes += m.writes
				}
			}
			row.Windows = append(row.Windows, iw)
		}
		if row.Windows[len(row.Windows)-1] != (nsapi.IOWindow{Seconds: int(time.Hour.Seconds())}) {
			out = append(out, row)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.UID != b.UID {
			return a.UID < b.UID
		}
		if a.GID != b.GID {
			return a.GID < b.GID
		}
		return a.App < b.App
	})
	return out
}
