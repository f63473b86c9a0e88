package modetest

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/macpd/macpd/internal/mode"
)

// Rand is a random source that reads its choices from a byte string, so a
// coverage-guided fuzzer's small mutations of the input make small changes
// to the generated sequence. When the bytes run out every choice is 0.
type Rand struct {
	data []byte
	pos  int
}

// NewRand returns a Rand reading data.
func NewRand(data []byte) *Rand { return &Rand{data: data} }

// Remaining reports how many unread bytes are left.
func (r *Rand) Remaining() int { return len(r.data) - r.pos }

func (r *Rand) byte() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

// Intn returns a value in [0, n); 0 when n <= 1.
func (r *Rand) Intn(n int) int {
	switch {
	case n <= 1:
		return 0
	case n <= 256:
		return int(r.byte()) % n
	default:
		v := uint32(r.byte()) | uint32(r.byte())<<8 | uint32(r.byte())<<16 | uint32(r.byte())<<24
		return int(v % uint32(n))
	}
}

// Bool returns a random bool.
func (r *Rand) Bool() bool { return r.byte()&1 == 1 }

// Chance returns true with probability about num/den.
func (r *Rand) Chance(num, den int) bool { return r.Intn(den) < num }

// Float64 returns a value in [0, 1].
func (r *Rand) Float64() float64 { return float64(r.byte()) / 255 }

// Pick returns one of choices (the zero value when empty).
func (r *Rand) Pick(choices ...string) string {
	if len(choices) == 0 {
		return ""
	}
	return choices[r.Intn(len(choices))]
}

// Bytes returns up to max raw bytes from the input.
func (r *Rand) Bytes(max int) []byte {
	n := r.Intn(max + 1)
	out := make([]byte, n)
	for i := range out {
		out[i] = r.byte()
	}
	return out
}

// Generator produces plausible inputs for one mode: mostly well-formed
// messages from plausible senders referencing plausible ids, so that valid
// paths (including accepted Commitments) are reached, plus malformed ones.
type Generator interface {
	// Binding returns the session binding a sequence runs under. It must be
	// one the mode's Start accepts.
	Binding(r *Rand) *mode.Binding
	// Next returns the next input for a session bound to b; seq is its index
	// in the sequence (usable for message ids).
	Next(r *Rand, b *mode.Binding, seq int) Input
}

// MaxFuzzInputs bounds the length of one generated sequence.
const MaxFuzzInputs = 64

// Generate turns data into a binding and a sequence of inputs.
func Generate(g Generator, data []byte) (*mode.Binding, []Input) {
	r := NewRand(data)
	b := g.Binding(r)
	var inputs []Input
	for i := 0; r.Remaining() > 0 && i < MaxFuzzInputs; i++ {
		inputs = append(inputs, g.Next(r, b, i))
	}
	return b, inputs
}

// FuzzSteps generates a sequence from data and checks the invariants of
// [Check] on it. Call it from a native fuzz target:
//
//	f.Fuzz(func(t *testing.T, data []byte) { modetest.FuzzSteps(t, New(), gen{}, data) })
func FuzzSteps(t *testing.T, m mode.Mode, g Generator, data []byte) {
	t.Helper()
	b, inputs := Generate(g, data)
	if _, err := Check(m, b, inputs); err != nil {
		t.Fatal(err)
	}
}

// RandomRuns runs n sequences generated from a PCG seeded with seed, each
// from size random bytes, through [Check]. It returns how many sequences
// ended in an accepted Commitment and how many inputs were accepted, so a
// caller can assert that the generator reaches the valid paths.
func RandomRuns(t *testing.T, m mode.Mode, g Generator, seed uint64, n, size int) (resolved, accepted int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	data := make([]byte, size)
	for i := 0; i < n; i++ {
		for j := 0; j < size; j += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(data[j:], w[:])
		}
		b, inputs := Generate(g, data)
		res, err := Check(m, b, inputs)
		if err != nil {
			t.Fatalf("run %d (seed %d): %v", i, seed, err)
		}
		if res.Resolved {
			resolved++
		}
		for _, c := range res.Codes {
			if c == "" {
				accepted++
			}
		}
	}
	return resolved, accepted
}
