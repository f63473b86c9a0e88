package handoff_test

import (
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/mode/modetest"
)

const (
	invalidEnv = coord.CodeInvalidEnvelope
	forbidden  = coord.CodeForbidden
	badPolicy  = coord.CodeInvalidPolicyDefinition
)

// garbage is not decodable as any protobuf message (truncated varint).
var garbage = []byte{0xff, 0xff}

// badUTF8 is a payload whose field 1 (handoff_id in every handoff message)
// is not valid UTF-8, which proto3 string fields refuse.
var badUTF8 = []byte{0x0a, 0x02, 0xc3, 0x28}

// TestSuite runs the shared mode suite over the message-level scenarios.
func TestSuite(t *testing.T) {
	modetest.Run(t, handoff.New(), messageScenarios(t)...)
}

func messageScenarios(t *testing.T) []modetest.Scenario {
	return []modetest.Scenario{
		{
			// RFC-MACP-0010 §4, §6; checklist CONF-26 (spec fixture
			// handoff_happy_path) plus context before the answer.
			Name:    "happy path",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(offerIn(owner, "h1", target), "RFC-MACP-0010 §4 HandoffOffer"),
				ok(contextIn(owner, "h1"), "RFC-MACP-0010 §2.1 context before the answer"),
				ok(contextIn(owner, "h1"), "several contexts per offer"),
				ok(acceptIn(target, "h1", target), "RFC-MACP-0010 §4 HandoffAccept"),
				ok(commitIn(owner, true), "RFC-MACP-0010 §6 handoff.accepted"),
			},
			WantState: map[string]any{
				"phase":          "Committed",
				"owner":          target,
				"accepted_offer": "h1",
				"pending_offer":  "",
				"offers": map[string]any{"h1": map[string]any{
					"handoff_id": "h1", "target_participant": target, "scope": "support", "reason": "escalate h1",
					"offered_by": owner, "disposition": "Accepted", "responded_by": target, "response_reason": "ready", "contexts": 2,
				}},
				"offer_order": []any{"h1"},
				"contexts": []any{
					map[string]any{"handoff_id": "h1", "content_type": "text/plain", "sender": owner, "bytes": 9, "late": false},
					map[string]any{"handoff_id": "h1"},
				},
				"outcome_positive": true,
			},
		},
		{
			// RFC-MACP-0010 §2, §2.1: HandoffOffer and HandoffContext only
			// from the current owner; Accept/Decline only from the offer's
			// target; authority before decoding where the payload is not
			// needed to decide it.
			Name:    "authority",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(offerIn(target, "h1", backup), forbidden, "RFC-MACP-0010 §2.1 participant HandoffOffer"),
				rej(offerIn(outsider, "h1", target), forbidden, "RFC-MACP-0010 §2.1 outsider HandoffOffer"),
				rej(rawIn(handoff.TypeOffer, target, garbage), forbidden, "authority before decoding"),
				ok(offerIn(owner, "h1", target), ""),
				rej(contextIn(target, "h1"), forbidden, "RFC-MACP-0010 §2.1 target HandoffContext"),
				rej(contextIn(outsider, "h1"), forbidden, "RFC-MACP-0010 §2.1 outsider HandoffContext"),
				rej(rawIn(handoff.TypeContext, backup, garbage), forbidden, "authority before decoding"),
				rej(acceptIn(owner, "h1", ""), forbidden, "RFC-MACP-0010 §5.3 the owner is never the target"),
				rej(acceptIn(outsider, "h1", ""), forbidden, "RFC-MACP-0010 §5.3 outsider HandoffAccept"),
				rej(rawIn(handoff.TypeAccept, outsider, garbage), forbidden, "authority before decoding"),
				rej(rawIn(handoff.TypeAccept, owner, garbage), forbidden, "authority before decoding"),
				rej(acceptIn(backup, "h1", ""), forbidden, "RFC-MACP-0010 §5.3 a participant who is not the target"),
				rej(declineIn(owner, "h1", ""), forbidden, "RFC-MACP-0010 §5.3 owner HandoffDecline"),
				rej(declineIn(outsider, "h1", ""), forbidden, "RFC-MACP-0010 §5.3 outsider HandoffDecline"),
				rej(rawIn(handoff.TypeDecline, outsider, garbage), forbidden, "authority before decoding"),
				rej(declineIn(backup, "h1", ""), forbidden, "RFC-MACP-0010 §5.3 not the target"),
				ok(declineIn(target, "h1", ""), "RFC-MACP-0010 §5.3 the target declines"),
				ok(offerIn(owner, "h2", backup), ""),
				rej(acceptIn(target, "h2", ""), forbidden, "the earlier target cannot answer the new offer"),
				ok(acceptIn(backup, "h2", ""), "RFC-MACP-0010 §5.3 the new target accepts"),
			},
			WantState: map[string]any{"phase": "Accepted", "owner": owner, "accepted_offer": "h2", "offer_order": []any{"h1", "h2"}},
		},
		{
			// RFC-MACP-0010 §9: payloads are handoff.proto messages.
			Name:    "undecodable payloads",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(handoff.TypeOffer, owner, garbage), invalidEnv, "RFC-MACP-0010 §9 HandoffOffer"),
				rej(rawIn(handoff.TypeOffer, owner, badUTF8), invalidEnv, "proto3 string must be UTF-8"),
				rej(rawIn(handoff.TypeOffer, owner, nil), invalidEnv, "empty payload has no handoff_id"),
				ok(offerIn(owner, "h1", target), ""),
				rej(rawIn(handoff.TypeContext, owner, garbage), invalidEnv, "RFC-MACP-0010 §9 HandoffContext"),
				rej(rawIn(handoff.TypeContext, owner, nil), invalidEnv, "empty payload references no offer"),
				rej(rawIn(handoff.TypeAccept, target, garbage), invalidEnv, "RFC-MACP-0010 §9 HandoffAccept"),
				rej(rawIn(handoff.TypeAccept, target, badUTF8), invalidEnv, "UTF-8"),
				rej(rawIn(handoff.TypeDecline, target, garbage), invalidEnv, "RFC-MACP-0010 §9 HandoffDecline"),
				rej(rawIn(handoff.TypeDecline, target, nil), invalidEnv, "empty payload references no offer"),
			},
			WantState: map[string]any{"phase": "OfferPending", "pending_offer": "h1", "contexts": []any{}},
		},
		{
			// RFC-MACP-0002 §1: types the mode does not define.
			Name:    "undefined message types",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(coord.TypeCommitment, owner, nil), invalidEnv, "Commitment goes through Commit, never Step"),
				rej(rawIn(coord.TypeSessionStart, owner, nil), invalidEnv, "SessionStart is the core's"),
				rej(rawIn("TaskAccept", target, nil), invalidEnv, "another mode's type"),
				rej(rawIn("handoffoffer", owner, nil), invalidEnv, "type names are case-sensitive"),
				rej(rawIn("Bogus", outsider, garbage), invalidEnv, "undefined type from an outsider"),
			},
			WantState: map[string]any{"phase": "Idle", "offers": map[string]any{}, "owner": owner},
		},
		{
			// RFC-MACP-0010 §5.1, §2: offer payload validation.
			Name:    "offer validation",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(offerIn(owner, "", target), invalidEnv, "RFC-MACP-0010 §5.1 handoff_id required"),
				rej(offerIn(owner, "  ", target), invalidEnv, "blank handoff_id"),
				rej(offerIn(owner, "h1", ""), invalidEnv, "target_participant required"),
				rej(offerIn(owner, "h1", outsider), invalidEnv, "RFC-MACP-0010 §3 target must be a declared participant"),
				rej(offerIn(owner, "h1", owner), invalidEnv, "no handoff to oneself"),
				rej(offerIn(owner, "h1", "AGENT://TARGET"), invalidEnv, "identities are case-sensitive"),
				ok(offerIn(owner, "h1", target), ""),
			},
			WantState: map[string]any{"phase": "OfferPending", "offer_order": []any{"h1"}},
		},
		{
			// RFC-MACP-0010 §5.2; CONF-27 (spec fixture handoff_reject_paths).
			Name:    "references",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(acceptIn(target, "h1", target), invalidEnv, "CONF-27 HandoffAccept for an unknown offer"),
				rej(declineIn(target, "h1", ""), invalidEnv, "RFC-MACP-0010 §5.2 HandoffDecline for an unknown offer"),
				rej(contextIn(owner, "h1"), invalidEnv, "RFC-MACP-0010 §5.2 HandoffContext for an unknown offer"),
				ok(offerIn(owner, "h1", target), ""),
				rej(acceptIn(target, "h9", ""), invalidEnv, "unknown offer"),
				rej(acceptIn(target, "", ""), invalidEnv, "empty reference"),
				rej(contextIn(owner, "H1"), invalidEnv, "ids are case-sensitive"),
				rej(acceptIn(backup, "h9", ""), invalidEnv, "unknown offer before the target check"),
			},
			WantState: map[string]any{"phase": "OfferPending", "contexts": []any{}},
		},
		{
			// RFC-MACP-0010 §5.4: one answer per offer; answerer fields.
			Name:    "one answer per offer",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(offerIn(owner, "h1", target), ""),
				rej(acceptIn(target, "h1", backup), invalidEnv, "accepted_by must name the sender"),
				rej(declineIn(target, "h1", owner), invalidEnv, "declined_by must name the sender"),
				ok(acceptIn(target, "h1", ""), "empty accepted_by means the sender"),
				rej(acceptIn(target, "h1", target), invalidEnv, "RFC-MACP-0010 §5.4 no second accept"),
				rej(declineIn(target, "h1", target), invalidEnv, "RFC-MACP-0010 §5.4 no decline after accept"),
			},
			WantState: map[string]any{"phase": "Accepted", "offers": map[string]any{"h1": map[string]any{"disposition": "Accepted", "responded_by": target}}},
		},
		{
			// RFC-MACP-0010 §5.5: at most one outstanding offer; none after
			// an accept.
			Name:    "sequential offers",
			Binding: bindingFor(t, "", owner, target, owner, backup, third),
			Steps: []modetest.Step{
				ok(offerIn(owner, "h1", target), ""),
				rej(offerIn(owner, "h2", backup), invalidEnv, "RFC-MACP-0010 §5.5 h1 still pending"),
				ok(declineIn(target, "h1", target), ""),
				rej(declineIn(target, "h1", target), invalidEnv, "RFC-MACP-0010 §5.4 one answer"),
				rej(acceptIn(target, "h1", target), invalidEnv, "no accept after decline"),
				rej(offerIn(owner, "h1", backup), invalidEnv, "RFC-MACP-0010 §5.3a a new offer needs a new handoff_id"),
				rej(offerIn(owner, "h2", target), invalidEnv, "RFC-MACP-0010 §5.3a ... and a different target"),
				ok(offerIn(owner, "h2", backup), "RFC-MACP-0010 §5.5 sequential offer to a different target"),
				ok(declineIn(backup, "h2", ""), ""),
				rej(offerIn(owner, "h3", target), invalidEnv, "no target is offered twice"),
				ok(offerIn(owner, "h3", third), ""),
				ok(acceptIn(third, "h3", third), ""),
				rej(offerIn(owner, "h4", target), invalidEnv, "RFC-MACP-0010 §5.5 no offers once one is accepted"),
			},
			WantState: map[string]any{
				"phase":          "Accepted",
				"accepted_offer": "h3",
				"offer_order":    []any{"h1", "h2", "h3"},
				"offers": map[string]any{
					"h1": map[string]any{"disposition": "Declined", "target_participant": target, "response_reason": "busy"},
					"h2": map[string]any{"disposition": "Declined", "target_participant": backup, "responded_by": backup},
					"h3": map[string]any{"disposition": "Accepted", "target_participant": third},
				},
			},
		},
		{
			// HAND-6, ⚠C7: late context (after the answer) is refused by
			// default, as the April spec fixture handoff_reject_paths.
			Name:    "late context",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(offerIn(owner, "h1", target), ""),
				ok(declineIn(target, "h1", ""), ""),
				rej(contextIn(owner, "h1"), invalidEnv, "⚠C7 context after a decline"),
				ok(offerIn(owner, "h2", backup), ""),
				ok(contextIn(owner, "h2"), "context for the pending offer"),
				ok(acceptIn(backup, "h2", backup), ""),
				rej(contextIn(owner, "h2"), invalidEnv, "CONF-27 ⚠C7 context after the accept"),
				rej(contextIn(target, "h2"), forbidden, "authority before the late-context check"),
			},
			WantState: map[string]any{
				"offers":   map[string]any{"h1": map[string]any{"contexts": 0}, "h2": map[string]any{"contexts": 1}},
				"contexts": []any{map[string]any{"handoff_id": "h2", "late": false}},
			},
		},
		{
			// RFC-MACP-0010 §6, checklist HAND-7: eligibility.
			Name:    "commitment eligibility",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(commitIn(owner, true), invalidEnv, "positive with no offer"),
				rej(commitIn(owner, false), invalidEnv, "negative with no offer (no-target outcome not eligible)"),
				ok(offerIn(owner, "h1", target), ""),
				rej(commitIn(owner, true), invalidEnv, "positive with the offer pending"),
				rej(commitIn(owner, false), invalidEnv, "negative with the offer pending"),
				ok(declineIn(target, "h1", target), ""),
				rej(commitIn(owner, true), invalidEnv, "positive after a decline"),
				ok(offerIn(owner, "h2", backup), ""),
				rej(commitIn(owner, false), invalidEnv, "negative while a re-offer is pending"),
				ok(declineIn(backup, "h2", backup), ""),
				ok(commitIn(owner, false), "RFC-MACP-0010 §6 handoff.declined"),
			},
			WantState: map[string]any{"phase": "Committed", "outcome_positive": false, "owner": owner, "accepted_offer": ""},
		},
		{
			// RFC-MACP-0010 §6: an accepted offer is not committed negatively.
			Name:    "no negative commitment after an accept",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(offerIn(owner, "h1", target), ""),
				ok(declineIn(target, "h1", ""), ""),
				ok(offerIn(owner, "h2", backup), ""),
				ok(acceptIn(backup, "h2", ""), ""),
				rej(commitIn(owner, false), invalidEnv, "the latest offer was accepted"),
				ok(commitIn(owner, true), ""),
			},
			WantState: map[string]any{"phase": "Committed", "owner": backup, "outcome_positive": true},
		},
		{
			// Duplicate participants are harmless; the owner need not be
			// listed first.
			Name:    "participant order",
			Binding: bindingFor(t, "", owner, target, owner, target),
			Steps: []modetest.Step{
				ok(offerIn(owner, "h1", target), ""),
				ok(acceptIn(target, "h1", target), ""),
				ok(commitIn(owner, true), ""),
			},
		},
		{
			// RFC-MACP-0010 §3: the owner must be a declared participant.
			Name:     "owner not declared",
			Binding:  bindingFor(t, "", owner, target, backup),
			StartErr: invalidEnv,
		},
		{
			// RFC-MACP-0010 §3: someone to hand off to.
			Name:     "no target",
			Binding:  bindingFor(t, "", owner, owner),
			StartErr: invalidEnv,
		},
		{
			Name:     "no participants",
			Binding:  bindingFor(t, "", owner),
			StartErr: invalidEnv,
		},
		{
			// RFC-MACP-0012 §4.5 (POL-55): implicit accept is unsupported.
			Name:     "implicit accept timeout",
			Binding:  binding(t, `{"acceptance":{"implicit_accept_timeout_ms":30000}}`),
			StartErr: badPolicy,
		},
		{
			Name:    "implicit accept timeout zero",
			Binding: binding(t, `{"acceptance":{"implicit_accept_timeout_ms":0},"commitment":{"authority":"any_participant"}}`),
			Steps:   []modetest.Step{ok(offerIn(owner, "h1", target), "")},
		},
	}
}

// TestLateContextOption: with AcceptLateContext, late HandoffContext is
// recorded as supplementary documentation (RFC-MACP-0010 §2.1; the runtime
// fixture copies, CONF-40/41); everything else is unchanged.
func TestLateContextOption(t *testing.T) {
	m := handoff.NewWithOptions(handoff.Options{AcceptLateContext: true})
	modetest.Run(t, m, modetest.Scenario{
		Name:    "late context accepted",
		Binding: binding(t, ""),
		Steps: []modetest.Step{
			rej(acceptIn(target, "h1", target), invalidEnv, "CONF-27 unknown offer"),
			ok(offerIn(owner, "h1", target), ""),
			ok(declineIn(target, "h1", ""), ""),
			ok(contextIn(owner, "h1"), "RFC-MACP-0010 §2.1 late context after a decline"),
			ok(offerIn(owner, "h2", backup), ""),
			ok(contextIn(owner, "h2"), ""),
			ok(acceptIn(backup, "h2", backup), ""),
			ok(contextIn(owner, "h2"), "RFC-MACP-0010 §2.1 late context after the accept"),
			rej(contextIn(backup, "h2"), forbidden, "still only the owner"),
			rej(contextIn(owner, "h9"), invalidEnv, "still an existing offer"),
			ok(commitIn(owner, true), ""),
		},
		WantState: map[string]any{
			"phase":  "Committed",
			"offers": map[string]any{"h1": map[string]any{"contexts": 1}, "h2": map[string]any{"contexts": 2, "disposition": "Accepted"}},
			"contexts": []any{
				map[string]any{"handoff_id": "h1", "late": true},
				map[string]any{"handoff_id": "h2", "late": false},
				map[string]any{"handoff_id": "h2", "late": true},
			},
		},
	})
	if m.Descriptor() != handoff.New().Descriptor() {
		t.Error("options must not change the descriptor")
	}
}

// TestPolicyDefinitions: rules that fail handoff-rules.schema.json, or ask
// for the unsupported implicit accept, are refused at Start with
// INVALID_POLICY_DEFINITION (RFC-MACP-0012 §4.5, §10; POL-55).
func TestPolicyDefinitions(t *testing.T) {
	for _, rules := range []string{
		`{"acceptance":{"implicit_accept_timeout_ms":1}}`,
		`{"acceptance":{"implicit_accept_timeout_ms":-1}}`,
		`{"acceptance":{"implicit_accept_timeout_ms":1.5}}`,
		`{"acceptance":{"implicit_accept_timeout_ms":"0"}}`,
		`{"acceptance":{"implicit_accept_timeout_ms":1e300}}`,
		`{"acceptance":0}`,
		`{"acceptance":[]}`,
	} {
		if _, err := handoff.New().Start(binding(t, rules)); coord.CodeOf(err) != badPolicy {
			t.Errorf("%s: Start = %v, want INVALID_POLICY_DEFINITION", rules, err)
		}
	}
	for _, rules := range []string{
		`{}`,
		`{"acceptance":null}`,
		`{"acceptance":{}}`,
		`{"acceptance":{"implicit_accept_timeout_ms":0}}`,
		`{"acceptance":{"implicit_accept_timeout_ms":0.0,"other":true}}`,
		`{"voting":{"algorithm":"majority"}}`, // other modes' sections are ignored
	} {
		if _, err := handoff.New().Start(binding(t, rules)); err != nil {
			t.Errorf("%s: Start = %v, want ok", rules, err)
		}
	}
	b := binding(t, "")
	b.Policy = nil
	if _, err := handoff.New().Start(b); err != nil {
		t.Errorf("nil policy: %v", err)
	}
}

// TestRejectedLeavesProjectUnchanged: "On error nothing changed" (mode.State
// contract), with reflect.DeepEqual on every reject path from a state that
// has content.
func TestRejectedLeavesProjectUnchanged(t *testing.T) {
	b := bindingFor(t, "", owner, owner, target, backup, third)
	st, err := handoff.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{
		offerIn(owner, "h1", target), contextIn(owner, "h1"), declineIn(target, "h1", ""), offerIn(owner, "h2", backup),
	} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	check := func(ins ...modetest.Input) {
		t.Helper()
		modetest.RejectUnchanged(t, st, b, ins...)
	}
	check(
		offerIn(target, "h3", third), offerIn(owner, "h3", third), offerIn(owner, "h1", third), offerIn(owner, "", third),
		rawIn(handoff.TypeOffer, owner, garbage),
		contextIn(target, "h2"), contextIn(owner, "h9"), contextIn(owner, "h1"),
		acceptIn(outsider, "h2", ""), acceptIn(target, "h2", ""), acceptIn(backup, "h9", ""), acceptIn(backup, "h2", third), acceptIn(target, "h1", ""),
		declineIn(owner, "h2", ""), declineIn(backup, "h2", owner),
		rawIn("Bogus", owner, nil), commitIn(owner, true), commitIn(owner, false),
	)
	a := acceptIn(backup, "h2", backup)
	if err := st.Step(b, &a.Msg); err != nil {
		t.Fatal(err)
	}
	check(offerIn(owner, "h3", third), contextIn(owner, "h2"), acceptIn(backup, "h2", ""), declineIn(backup, "h2", ""), commitIn(owner, false))
}

// TestAfterCommit: a committed state refuses everything with
// SESSION_NOT_OPEN (the core normally stops first).
func TestAfterCommit(t *testing.T) {
	// After the transfer the new owner still cannot offer: the session is
	// resolved.
	modetest.CheckAfterCommit(t, handoff.New(), binding(t, ""),
		[]modetest.Input{offerIn(owner, "h1", target), acceptIn(target, "h1", "")}, commitIn(owner, true),
		offerIn(owner, "h2", backup), offerIn(target, "h2", backup), contextIn(owner, "h1"))
}

// TestDescriptor pins the discovery descriptor (RFC-MACP-0010 §2, §4, §7;
// RFC-MACP-0002 §4, §10; checklist MODE-6, HAND-1, HAND-2).
func TestDescriptor(t *testing.T) {
	modetest.CheckDescriptorIs(t, handoff.New, modetest.WantDescriptor{
		Mode: "macp.mode.handoff.v1", Version: "1.0.0",
		Determinism: "context-frozen", ParticipantModel: "delegated",
		MessageTypes: []string{"SessionStart", "HandoffOffer", "HandoffContext", "HandoffAccept", "HandoffDecline", "Commitment"},
		Standard:     true,
	})
}

// TestRandomRuns drives the generator through the suite invariants with
// fixed seeds, for both late-context settings, and checks it reaches the
// valid paths.
func TestRandomRuns(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 50
	}
	for _, m := range []mode.Mode{handoff.New(), handoff.NewWithOptions(handoff.Options{AcceptLateContext: true})} {
		resolved, accepted := modetest.RandomRuns(t, m, gen{}, 13, n, 160)
		t.Logf("%d runs: %d resolved, %d inputs accepted", n, resolved, accepted)
		if resolved < n/20 || accepted < n {
			t.Errorf("generator reaches too few valid paths: %d resolved, %d accepted", resolved, accepted)
		}
	}
}

// FuzzHandoff feeds fuzzer-chosen message sequences through the shared
// suite's invariants (no panic, rejections inert, determinism, replay), for
// both late-context settings (the first input byte picks one).
func FuzzHandoff(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 8, 6, 0, 0, 15, 1})
	f.Add([]byte("\x01\x02\x00\x01\x00\x00\x00\x00\x0c\x02\x00\x00\x00\x10\x00\x03"))
	f.Add([]byte("handoff fuzz seed with a longer body to produce more messages................"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := handoff.New()
		if len(data) > 0 && data[0]&0x80 != 0 {
			m = handoff.NewWithOptions(handoff.Options{AcceptLateContext: true})
		}
		modetest.FuzzSteps(t, m, gen{}, data)
	})
}
