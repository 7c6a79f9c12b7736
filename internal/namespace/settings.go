package namespace

import (
	"encoding/binary"
	"errors"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// Settings of the service that live with the namespace, so that they
// survive restarts and every server of a replicated instance applies
// them: opaque values (JSON) the service defines.
//
//	"K" name                -> a service setting ("access": the access rules)
//	"C" name 0 version(8)   -> a saved configuration (kaon config save NAME)

func settingKey(name string) []byte { return append([]byte{'K'}, name...) }

// Setting returns the value of setting name, nil if it was never saved.
func (ns *Namespace) Setting(name string) ([]byte, error) {
	v, err := ns.eng.Get(settingKey(name))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeError("setting "+name, err)
	}
	return v, nil
}

// SaveSetting stores setting name durably.
func (ns *Namespace) SaveSetting(name string, v []byte) error {
	return ns.mutate("setting save", func(tx *txn) error {
		tx.put(settingKey(name), v)
		return nil
	})
}

// configKey is the key of version v of saved configuration name (the 0
// ends the name: no name is a prefix of another's keys).
func configKey(name string, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(append([]byte{'C'}, name...), 0), v)
}

// SavedConfig is one version of a saved configuration.
type SavedConfig struct {
	Name    string
	Version uint64
	Value   []byte
}

// SavedConfigs returns every saved configuration version, by name then
// version, with their values when values is set.
func (ns *Namespace) SavedConfigs(values bool) ([]SavedConfig, error) {
	var out []SavedConfig
	err := ns.eng.Scan([]byte{'C'}, []byte{'D'}, func(k, v []byte) bool {
		if len(k) < 10 || k[len(k)-9] != 0 {
			return true
		}
		c := SavedConfig{Name: string(k[1 : len(k)-9]), Version: binary.BigEndian.Uint64(k[len(k)-8:])}
		if values {
			c.Value = append([]byte(nil), v...)
		}
		out = append(out, c)
		return true
	})
	if err != nil {
		return nil, storeError("config ls", err)
	}
	return out, nil
}

// SaveConfig stores v as the next version of configuration name and
// returns that version (1 for the first).
func (ns *Namespace) SaveConfig(name string, v []byte) (uint64, error) {
	var version uint64
	err := ns.mutate("config save", func(tx *txn) error {
		version = 1
		err := ns.eng.Scan(configKey(name, 0), configKey(name, ^uint64(0)), func(k, _ []byte) bool {
			version = binary.BigEndian.Uint64(k[len(k)-8:]) + 1
			return true
		})
		if err != nil {
			return storeError("config save", err)
		}
		tx.put(configKey(name, version), v)
		return nil
	})
	return version, err
}

// SavedConfig returns version v of configuration name (0: its latest).
func (ns *Namespace) SavedConfig(name string, v uint64) (SavedConfig, error) {
	var out SavedConfig
	from, to := configKey(name, 1), configKey(name, ^uint64(0))
	if v != 0 {
		from, to = configKey(name, v), configKey(name, v+1)
	}
	err := ns.eng.Scan(from, to, func(k, val []byte) bool {
		out = SavedConfig{Name: name, Version: binary.BigEndian.Uint64(k[len(k)-8:]), Value: append([]byte(nil), val...)}
		return true
	})
	if err != nil {
		return out, storeError("config load", err)
	}
	if out.Value == nil {
		return out, kerr.New(kerr.NotFound, "config load", name, "no such saved configuration (kaon config ls)")
	}
	return out, nil
}
