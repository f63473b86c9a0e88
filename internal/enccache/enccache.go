package enccache

import (
	"hash/maphash"
	"sync/atomic"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Cache is a fixed-size cache of envelope encodings.
type Cache struct {
	seed     maphash.Seed
	maxEntry int
	slots    []atomic.Pointer[entry]
}

type entry struct {
	env     *macpv1.Envelope
	seq     uint64
	variant bool
	b       []byte
}

// New returns a Cache of slots entries of at most maxEntry bytes each.
func New(slots, maxEntry int) *Cache {
	return &Cache{seed: maphash.MakeSeed(), maxEntry: maxEntry, slots: make([]atomic.Pointer[entry], max(slots, 1))}
}

// Encoded returns encode(env, variant) for record seq, from the cache when
// another follower encoded it recently. encode must return the same bytes
// for the same arguments.
func (c *Cache) Encoded(seq uint64, env *macpv1.Envelope, variant bool, encode func(*macpv1.Envelope, bool) ([]byte, error)) ([]byte, error) {
	slot := &c.slots[(maphash.Comparable(c.seed, env)^seq)%uint64(len(c.slots))]
	if e := slot.Load(); e != nil && e.env == env && e.seq == seq && e.variant == variant {
		return e.b, nil
	}
	b, err := encode(env, variant)
	if err != nil {
		return nil, err
	}
	if cap(b) <= c.maxEntry {
		slot.Store(&entry{env: env, seq: seq, variant: variant, b: b})
	}
	return b, nil
}
