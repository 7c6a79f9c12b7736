package mount

import (
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestListingCache: a directory's cached listing answers names, absent
// ones included, while its lease holds; a change of a name makes that
// name (only) unsure; a listing read across a change is not kept; an
// entry made here does not overrule a change heard meanwhile.
func TestListingCache(t *testing.T) {
	ent := func(name string, id uint64) nsapi.Entry { return nsapi.Entry{Name: name, Attr: nsapi.Attr{ID: id}} }
	n := &node{lease: time.Now().Add(time.Minute)}
	if _, _, known := n.listed("a"); known {
		t.Fatal("a name is known before any listing")
	}

	gen := n.listingGen()
	n.nameChanged("z") // arrives while the listing is read
	n.setListing([]nsapi.Entry{ent("a", 1)}, gen)
	if _, _, known := n.listed("z"); known {
		t.Fatal("a listing read across a change was kept")
	}

	n.setListing([]nsapi.Entry{ent("a", 1), ent("b", 2)}, n.listingGen())
	if e, found, known := n.listed("a"); !known || !found || e.ID != 1 {
		t.Fatalf("listed a: %+v found %v known %v", e, found, known)
	}
	if _, found, known := n.listed("c"); !known || found {
		t.Fatalf("listed c (absent): found %v known %v, want a known absence", found, known)
	}

	n.nameChanged("c") // created elsewhere
	n.nameChanged("a") // changed elsewhere
	if _, _, known := n.listed("c"); known {
		t.Fatal("a name created elsewhere is still answered absent")
	}
	if _, _, known := n.listed("a"); known {
		t.Fatal("a name changed elsewhere is still answered from the listing")
	}
	if _, found, known := n.listed("b"); !known || !found {
		t.Fatal("a change of other names dropped b")
	}
	if n.cachedListing() != nil {
		t.Fatal("a listing with unsure names answered a readdir")
	}

	n.created(ent("c", 3)) // made here after the change was heard: still unsure
	if _, _, known := n.listed("c"); known {
		t.Fatal("an entry made here overruled a change heard before it")
	}
	n.created(ent("d", 4))
	if e, found, known := n.listed("d"); !known || !found || e.ID != 4 {
		t.Fatalf("an entry made here: %+v found %v known %v", e, found, known)
	}

	n.lease = time.Now().Add(-time.Second)
	if _, _, known := n.listed("b"); known {
		t.Fatal("the listing answers after its lease ended")
	}
	n.lease = time.Now().Add(time.Minute)
	n.invalidate(true)
	if _, _, known := n.listed("b"); known {
		t.Fatal("the listing answers after a full invalidation")
	}
}
