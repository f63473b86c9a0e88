package handoff_test

import (
	"fmt"
	"testing"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/mode/modetest"
)

const (
	owner    = "agent://owner"
	target   = "agent://target"
	backup   = "agent://backup"
	third    = "agent://third"
	outsider = "agent://outsider"
)

var msg = modetest.Messages()

var marshal = modetest.Marshal

// bindingFor returns a handoff binding with the given policy rules JSON
// ("" = policy.default), initiator and participants.
func bindingFor(t testing.TB, rules, initiator string, participants ...string) *mode.Binding {
	return modetest.Binding(t, handoff.ModeID, handoff.ModeVersion, "policy.test.rules", rules, initiator, participants)
}

// binding: owner initiates; owner, target and backup are declared.
func binding(t testing.TB, rules string) *mode.Binding {
	t.Helper()
	return bindingFor(t, rules, owner, owner, target, backup)
}

func offerIn(sender, id, to string) modetest.Input {
	return modetest.Input{Msg: msg(handoff.TypeOffer, sender, marshal(&handoffv1.HandoffOfferPayload{
		HandoffId: id, TargetParticipant: to, Scope: "support", Reason: "escalate " + id,
	}))}
}

func contextIn(sender, id string) modetest.Input {
	return modetest.Input{Msg: msg(handoff.TypeContext, sender, marshal(&handoffv1.HandoffContextPayload{
		HandoffId: id, ContentType: "text/plain", Context: []byte("ticket 42"),
	}))}
}

func acceptIn(sender, id, by string) modetest.Input {
	return modetest.Input{Msg: msg(handoff.TypeAccept, sender, marshal(&handoffv1.HandoffAcceptPayload{HandoffId: id, AcceptedBy: by, Reason: "ready"}))}
}

func declineIn(sender, id, by string) modetest.Input {
	return modetest.Input{Msg: msg(handoff.TypeDecline, sender, marshal(&handoffv1.HandoffDeclinePayload{HandoffId: id, DeclinedBy: by, Reason: "busy"}))}
}

func rawIn(typ, sender string, payload []byte) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, payload)}
}

func commitIn(sender string, positive bool) modetest.Input {
	return modetest.Commitment(msg(coord.TypeCommitment, sender, nil), handoff.ModeVersion, "handoff.accepted", "handoff.declined", positive)
}

// Step constructors: ok expects acceptance, rej a code.
var ok, rej = modetest.Ok, modetest.Rej

// gen is the Handoff Mode generator for randomized runs and fuzzing: mostly
// well-formed messages over small id pools, biased so that offers, answers,
// context, re-offers after declines and both Commitments are reached.
type gen struct{}

var genPolicies = []string{
	"",
	`{"acceptance":{"implicit_accept_timeout_ms":0}}`,
	`{"commitment":{"authority":"any_participant"}}`,
}

var genTargets = []string{target, backup, third}

func (gen) Binding(r *modetest.Rand) *mode.Binding {
	n := 1 + r.Intn(len(genTargets))
	participants := append([]string{owner}, genTargets[:n]...)
	if r.Bool() { // the owner need not be listed first
		participants[0], participants[n] = participants[n], participants[0]
	}
	b := bindingFor(nil, genPolicies[r.Intn(len(genPolicies))], owner, participants...)
	b.Profile = r.Pick(coord.ProfileApril, coord.ProfileLatest) // late context differs
	return b
}

func (gen) Next(r *modetest.Rand, b *mode.Binding, seq int) modetest.Input {
	var targets []string // declared participants other than the owner
	for _, p := range b.Participants {
		if p != owner {
			targets = append(targets, p)
		}
	}
	sender := targets[r.Intn(len(targets))] // a plausible answerer
	switch k := r.Intn(10); {
	case k < 2:
		sender = owner
	case k < 3:
		sender = outsider
	}
	hid := r.Pick("h1", "h2", "h3", "h1", "h2", "")
	var in modetest.Input
	switch k := r.Intn(20); {
	case k < 5:
		to := targets[r.Intn(len(targets))]
		if r.Chance(1, 4) {
			to = r.Pick(owner, outsider, "", target)
		}
		from := owner
		if r.Chance(1, 8) {
			from = sender
		}
		in = offerIn(from, hid, to)
	case k < 7:
		in = contextIn(r.Pick(owner, owner, sender), hid)
	case k < 10:
		in = acceptIn(sender, hid, r.Pick("", "", sender, target))
	case k < 11:
		// A client may never send implicit=true (RFC-MACP-0010 §5.1).
		in = modetest.Input{Msg: msg(handoff.TypeAccept, sender, marshal(&handoffv1.HandoffAcceptPayload{HandoffId: hid, AcceptedBy: sender, Implicit: true}))}
	case k < 14:
		in = declineIn(sender, hid, r.Pick("", "", sender, backup))
	case k < 17:
		// The core passes on only Commitments from a sender with
		// commitment authority.
		in = commitIn(owner, r.Chance(1, 2))
	default:
		in = rawIn(r.Pick(handoff.TypeOffer, handoff.TypeContext, handoff.TypeAccept, handoff.TypeDecline), sender, r.Bytes(12))
	}
	in.Msg.ID = fmt.Sprintf("m%d", seq)
	return in
}
