package streambudget

import (
	"testing"
	"time"

	"github.com/macpd/macpd/internal/testutil"
)

// eventually polls cond every 5ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recv returns the next value of ch, failing the test after 5s.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testutil.Recv(t, ch, what)
}

// nothingFor asserts ch yields nothing for d.
func nothingFor[T any](t *testing.T, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	testutil.NothingFor(t, ch, d, what)
}
