package cmthash

import (
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

// WellFormedHash reports whether s has the shape of a canonical commitment
// hash: "sha256:" followed by exactly 64 lowercase hex characters
// (RFC-MACP-0013 §2, §7, §9: ^sha256:[0-9a-f]{64}$).
func WellFormedHash(s string) bool {
	if len(s) != len(Prefix)+64 || s[:len(Prefix)] != Prefix {
		return false
	}
	for i := len(Prefix); i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidateRef checks a CommitmentPayload.supersedes reference structurally
// (RFC-MACP-0001 §7.3.1 obligation (a)) and returns nil or a *coord.Error
// with code INVALID_ENVELOPE. A nil ref (supersedes absent) is valid.
//
// profile is the session's recorded profile (coord.StoredProfile):
//   - coord.ProfileApril: session_id and commitment_hash must be non-empty
//     (the §7.3.1 text as it was added, spec commit 048739d).
//   - coord.ProfileLatest: additionally commitment_hash must be a canonical
//     commitment hash, ^sha256:[0-9a-f]{64}$ (the obligation as tightened
//     by RFC-MACP-0013 §9).
//
// ValidateRef never resolves the reference or recomputes a hash: whether
// the referenced commitment exists is consumer governance (§7.3.1).
func ValidateRef(ref *macpv1.CommitmentRef, profile string) *coord.Error {
	if ref == nil {
		return nil
	}
	if ref.GetSessionId() == "" {
		return coord.Errorf(coord.CodeInvalidEnvelope, "supersedes.session_id must not be empty")
	}
	h := ref.GetCommitmentHash()
	if h == "" {
		return coord.Errorf(coord.CodeInvalidEnvelope, "supersedes.commitment_hash must not be empty")
	}
	if coord.IsLatest(coord.StoredProfile(profile)) && !WellFormedHash(h) {
		return coord.Errorf(coord.CodeInvalidEnvelope,
			"supersedes.commitment_hash must be %q followed by 64 lowercase hex characters", Prefix)
	}
	return nil
}
