package pebblestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrLocked marks an Open refused because another process (or another
// Store of this process) holds the directory's lock: Pebble allows one
// writer per directory. errors.Is(err, ErrLocked) holds for a *LockedError.
var ErrLocked = errors.New("pebblestore: data directory in use")

// LockedError is the error of an Open whose directory is held: it names
// the directory and, where the lock can be queried (Linux, macOS), the
// holder's process id and command, and says how to fix it.
type LockedError struct {
	// Dir is the data directory Open was given.
	Dir string
	// PID is the lock holder's process id, 0 when unknown.
	PID int
	// Command is the holder's command name (Linux: /proc/PID/comm), "" when
	// unknown.
	Command string
	// Err is Pebble's error.
	Err error
}

func (e *LockedError) Error() string {
	var who string
	switch {
	case e.PID == os.Getpid():
		who = "is already open in this process"
	case e.PID > 0 && e.Command != "":
		who = fmt.Sprintf("is in use by another process (pid %d, %s)", e.PID, e.Command)
	case e.PID > 0:
		who = fmt.Sprintf("is in use by another process (pid %d)", e.PID)
	default:
		who = "is in use by another process"
	}
	return fmt.Sprintf("pebblestore: the data directory %s %s: stop that process (for example a macpd started earlier), "+
		"or point this one at another directory with MACP_DATA_DIR (--data-dir) [%v]", e.Dir, who, e.Err)
}

func (e *LockedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// lockedError returns a *LockedError when err, from pebble.Open on dir,
// says that the directory's lock is held, else nil. lookup tells whether
// to query the lock file of the real file system (not for an in-memory
// vfs.FS).
func lockedError(dir string, err error, lookup bool) error {
	held := errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
	if !held {
		return nil
	}
	le := &LockedError{Dir: dir, Err: err}
	if strings.Contains(err.Error(), "lock held by current process") {
		le.PID = os.Getpid()
	} else if lookup {
		le.PID = lockHolder(filepath.Join(dir, "LOCK"))
		if le.PID > 0 {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", le.PID)); err == nil {
				le.Command = strings.TrimSpace(string(b))
			}
		}
	}
	return le
}
