package multiround_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	multiroundv1 "github.com/macpd/macpd/gen/macp/modes/multi_round/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/multiround"
)

func pb(v string) []byte {
	b, err := proto.Marshal(&multiroundv1.ContributePayload{Value: v})
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeContribute(t *testing.T) {
	// A payload that is at once legacy JSON and an exact ContributePayload:
	// tag 0x0a (also JSON whitespace LF), length 0x20 (a space), and a
	// 32-byte value that is itself a legacy JSON object.
	inner := `{"value":"xxxxxxxxxxxxxxxxxxxx"}`
	if len(inner) != 32 {
		t.Fatalf("inner is %d bytes", len(inner))
	}
	both := pb(inner)
	unknown := protowire.AppendTag(pb("v"), 7, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	for _, c := range []struct {
		name, profile string
		payload       []byte
		value, format string
		bad           bool
	}{
		{"legacy JSON, April", coord.ProfileApril, []byte(`{"value":"a"}`), "a", multiround.FormatJSON, false},
		{"legacy JSON, latest", coord.ProfileLatest, []byte(`{"value":"a"}`), "a", multiround.FormatJSON, false},
		{"legacy JSON with whitespace, April", "", []byte(" {\"value\" : \"a\"}\n"), "a", multiround.FormatJSON, false},
		{"protobuf, April", coord.ProfileApril, pb("a"), "a", multiround.FormatProto, false},
		{"protobuf, latest", coord.ProfileLatest, pb("option_a"), "option_a", multiround.FormatProto, false},
		{"protobuf with an unknown field, latest", coord.ProfileLatest, unknown, "v", multiround.FormatProto, false},
		{"empty payload, latest (value \"\")", coord.ProfileLatest, nil, "", multiround.FormatProto, false},
		{"empty payload, April (refused as always)", coord.ProfileApril, nil, "", "", true},
		{"ambiguous bytes, April: JSON", coord.ProfileApril, both, "xxxxxxxxxxxxxxxxxxxx", multiround.FormatJSON, false},
		{"ambiguous bytes, latest: protobuf", coord.ProfileLatest, both, inner, multiround.FormatProto, false},
		{"neither", coord.ProfileLatest, []byte(`{"value":1}`), "", "", true},
		{"invalid UTF-8 protobuf string", coord.ProfileLatest, []byte{0x0a, 0x01, 0xff}, "", "", true},
	} {
		v, f, err := multiround.DecodeContribute(c.payload, c.profile)
		if c.bad {
			if err == nil {
				t.Errorf("%s: decoded %q (%s), want an error", c.name, v, f)
			}
			continue
		}
		if err != nil || v != c.value || f != c.format {
			t.Errorf("%s: got %q %s %v, want %q %s", c.name, v, f, err, c.value, c.format)
		}
	}
}

// Both encodings drive one session to convergence; the same history
// replays to the same state (modetest.Check).
func TestMixedEncodingsConverge(t *testing.T) {
	for _, profile := range []string{coord.ProfileApril, coord.ProfileLatest} {
		b := binding()
		b.Profile = profile
		ins := []modetest.Input{
			rawIn(multiround.TypeContribute, alice, pb("x")),
			contributeIn(bob, "x"),
			commitIn(coordinator, true),
		}
		res, err := modetest.Check(multiround.New(), b, ins)
		if err != nil {
			t.Fatalf("%s: %v", profile, err)
		}
		if !res.Resolved || res.Codes[0] != "" || res.Codes[1] != "" || res.Final["converged_value"] != "x" {
			t.Errorf("%s: codes %v, final %v", profile, res.Codes, res.Final)
		}
	}
}
