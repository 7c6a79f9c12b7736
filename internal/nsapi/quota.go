package nsapi

// QuotaKind says whose limit a quota key names.
type QuotaKind string

// Quota kinds.
const (
	QuotaUser    QuotaKind = "user"
	QuotaGroup   QuotaKind = "group"
	QuotaProject QuotaKind = "project" // everybody below the node together
)

// QuotaKey names one limit of a quota node: a user's, a group's, or the
// project's (ID 0).
type QuotaKey struct {
	Kind QuotaKind
	ID   uint32 // uid or gid
}

// Amount is bytes and files: a limit or a usage.
type Amount struct {
	Bytes int64
	Files int64
}

// Quota is one limit of a quota node with its usage (`quota ls`).
type Quota struct {
	Path        string    `json:"path"`
	Kind        QuotaKind `json:"kind"`
	ID          uint32    `json:"id"`
	LimitBytes  int64     `json:"limit_bytes"` // 0: no limit
	LimitFiles  int64     `json:"limit_files"`
	UsedBytes   int64     `json:"used_bytes"`
	UsedFiles   int64     `json:"used_files"`
	BookedBytes int64     `json:"booked_bytes"` // by uploads in flight
}
