// Package snapshot derives deterministic, privacy-safe snapshots of MACP
// sessions in the shape of Assay's session_state_window_v1 contract
// (ADR-029), and replays stored sessions for verification and what-if
// analysis (RFC-MACP-0003). It is the pure half; package
// snapshot/snapshotio is its I/O.
//
// Contract:
//
//  1. A Payload is derived only from a session's accepted history and its
//     bound versions (Input): the session key (event_source and server_id
//     from configuration, the session id), the window, the privacy
//     profile, the protocol profile (only when it is not 2026-04, so
//     2026-04 ids are those computed before profiles existed), mode,
//     mode/configuration/policy versions, state (SUSPENDED included: not
//     ended, no outcome; CANCELLED only under 2026-09), accepted
//     envelope count, initiator, participants in declared order, one entry
//     {seq, message_type, sender, message_id, payload_sha256} per accepted
//     envelope, and the terminal outcome (a superseding Commitment's
//     reference as hashes only). It never holds timestamps,
//     intents, reasons, payload bytes, extension values, host names,
//     runtime versions or rejected envelopes (nor, in a hash, the
//     SessionResume's clock-derived banked_ms). The strict profile drops
//     the payload hashes.
//  2. Payload types cannot hold raw text: their strings are of the named
//     types ID, Name, Class and Hash, each with a grammar (no whitespace,
//     at most 128 bytes, or a sha256 address; classes from closed sets);
//     there are no byte slices, maps or interfaces. Validate enforces it
//     on every payload before canonicalization; a reflection test proves
//     the types.
//  3. The canonical bytes are RFC 8785 (JCS, github.com/gowebpki/jcs);
//     integers only, below 2^53. state_snapshot_id = "sha256:" +
//     lowercase hex(SHA-256(canonical bytes)); the same bytes are stored
//     and served under that content address (report contents_ref).
//  4. A Report is emitted only after it validated against the vendored
//     schema (schema/, see its SOURCE.md).
//  5. The package is pure: no clock, no I/O, no goroutines, no locks
//     (internal/lint checks it). Replay and ReplayWhatIf fold stored
//     records through the core with package replay (a what-if also under
//     the other protocol profile: Rebind.Profile). The I/O around it
//     lives in package snapshotio: reading a store (StoreSource), serving
//     HTTP (Service), writing snapshot files after terminal transitions
//     (Writer, off the acceptance path), and reading a remote runtime
//     over gRPC (FromRuntime).
//  6. A cross_session_decay window is informational: it lists subsequent
//     sessions (same initiator, SessionStart acceptance order) that the
//     caller (Viewer) may observe, and never influences admission; replay
//     of a session stays self-contained. snapshotio's Service reads
//     them from an in-memory index by initiator, not the store.
//  7. Client-chosen identifiers (session, message and commitment ids,
//     senders, participants, the commitment action, the configuration
//     version) enter a payload only as Opaque digests of (event_source,
//     server_id, raw id): stable for equal settings, never verbatim.
package snapshot
