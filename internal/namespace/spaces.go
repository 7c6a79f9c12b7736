package namespace

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Space is the persistent definition of a space ("N" keys, JSON): a named
// set of filesystems new files are placed on (their groups are SPACE.N;
// a directory chooses one with nsapi.AttrSpace), with settings its storage
// servers apply to every filesystem of it. A space also exists without a
// definition as soon as a filesystem's group names it.
type Space struct {
	Name string `json:"name"`
	// CephPool is the CephFS data pool of the space's filesystems inside
	// a CephFS (the layout of their roots); "" leaves the mount's own.
	CephPool string `json:"ceph_pool,omitempty"`
	// ObjectSize is the object size of their CephFS layout (and of a
	// RADOS filesystem of the space that sets none itself); 0 leaves it.
	ObjectSize int64 `json:"object_size,omitempty"`
}

var spaceName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckSpaceName says why name cannot name a space (nil if it can):
// letters, digits, '_' and '-' (a group is SPACE.N).
func CheckSpaceName(name string) error {
	if !spaceName.MatchString(name) {
		return fmt.Errorf("bad space name %q: want 1-64 letters, digits, '_' or '-'", name)
	}
	return nil
}

func spaceKey(name string) []byte { return append([]byte{'N'}, name...) }

// Spaces returns every defined space in name order.
func (ns *Namespace) Spaces() ([]Space, error) {
	var out []Space
	var derr error
	err := ns.eng.Scan([]byte{'N'}, []byte{'O'}, func(k, v []byte) bool {
		var s Space
		if err := json.Unmarshal(v, &s); err != nil {
			derr = kerr.Wrap(kerr.Internal, "spaces", string(k), err)
			return false
		}
		out = append(out, s)
		return true
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// SaveSpace stores a space definition durably.
func (ns *Namespace) SaveSpace(s Space) error {
	if err := CheckSpaceName(s.Name); err != nil {
		return kerr.New(kerr.Invalid, "space save", s.Name, err.Error())
	}
	v, err := json.Marshal(s)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "space save", s.Name, err)
	}
	return ns.mutate("space save", func(tx *txn) error {
		tx.put(spaceKey(s.Name), v)
		return nil
	})
}
