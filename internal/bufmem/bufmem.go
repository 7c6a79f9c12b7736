// Package bufmem holds the recycled buffers of data streams (copy
// buffers, direct-I/O staging, erasure frames) and counts the bytes handed
// out and not yet returned, so that a storage server's stream budget can
// be checked against what the streams really hold (tests compare Peak
// with the budget's).
package bufmem

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

var inUse, peak atomic.Int64

// InUse is how many bytes of buffers are handed out now, over all pools.
func InUse() int64 { return inUse.Load() }

// Peak is the most InUse has been since the last ResetPeak.
func Peak() int64 { return peak.Load() }

// ResetPeak starts a new Peak from the bytes in use now.
func ResetPeak() { peak.Store(inUse.Load()) }

func add(n int64) {
	v := inUse.Add(n)
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// Pool recycles buffers of one size.
type Pool struct {
	size int
	make func() []byte
	p    sync.Pool
}

// NewPool returns a pool of buffers of size bytes, made by mk (nil:
// make([]byte, size)), which must return a slice of exactly that length.
func NewPool(size int, mk func() []byte) *Pool {
	if mk == nil {
		mk = func() []byte { return make([]byte, size) }
	}
	return &Pool{size: size, make: mk}
}

// Get returns a buffer of the pool's size (contents undefined); it counts
// as in use until Put.
func (p *Pool) Get() []byte {
	add(int64(p.size))
	if b, ok := p.p.Get().(*[]byte); ok {
		return *b
	}
	return p.make()
}

// Put returns b, which Get gave, to the pool.
func (p *Pool) Put(b []byte) {
	add(-int64(p.size))
	b = b[:p.size]
	p.p.Put(&b)
}

// Drop stops counting b, which Get gave, without recycling it: someone
// may still hold it (an I/O call that was given up on).
func (p *Pool) Drop(b []byte) { add(-int64(p.size)) }

var (
	sized   sync.Map // size -> *Pool
	aligned sync.Map // [2]int{size, align} -> *Pool
)

// Aligned is the shared pool of size-byte buffers whose first byte sits
// on an align boundary (a power of two), for direct I/O straight from
// them.
func Aligned(size, align int) *Pool {
	key := [2]int{size, align}
	if p, ok := aligned.Load(key); ok {
		return p.(*Pool)
	}
	p, _ := aligned.LoadOrStore(key, NewPool(size, func() []byte {
		b := make([]byte, size+align)
		skip := int(-uintptr(unsafe.Pointer(&b[0])) & uintptr(align-1))
		return b[skip : skip+size : skip+size]
	}))
	return p.(*Pool)
}

// Sized is the shared pool of plain buffers of size bytes.
func Sized(size int) *Pool {
	if p, ok := sized.Load(size); ok {
		return p.(*Pool)
	}
	p, _ := sized.LoadOrStore(size, NewPool(size, nil))
	return p.(*Pool)
}
