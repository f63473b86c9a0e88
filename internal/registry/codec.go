package registry

import (
	"context"
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/passthrough"
	"github.com/macpd/macpd/internal/policy"
	"google.golang.org/protobuf/proto"
)

// ModeState is the lifecycle state of a stored registration.
type ModeState byte

// The stored states.
const (
	ModeActive   ModeState = 'E' // registered extension mode
	ModeStandard ModeState = 'S' // promoted to standards-track
	ModeRetired  ModeState = 'R' // unregistered or renamed; kept for replay
)

// ModePrefix is the meta-key prefix of stored registrations.
const ModePrefix = "mode/"

// ModeKey is the meta key of mode id's registration.
func ModeKey(id string) string { return ModePrefix + id }

// EncodeMode is the stored value of a registration.
func EncodeMode(state ModeState, d *macpv1.ModeDescriptor) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil {
		return nil, err
	}
	return append([]byte{byte(state)}, b...), nil
}

// DecodeMode reads a stored value back, validating the state and the
// descriptor.
func DecodeMode(val []byte) (ModeState, *macpv1.ModeDescriptor, error) {
	if len(val) < 1 {
		return 0, nil, coord.Errorf(coord.CodeInternalError, "empty mode registration")
	}
	switch s := ModeState(val[0]); s {
	case ModeActive, ModeStandard, ModeRetired:
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
	return ModeState(val[0]), nd, nil
}

// MetaReader is the part of store.Store that LoadModes reads.
type MetaReader interface {
	ListMeta(ctx context.Context, prefix string, fn func(key string, val []byte) error) error
}

// LoadModes returns base extended with the registrations stored in st: ModeActive
// ones as extension modes, ModeStandard ones as standards-track modes; a
// built-in mode of base wins over a stored one of the same id. ModeRetired
// registrations are returned apart, by mode id, as extension-mode entries:
// the runtime keeps them out of discovery but binds their sessions to
// them; replay tools add them to the registry.
func LoadModes(ctx context.Context, st MetaReader, base *mode.Registry) (*mode.Registry, map[string]mode.Entry, error) {
	reg := base
	retired := map[string]mode.Entry{}
	err := st.ListMeta(ctx, ModePrefix, func(key string, val []byte) error {
		state, nd, err := DecodeMode(val)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if e, ok := base.Lookup(nd.Mode); ok && e.BuiltIn {
			return nil
		}
		e := mode.Entry{Mode: passthrough.New(nd), Kind: mode.Extension}
		switch state {
		case ModeActive:
			reg = reg.With(e)
		case ModeStandard:
			e.Kind = mode.Standard
			reg = reg.With(e)
		case ModeRetired:
			retired[nd.Mode] = e
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return reg, retired, nil
}

// Policy registrations are stored under policyStoreKey(id): one state
// byte (policyActive or policyRetired), then the deterministic protobuf
// encoding of the macp.v1.PolicyDescriptor.
const (
	policyStorePrefix      = "policy/"
	policyActive      byte = 'A'
	policyRetired     byte = 'R'
)

func policyStoreKey(id string) string { return policyStorePrefix + id }

// registeredPolicy is one dynamic registration.
type registeredPolicy struct {
	desc           policy.Descriptor
	registeredAtMs int64
}

func (p registeredPolicy) proto() *macpv1.PolicyDescriptor {
	return &macpv1.PolicyDescriptor{PolicyId: p.desc.ID, Mode: p.desc.Mode, Description: p.desc.Description,
		Rules: p.desc.Rules, SchemaVersion: p.desc.SchemaVersion, RegisteredAtUnixMs: p.registeredAtMs}
}

// sameRules is the §8 policy equality (id + schema_version + rules), plus
// the target mode, which decides where the policy binds.
func (p registeredPolicy) sameRules(d policy.Descriptor) bool {
	return p.desc.ID == d.ID && p.desc.Mode == d.Mode && p.desc.SchemaVersion == d.SchemaVersion && p.desc.Rules == d.Rules
}

func encodePolicy(state byte, p registeredPolicy) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p.proto())
	if err != nil {
		return nil, err
	}
	return append([]byte{state}, b...), nil
}

func decodePolicy(val []byte) (byte, registeredPolicy, error) {
	if len(val) < 1 {
		return 0, registeredPolicy{}, fmt.Errorf("empty policy registration")
	}
	switch val[0] {
	case policyActive, policyRetired:
	default:
		return 0, registeredPolicy{}, fmt.Errorf("unknown policy registration state %q", val[0])
	}
	var d macpv1.PolicyDescriptor
	if err := proto.Unmarshal(val[1:], &d); err != nil {
		return 0, registeredPolicy{}, fmt.Errorf("policy registration does not decode: %w", err)
	}
	p := registeredPolicy{registeredAtMs: d.RegisteredAtUnixMs, desc: policy.Descriptor{
		ID: d.PolicyId, Mode: d.Mode, Description: d.Description, Rules: d.Rules, SchemaVersion: d.SchemaVersion}}
	if p.desc.ID == "" {
		return 0, registeredPolicy{}, fmt.Errorf("policy registration without policy_id")
	}
	return val[0], p, nil
}
