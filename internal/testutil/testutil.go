// Package testutil holds small helpers shared by the tests of several
// packages: a concurrent log buffer, where the MACP spec's fixtures and
// protos are found (the pinned spec commit), and builders of Decision
// envelopes (envelopes.go). Its subpackage apptest starts an in-process
// macpd and dials it. Contract: imported by
// _test.go files and test-support packages (modetest) only; nothing here
// is part of macpd's behaviour.
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a process's or
// an App's log written by its goroutines and read by the test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
