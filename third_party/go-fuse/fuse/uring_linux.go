// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// FUSE over io_uring (Linux >= 6.14, Documentation/filesystems/fuse-io-uring.rst).
//
// With MountOptions.IoUring the server asks for FUSE_OVER_IO_URING at
// INIT. If the kernel grants it (the fuse module's enable_uring
// parameter is on), NewServer starts one queue per possible CPU once
// INIT is answered. Each queue
// is a goroutine locked to its OS thread that owns an io_uring (SQE128,
// single issuer, deferred task work: the kernel copies a request into
// the entry's buffers in this thread's context, when it waits for
// completions) and registers `depth` ring entries with
// FUSE_IO_URING_CMD_REGISTER. Once every queue has an entry the kernel
// sends all requests except FORGET and INTERRUPT through the rings
// (those still come through /dev/fuse, which the ordinary loop keeps
// reading), choosing the queue of the CPU the application runs on. A
// completion is a request, served by the same handlers as /dev/fuse
// requests; the reply goes back with FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
// which also re-arms the entry.
//
// The queue thread only submits and reaps: each request is served in a
// goroutine of its own (as /dev/fuse requests are), which hands its
// commit back through a list and an eventfd whose read sits in the same
// ring, so a slow or blocked handler delays nobody else. Notifications
// (unique 0) are not accepted on the ring by the kernel and keep using
// /dev/fuse.

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	ioringSetupCqsize        = 1 << 3
	ioringSetupSQE128        = 1 << 10
	ioringSetupSingleIssuer  = 1 << 12
	ioringSetupDeferTaskrun  = 1 << 13
	ioringEnterGetevents     = 1 << 0
	ioringOffSqRing          = 0
	ioringOffSqes            = 0x10000000
	ioringFeatSingleMmap     = 1 << 0
	ioringOpRead             = 22
	ioringOpUringCmd         = 46
	fuseIoUringCmdRegister   = 1
	fuseIoUringCmdCommitFtch = 2

	uringHeaderInOutSize = 128 // fuse_uring_req_header.in_out
	uringHeaderOpInSize  = 128 // fuse_uring_req_header.op_in
	uringHeaderSize      = uringHeaderInOutSize + uringHeaderOpInSize + 32
	uringSQESize         = 128
	uringCmdOffset       = 48 // io_uring_sqe.cmd
	uringDefaultDepth    = 8
)

type ioSqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type ioCqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, Cqes, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type ioUringParams struct {
	SqEntries, CqEntries, Flags, SqThreadCPU, SqThreadIdle, Features, WqFd uint32
	Resv                                                                   [3]uint32
	SqOff                                                                  ioSqringOffsets
	CqOff                                                                  ioCqringOffsets
}

type ioUringCqe struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// uringEntInOut is struct fuse_uring_ent_in_out.
type uringEntInOut struct {
	Flags     uint64
	CommitID  uint64
	PayloadSz uint32
	Padding   uint32
	Reserved  uint64
}

// uringCmdReq is struct fuse_uring_cmd_req, in the SQE's command area.
type uringCmdReq struct {
	Flags    uint64
	CommitID uint64
	Qid      uint16
	Padding  [6]uint8
}

// uringRing is one io_uring with its mappings.
type uringRing struct {
	fd                     int
	sqRing, sqes           []byte
	sqHead, sqTail, sqMask *uint32
	sqArray                unsafe.Pointer
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer
	sqEntries              uint32
	pending                uint32 // SQEs prepared, not yet submitted
}

func newURing(entries uint32) (*uringRing, error) {
	p := ioUringParams{
		Flags:     ioringSetupSQE128 | ioringSetupSingleIssuer | ioringSetupDeferTaskrun | ioringSetupCqsize,
		CqEntries: 2 * entries,
	}
	fd, _, errno := syscall.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &uringRing{fd: int(fd), sqEntries: p.SqEntries}
	if p.Features&ioringFeatSingleMmap == 0 {
		r.close()
		return nil, fmt.Errorf("io_uring: kernel lacks IORING_FEAT_SINGLE_MMAP")
	}
	size := max(p.SqOff.Array+p.SqEntries*4, p.CqOff.Cqes+p.CqEntries*uint32(unsafe.Sizeof(ioUringCqe{})))
	var err error
	if r.sqRing, err = unix.Mmap(r.fd, ioringOffSqRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, ioringOffSqes, int(p.SqEntries)*uringSQESize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap sqes: %w", err)
	}
	base := unsafe.Pointer(&r.sqRing[0])
	r.sqHead = (*uint32)(unsafe.Add(base, p.SqOff.Head))
	r.sqTail = (*uint32)(unsafe.Add(base, p.SqOff.Tail))
	r.sqMask = (*uint32)(unsafe.Add(base, p.SqOff.RingMask))
	r.sqArray = unsafe.Add(base, p.SqOff.Array)
	r.cqHead = (*uint32)(unsafe.Add(base, p.CqOff.Head))
	r.cqTail = (*uint32)(unsafe.Add(base, p.CqOff.Tail))
	r.cqMask = (*uint32)(unsafe.Add(base, p.CqOff.RingMask))
	r.cqes = unsafe.Add(base, p.CqOff.Cqes)
	return r, nil
}

func (r *uringRing) close() {
	if r.sqes != nil {
		unix.Munmap(r.sqes)
	}
	if r.sqRing != nil {
		unix.Munmap(r.sqRing)
	}
	syscall.Close(r.fd)
}

// prepCmd queues one FUSE uring command SQE. The SQ never overflows:
// it has room for every entry of the queue and each entry has at most
// one command outstanding.
func (r *uringRing) prepCmd(devFd int, op uint32, userData uint64, iov *[2]syscall.Iovec, req uringCmdReq) {
	tail := atomic.LoadUint32(r.sqTail) + r.pending
	idx := tail & *r.sqMask
	sqe := r.sqes[int(idx)*uringSQESize : int(idx+1)*uringSQESize]
	clear(sqe)
	sqe[0] = ioringOpUringCmd
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(devFd)
	*(*uint32)(unsafe.Pointer(&sqe[8])) = op // cmd_op
	if iov != nil {
		*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(iov)))
		*(*uint32)(unsafe.Pointer(&sqe[24])) = 2
	}
	*(*uint64)(unsafe.Pointer(&sqe[32])) = userData
	*(*uringCmdReq)(unsafe.Pointer(&sqe[uringCmdOffset])) = req
	*(*uint32)(unsafe.Add(r.sqArray, 4*uintptr(idx))) = idx
	r.pending++
}

// prepRead queues a read of len(buf) bytes from fd.
func (r *uringRing) prepRead(fd int, buf []byte, userData uint64) {
	tail := atomic.LoadUint32(r.sqTail) + r.pending
	idx := tail & *r.sqMask
	sqe := r.sqes[int(idx)*uringSQESize : int(idx+1)*uringSQESize]
	clear(sqe)
	sqe[0] = ioringOpRead
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(fd)
	*(*uint64)(unsafe.Pointer(&sqe[16])) = uint64(uintptr(unsafe.Pointer(&buf[0])))
	*(*uint32)(unsafe.Pointer(&sqe[24])) = uint32(len(buf))
	*(*uint64)(unsafe.Pointer(&sqe[32])) = userData
	*(*uint32)(unsafe.Add(r.sqArray, 4*uintptr(idx))) = idx
	r.pending++
}

// submitAndWait publishes the prepared SQEs and waits for at least one
// completion (running the deferred task work that fills entries).
func (r *uringRing) submitAndWait() error {
	n := r.pending
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqTail)+n)
	r.pending = 0
	for {
		_, _, errno := syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 1, ioringEnterGetevents, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			n = 0 // submitted already; wait again
			continue
		default:
			return errno
		}
	}
}

// uringEntry is one registered ring entry: header and payload buffers.
type uringEntry struct {
	header  []byte
	payload []byte
	iov     [2]syscall.Iovec
}

// uringQueue serves one CPU's ring queue.
type uringQueue struct {
	ms      *Server
	qid     uint16
	ring    *uringRing
	devFd   int
	entries []*uringEntry
	mem     []byte

	// Requests are served in goroutines; their commits come back to
	// the queue thread (the ring's only submitter) through done, and
	// an eventfd read in the ring wakes it.
	efd     int
	efdBuf  [8]byte
	mu      sync.Mutex
	done    []uringCommit
	serving sync.WaitGroup
}

type uringCommit struct{ ent, unique uint64 }

// uringWakeTag is the user_data of the eventfd read.
const uringWakeTag = ^uint64(0)

// IoUringActive reports whether the kernel granted FUSE over io_uring
// and the queues were registered.
func (ms *Server) IoUringActive() bool { return ms.uringActive.Load() }

// startURing sets up the queues (called by NewServer after INIT). It returns once every
// queue has registered its entries or failed; on failure the kernel
// keeps using /dev/fuse.
func (ms *Server) startURing() error {
	ncpu, err := possibleCPUs()
	if err != nil {
		return err
	}
	depth := ms.opts.IoUringDepth
	if depth <= 0 {
		depth = uringDefaultDepth
	}
	ps := syscall.Getpagesize()
	payloadSize := max(_FUSE_MIN_READ_BUFFER, ((ms.opts.MaxWrite-1)/ps+1)*ps)
	var devFd int
	if err := ms.fuseFD.withFD(func(fd int) { devFd = fd }); err != nil {
		return err
	}
	errs := make(chan error, ncpu)
	for q := 0; q < ncpu; q++ {
		uq := &uringQueue{ms: ms, qid: uint16(q), devFd: devFd}
		ms.fuseFD.loops.Add(1)
		go uq.run(depth, payloadSize, errs)
	}
	var first error
	for q := 0; q < ncpu; q++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		ms.uringActive.Store(true)
	}
	return first
}

func possibleCPUs() (int, error) {
	b, err := readFileString("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, err
	}
	var lo, hi int
	if n, _ := fmt.Sscanf(b, "%d-%d", &lo, &hi); n == 2 {
		return hi + 1, nil
	}
	if n, _ := fmt.Sscanf(b, "%d", &lo); n == 1 {
		return lo + 1, nil
	}
	return 0, fmt.Errorf("cannot parse possible CPUs %q", b)
}

func readFileString(p string) (string, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 64)
	n, err := syscall.Read(fd, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func (q *uringQueue) run(depth, payloadSize int, started chan<- error) {
	defer q.ms.fuseFD.loops.Done()
	// The ring's task work runs in this thread: it must stay the same.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	if err = q.setup(depth, payloadSize); err == nil {
		for i, e := range q.entries {
			q.ring.prepCmd(q.devFd, fuseIoUringCmdRegister, uint64(i), &e.iov, uringCmdReq{Qid: q.qid})
		}
		err = q.ring.submit()
	}
	started <- err
	if err != nil {
		q.release()
		return
	}
	q.loop()
	q.release()
}

// submit publishes the prepared SQEs without waiting (registration).
func (r *uringRing) submit() error {
	n := r.pending
	atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqTail)+n)
	r.pending = 0
	_, _, errno := syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 0, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func (q *uringQueue) setup(depth, payloadSize int) error {
	ring, err := newURing(uint32(depth + 1))
	if err != nil {
		return err
	}
	q.ring = ring
	if q.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		return err
	}
	per := uringHeaderSize + payloadSize
	per = (per + 4095) &^ 4095
	q.mem, err = unix.Mmap(-1, 0, per*depth, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	for i := 0; i < depth; i++ {
		b := q.mem[i*per : (i+1)*per]
		e := &uringEntry{header: b[:uringHeaderSize], payload: b[uringHeaderSize : uringHeaderSize+payloadSize]}
		e.iov[0] = syscall.Iovec{Base: &e.header[0], Len: uint64(len(e.header))}
		e.iov[1] = syscall.Iovec{Base: &e.payload[0], Len: uint64(len(e.payload))}
		q.entries = append(q.entries, e)
	}
	return nil
}

func (q *uringQueue) release() {
	// Handlers still running write into the entries' buffers.
	q.serving.Wait()
	if q.efd > 0 {
		syscall.Close(q.efd)
	}
	if q.ring != nil {
		q.ring.close()
	}
	if q.mem != nil {
		unix.Munmap(q.mem)
	}
}

// loop waits for requests, hands each to a goroutine and submits the
// commits the handlers return, until the connection ends.
func (q *uringQueue) loop() {
	r := q.ring
	r.prepRead(q.efd, q.efdBuf[:], uringWakeTag)
	for {
		if err := r.submitAndWait(); err != nil {
			q.ms.opts.Logger.Printf("fuse io_uring queue %d: %v", q.qid, err)
			return
		}
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			cqe := (*ioUringCqe)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*unsafe.Sizeof(ioUringCqe{})))
			ud, res := cqe.UserData, cqe.Res
			if res < 0 {
				// ENOTCONN/ECANCELED: unmounted or aborted.
				atomic.StoreUint32(r.cqHead, head+1)
				return
			}
			if ud == uringWakeTag {
				q.mu.Lock()
				done := q.done
				q.done = nil
				q.mu.Unlock()
				for _, c := range done {
					r.prepCmd(q.devFd, fuseIoUringCmdCommitFtch, c.ent, nil, uringCmdReq{Qid: q.qid, CommitID: c.unique})
				}
				r.prepRead(q.efd, q.efdBuf[:], uringWakeTag)
				continue
			}
			q.serving.Add(1)
			go q.serveAsync(ud)
		}
		atomic.StoreUint32(r.cqHead, head)
	}
}

// serveAsync answers the request of entry ent and hands the commit to
// the queue thread.
func (q *uringQueue) serveAsync(ent uint64) {
	defer q.serving.Done()
	unique := q.serve(q.entries[ent])
	q.mu.Lock()
	wake := len(q.done) == 0
	q.done = append(q.done, uringCommit{ent, unique})
	q.mu.Unlock()
	if wake {
		one := [8]byte{1}
		syscall.Write(q.efd, one[:])
	}
}

// serve handles the request in e and writes the reply into e. It
// returns the commit id (the request's unique).
func (q *uringQueue) serve(e *uringEntry) uint64 {
	ms := q.ms
	inOut := (*uringEntInOut)(unsafe.Pointer(&e.header[uringHeaderInOutSize+uringHeaderOpInSize]))
	hdr := (*InHeader)(unsafe.Pointer(&e.header[0]))
	unique := hdr.Unique
	opSize := 0
	if h := getHandler(hdr.Opcode); h != nil && int(h.InputSize) > int(unsafe.Sizeof(InHeader{})) {
		opSize = int(h.InputSize) - int(unsafe.Sizeof(InHeader{}))
	}
	switch hdr.Opcode {
	case _OP_RENAME:
		opSize = renameInSize(&ms.kernelSettings) - int(unsafe.Sizeof(InHeader{}))
	case _OP_SETXATTR:
		opSize = setXAttrInSize(ms.negotiatedFlags) - int(unsafe.Sizeof(InHeader{}))
	}
	opSize = min(opSize, uringHeaderOpInSize)
	payload := e.payload[:inOut.PayloadSz]

	// The handlers expect one buffer: header, operation struct, payload.
	req := ms.reqPool.Get().(*requestAlloc)
	n := int(unsafe.Sizeof(InHeader{})) + opSize + len(payload)
	var in []byte
	if n <= len(req.smallInputBuf) {
		in = req.smallInputBuf[:n]
	} else {
		in = ms.buffers.AllocBuffer(uint32(n))[:n]
		defer ms.buffers.FreeBuffer(in)
	}
	copy(in, e.header[:unsafe.Sizeof(InHeader{})])
	copy(in[unsafe.Sizeof(InHeader{}):], e.header[uringHeaderInOutSize:uringHeaderInOutSize+opSize])
	copy(in[int(unsafe.Sizeof(InHeader{}))+opSize:], payload)
	req.inputBuf = in
	(*InHeader)(unsafe.Pointer(&in[0])).Length = uint32(n)

	h, inSize, outSize, outPayloadSize, code := parseRequest(req.inputBuf, &ms.kernelSettings, ms.negotiatedFlags)
	req.request.status = code
	if code.Ok() {
		req.request.status = req.splitPayload(inSize, int(h.InputSize))
	}
	req.outHeaderBuf = req.outHeaderInline[:]
	req.outDataBuf = req.outDataInline[:outSize]
	clear(req.outHeaderBuf)
	clear(req.outDataBuf)
	if outPayloadSize > 0 {
		req.outPayload = ms.buffers.AllocBuffer(uint32(outPayloadSize))
		req.bufferPoolOutputBuf = req.outPayload
	}
	ms.protocolServer.handleRequest(h, &req.request)
	if req.readResult != nil {
		req.outPayload, req.status = req.readResult.Bytes(req.outPayload)
		req.readResult.Done()
		req.readResult = nil
		req.serializeHeader(len(req.outPayload))
	}

	// Reply: out header in in_out, everything else in the payload.
	copy(e.header[:uringHeaderInOutSize], req.outHeaderBuf)
	m := copy(e.payload, req.outDataBuf)
	m += copy(e.payload[m:], req.outPayload)
	inOut.PayloadSz = uint32(m)

	if req.bufferPoolOutputBuf != nil {
		ms.buffers.FreeBuffer(req.bufferPoolOutputBuf)
		req.bufferPoolOutputBuf = nil
	}
	if req.interrupted {
		req.interrupted = false
		req.cancel = make(chan struct{})
	}
	req.clear()
	ms.reqPool.Put(req)
	return unique
}
