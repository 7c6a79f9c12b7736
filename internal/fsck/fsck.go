// Package fsck checks that what the filesystems hold and what the
// namespace says agree, and repairs what can be repaired from healthy
// copies (EOS: fsck). It is the namespace side: the checks (CheckStripe,
// CheckFile), the findings (Book), the repair plans (PlanRepair) and the
// service that runs them in the namespace server (Service). Storage
// servers run the scans (over backend.Store.Walk) and the rebuilds
// (package storage) and do not import this package.
//
// Two directions are compared. A storage server walks each filesystem,
// throttled, and reports every stripe with its metadata and length (and,
// on a scrub, whether its bytes still match its checksums); the namespace
// server looks each one up (CheckStripe). Every completed walk is also the
// filesystem's inventory, against which the namespace server checks that
// every stripe it registers is there (missing stripes).
//
// Findings are kept per error class, in EOS' vocabulary (Class). The
// metadata written beside every stripe (backend.Meta) plays the part of
// EOS' "reference" (the FST's local record): d_* classes compare the disk
// with it, m_* classes the namespace with it.
package fsck

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// Class is an error class.
type Class string

// The error classes, EOS' names.
const (
	BlockSum    Class = "blockxs_err"   // blocks of a stripe fail their crc32c (scrub): a replica's block sums, an erasure-coded stripe's frames
	StripeErr   Class = "stripe_err"    // a stripe's metadata is unreadable or says it is another stripe, layout or file than the namespace registers
	DiskSize    Class = "d_mem_sz_diff" // the stripe's length on disk is not what its metadata implies
	NSSize      Class = "m_mem_sz_diff" // the namespace's size differs from the stripe's metadata
	DiskSum     Class = "d_cx_diff"     // the checksum of a replica's bytes, every block verifying, differs from its metadata (scrub)
	NSSum       Class = "m_cx_diff"     // the namespace's checksum differs from the stripe's metadata
	Unreg       Class = "unreg_n"       // a stripe of a file on a filesystem the namespace does not register for it
	Missing     Class = "rep_missing_n" // a stripe the namespace registers is not on its filesystem
	ReplicaDiff Class = "rep_diff_n"    // more copies of a file than its layout has
	Orphan      Class = "orphans_n"     // a stripe of no file the namespace knows
	Stale       Class = "stale_n"       // a stripe at an older data version than its file (it missed an update)
)

// Classes lists every class in repair priority order (EOS').
var Classes = []Class{BlockSum, StripeErr, Stale, DiskSize, NSSize, DiskSum, NSSum, Unreg, Missing, ReplicaDiff, Orphan}

var descriptions = map[Class]string{
	BlockSum:    "stripe with blocks (replicas) or frames (erasure-coded) failing their crc32c (scrub)",
	StripeErr:   "stripe metadata unreadable or naming another stripe, layout or file",
	DiskSize:    "stripe length on disk differs from its metadata",
	NSSize:      "namespace size differs from the stripe's metadata",
	DiskSum:     "replica bytes differ from the checksum in its metadata (scrub)",
	NSSum:       "namespace checksum differs from the stripe's metadata",
	Unreg:       "stripe on a filesystem the namespace does not register for its file",
	Missing:     "stripe registered in the namespace is missing on its filesystem",
	ReplicaDiff: "more copies of a file than its layout has",
	Orphan:      "stripe of no file in the namespace",
	Stale:       "stripe at an older data version than its file: it missed an update (never read; rebuilt from a current one)",
}

// Describe says what c means.
func (c Class) Describe() string { return descriptions[c] }

// ParseClass checks a class name.
func ParseClass(s string) (Class, error) {
	for _, c := range Classes {
		if string(c) == s {
			return c, nil
		}
	}
	names := make([]string, len(Classes))
	for i, c := range Classes {
		names[i] = string(c)
	}
	return "", fmt.Errorf("unknown fsck class %q (%s)", s, strings.Join(names, ", "))
}

// BadCopy reports whether c makes one stripe unusable as it is: it is
// repaired by rebuilding that stripe from the file's healthy ones.
func (c Class) BadCopy() bool {
	switch c {
	case BlockSum, StripeErr, Stale, DiskSize, NSSize, DiskSum, NSSum, Missing:
		return true
	}
	return false
}

// scrubClass reports whether c is found only by scans that re-read data.
func (c Class) scrubClass() bool { return c == BlockSum || c == DiskSum }

// Settings keys of `fs config`, EOS' names.
const (
	KeyDiskInterval  = "scan_disk_interval"
	KeyNSRate        = "scan_ns_rate"
	KeyScrubInterval = "scaninterval"
	KeyScrubRate     = "scanrate"
)

// Keys lists the settings keys.
var Keys = []string{KeyDiskInterval, KeyNSRate, KeyScrubInterval, KeyScrubRate}

// Set applies `fs config` key=value to s. Intervals are durations with
// an optional d (days) suffix or plain seconds; scan_ns_rate is stripes
// per second and scanrate MB/s (0 or "off" turns the throttle, or for
// scaninterval the scrub, off; "default" restores the default).
func Set(s *message.FsckSettings, key, value string) error {
	def := value == "default"
	off := value == "off" || value == "0"
	switch key {
	case KeyDiskInterval, KeyScrubInterval:
		var d time.Duration
		switch {
		case def:
		case off && key == KeyScrubInterval:
			d = -1
		default:
			var err error
			if d, err = ParseInterval(value); err != nil || d <= 0 {
				return fmt.Errorf("%s: want an interval such as 4h, 7d or seconds, got %q", key, value)
			}
		}
		if key == KeyDiskInterval {
			s.DiskInterval = d
		} else {
			s.ScrubInterval = d
		}
	case KeyNSRate, KeyScrubRate:
		var n int64
		switch {
		case def:
		case off:
			n = -1
		default:
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil || v < 0 {
				return fmt.Errorf("%s: want a number (0 or off: unthrottled), got %q", key, value)
			}
			n = v
		}
		if key == KeyNSRate {
			s.NSRate = int(n)
		} else {
			if n > 0 {
				n <<= 20 // MB/s
			}
			s.ScrubRate = n
		}
	default:
		return fmt.Errorf("unknown fsck key %q", key)
	}
	return nil
}

// ParseInterval reads a Go duration, a number of days ("7d") or seconds.
func ParseInterval(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil {
			return 0, err
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	return time.ParseDuration(s)
}

// Describe renders resolved settings as `fs config` would set them.
func Describe(s message.FsckSettings) string {
	s = s.Resolved()
	rate := func(n int64, unit int64) string {
		if n < 0 {
			return "off"
		}
		return strconv.FormatInt(n/unit, 10)
	}
	scrub := "off"
	if s.ScrubInterval > 0 {
		scrub = s.ScrubInterval.String()
	}
	return fmt.Sprintf("%s=%v %s=%s %s=%s %s=%s", KeyDiskInterval, s.DiskInterval, KeyNSRate, rate(int64(s.NSRate), 1),
		KeyScrubInterval, scrub, KeyScrubRate, rate(s.ScrubRate, 1<<20))
}
