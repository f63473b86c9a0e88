package testutil

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers and a reader (run with -race): every write lands
// whole.
func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("ab"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 800) {
		t.Fatalf("%d bytes, want 1600 of \"ab\" repeated", len(got))
	}
}
