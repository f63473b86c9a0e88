package session_test

// Commitment admission (RFC-MACP-0001 §7.3; RFC-MACP-0012 §5; checklist
// MODE-4, MODE-5, COMMIT-1, COMMIT-2, ADM-21..23, C5).

import (
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// withNote starts a session under policy pol and accepts one Note, so the
// test mode's eligibility rule is met.
func withNote(t *testing.T, pol string) *session.Session {
	t.Helper()
	p := startPayload()
	p.PolicyVersion = pol
	s, _ := mustStartWith(t, p)
	mustAccept(t, s, note("n1", alice), t0+1)
	return s
}

// checklist MODE-4 "Commitment authority default = session initiator";
// RFC-MACP-0012 §5 commitment.authority; ADM-21 -> FORBIDDEN.
func TestCommitmentAuthority(t *testing.T) {
	cases := []struct {
		policy string
		sender string
		want   coord.Code
	}{
		{"", initiator, ""},
		{"", alice, coord.CodeForbidden},
		{"", mallory, coord.CodeForbidden},
		{coord.DefaultPolicyID, bob, coord.CodeForbidden},
		{policyAny, alice, ""},
		{policyAny, initiator, ""},
		{policyAny, mallory, coord.CodeForbidden},
		{policyDesig, "carol", ""},
		{policyDesig, initiator, coord.CodeForbidden},
		{policyDesig, alice, coord.CodeForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.policy+"/"+tc.sender, func(t *testing.T) {
			s := withNote(t, tc.policy)
			c := commit(t, "c1", tc.sender, commitPayload())
			if tc.want == "" {
				mustAccept(t, s, c, t0+2)
				if s.Status != session.Resolved {
					t.Fatal("not resolved")
				}
				return
			}
			wantStepErr(t, s, c, t0+2, tc.want)
		})
	}
}

// Authority is checked before the payload (ADM-21 FORBIDDEN precedes ADM-22
// INVALID_ENVELOPE): an unauthorized sender learns nothing about the
// payload's validity.
func TestCommitmentAuthorityBeforePayload(t *testing.T) {
	s := withNote(t, "")
	wantStepErr(t, s, msg(coord.TypeCommitment, "c1", alice, []byte{0xff, 0xff}), t0+2, coord.CodeForbidden)
	wantStepErr(t, s, msg(coord.TypeCommitment, "c1", alice, nil), t0+2, coord.CodeForbidden)
}

// checklist COMMIT-1 "commitment_id, action, authority_scope, reason
// non-empty → else INVALID_ENVELOPE"; COMMIT-2 "mode_version and
// configuration_version = session's, and policy_version = session's
// effective policy id (when non-empty) → else INVALID_ENVELOPE"; C5 "treat
// [""] and [policy.default] as equal".
func TestCommitmentPayloadRules(t *testing.T) {
	cases := []struct {
		name   string
		policy string
		mod    func(c *macpv1.CommitmentPayload)
		want   coord.Code
	}{
		{"valid", "", func(c *macpv1.CommitmentPayload) {}, ""},
		{"empty commitment_id", "", func(c *macpv1.CommitmentPayload) { c.CommitmentId = "" }, coord.CodeInvalidEnvelope},
		{"empty action", "", func(c *macpv1.CommitmentPayload) { c.Action = "" }, coord.CodeInvalidEnvelope},
		{"empty authority_scope", "", func(c *macpv1.CommitmentPayload) { c.AuthorityScope = "" }, coord.CodeInvalidEnvelope},
		{"empty reason", "", func(c *macpv1.CommitmentPayload) { c.Reason = "" }, coord.CodeInvalidEnvelope},
		{"mode_version mismatch", "", func(c *macpv1.CommitmentPayload) { c.ModeVersion = "2.0.0" }, coord.CodeInvalidEnvelope},
		{"mode_version empty", "", func(c *macpv1.CommitmentPayload) { c.ModeVersion = "" }, coord.CodeInvalidEnvelope},
		{"configuration_version mismatch", "", func(c *macpv1.CommitmentPayload) { c.ConfigurationVersion = "cfg-2" }, coord.CodeInvalidEnvelope},
		{"configuration_version empty", "", func(c *macpv1.CommitmentPayload) { c.ConfigurationVersion = "" }, coord.CodeInvalidEnvelope},
		// C5: spec fixtures send "" where [RT] expects "policy.default".
		{"policy_version empty (default session)", "", func(c *macpv1.CommitmentPayload) { c.PolicyVersion = "" }, ""},
		{"policy_version policy.default (default session)", "", func(c *macpv1.CommitmentPayload) { c.PolicyVersion = coord.DefaultPolicyID }, ""},
		{"policy_version policy.default (explicit default session)", coord.DefaultPolicyID, func(c *macpv1.CommitmentPayload) { c.PolicyVersion = coord.DefaultPolicyID }, ""},
		{"policy_version empty (explicit default session)", coord.DefaultPolicyID, func(c *macpv1.CommitmentPayload) { c.PolicyVersion = "" }, ""},
		{"policy_version other", "", func(c *macpv1.CommitmentPayload) { c.PolicyVersion = policyAny }, coord.CodeInvalidEnvelope},
		{"policy_version bound custom", policyStrict, func(c *macpv1.CommitmentPayload) { c.PolicyVersion = policyStrict }, coord.CodePolicyDenied},
		{"policy_version default under custom", policyAny, func(c *macpv1.CommitmentPayload) { c.PolicyVersion = coord.DefaultPolicyID }, coord.CodeInvalidEnvelope},
		{"policy_version empty under custom", policyAny, func(c *macpv1.CommitmentPayload) { c.PolicyVersion = "" }, ""},
		{"policy_version case differs", "", func(c *macpv1.CommitmentPayload) { c.PolicyVersion = "Policy.Default" }, coord.CodeInvalidEnvelope},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := withNote(t, tc.policy)
			c := commitPayload()
			tc.mod(c)
			e := commit(t, "c1", initiator, c)
			if tc.want == "" {
				mustAccept(t, s, e, t0+2)
				return
			}
			wantStepErr(t, s, e, t0+2, tc.want)
		})
	}
}

// An undecodable Commitment payload is INVALID_ENVELOPE (ADM-22); unknown
// fields are ignored (PROTO-5).
func TestCommitmentUndecodable(t *testing.T) {
	s := withNote(t, "")
	wantStepErr(t, s, msg(coord.TypeCommitment, "c1", initiator, []byte{0x0a, 0x05, 'a'}), t0+2, coord.CodeInvalidEnvelope)
	wantStepErr(t, s, msg(coord.TypeCommitment, "c1", initiator, nil), t0+2, coord.CodeInvalidEnvelope)
	withUnknown := append(marshal(t, commitPayload()), 0xf8, 0x07, 0x01) // field 127 varint 1
	mustAccept(t, s, msg(coord.TypeCommitment, "c1", initiator, withUnknown), t0+2)
}

// checklist MODE-5 "[RT] also rejects (INVALID_ENVELOPE) action suffix
// rejected|failed|declined with true and selected|accepted|completed|approved
// with false".
func TestCommitmentOutcomeConsistency(t *testing.T) {
	positive := []string{"decision.selected", "proposal.accepted", "task.completed", "quorum.approved", "x.converged"}
	negative := []string{"proposal.rejected", "task.failed", "handoff.declined"}
	neutral := []string{"testing.done", "selected", "accepted-ish", "x.rejected.later"}
	run := func(action string, pos bool, want coord.Code) {
		t.Run(action, func(t *testing.T) {
			s := withNote(t, "")
			c := commitPayload()
			c.Action, c.OutcomePositive = action, pos
			e := commit(t, "c1", initiator, c)
			if want == "" {
				mustAccept(t, s, e, t0+2)
				if s.Resolution.OutcomePositive != pos {
					t.Fatal("outcome_positive not kept")
				}
				return
			}
			wantStepErr(t, s, e, t0+2, want)
		})
	}
	for _, a := range positive {
		run(a, true, "")
		run(a, false, coord.CodeInvalidEnvelope)
	}
	for _, a := range negative {
		run(a, false, "")
		run(a, true, coord.CodeInvalidEnvelope)
	}
	for _, a := range neutral {
		run(a, false, "")
		run(a, true, "")
	}
}

// State.Commit contract: session eligibility is the mode's
// (INVALID_ENVELOPE) and the bound policy's mode rules give POLICY_DENIED
// (ADM-22, ADM-23), with reasons carried through unchanged. A rejected
// Commitment leaves the session OPEN; a later eligible one resolves it.
func TestCommitmentModeAndPolicy(t *testing.T) {
	p := startPayload()
	p.PolicyVersion = policyStrict
	s, _ := mustStartWith(t, p)
	wantStepErr(t, s, commit(t, "c1", initiator, commitPayload()), t0+1, coord.CodeInvalidEnvelope) // no notes
	mustAccept(t, s, note("n1", alice), t0+2)
	out := wantStepErr(t, s, commit(t, "c1", initiator, commitPayload()), t0+3, coord.CodePolicyDenied)
	if len(out.Err.Reasons) != 1 || out.Err.Reasons[0] != "min_notes" {
		t.Fatalf("POLICY_DENIED reasons lost: %+v", out.Err)
	}
	if s.Status != session.Open || s.Resolution != nil {
		t.Fatal("rejected commitment changed the lifecycle")
	}
	mustAccept(t, s, note("n2", bob), t0+4)
	mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), t0+5)
	if s.Status != session.Resolved || s.ModeProjection()["committed"] != "testing.accepted" {
		t.Fatalf("status %s projection %v", s.Status, s.ModeProjection())
	}
}
