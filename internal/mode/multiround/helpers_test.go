package multiround_test

import (
	"encoding/json"
	"fmt"

	multiroundv1 "github.com/macpd/macpd/gen/macp/modes/multi_round/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/multiround"
)

const (
	coordinator = "agent://coordinator"
	outsider    = "agent://outsider"
	alice       = "agent://alice"
	bob         = "agent://bob"
	carol       = "agent://carol"
)

const (
	invalidEnv = coord.CodeInvalidEnvelope
	forbidden  = coord.CodeForbidden
)

var msg = modetest.Messages()

// binding returns a multi-round binding under policy.default with the given
// participants (default alice, bob); the coordinator initiates, unlisted.
func binding(participants ...string) *mode.Binding {
	if participants == nil {
		participants = []string{alice, bob}
	}
	return modetest.Binding(nil, multiround.ModeID, multiround.ModeVersion, "", "", coordinator, participants)
}

// contributeIn builds a Contribute with the CONF-11 encoding: UTF-8 JSON
// {"value": v}.
func contributeIn(sender, v string) modetest.Input {
	p, err := json.Marshal(map[string]string{"value": v})
	if err != nil {
		panic(err)
	}
	return modetest.Input{Msg: msg(multiround.TypeContribute, sender, p)}
}

func rawIn(typ, sender string, payload []byte) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, payload)}
}

func commitIn(sender string, positive bool) modetest.Input {
	return modetest.Commitment(msg(coord.TypeCommitment, sender, nil), multiround.ModeVersion, "multi_round.converged", "multi_round.abandoned", positive)
}

var ok, rej = modetest.Ok, modetest.Rej

// badPayloads are Contribute payloads parseContribute refuses.
var badPayloads = [][]byte{
	nil,
	[]byte(""),
	[]byte("not json"),
	[]byte(`"option_a"`),
	[]byte(`["option_a"]`),
	[]byte(`{}`),
	[]byte(`{"value":null}`),
	[]byte(`{"value":1}`),
	[]byte(`{"value":true}`),
	[]byte(`{"value":{"x":"y"}}`),
	[]byte(`{"value":["a"]}`),
	[]byte(`{"Value":"a"}`),
	[]byte(`{"value":"a","value":"b"}`),
	[]byte(`{"value":"a"} {}`),
	[]byte(`{"value":"a"}x`),
	[]byte(`{"value":"a",}`),
	[]byte(`{"value":"a"`),
	[]byte(`{"value" "a"}`),
	[]byte("{\"value\":\"\xc3\x28\"}"),
	{0xff, 0xfe},
}

// gen is the Multi-Round generator for randomized runs and fuzzing: mostly
// well-formed contributions over a two-value pool from the declared
// participants, so revisions, convergence and Commitments are reached,
// plus malformed payloads, outsiders and the unlisted initiator.
type gen struct{}

var genPool = []string{alice, bob, carol}

func (gen) Binding(r *modetest.Rand) *mode.Binding {
	n := 1 + r.Intn(len(genPool))
	b := binding(append([]string(nil), genPool[:n]...)...)
	if r.Chance(1, 4) {
		b.Initiator = alice
	}
	b.Profile = r.Pick(coord.ProfileApril, coord.ProfileLatest) // payload decoding order differs
	return b
}

func (gen) Next(r *modetest.Rand, b *mode.Binding, seq int) modetest.Input {
	sender := b.Participants[r.Intn(len(b.Participants))]
	switch k := r.Intn(16); {
	case k < 1:
		sender = outsider
	case k < 2:
		sender = b.Initiator
	}
	var in modetest.Input
	switch k := r.Intn(20); {
	case k < 9:
		in = contributeIn(sender, r.Pick("a", "a", "b", "a", "", "é"))
	case k < 13:
		// The canonical protobuf ContributePayload.
		in = rawIn(multiround.TypeContribute, sender, modetest.Marshal(&multiroundv1.ContributePayload{Value: r.Pick("a", "a", "b", "")}))
	case k < 16:
		in = commitIn(b.Initiator, !r.Chance(1, 4))
	case k < 18:
		in = rawIn(multiround.TypeContribute, sender, badPayloads[r.Intn(len(badPayloads))])
	default:
		in = rawIn(multiround.TypeContribute, sender, r.Bytes(12))
	}
	in.Msg.ID = fmt.Sprintf("m%d", seq)
	return in
}
