package fleet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Scheduling groups: a group SPACE.N is the unit placement puts a
// file's stripes in and drain and balance work in. A group exists while
// filesystems name it; its settings (`group set`) are a namespace record,
// whose keys the subsystems register (GroupKey: the balancer's).

// GroupKey is one key of `group set`: Set checks value and applies it to
// the group's record g, or says why not.
type GroupKey struct {
	Name string
	Set  func(g *namespace.Group, value string) error
}

// RegisterGroupKeys adds keys to those `group set` takes. Call it before
// the registry is used.
func (r *Registry) RegisterGroupKeys(keys ...GroupKey) { r.groupKeys = append(r.groupKeys, keys...) }

// SetGroup sets key of group name (`group set`) with the registered
// key's Set and saves the group's record.
func (r *Registry) SetGroup(name, key, value string) error {
	if err := checkGroup(name); err != nil || !strings.Contains(name, ".") {
		return kerr.New(kerr.Invalid, "group set", name, fmt.Sprintf("bad group %q: want SPACE.N", name))
	}
	r.saveMu.Lock() // not mu: see save
	defer r.saveMu.Unlock()
	r.mu.RLock()
	g := r.groups[name]
	r.mu.RUnlock()
	g.Name = name
	i := slices.IndexFunc(r.groupKeys, func(k GroupKey) bool { return k.Name == key })
	if i < 0 {
		names := make([]string, len(r.groupKeys))
		for j, k := range r.groupKeys {
			names[j] = k.Name
		}
		return kerr.New(kerr.Invalid, "group set", name, fmt.Sprintf("unknown key %q (%s)", key, strings.Join(names, ", ")))
	}
	if err := r.groupKeys[i].Set(&g, value); err != nil {
		return kerr.New(kerr.Invalid, "group set", name, err.Error())
	}
	if err := r.ns.SaveGroup(g); err != nil {
		return err
	}
	r.mu.Lock()
	r.groups[name] = g
	r.mu.Unlock()
	return nil
}

// Group returns the settings of group name (zero ones if it has none).
func (r *Registry) Group(name string) namespace.Group {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.groups[name]
}

// Groups returns the groups with settings, by name.
func (r *Registry) Groups() []namespace.Group {
	r.mu.RLock()
	out := make([]namespace.Group, 0, len(r.groups))
	for _, g := range r.groups {
		out = append(out, g)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b namespace.Group) int { return strings.Compare(a.Name, b.Name) })
	return out
}
