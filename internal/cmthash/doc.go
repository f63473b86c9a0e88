// Package cmthash computes the canonical commitment hash of RFC-MACP-0013
// (label macp-commitment-hash/1) and checks the structure of a
// CommitmentRef (RFC-MACP-0001 §7.3.1, tightened by RFC-MACP-0013 §9).
//
// Contract:
//
//  1. Projection (RFC-MACP-0013 §3): a CommitmentPayload becomes a JSON
//     object with the proto field names of the nine frozen fields
//     (commitment_id, action, authority_scope, reason, mode_version,
//     policy_version, configuration_version, outcome_positive, supersedes).
//     The seven strings are always present ("" when unset) and
//     outcome_positive is always a boolean, false included. supersedes is
//     absent when the message field is unset (nil) and, when set, an object
//     {session_id, commitment_hash} whose strings are always present: a
//     set but empty CommitmentRef is not an absent one (vectors
//     cmt_hash_003 and cmt_hash_004 hash differently).
//  2. Algorithm (§4): C = RFC 8785 (JCS) bytes of the projection;
//     preimage P = "macp-commitment-hash/1:" || C; hash = "sha256:" +
//     lowercase hex(SHA-256(P)).
//  3. Hashability (§5, §6): hashing never depends on the payload being
//     well-formed (empty strings, an empty supersedes all hash). A payload
//     carrying anything outside the frozen set (a populated field of
//     another number, unknown fields in the payload or in supersedes) is
//     not hashable under this label: Hash returns an error that matches
//     ErrCannotVerify. Verify tells cannot-verify (ErrCannotVerify) from a
//     mismatch (ErrMismatch).
//  4. ValidateRef is the runtime's structural check of a present
//     supersedes reference; it returns a *coord.Error with code
//     INVALID_ENVELOPE and does not compute or resolve anything.
//
// The package is pure (internal/lint TestPureCore): no clock, no I/O, no
// goroutines.
package cmthash
