// Package builtin is the set of coordination modes this build of macpd
// ships: the five standards-track modes (RFC-MACP-0007..0011) and the
// ext.multi_round.v1 extension. Contract: Modes returns a new registry of
// them, every entry BuiltIn (never unregistered, never replaced by a
// stored registration); the runtime, the offline tools (verify, replay)
// and the tests all start from it, so they agree on what a mode id means.
package builtin

import (
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/mode/multiround"
	"github.com/macpd/macpd/internal/mode/proposal"
	"github.com/macpd/macpd/internal/mode/quorum"
	"github.com/macpd/macpd/internal/mode/task"
)

// Modes returns a registry of the built-in modes.
func Modes() *mode.Registry {
	return mode.NewRegistry(
		mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true},
		mode.Entry{Mode: proposal.New(), Kind: mode.Standard, BuiltIn: true},
		mode.Entry{Mode: task.New(), Kind: mode.Standard, BuiltIn: true},
		mode.Entry{Mode: handoff.NewWithOptions(handoff.Options{ImplicitAccept: true}), Kind: mode.Standard, BuiltIn: true}, // the runtime runs the implicit-accept timer
		mode.Entry{Mode: quorum.New(), Kind: mode.Standard, BuiltIn: true},
		mode.Entry{Mode: multiround.New(), Kind: mode.Extension, BuiltIn: true},
	)
}
