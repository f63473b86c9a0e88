//go:build linux || darwin

package pebblestore

import (
	"io"
	"os"
	"syscall"
)

// lockHolder returns the process id holding a write lock on the file at
// path (Pebble takes an fcntl F_SETLK write lock on the directory's LOCK
// file), 0 when none or unknown. F_GETLK reports the holder of a
// conflicting POSIX lock.
func lockHolder(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}
