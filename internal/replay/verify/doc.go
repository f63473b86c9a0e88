// Package verify checks a store offline (macpctl verify): for every
// session, the integrity chain of its history (RFC-MACP-0003 §6) and a full
// replay through the core (RFC-MACP-0003 §4: package replay's fold, whose
// per-record Check compares what each record says with the replay),
// compared with what the store recorded about the session (status, final
// metadata, final hash).
//
// Contract: Verify and Session only read the store. A damaged session is
// a failed SessionResult (errors.Is store.ErrCorrupt for integrity
// failures; a replay divergence wraps the core's *coord.Error), never an
// error of the call; Verify's error is for the store as a whole (it
// cannot be listed, it was closed or failed, ctx ended). StoredModes adds
// the extension modes package registry stored, retired ones included, so
// sessions bound to an unregistered mode still replay.
package verify
