package kvbase

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// ErrRetry is what an attempt returns when it lost to a concurrent commit
// (or its snapshot was compacted away) and should run again.
var ErrRetry = errors.New("kvbase: transaction must be retried")

// Backoff bounds: attempt i sleeps a random time below min(base<<i, max),
// so contenders spread out instead of colliding again.
const (
	backoffBase = 100 * time.Microsecond
	backoffMax  = 20 * time.Millisecond
)

// Retry runs attempt until it returns anything but ErrRetry, at most
// kv.TxnAttempts times, sleeping a random backoff between attempts. After
// the bound it returns a kerr.Busy error wrapping kv.ErrConflict.
func Retry(ctx context.Context, attempt func() error) error {
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := attempt()
		if !errors.Is(err, ErrRetry) {
			return err
		}
		if i+1 >= kv.TxnAttempts {
			return &kerr.Error{Kind: kerr.Busy, Op: "kv transaction",
				Msg: fmt.Sprintf("gave up after %d attempts", kv.TxnAttempts), Err: kv.ErrConflict}
		}
		d := backoffMax
		if i < 10 && backoffBase<<i < backoffMax {
			d = backoffBase << i
		}
		t := time.NewTimer(rand.N(d) + time.Microsecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
