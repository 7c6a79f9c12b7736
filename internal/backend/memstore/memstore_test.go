package memstore

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/backendtest"
)

func TestSuite(t *testing.T) {
	backendtest.Run(t, backendtest.Hooks{
		Open:       func(t *testing.T) backend.Store { return New(t.Name()) },
		Litter:     func(_ *testing.T, s backend.Store) { s.(*Store).Litter() },
		LoseMarker: func(_ *testing.T, s backend.Store) { s.(*Store).SetMarker(nil) },
		Corrupt:    func(_ *testing.T, s backend.Store, fid uint64, off int64) { s.(*Store).Corrupt(fid, off) },
		Legacy:     func(_ *testing.T, s backend.Store, fid uint64) { s.(*Store).Legacy(fid) },
	})
}
