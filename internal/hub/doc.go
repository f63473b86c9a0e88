// Package hub fans values out to subscribers without ever blocking the
// publisher (the runtime's signal and lifecycle feeds, the registries'
// change hints).
//
// Contract: Publish never blocks; each subscriber has a bounded buffer
// (New: a count; NewBounded: also a byte cost of the values it holds and
// has not yet taken, Took), and a subscriber that would pass its bound is
// dropped: its Done channel closes and Lagged reports true, so its
// transport can end the stream with a clear error instead of silently
// losing values. Unsubscribe is idempotent. Every method is safe for
// concurrent use; the package starts no goroutine.
package hub
