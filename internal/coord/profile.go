package coord

// A profile names the MACP semantics a session is bound to at SessionStart
// (docs/spec-decisions.md "Profiles"). It is recorded with the session's
// start record and every replay, verify, snapshot, what-if and recovery of
// the session uses the recorded profile, never the live server setting.
//
//   - ProfileApril ("2026-04") is the spec at 17ca7a1: the lifecycle macpd was
//     founded on (OPEN -> RESOLVED | EXPIRED; CancelSession ends a session
//     EXPIRED) and the April mode and policy rules. It is the default, and
//     every session stored before profiles existed is an April session.
//   - ProfileLatest ("2026-09", alias "latest") is the newest spec revision
//     macpd implements: CancelSession ends a session CANCELLED, and the
//     newest Decision rules (RFC-MACP-0007 §6.2 decline guard,
//     RFC-MACP-0012 §4.1 algorithm definitions) apply.
//
// Additive features (SuspendSession/ResumeSession, supersedes, policy
// schema versions 2 and 3, pagination) serve sessions of both profiles
// where they do not change an April verdict.
const (
	ProfileApril  = "2026-04"
	ProfileLatest = "2026-09"
	// ProfileLatestAlias is accepted wherever a profile is configured and
	// resolves to ProfileLatest.
	ProfileLatestAlias = "latest"
)

// HeaderSessionProfile is the gRPC metadata key of a macpd extension: a
// GetSession request that carries it (any value) is answered with a
// response header of that key naming the session's recorded profile, which
// SessionMetadata does not carry. Snapshot readers use it
// (docs/snapshots.md); other clients never pay for it.
const HeaderSessionProfile = "macpd-session-profile"

// Profiles lists the profiles this runtime serves, oldest first.
var Profiles = []string{ProfileApril, ProfileLatest}

// ResolveProfile maps a configured profile name to the profile recorded in
// history: "" and "2026-04" are ProfileApril, "latest" and "2026-09" are
// ProfileLatest. ok is false for any other name.
func ResolveProfile(name string) (profile string, ok bool) {
	switch name {
	case "", ProfileApril:
		return ProfileApril, true
	case ProfileLatest, ProfileLatestAlias:
		return ProfileLatest, true
	}
	return "", false
}

// StoredProfile is the profile of a stored session: the recorded value, or
// ProfileApril for a session recorded before profiles existed (empty).
func StoredProfile(recorded string) string {
	if recorded == "" {
		return ProfileApril
	}
	return recorded
}

// IsLatest reports whether a recorded profile is ProfileLatest.
func IsLatest(profile string) bool { return profile == ProfileLatest }
