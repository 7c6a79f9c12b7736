package message

// Data movement orders from the namespace server to a storage server
// (drain, balance, conversion). The namespace schedules; the storage
// server holding the new stripe copies through the mover and answers when
// the copy is complete and verified, or why not.

// MoveOrder asks the storage server holding the target filesystem to
// write a copy of one stripe there. Token is a move capability
// (capability.Move): the file, its layout, size, checksums and stripe
// locations, the stripe and the target.
type MoveOrder struct {
	Token string `json:"token"`
	Rate  int64  `json:"rate,omitempty"` // bytes per second at most (0: no cap)
	// Yield makes the copy give way to the storage server's client
	// streams (a rebuild at its default rate): while any runs, such
	// copies run one at a time, at most a third of the time.
	Yield bool `json:"yield,omitempty"`
	// Avoid are stripes not to read: their filesystems are down, offline
	// or lost, as the namespace knows (probing them would only wait).
	Avoid []int `json:"avoid,omitempty"`
}

// How a stripe was moved (MoveResult.How).
const (
	MovedCopy    = "copied"  // read whole from its old place (or another replica), verified
	MovedRebuilt = "rebuilt" // an EC stripe decoded from the others
)

// MoveResult is a finished (durable, verified) copy of a stripe.
type MoveResult struct {
	Bytes int64  `json:"bytes"`
	How   string `json:"how"`
	// Checksum is what was verified: "adler32=..." of a replica against
	// the file's, or "crc32c frames" of an EC stripe.
	Checksum string `json:"checksum,omitempty"`
	// Tried says why earlier sources were given up (a stripe rebuilt
	// because its own copy was unreadable), for the operator.
	Tried string `json:"tried,omitempty"`
}

// ConvertOrder asks the storage server at the first new location to
// copy a whole file (Read, a read capability) into a staged copy with
// another layout or on other filesystems (Write, a staged write
// capability), verifying its checksum end to end.
type ConvertOrder struct {
	Read  string `json:"read"`
	Write string `json:"write"`
	Rate  int64  `json:"rate,omitempty"`
}

// ConvertResult is a staged copy, finished on every stripe.
type ConvertResult struct {
	Size      int64             `json:"size"`
	Checksums map[string]string `json:"checksums"`
}
