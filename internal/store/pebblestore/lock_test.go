package pebblestore_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/store/pebblestore"
)

// lockHolderEnv makes the test binary a lock holder (TestMain): it opens
// the store in the named directory, prints "ready", and waits for its
// standard input to close.
const lockHolderEnv = "PEBBLESTORE_TEST_HOLD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockHolderEnv); dir != "" {
		s, err := pebblestore.Open(dir, pebblestore.Options{})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = s.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// issue 28: a second open of a held directory says the directory is in
// use, by whom (pid), and how to fix it; it does not touch the store.
func TestOpenHeldDirectory(t *testing.T) {
	dir := t.TempDir()

	// Held by another process: the child's pid is named.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("lock holder: %q %v", line, err)
	}
	_, err = pebblestore.Open(dir, pebblestore.Options{})
	if err == nil {
		t.Fatal("a second process opened a held directory")
	}
	var le *pebblestore.LockedError
	if !errors.Is(err, pebblestore.ErrLocked) || !errors.As(err, &le) {
		t.Fatalf("not ErrLocked: %v", err)
	}
	for _, s := range []string{dir, "in use by another process", fmt.Sprintf("pid %d", cmd.Process.Pid), "stop that process", "MACP_DATA_DIR"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	if le.PID != cmd.Process.Pid || le.Dir != dir {
		t.Errorf("LockedError %+v, holder pid %d", le, cmd.Process.Pid)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lock holder: %v", err)
	}

	// Held by this process: said so.
	s, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatalf("open after the holder ended: %v", err)
	}
	defer s.Close()
	_, err = pebblestore.Open(dir, pebblestore.Options{})
	if !errors.Is(err, pebblestore.ErrLocked) || !strings.Contains(err.Error(), "already open in this process") ||
		!strings.Contains(err.Error(), dir) {
		t.Fatalf("second open in one process: %v", err)
	}
}
