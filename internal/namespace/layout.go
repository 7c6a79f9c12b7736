package namespace

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Layout says how a file's bytes are spread over filesystems.
type Layout struct {
	Kind string // "plain", "replica", "ec"
	N    int    // replica count
	K, M int    // data and parity stripes
	Unit int    // EC stripe unit in bytes
}

// DefaultUnit is the EC stripe unit when none is given.
const DefaultUnit = 1 << 20

// Stripes is the number of physical files the layout uses.
func (l Layout) Stripes() int {
	switch l.Kind {
	case "replica":
		return l.N
	case "ec":
		return l.K + l.M
	}
	return 1
}

func (l Layout) String() string {
	switch l.Kind {
	case "replica":
		return fmt.Sprintf("replica:%d", l.N)
	case "ec":
		return fmt.Sprintf("ec:%d+%d:%d", l.K, l.M, l.Unit)
	}
	return "plain"
}

// ParseLayout accepts "plain", "replica:N" (1..16) and "ec:K+M[:unit]"
// where unit is bytes or with a K/M suffix (4K..64M, multiple of 64).
func ParseLayout(s string) (Layout, error) {
	bad := func(why string) (Layout, error) {
		return Layout{}, kerr.New(kerr.Invalid, "layout", s, why)
	}
	switch {
	case s == "plain":
		return Layout{Kind: "plain"}, nil
	case strings.HasPrefix(s, "replica:"):
		n, err := strconv.Atoi(s[len("replica:"):])
		if err != nil || n < 1 || n > 16 {
			return bad("replica count must be 1..16")
		}
		return Layout{Kind: "replica", N: n}, nil
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
		if err1 != nil || err2 != nil || k < 1 || m < 1 || k+m > 32 {
			return bad("need K>=1, M>=1, K+M<=32")
		}
		unit := DefaultUnit
		if len(parts) == 2 {
			u, err := parseSize(parts[1])
			if err != nil || u < 4096 || u > 64<<20 || u%64 != 0 {
				return bad("stripe unit must be 4K..64M and a multiple of 64")
			}
			unit = int(u)
		}
		return Layout{Kind: "ec", K: k, M: m, Unit: unit}, nil
	}
	return bad("unknown layout (want plain, replica:N or ec:K+M[:unit])")
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}
