package mode

import (
	"slices"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Kind says how a registered mode is listed.
type Kind int

const (
	// Standard modes are listed by ListModes (macp.mode.*, or promoted
	// extensions).
	Standard Kind = iota
	// Extension modes are listed by ListExtModes.
	Extension
)

// Entry is one registered mode.
type Entry struct {
	Mode Mode
	Kind Kind
	// BuiltIn modes ship with the runtime and cannot be unregistered.
	BuiltIn bool
}

// Registry is an immutable set of modes keyed by mode id. Mutations return a
// new Registry, so a runtime can swap registries atomically while sessions
// keep using the mode they were bound to.
type Registry struct {
	entries map[string]Entry
}

// NewRegistry returns a registry of the given entries. Later duplicates of a
// mode id replace earlier ones.
func NewRegistry(entries ...Entry) *Registry {
	r := &Registry{entries: make(map[string]Entry, len(entries))}
	for _, e := range entries {
		r.entries[e.Mode.Descriptor().GetMode()] = e
	}
	return r
}

// Lookup returns the entry for a mode id.
func (r *Registry) Lookup(id string) (Entry, bool) {
	e, ok := r.entries[id]
	return e, ok
}

// With returns a copy of r with e added or replaced.
func (r *Registry) With(e Entry) *Registry {
	n := &Registry{entries: make(map[string]Entry, len(r.entries)+1)}
	for k, v := range r.entries {
		n.entries[k] = v
	}
	n.entries[e.Mode.Descriptor().GetMode()] = e
	return n
}

// Without returns a copy of r without mode id.
func (r *Registry) Without(id string) *Registry {
	n := &Registry{entries: make(map[string]Entry, len(r.entries))}
	for k, v := range r.entries {
		if k != id {
			n.entries[k] = v
		}
	}
	return n
}

// IDs returns all mode ids, standard modes first, each group sorted.
func (r *Registry) IDs() []string {
	var std, ext []string
	for id, e := range r.entries {
		if e.Kind == Standard {
			std = append(std, id)
		} else {
			ext = append(ext, id)
		}
	}
	slices.Sort(std)
	slices.Sort(ext)
	return append(std, ext...)
}

// Descriptors returns the descriptors of one kind, sorted by mode id.
func (r *Registry) Descriptors(k Kind) []*macpv1.ModeDescriptor {
	var out []*macpv1.ModeDescriptor
	for _, id := range r.IDs() {
		if e := r.entries[id]; e.Kind == k {
			out = append(out, e.Mode.Descriptor())
		}
	}
	return out
}

// IsStandardID reports whether id is in the reserved standards-track
// namespace macp.mode.* (RFC-MACP-0002 §4).
func IsStandardID(id string) bool { return strings.HasPrefix(id, "macp.mode.") }
