//go:build !linux

package datasync

import "os"

// File falls back to fsync where there is no fdatasync.
func File(f *os.File) error { return f.Sync() }
