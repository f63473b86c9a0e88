package snapshot_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/macpd/macpd/internal/snapshot"
)

// Every report we build validates against the vendored schema, has the
// fixed fields and the id both as state_snapshot_id and as contents_ref.
func TestReportsValidate(t *testing.T) {
	strict := keyOpts
	strict.Profile = snapshot.ProfileStrict
	decay := keyOpts
	decay.DecayRuns = 3
	for name, s := range map[string]snapshot.Sealed{
		"resolved": seal(t, resolved(t, sidA).recs, keyOpts),
		"strict":   seal(t, resolved(t, sidA).recs, strict),
		"decay":    seal(t, resolved(t, sidA).recs, decay),
		"open":     seal(t, newHist(t, startOpts{id: sidB}).recs, keyOpts),
	} {
		b, err := snapshot.NewReport(s).Bytes()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var r map[string]any
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		snap := r["snapshot"].(map[string]any)
		if r["schema_version"] != "session_state_window_v1" || r["report_version"] != "1" ||
			snap["state_snapshot_id"] != string(s.ID) || snap["contents_ref"] != string(s.ID) ||
			snap["canonicalization"].(map[string]any)["method"] != "canonical_json_sha256" {
			t.Errorf("%s: %s", name, b)
		}
		priv := r["privacy"].(map[string]any)
		for _, k := range []string{"stores_raw_tool_args", "stores_raw_prompt_bodies", "stores_raw_document_bodies"} {
			if priv[k] != false {
				t.Errorf("%s: privacy.%s = %v", name, k, priv[k])
			}
		}
		w := r["window"].(map[string]any)
		if name == "decay" && (w["window_kind"] != "cross_session_decay" || w["decay_runs"] != 3.0) {
			t.Errorf("decay window: %v", w)
		}
		if name != "decay" && (w["window_kind"] != "session" || w["decay_runs"] != nil) {
			t.Errorf("%s window: %v", name, w)
		}
		// The report bytes are canonical.
		if c, _ := jcs.Transform(b); string(c) != string(b) {
			t.Errorf("%s: report is not in RFC 8785 form", name)
		}
	}
}

// The schema's negative cases are rejected by our validator (issue 15):
// decay without decay_runs, session with decay_runs, decay_runs 0,
// uppercase hex, an extra property; and a few more.
func TestSchemaNegativeCases(t *testing.T) {
	good, err := snapshot.NewReport(seal(t, resolved(t, sidA).recs, keyOpts)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.ValidateReportJSON(good); err != nil {
		t.Fatalf("good report: %v", err)
	}
	mutate := func(f func(r map[string]any)) []byte {
		var r map[string]any
		_ = json.Unmarshal(good, &r)
		f(r)
		b, _ := json.Marshal(r)
		return b
	}
	obj := func(r map[string]any, k string) map[string]any { return r[k].(map[string]any) }
	for name, b := range map[string][]byte{
		"decay without decay_runs": mutate(func(r map[string]any) { obj(r, "window")["window_kind"] = "cross_session_decay" }),
		"session with decay_runs":  mutate(func(r map[string]any) { obj(r, "window")["decay_runs"] = 2 }),
		"decay_runs 0": mutate(func(r map[string]any) {
			obj(r, "window")["window_kind"] = "cross_session_decay"
			obj(r, "window")["decay_runs"] = 0
		}),
		"decay_runs not an integer": mutate(func(r map[string]any) {
			obj(r, "window")["window_kind"] = "cross_session_decay"
			obj(r, "window")["decay_runs"] = 1.5
		}),
		"uppercase hex": mutate(func(r map[string]any) {
			obj(r, "snapshot")["state_snapshot_id"] = strings.ToUpper(obj(r, "snapshot")["state_snapshot_id"].(string)[7:])
			obj(r, "snapshot")["state_snapshot_id"] = "sha256:" + obj(r, "snapshot")["state_snapshot_id"].(string)
		}),
		"short hex":              mutate(func(r map[string]any) { obj(r, "snapshot")["state_snapshot_id"] = "sha256:abc" }),
		"extra top-level":        mutate(func(r map[string]any) { r["hostname"] = "x" }),
		"extra in session":       mutate(func(r map[string]any) { obj(r, "session")["user"] = "x" }),
		"extra in privacy":       mutate(func(r map[string]any) { obj(r, "privacy")["raw"] = "x" }),
		"unknown window kind":    mutate(func(r map[string]any) { obj(r, "window")["window_kind"] = "forever" }),
		"wrong schema_version":   mutate(func(r map[string]any) { r["schema_version"] = "session_state_window_v2" }),
		"empty server_id":        mutate(func(r map[string]any) { obj(r, "session")["server_id"] = "" }),
		"missing privacy":        mutate(func(r map[string]any) { delete(r, "privacy") }),
		"other canonicalization": mutate(func(r map[string]any) { obj(obj(r, "snapshot"), "canonicalization")["method"] = "md5" }),
		"privacy not boolean":    mutate(func(r map[string]any) { obj(r, "privacy")["stores_raw_tool_args"] = "no" }),
	} {
		if err := snapshot.ValidateReportJSON(b); err == nil {
			t.Errorf("%s: accepted %s", name, b)
		}
	}
}

// RFC 8785 §3.2: the canonical form our ids hash. Vectors from the RFC
// text: §3.2.3 property sorting by UTF-16 code units (non-ASCII keys,
// a surrogate pair sorting before U+FB33), §3.2.4 the worked example
// (ECMAScript number form, minimal string escapes), and §3.2.2.3 number
// serializations.
func TestRFC8785Vectors(t *testing.T) {
	for name, v := range map[string]struct{ in, want string }{
		"sorting by UTF-16 code units": {
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		"worked example": {
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		"nested objects sorted, arrays kept": {
			in:   `{"b":[3,1,2],"a":{"z":1,"y":{"d":0,"c":-0}}}`,
			want: `{"a":{"y":{"c":0,"d":0},"z":1},"b":[3,1,2]}`,
		},
		"numbers": {
			in:   `[0, -0, 1e21, 1e20, 9007199254740991, 5e-324, 1.7976931348623157e308, 0.1, 100, 1.0, -1.5e-7]`,
			want: `[0,0,1e+21,100000000000000000000,9007199254740991,5e-324,1.7976931348623157e+308,0.1,100,1,-1.5e-7]`,
		},
	} {
		got, err := jcs.Transform([]byte(v.in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(got) != v.want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, v.want)
		}
	}
	// Our own encoder path: struct fields in declaration order come out
	// sorted, and Go's HTML escaping (\u003c) does not survive.
	p := seal(t, resolved(t, sidA).recs, keyOpts)
	if !strings.HasPrefix(string(p.Bytes), `{"accepted_count":4,"configuration_version":"`+string(snapshot.Opaque("macpd", "default", "cfg-1"))+`","entries":[`) {
		t.Errorf("payload not sorted: %.120s", p.Bytes)
	}
	type probe struct {
		B snapshot.ID `json:"b"`
		A snapshot.ID `json:"a<"`
	}
	raw, _ := json.Marshal(probe{B: "x&y", A: "z"})
	got, _ := jcs.Transform(raw)
	if string(got) != `{"a<":"z","b":"x&y"}` {
		t.Errorf("escapes: %s", got)
	}
}
