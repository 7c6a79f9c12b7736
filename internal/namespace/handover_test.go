package namespace

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/layout"
)

// What a namespace server hands over when it steps down (HandOver) lets
// its successor (Adopt, over the same store) keep the uploads in flight:
// a claimed one stays claimed (a replayed capability is refused there
// too), an unclaimed one can still be claimed, quota bookings still count
// and are released by the commit or abort; the one that handed over
// claims nothing any more. Copies of conversions are dropped, as at a
// restart. It travels as JSON.
func TestHandOverAndAdopt(t *testing.T) {
	eng := memkv.New()
	a, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	alice := Caller{UID: 1000, GID: 1000}
	if err := a.Mkdir(Root, "/q", 0o777, false); err != nil {
		t.Fatal(err)
	}
	qk := QuotaKey{QuotaUser, 1000}
	if err := a.SetQuota(Root, "/q", qk, Amount{Bytes: 100, Files: 5}); err != nil {
		t.Fatal(err)
	}
	claimed, err := a.BeginCreate(alice, "/q/claimed", CreateOptions{SizeHint: 60}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ClaimUpload(claimed.ID); err != nil {
		t.Fatal(err)
	}
	unclaimed, err := a.BeginCreate(alice, "/q/unclaimed", CreateOptions{SizeHint: 10}, place)
	if err != nil {
		t.Fatal(err)
	}
	src, err := a.BeginCreate(Root, "/src", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(src.ID, 1, nil); err != nil {
		t.Fatal(err)
	}
	plain, _ := layout.Parse("plain")
	cp, err := a.BeginConvert(src.ID, plain, []uint32{2})
	if err != nil {
		t.Fatal(err)
	}

	in := a.HandOver()
	_, err = a.ClaimUpload(unclaimed.ID)
	mustKind(t, err, kerr.Busy)
	wire, _ := json.Marshal(in)
	var got InFlight
	if err := json.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}

	b, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.Adopt(got)
	if err != nil || n != 2 {
		t.Fatalf("Adopt: kept %d (%v), want the 2 uploads", n, err)
	}
	if _, err := b.Pending(cp.ID); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("a conversion's copy survived the handover: %v", err)
	}
	_, err = b.ClaimUpload(claimed.ID)
	mustKind(t, err, kerr.Permission)
	if _, err := b.ClaimUpload(unclaimed.ID); err != nil {
		t.Fatalf("claiming an unclaimed upload after the handover: %v", err)
	}
	booked := func() Amount {
		t.Helper()
		qs, err := b.Quotas(Root, "/q")
		if err != nil || len(qs) != 1 {
			t.Fatalf("quota ls: %+v %v", qs, err)
		}
		return qs[0].Booked[qk]
	}
	if got := booked(); got != (Amount{70, 2}) {
		t.Fatalf("booked after the handover: %+v, want 70 bytes 2 files", got)
	}
	_, err = b.BeginCreate(alice, "/q/more", CreateOptions{SizeHint: 40}, place)
	mustKind(t, err, kerr.Quota)
	if _, err := b.Commit(claimed.ID, 50, nil); err != nil {
		t.Fatalf("commit after the handover: %v", err)
	}
	if err := b.Abort(unclaimed.ID); err != nil {
		t.Fatal(err)
	}
	if got := booked(); got != (Amount{}) {
		t.Fatalf("booked after the commit and the abort: %+v, want none", got)
	}
	if st, err := b.Stat(Root, "/q/claimed"); err != nil || st.Size != 50 {
		t.Fatalf("/q/claimed: %+v %v", st, err)
	}
	// Nothing is left for a later restart to abort.
	if n, err := b.AbortStale(time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("pending uploads left: %d %v", n, err)
	}
}
