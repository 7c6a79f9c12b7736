package xrootd

import "sync"

// Buffer classes sized for what clients send: small requests, 1 MiB, 4 MiB
// and xrdcp's 8 MiB chunks (plus pgwrite CRCs), and the 16 MiB frame cap.
var bufClasses = [...]int{64 << 10, 1 << 20, 4 << 20, 8<<20 + 64<<10, 16<<20 + 128<<10}

var bufPools [len(bufClasses)]sync.Pool

// getBuf returns a buffer of length n, pooled when n fits a class.
func getBuf(n int) []byte {
	for i, c := range bufClasses {
		if n <= c {
			if p, ok := bufPools[i].Get().(*[]byte); ok {
				return (*p)[:n]
			}
			return make([]byte, n, c)
		}
	}
	return make([]byte, n)
}

// putBuf recycles a buffer obtained from getBuf.
func putBuf(b []byte) {
	c := cap(b)
	for i, cl := range bufClasses {
		if c == cl {
			b = b[:c]
			bufPools[i].Put(&b)
			return
		}
	}
}

// budget bounds bytes held by in-flight requests and responses, so neither
// one client nor many together can make the server allocate without limit.
// acquire blocks until enough is free; requests larger than the whole budget
// take all of it.
type budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	avail int64
	max   int64
	dead  bool
}

func newBudget(max int64) *budget {
	b := &budget{avail: max, max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) clip(n int64) int64 {
	if n > b.max {
		return b.max
	}
	return n
}

// acquire returns the amount actually taken (to pass to release), or -1
// when the budget was closed while waiting.
func (b *budget) acquire(n int64) int64 {
	n = b.clip(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.avail < n && !b.dead {
		b.cond.Wait()
	}
	if b.dead {
		return -1
	}
	b.avail -= n
	return n
}

func (b *budget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.avail += n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// close wakes waiters, who then give up (used when a connection dies).
func (b *budget) close() {
	b.mu.Lock()
	b.dead = true
	b.mu.Unlock()
	b.cond.Broadcast()
}
