package nsserver

import (
	"context"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestIOStatWindows: a storage server's first report is its baseline
// (what it counted before is not this server's to show), later ones add
// their differences to the minute they arrive in, a restarted server's
// counters count from zero, and the windows sum the last 1, 5 and 60
// minutes, of one user and application when asked.
func TestIOStatWindows(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000_000*60, 0)
	s := newServer(t)
	s.now = func() time.Time { return now }
	report := func(read, reads int64) {
		s.iostat.Note("n1", []message.IOAccount{{UID: 5, GID: 6, App: "curl", ReadBytes: read, Reads: reads},
			{UID: 7, GID: 6, App: "xrootd", WriteBytes: read, Writes: reads}}, now)
	}
	report(1000, 1) // baseline
	now = now.Add(20 * time.Minute)
	report(1100, 2) // +100, +1
	now = now.Add(10 * time.Minute)
	report(1300, 3) // +200, +1
	now = now.Add(time.Minute)
	report(50, 1) // restarted: +50, +1
	rows, err := s.IOStat(ctx, root, nsapi.IOStatRequest{User: "5"})
	if err != nil || len(rows) != 1 || rows[0].App != "curl" {
		t.Fatalf("io stat of uid 5: %+v %v", rows, err)
	}
	want := []nsapi.IOWindow{{Seconds: 60, ReadBytes: 50, Reads: 1}, {Seconds: 300, ReadBytes: 250, Reads: 2}, {Seconds: 3600, ReadBytes: 350, Reads: 3}}
	for i, w := range want {
		if rows[0].Windows[i] != w {
			t.Errorf("window %d: %+v, want %+v", i, rows[0].Windows[i], w)
		}
	}
	if rows, _ := s.IOStat(ctx, root, nsapi.IOStatRequest{App: "xrootd"}); len(rows) != 1 || rows[0].UID != 7 || rows[0].Windows[2].WriteBytes != 350 {
		t.Errorf("io stat of app xrootd: %+v", rows)
	}
	now = now.Add(2 * time.Hour)
	if rows, _ := s.IOStat(ctx, root, nsapi.IOStatRequest{}); len(rows) != 0 {
		t.Errorf("io stat 2 h later: %+v", rows)
	}
	if _, err := s.IOStat(ctx, auth.Principal{UID: 5, GID: 6}, nsapi.IOStatRequest{}); err == nil {
		t.Error("io stat by a user")
	}
}
