package krb5auth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/types"
)

// The replay cache on disk. gokrb5 keeps the authenticators it has seen
// in memory (service.GetReplayCache, one per process), so a restart
// within the clock skew would take a captured AP-REQ again. Every
// accepted authenticator is also appended to a file (one JSON line:
// service, client, time) and fsync'd before the client is let in; on
// open the file's entries younger than the clock skew are put back into
// gokrb5's cache and the file is rewritten with them only (older ones
// are refused by the skew check anyway). A crash loses no accepted
// authenticator (the append is synced before the answer); it may keep
// one whose client was never answered, which only refuses that client's
// retry of the same AP-REQ (clients make a new one). Cost: one fsync per
// Kerberos login.

// replayEntry is one line of the replay file.
type replayEntry struct {
	SName []string  `json:"s"`
	SType int32     `json:"st"`
	CName []string  `json:"c"`
	CType int32     `json:"ct"`
	Time  time.Time `json:"t"` // the authenticator's ctime + cusec
}

type replayFile struct {
	mu sync.Mutex
	f  *os.File
}

// OpenReplayCache keeps m's replay cache in the file at path too, loading
// what it holds (see above).
func (m *Method) OpenReplayCache(path string) error {
	var keep []replayEntry
	now := time.Now()
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e replayEntry
			if json.Unmarshal(sc.Bytes(), &e) == nil && now.Sub(e.Time) <= MaxSkew {
				keep = append(keep, e)
			}
		}
		f.Close()
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("krb5 replay cache: %w", err)
	}
	rc := service.GetReplayCache(MaxSkew)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("krb5 replay cache: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, e := range keep {
		rc.AddEntry(types.PrincipalName{NameType: e.SType, NameString: e.SName},
			types.Authenticator{CName: types.PrincipalName{NameType: e.CType, NameString: e.CName}, CTime: e.Time})
		enc.Encode(e)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("krb5 replay cache: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return fmt.Errorf("krb5 replay cache: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	f.Close()
	if f, err = os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
		return fmt.Errorf("krb5 replay cache: %w", err)
	}
	m.replay = &replayFile{f: f}
	return nil
}

// remember appends a's authenticator to the replay file, synced (nil
// without one).
func (m *Method) remember(a *messages.APReq) error {
	if m.replay == nil {
		return nil
	}
	e := replayEntry{SName: a.Ticket.SName.NameString, SType: a.Ticket.SName.NameType,
		CName: a.Authenticator.CName.NameString, CType: a.Authenticator.CName.NameType,
		Time: a.Authenticator.CTime.Add(time.Duration(a.Authenticator.Cusec) * time.Microsecond)}
	b, _ := json.Marshal(e)
	m.replay.mu.Lock()
	defer m.replay.mu.Unlock()
	if _, err := m.replay.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return m.replay.f.Sync()
}

// Close closes the replay file.
func (m *Method) Close() error {
	if m.replay == nil {
		return nil
	}
	return m.replay.f.Close()
}
