// Package modereg is the durable form of extension-mode registrations
// (RFC-MACP-0002 §12, RFC-MACP-0006 §3.6), shared by the runtime, which
// writes them before acknowledging a registration and restores them at
// boot, and by the offline tools (verify, replay), which need them to
// replay the sessions bound to extension modes.
//
// Contract:
//  1. A registration is stored as a store meta value under Key(mode id):
//     one State byte, then the deterministic protobuf encoding of its
//     macp.v1.ModeDescriptor (Encode). The format is part of the store
//     format: it never changes in place.
//  2. Decode validates what it reads (the state byte and the descriptor,
//     with passthrough.Validate): a damaged value is an error naming it,
//     never a mode with a wrong descriptor.
//  3. Unregistered and renamed (promoted) modes stay stored as Retired,
//     because their sessions still replay under them.
//  4. Load never lets a stored registration replace a built-in mode of
//     the registry it extends.
package modereg

import (
	"context"
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/passthrough"
	"google.golang.org/protobuf/proto"
)

// State is the lifecycle state of a stored registration.
type State byte

// The stored states.
const (
	Active   State = 'E' // registered extension mode
	Standard State = 'S' // promoted to standards-track
	Retired  State = 'R' // unregistered or renamed; kept for replay
)

// Prefix is the meta-key prefix of stored registrations.
const Prefix = "mode/"

// Key is the meta key of mode id's registration.
func Key(id string) string { return Prefix + id }

// Encode is the stored value of a registration.
func Encode(state State, d *macpv1.ModeDescriptor) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil {
		return nil, err
	}
	return append([]byte{byte(state)}, b...), nil
}

// Decode reads a stored value back, validating the state and the
// descriptor.
func Decode(val []byte) (State, *macpv1.ModeDescriptor, error) {
	if len(val) < 1 {
		return 0, nil, coord.Errorf(coord.CodeInternalError, "empty mode registration")
	}
	switch s := State(val[0]); s {
	case Active, Standard, Retired:
	default:
		return 0, nil, coord.Errorf(coord.CodeInternalError, "unknown mode registration state %q", val[0])
	}
	var d macpv1.ModeDescriptor
	if err := proto.Unmarshal(val[1:], &d); err != nil {
		return 0, nil, coord.Errorf(coord.CodeInternalError, "mode registration does not decode: %v", err)
	}
	nd, err := passthrough.Validate(&d)
	if err != nil {
		return 0, nil, err
	}
	return State(val[0]), nd, nil
}

// Meta is the part of store.Store that Load reads.
type Meta interface {
	ListMeta(ctx context.Context, prefix string, fn func(key string, val []byte) error) error
}

// Load returns base extended with the registrations stored in st: Active
// ones as extension modes, Standard ones as standards-track modes; a
// built-in mode of base wins over a stored one of the same id. Retired
// registrations are returned apart, by mode id, as extension-mode entries:
// the runtime keeps them out of discovery but binds their sessions to
// them; replay tools add them to the registry.
func Load(ctx context.Context, st Meta, base *mode.Registry) (*mode.Registry, map[string]mode.Entry, error) {
	reg := base
	retired := map[string]mode.Entry{}
	err := st.ListMeta(ctx, Prefix, func(key string, val []byte) error {
		state, nd, err := Decode(val)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if e, ok := base.Lookup(nd.Mode); ok && e.BuiltIn {
			return nil
		}
		e := mode.Entry{Mode: passthrough.New(nd), Kind: mode.Extension}
		switch state {
		case Active:
			reg = reg.With(e)
		case Standard:
			e.Kind = mode.Standard
			reg = reg.With(e)
		case Retired:
			retired[nd.Mode] = e
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return reg, retired, nil
}
