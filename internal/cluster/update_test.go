package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/cluster"
)

// journalServer answers prepares with applyNow.
type journalServer struct {
	cluster.StorageServer
	applyNow bool
	got      string
}

func (s *journalServer) PrepareStripe(_ string, _ uint64, _ int, _ backend.JournalHead, ops io.Reader) (bool, error) {
	b, err := io.ReadAll(ops)
	s.got = string(b)
	return s.applyNow, err
}
func (s *journalServer) ApplyStripe(string, uint64, int) error   { return nil }
func (s *journalServer) DiscardStripe(string, uint64, int) error { return nil }
func (s *journalServer) TruncateFile(context.Context, string, int64) error {
	return nil
}

// TestPrepareAnswersApplyNow: a stripe server's prepare tells the entry
// server whether the journal must be applied before the commit's reply
// (a stripe a mount may read through a passthrough descriptor), over
// the internal HTTP call.
func TestPrepareAnswersApplyNow(t *testing.T) {
	const secret = "internal-secret-for-the-test"
	for _, want := range []bool{false, true} {
		js := &journalServer{applyNow: want}
		hs := httptest.NewServer(cluster.StorageHandler(js, secret, slog.New(slog.DiscardHandler)))
		c := cluster.NewStorageClient(secret)
		got, err := c.PrepareStripe(context.Background(), hs.URL, 0x42, 1, "cap", backend.JournalHead{From: 3}, strings.NewReader("ops"))
		hs.Close()
		if err != nil || got != want || js.got != "ops" {
			t.Fatalf("prepare answered applyNow %v, %v (ops %q); want %v", got, err, js.got, want)
		}
	}
}
