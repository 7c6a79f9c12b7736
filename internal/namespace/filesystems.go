package namespace

import (
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Filesystem is the persistent registration of one filesystem ("F" keys,
// JSON): where it is, how it is scheduled, and its identity.
type Filesystem struct {
	ID           uint32 `json:"id"`
	Node         string `json:"node"`
	Path         string `json:"path"`
	Group        string `json:"group"`
	Space        string `json:"space"`
	ConfigStatus string `json:"configstatus"`
	// UUID is written into the filesystem's identity marker, so a disk of
	// another filesystem or instance is never taken for this one.
	UUID string `json:"uuid,omitempty"`
	// Initialized is set once the storage server has reported the
	// filesystem with its marker; after that it is never created again
	// implicitly (fs reinit clears it).
	Initialized bool `json:"initialized,omitempty"`
	// IO is the operator's write mode for it (backend.Settings.IO:
	// auto, direct, buffered); "" is auto.
	IO string `json:"io,omitempty"`
	// NoBlockSums: new replicas on it are kept without block sums
	// (backend.Settings.NoBlockSums; `fs config ID blocksums=off`).
	NoBlockSums bool `json:"no_block_sums,omitempty"`
	// ObjectSize cuts its stripes into objects of this size (RADOS;
	// overrides the space's); 0 leaves it to the space or the store.
	ObjectSize int64 `json:"object_size,omitempty"`
	// Location is the operator's failure-domain tag (EOS' geotag,
	// "site::rack1"; "" when none): placement spreads a file's stripes
	// over locations as it does over storage servers.
	Location string `json:"location,omitempty"`
	// Drain is where moving every stripe off the filesystem stands:
	// "draining" from configstatus=drain until every stripe has moved
	// off, then "drained"; "rebuilding" from configstatus=lost until
	// every stripe it held is recreated elsewhere, then "empty"; "" when
	// neither. Kept so a drain or rebuild resumes after a restart and its
	// end stays shown.
	Drain string `json:"drain,omitempty"`
	// DrainRate caps the bytes per second the drain moves (0: no cap);
	// DrainParallel is how many stripes it moves at once (0: default).
	DrainRate     int64 `json:"drain_rate,omitempty"`
	DrainParallel int   `json:"drain_parallel,omitempty"`
	// LostWhy and LostAt say why and when the filesystem was declared
	// lost (configstatus lost: by the operator, or once it was
	// unreadable for longer than the rebuild grace).
	LostWhy string    `json:"lost_why,omitempty"`
	LostAt  time.Time `json:"lost_at,omitzero"`
	// RebuildRate is the rebuild's rate: 0 the default (it gives way to
	// client traffic), > 0 a cap in bytes per second, < 0 no cap;
	// RebuildParallel is how many stripes it rebuilds at once (0:
	// default).
	RebuildRate     int64 `json:"rebuild_rate,omitempty"`
	RebuildParallel int   `json:"rebuild_parallel,omitempty"`
	// Fsck are its scan settings (zero: the defaults).
	Fsck FsckSettings `json:"fsck,omitzero"`
}

// FsckSettings are a filesystem's fsck scan settings (package fsck: EOS'
// scan_disk_interval, scan_ns_rate, scaninterval and scanrate; negative
// rates are unthrottled, a negative scan interval turns scrubs off).
type FsckSettings struct {
	DiskInterval  time.Duration `json:"disk_interval,omitempty"`
	NSRate        int           `json:"ns_rate,omitempty"`
	ScrubInterval time.Duration `json:"scrub_interval,omitempty"`
	ScrubRate     int64         `json:"scrub_rate,omitempty"`
}

func fsKey(id uint32) []byte { return binary.BigEndian.AppendUint32([]byte{'F'}, id) }

// Filesystems returns every registered filesystem in id order.
func (ns *Namespace) Filesystems() ([]Filesystem, error) {
	var out []Filesystem
	var derr error
	err := ns.eng.Scan([]byte{'F'}, []byte{'G'}, func(k, v []byte) bool {
		var f Filesystem
		if err := json.Unmarshal(v, &f); err != nil {
			derr = kerr.Wrap(kerr.Internal, "filesystems", string(k), err)
			return false
		}
		out = append(out, f)
		return true
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// SaveFilesystem stores a filesystem registration durably.
func (ns *Namespace) SaveFilesystem(f Filesystem) error {
	v, err := json.Marshal(f)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "fs save", "", err)
	}
	return ns.mutate("fs save", func(tx *txn) error {
		tx.put(fsKey(f.ID), v)
		return nil
	})
}
