package xrootd

import (
	"context"
	"errors"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// xrdCode maps a Kaon error kind to the kXR_* error code real clients
// translate into errno and print. Busy is answered with kXR_wait instead
// (see errResponse), so it is not listed.
func xrdCode(k kerr.Kind) uint32 {
	switch k {
	case kerr.NotFound:
		return kXR_NotFound
	case kerr.Exists:
		return kXR_ItExists
	case kerr.NotDir, kerr.NotEmpty, kerr.Loop:
		return kXR_FSError // what xrootd itself answers for ENOTDIR/ENOTEMPTY
	case kerr.IsDir:
		return kXR_isDirectory
	case kerr.Permission, kerr.Expired, kerr.Unauthenticated:
		return kXR_NotAuthorized
	case kerr.Invalid:
		return kXR_ArgInvalid
	case kerr.NameTooLong:
		return kXR_ArgTooLong
	case kerr.NoSpace:
		return kXR_NoSpace
	case kerr.Quota:
		return kXR_overQuota
	case kerr.Busy:
		return kXR_inProgress
	case kerr.Unsupported:
		return kXR_Unsupported
	case kerr.ReadOnly:
		return kXR_fsReadOnly
	case kerr.IO, kerr.Unavailable:
		return kXR_IOError
	case kerr.Down:
		return kXR_ServerError // as xrootd answers when it has no server to send a client to
	case kerr.Aborted:
		return kXR_Cancelled
	case kerr.Locked, kerr.Deadlock:
		return kXR_FileLocked
	}
	return kXR_ServerError
}

// errMessage builds the text the client prints: it always names the path
// and the reason.
func errMessage(op, path string, err error) string {
	msg := err.Error()
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Path != "" {
		return msg
	}
	if path != "" && !strings.Contains(msg, path) {
		return op + " " + path + ": " + msg
	}
	if op != "" && !strings.HasPrefix(msg, op) {
		return op + ": " + msg
	}
	return msg
}

// kindOf classifies err, treating context cancellation as busy/timeout.
func kindOf(err error) kerr.Kind {
	if errors.Is(err, context.DeadlineExceeded) {
		return kerr.Busy
	}
	return kerr.KindOf(err)
}
