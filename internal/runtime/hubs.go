package runtime

import "github.com/macpd/macpd/internal/hub"

// Hub and Sub are package hub's fan-out (the runtime's Signals and
// Lifecycle feeds, the registries' change hints).
type (
	Hub[T any] = hub.Hub[T]
	Sub[T any] = hub.Sub[T]
)

// NewHub is hub.New.
func NewHub[T any](size int) *Hub[T] { return hub.New[T](size) }

// NewBoundedHub is hub.NewBounded.
func NewBoundedHub[T any](size int, maxBytes int64, cost func(T) int64) *Hub[T] {
	return hub.NewBounded(size, maxBytes, cost)
}
