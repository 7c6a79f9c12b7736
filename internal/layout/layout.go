// Package layout is the one description of how a file's bytes are spread
// over filesystems, and its one grammar:
//
//	plain            one copy (the right choice on an erasure-coded backend)
//	replica:N        N full copies, 1 <= N <= 16
//	ec:K+M[:unit]    Reed-Solomon, K data + M parity stripes, K+M <= 32;
//	                 unit (bytes, or with a k/K/m/M suffix) 4K..64M, a
//	                 multiple of 64; default 1M
//
// The namespace records String() of a parsed layout in every file, so the
// canonical form (unit in bytes) is part of the on-disk format.
package layout

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Kind is the family of a layout.
type Kind uint8

const (
	Plain Kind = iota + 1
	Replica
	EC
)

func (k Kind) String() string {
	switch k {
	case Plain:
		return "plain"
	case Replica:
		return "replica"
	case EC:
		return "ec"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits of a layout.
const (
	DefaultUnit = 1 << 20  // EC stripe unit when none is given
	MinUnit     = 4 << 10  // smallest EC stripe unit
	MaxUnit     = 64 << 20 // largest EC stripe unit
	MaxStripes  = 32       // K+M upper bound: wider stripes only add fan-out
	MaxReplicas = 16
)

// Layout says how a file's bytes are spread over filesystems.
type Layout struct {
	Kind Kind
	N    int // replica count
	K, M int // EC data and parity stripes
	Unit int // EC stripe unit in bytes
}

// Stripes is the number of physical files the layout uses.
func (l Layout) Stripes() int {
	switch l.Kind {
	case Replica:
		return l.N
	case EC:
		return l.K + l.M
	}
	return 1
}

// String is the canonical form, which Parse reads back to l.
func (l Layout) String() string {
	switch l.Kind {
	case Replica:
		return fmt.Sprintf("replica:%d", l.N)
	case EC:
		return fmt.Sprintf("ec:%d+%d:%d", l.K, l.M, l.Unit)
	}
	return "plain"
}

// Parse reads a layout in the grammar of the package comment (case and
// surrounding blanks do not matter; units may also be written KiB, MiB).
func Parse(in string) (Layout, error) {
	bad := func(why string) (Layout, error) {
		return Layout{}, kerr.New(kerr.Invalid, "layout", in, why)
	}
	s := strings.ToLower(strings.TrimSpace(in))
	switch {
	case s == "plain":
		return Layout{Kind: Plain}, nil
	case strings.HasPrefix(s, "replica:"):
		n, err := strconv.Atoi(s[len("replica:"):])
		if err != nil || n < 1 || n > MaxReplicas {
			return bad("replica count must be 1..16")
		}
		return Layout{Kind: Replica, N: n}, nil
	case strings.HasPrefix(s, "ec:"):
		parts := strings.Split(s[3:], ":")
		if len(parts) > 2 {
			return bad("want ec:K+M[:unit]")
		}
		km := strings.Split(parts[0], "+")
		if len(km) != 2 {
			return bad("want ec:K+M[:unit]")
		}
		k, err1 := strconv.Atoi(km[0])
		m, err2 := strconv.Atoi(km[1])
		if err1 != nil || err2 != nil || k < 1 || m < 1 || k+m > MaxStripes {
			return bad("need K>=1, M>=1, K+M<=32")
		}
		unit := DefaultUnit
		if len(parts) == 2 {
			u, err := parseSize(parts[1])
			if err != nil || u < MinUnit || u > MaxUnit || u%64 != 0 {
				return bad("stripe unit must be 4K..64M and a multiple of 64")
			}
			unit = int(u)
		}
		return Layout{Kind: EC, K: k, M: m, Unit: unit}, nil
	}
	return bad("unknown layout (want plain, replica:N or ec:K+M[:unit])")
}

// MustParse is Parse for layouts known to be valid (tests, constants).
func MustParse(s string) Layout {
	l, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return l
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, suf := range []struct {
		s string
		m int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"k", 1 << 10}, {"m", 1 << 20}} {
		if t, ok := strings.CutSuffix(s, suf.s); ok {
			s, mult = t, suf.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxUnit {
		return 0, fmt.Errorf("bad size")
	}
	return n * mult, nil
}
