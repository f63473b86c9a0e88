package testutil

import (
	"testing"
	"time"
)

// Recv returns the next value of ch, failing the test if none arrives
// within 5 s (a liveness bound, not a timing assertion).
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// NothingFor fails the test if ch yields a value within d.
func NothingFor[T any](t testing.TB, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s arrived too early: %v", what, v)
	case <-time.After(d):
	}
}
