// Package registry holds the extension modes and the governance policies
// sessions are started under (RFC-MACP-0002 §12, RFC-MACP-0006 §3.6,
// RFC-MACP-0012 §7): validation of a registration, the limits on what
// clients may register, the durable form of registrations in the store's
// meta space, their restoration at boot and their reload when another
// node changed them, and the change hints the bindings' watch calls serve.
//
// Contract:
//  1. A Registry is the lookup the core resolves a SessionStart against:
//     it implements session.Modes (Lookup: the modes new sessions may bind
//     to) and policy.Lookup (Policy: built-in policies first, then the
//     registered ones). internal/app builds one and gives it to
//     runtime.New as both; the runtime never imports this package. A
//     session keeps the mode value and policy descriptor it resolved
//     (recorded in its SessionStart record), so no registry change affects
//     a started session or its replay.
//  2. ReplayModes adds the modes that were unregistered (or renamed by a
//     promotion) but still bind stored sessions: the runtime replays with
//     it (runtime.ReplayModer).
//  3. A registration or unregistration is acknowledged (nil *coord.Error)
//     only once it is durable in the store (MetaStore.PutMeta); a failed
//     write is INTERNAL_ERROR and changes nothing, watchers included. Mode
//     and policy changes are serialized, each registry by its own mutex;
//     lookups are lock-free (immutable values swapped atomically), except
//     a ReplayModes lookup that misses the active modes.
//  4. Ids are immutable: an unregistered mode or policy stays stored as
//     retired, and its id can be registered again only with the identical
//     descriptor (a mode) or the same mode, schema_version and rules (a
//     policy). Built-in modes and policies can be neither registered over
//     nor removed.
//  5. Mutations need the mode-registry grant
//     (coord.Capabilities.CanManageModeRegistry), else FORBIDDEN; limits
//     (Options.Limits, limits.go) answer PAYLOAD_TOO_LARGE for one
//     oversized descriptor and RATE_LIMITED for a full registry.
//  6. Load restores the stored registrations before the runtime recovers
//     sessions; a stored value that does not decode fails Load (and so the
//     start) naming its key, and a stored registration never replaces a
//     built-in. Reload (internal/cluster, on a meta-bucket update) adds and
//     updates registrations and drops those no longer active.
//  7. Every change publishes its time (Unix ms) on ModeChanges or
//     PolicyChanges (package hub: never blocks; a lagging watcher is
//     dropped and re-reads the list).
//
// Storage formats (codec.go), part of the store format, never changed in
// place: a mode registration is the meta value under ModeKey(id), one
// ModeState byte then the deterministic protobuf encoding of its
// macp.v1.ModeDescriptor; a policy registration is the value under
// "policy/"+id, one state byte ('A' active, 'R' retired) then its
// macp.v1.PolicyDescriptor. LoadModes reads the mode registrations alone,
// for the offline tools (replay/verify, macpctl replay and snapshot).
//
// Files: registry.go the Registry, Load, Reload and the lookups;
// extmodes.go and policies.go the two registries' operations; limits.go
// the limits; codec.go the stored forms.
package registry
