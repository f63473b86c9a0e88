package registry

import (
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Limits bound what clients may register (docs/security.md
// "Limits"): without them, registrations are memory the server keeps for
// good and list answers (ListExtModes, ListPolicies) grow past what
// clients accept (gRPC's default receive limit is 4 MiB).
type Limits struct {
	// MaxExtModes caps registered extension modes (MACP_MAX_EXT_MODES).
	MaxExtModes int
	// MaxPolicies caps registered policies (MACP_MAX_POLICIES).
	MaxPolicies int
	// MaxDescriptorBytes caps one mode or policy descriptor's encoded
	// size (MACP_MAX_DESCRIPTOR_BYTES).
	MaxDescriptorBytes int
}

// DefaultLimits are the documented defaults.
var DefaultLimits = Limits{MaxExtModes: 64, MaxPolicies: 256, MaxDescriptorBytes: 128 << 10}

// registryTotalBytes bounds the encoded descriptors of each registry
// together, whatever the settings, so a list answer stays well under
// gRPC's default 4 MiB receive limit.
const registryTotalBytes = 2 << 20

func (l *Limits) ensureDefaults() {
	if l.MaxExtModes <= 0 {
		l.MaxExtModes = DefaultLimits.MaxExtModes
	}
	if l.MaxPolicies <= 0 {
		l.MaxPolicies = DefaultLimits.MaxPolicies
	}
	if l.MaxDescriptorBytes <= 0 {
		l.MaxDescriptorBytes = DefaultLimits.MaxDescriptorBytes
	}
}

// checkDescriptorSize refuses a descriptor over MaxDescriptorBytes,
// before anything else looks at it.
func (r *Registry) checkDescriptorSize(what string, d proto.Message) *coord.Error {
	if size, max := proto.Size(d), r.opts.Limits.MaxDescriptorBytes; size > max {
		return coord.Errorf(coord.CodePayloadTooLarge, "%s descriptor is %d bytes; at most %d are allowed (MACP_MAX_DESCRIPTOR_BYTES)", what, size, max)
	}
	return nil
}

// checkExtModeRoom refuses a registration of d that would pass the count
// or total limits; the caller holds regMu.
func (r *Registry) checkExtModeRoom(reg *mode.Registry, d *macpv1.ModeDescriptor) *coord.Error {
	l := r.opts.Limits
	size := proto.Size(d)
	ext := reg.Descriptors(mode.Extension)
	if len(ext) >= l.MaxExtModes {
		return coord.Errorf(coord.CodeRateLimited, "%d extension modes are registered, the most allowed (MACP_MAX_EXT_MODES); unregister one first", len(ext))
	}
	total := size
	for _, e := range ext {
		total += proto.Size(e)
	}
	if total > registryTotalBytes {
		return coord.Errorf(coord.CodeRateLimited, "registered extension mode descriptors would take %d bytes; at most %d are allowed together", total, registryTotalBytes)
	}
	return nil
}

// checkPolicyRoom refuses a registration of pd that would pass the count
// or total limits; the caller holds polMu.
func (r *Registry) checkPolicyRoom(pd *macpv1.PolicyDescriptor) *coord.Error {
	l := r.opts.Limits
	size := proto.Size(pd)
	active := *r.policies.active.Load()
	if len(active) >= l.MaxPolicies {
		return coord.Errorf(coord.CodeRateLimited, "%d policies are registered, the most allowed (MACP_MAX_POLICIES); unregister one first", len(active))
	}
	total := size
	for _, p := range active {
		d := p.desc
		total += len(d.ID) + len(d.Mode) + len(d.Description) + len(d.Rules) + 32
	}
	if total > registryTotalBytes {
		return coord.Errorf(coord.CodeRateLimited, "registered policy descriptors would take %d bytes; at most %d are allowed together", total, registryTotalBytes)
	}
	return nil
}
