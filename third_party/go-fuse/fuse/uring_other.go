// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

//go:build !linux

package fuse

import "syscall"

// IoUringActive reports whether FUSE over io_uring is in use: never
// outside Linux.
func (ms *Server) IoUringActive() bool { return false }

func (ms *Server) startURing() error { return syscall.ENOSYS }
