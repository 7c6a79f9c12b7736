package nsserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

func TestRecentRefusalsNewestFirstBoundedAdminOnly(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	user := auth.Principal{UID: 1000, GID: 1000, Name: "alice", Method: "test"}
	if err := s.Mkdir(ctx, auth.Principal{}, "/locked", 0o700, false); err != nil {
		t.Fatal(err)
	}
	for i := range keptRefusals + 5 {
		if _, err := s.List(ctx, user, fmt.Sprintf("/locked/%d", i)); !kerr.Is(err, kerr.Permission) && !kerr.Is(err, kerr.NotFound) {
			t.Fatalf("list: %v", err)
		}
		_, _ = s.List(ctx, user, "/locked")
	}
	if err := s.Mkdir(ctx, user, "/locked/x", 0o755, false); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("mkdir in /locked as alice: %v", err)
	}
	got, err := s.RecentRefusals(ctx, auth.Principal{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != keptRefusals {
		t.Fatalf("%d refusals kept, want %d", len(got), keptRefusals)
	}
	if got[0].Op != "mkdir" || got[0].Path != "/locked/x" || got[0].User != "alice" || got[0].Reason == "" {
		t.Errorf("newest refusal %+v, want alice's mkdir /locked/x", got[0])
	}
	if got[1].Op != "list" || got[1].Path != "/locked" {
		t.Errorf("second newest %+v, want alice's list /locked", got[1])
	}
	if _, err := s.RecentRefusals(ctx, user); !kerr.Is(err, kerr.Permission) {
		t.Errorf("a user read the refusals: %v", err)
	}
}
