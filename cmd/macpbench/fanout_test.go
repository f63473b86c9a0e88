package main

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/bench/benchrec"
)

// The fan-out command finds the server's process by its listening port
// and reads its CPU time from /proc (Linux).
func TestListenerPIDAndItsCPU(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pid, err := listenerPID(l.Addr().String())
	if err != nil || pid != os.Getpid() {
		t.Fatalf("listenerPID = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
	c0, err := benchrec.ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the reading moves (10 ms ticks), failing only if it
	// never does.
	c1 := c0
	for deadline := time.Now().Add(30 * time.Second); c1 <= c0; {
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stuck at %v while this process was busy", c0)
		}
		for start := time.Now(); time.Since(start) < 10*time.Millisecond; {
		}
		if c1, err = benchrec.ProcCPU(pid); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if _, err := listenerPID(l.Addr().String()); err == nil {
		t.Fatal("a closed port was found listening")
	}
}
