package memkv

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvtest"
)

func TestSuite(t *testing.T) {
	kvtest.Run(t, func(*testing.T) kv.Engine { return New() }, nil)
}

func TestElection(t *testing.T) {
	kvtest.RunElection(t, func(*testing.T) kv.Engine { return New() })
}
