package namespace

import (
	"encoding/json"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Group is the persistent setting of a scheduling group ("G" keys, JSON):
// its balancer. A group exists as soon as a filesystem names it; a record
// exists once an operator set something on it (group set).
type Group struct {
	Name string `json:"name"`
	// Balancer moves stripes from fuller to emptier filesystems of the
	// group until the spread of their fill (the fullest's used fraction
	// minus the emptiest's, in percentage points) is at most Threshold.
	Balancer  bool    `json:"balancer,omitempty"`
	Threshold float64 `json:"threshold,omitempty"`
	// Rate caps the bytes per second the balancer moves (0: no cap);
	// Parallel is how many stripes it moves at once (0: default).
	Rate     int64 `json:"rate,omitempty"`
	Parallel int   `json:"parallel,omitempty"`
}

func groupKey(name string) []byte { return append([]byte{'G'}, name...) }

// Groups returns every group record in name order.
func (ns *Namespace) Groups() ([]Group, error) {
	var out []Group
	var derr error
	err := ns.eng.Scan([]byte{'G'}, []byte{'H'}, func(k, v []byte) bool {
		var g Group
		if err := json.Unmarshal(v, &g); err != nil {
			derr = kerr.Wrap(kerr.Internal, "groups", string(k), err)
			return false
		}
		out = append(out, g)
		return true
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// SaveGroup stores a group's settings durably.
func (ns *Namespace) SaveGroup(g Group) error {
	v, err := json.Marshal(g)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "group save", g.Name, err)
	}
	return ns.mutate("group save", func(tx *txn) error {
		tx.put(groupKey(g.Name), v)
		return nil
	})
}
