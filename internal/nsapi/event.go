package nsapi

// EventKind says what changed.
type EventKind string

// Event kinds.
const (
	EventCreated   EventKind = "created"   // an upload began: a pending file (not visible yet)
	EventCommitted EventKind = "committed" // a file became visible (upload committed, or empty file created)
	EventMkdir     EventKind = "mkdir"     // a directory was created
	EventRemoved   EventKind = "removed"   // a file or directory was unlinked (also a file replaced by another)
	EventRenamed   EventKind = "renamed"   // an entry moved (From/FromName → Parent/Name)
	EventAttr      EventKind = "attr"      // mode, owner, extended attributes or checksums changed
	EventModified  EventKind = "modified"  // a file's content changed in place (size, mtime, data version)
)

// Event is one change of the namespace, in commit order: what a client
// that caches entries (a mount) is told to invalidate.
//
// Rev numbers the events of one incarnation of the active namespace
// service from 1; Term names the incarnation (the HA term: the
// leadership revision of a replicated namespace's active server, 0 for a
// namespace in an embedded engine, where a restart is a new process). A
// client that sees another Term, or a Rev that does not follow the last
// one it saw, has missed events: it drops what it caches and reads again.
type Event struct {
	Term     uint64    `json:"term"`
	Rev      uint64    `json:"rev"`
	Kind     EventKind `json:"kind"`
	Ino      uint64    `json:"ino"`    // the inode concerned
	Parent   uint64    `json:"parent"` // its directory (the destination of a rename)
	Name     string    `json:"name"`
	IsDir    bool      `json:"dir,omitempty"`
	From     uint64    `json:"from,omitempty"`      // a rename's source directory
	FromName string    `json:"from_name,omitempty"` // and name
	// A file whose content became visible or changed (committed,
	// modified): its size, mtime (unix ns) and data version (0 where
	// files have none).
	Size        int64  `json:"size,omitempty"`
	MTime       int64  `json:"mtime,omitempty"`
	DataVersion uint64 `json:"data_version,omitempty"`
}

// Pushed reports whether sessions are told of events of kind k: pending
// uploads (created) are not visible yet.
func (k EventKind) Pushed() bool { return k != EventCreated }

// Suppressible reports whether events of kind k only update a file's
// size, mtime or data version: above a directory's broadcast audience
// (SessionConfig.MaxAudience) they are not pushed, while creations,
// removals, renames and attribute changes always are.
func (k EventKind) Suppressible() bool { return k == EventModified }
