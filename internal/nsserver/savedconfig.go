package nsserver

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Saved configurations (kaon config save|load|ls NAME): the instance's
// runtime settings as named, versioned snapshots in the namespace's
// engine ("C" keys, namespace/settings.go): spaces, groups, filesystems'
// settings, access rules and quota limits. Saving a name again adds a
// version; loading applies one (the latest by default). What the
// snapshot holds is snapshot below, format 1.

// snapshot is what a saved configuration holds (JSON).
type snapshot struct {
	Format int               `json:"format"` // 1
	Saved  time.Time         `json:"saved"`
	By     string            `json:"by"`
	Fleet  fleet.Settings    `json:"fleet"`
	Access nsapi.AccessRules `json:"access"`
	Quotas []nsapi.Quota     `json:"quotas,omitempty"` // limits only
}

const snapshotFormat = 1

var configName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func checkConfigName(op, name string) error {
	if !configName.MatchString(name) {
		return kerr.New(kerr.Invalid, op, name, "want 1-64 letters, digits, '.', '_' or '-'")
	}
	return nil
}

// summary is the row of config ls of version v of name, holding sn.
func summary(name string, v uint64, sn snapshot) nsapi.SavedConfig {
	a := sn.Access
	return nsapi.SavedConfig{Name: name, Version: v, Saved: sn.Saved, By: sn.By, Spaces: len(sn.Fleet.Spaces), Groups: len(sn.Fleet.Groups),
		Filesystems: len(sn.Fleet.Filesystems), Quotas: len(sn.Quotas),
		Rules: len(a.Bans) + len(a.Allows) + len(a.Stalls) + len(a.Redirects) + len(a.Limits)}
}

// SaveConfig saves the runtime settings as the next version of name
// (admin only).
func (s *Server) SaveConfig(ctx context.Context, p auth.Principal, name string) (out nsapi.SavedConfig, err error) {
	defer func() { err = s.audit(ctx, p, "config save", name, "", err) }()
	if err := requireRoot(p, "config save"); err != nil {
		return out, err
	}
	if err := checkConfigName("config save", name); err != nil {
		return out, err
	}
	sn := snapshot{Format: snapshotFormat, Saved: s.now().UTC(), By: p.Name, Fleet: s.reg.Settings(), Access: s.access.Rules()}
	qs, err := s.ns.Quotas(namespace.Caller{}, "/")
	if err != nil {
		return out, err
	}
	for _, q := range qs {
		for k, l := range q.Limits {
			if kind, ok := quotaKinds[k.Kind]; ok {
				sn.Quotas = append(sn.Quotas, nsapi.Quota{Path: q.Path, Kind: kind, ID: k.ID, LimitBytes: l.Bytes, LimitFiles: l.Files})
			}
		}
	}
	b, err := json.Marshal(sn)
	if err != nil {
		return out, kerr.Wrap(kerr.Internal, "config save", name, err)
	}
	v, err := s.ns.SaveConfig(name, b)
	if err != nil {
		return out, err
	}
	return summary(name, v, sn), nil
}

// SavedConfigs lists the saved configurations' versions (admin only).
func (s *Server) SavedConfigs(_ context.Context, p auth.Principal) ([]nsapi.SavedConfig, error) {
	if err := requireRoot(p, "config ls"); err != nil {
		return nil, err
	}
	cs, err := s.ns.SavedConfigs(true)
	if err != nil {
		return nil, err
	}
	out := make([]nsapi.SavedConfig, 0, len(cs))
	for _, c := range cs {
		var sn snapshot
		if err := json.Unmarshal(c.Value, &sn); err != nil {
			out = append(out, nsapi.SavedConfig{Name: c.Name, Version: c.Version, By: "(unreadable: " + err.Error() + ")"})
			continue
		}
		out = append(out, summary(c.Name, c.Version, sn))
	}
	return out, nil
}

// LoadConfig applies version v (0: the latest) of saved configuration
// name (admin only): the spaces, groups and filesystems' settings it
// holds (fleet.Registry.Restore), its access rules (replacing the
// current ones) and its quota limits (those set now but not saved are
// removed).
func (s *Server) LoadConfig(ctx context.Context, p auth.Principal, name string, v uint64) (out nsapi.ConfigLoaded, err error) {
	defer func() { err = s.audit(ctx, p, "config load", name, fmt.Sprint(out.Version), err) }()
	if err := requireRoot(p, "config load"); err != nil {
		return out, err
	}
	c, err := s.ns.SavedConfig(name, v)
	if err != nil {
		return out, err
	}
	var sn snapshot
	if err := json.Unmarshal(c.Value, &sn); err != nil || sn.Format != snapshotFormat {
		return out, kerr.New(kerr.Invalid, "config load", fmt.Sprintf("%s version %d", name, c.Version), "not a configuration this server reads")
	}
	out.SavedConfig = summary(name, c.Version, sn)
	if out.Skipped, err = s.reg.Restore(sn.Fleet); err != nil {
		return out, err
	}
	s.accessMu.Lock()
	err = s.storeAccess(sn.Access)
	s.accessMu.Unlock()
	if err != nil {
		return out, err
	}
	skipped, err := s.restoreQuotas(sn.Quotas)
	out.Skipped = append(out.Skipped, skipped...)
	s.mv.SettingsChanged()
	return out, err
}

// restoreQuotas sets the limits saved and removes the others.
func (s *Server) restoreQuotas(saved []nsapi.Quota) (skipped []string, err error) {
	root := namespace.Caller{}
	now, err := s.ns.Quotas(root, "/")
	if err != nil {
		return nil, err
	}
	type where struct {
		path string
		key  namespace.QuotaKey
	}
	keep := map[where]bool{}
	for _, q := range saved {
		k := quotaKeyOf(nsapi.QuotaKey{Kind: q.Kind, ID: q.ID})
		keep[where{q.Path, k}] = true
		err := s.ns.SetQuota(root, q.Path, k, namespace.Amount{Bytes: q.LimitBytes, Files: q.LimitFiles})
		if kerr.Is(err, kerr.NotFound) || kerr.Is(err, kerr.NotDir) {
			skipped = append(skipped, fmt.Sprintf("quota %s %s %d: %v", q.Path, q.Kind, q.ID, err))
			continue
		}
		if err != nil {
			return skipped, err
		}
	}
	for _, q := range now {
		for k := range q.Limits {
			if keep[where{q.Path, k}] {
				continue
			}
			if err := s.ns.RemoveQuota(root, q.Path, k); err != nil && !kerr.Is(err, kerr.NotFound) {
				return skipped, err
			}
		}
	}
	return skipped, nil
}
