package snapshot_test

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/snapshot"
)

// ADR-029 §3 (no raw prompts, arguments or bodies): canaries in the
// intent, an extension value, a rationale, a vote reason, the commitment
// reason and a cancel reason appear in no payload or report, in plain,
// hex or base64 form. (cmd/macpd's process test checks logs too.)
func TestPrivacyCanaries(t *testing.T) {
	canaries := []string{
		"CANARY-intent-7fQ2mX9pL4vR8tW3bN6y", "CANARY-extval-K5dJ8fQ2wE7rT4yU9iO1",
		"CANARY-ration-Z3xC6vB9nM2lK5jH8gF1", "CANARY-reason-P0oI9uY8tR7eW6qA5sD4",
		"CANARY-commit-L1kJ2hG3fD4sA5pO6iU7", "CANARY-cancel-M9nB8vC7xZ6lK5jH4gF3",
	}
	forms := func(c string) []string {
		out := []string{c, hex.EncodeToString([]byte(c)), strings.ToUpper(hex.EncodeToString([]byte(c)))}
		for shift := 0; shift < 3; shift++ {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				s := enc.EncodeToString(append(make([]byte, shift), c...))
				out = append(out, s[4:len(s)-4])
			}
		}
		return out
	}
	ext := map[string][]byte{"x-note": []byte(canaries[1])}
	res := newHist(t, startOpts{id: sidA, intent: canaries[0], extensions: ext}).propose(canaries[2]).vote("alice", canaries[3]).commit("decision.selected", canaries[4])
	can := newHist(t, startOpts{id: sidB, intent: canaries[0], extensions: ext}).propose(canaries[2]).cancel(canaries[5])
	// The check can fail: the raw history holds every canary.
	var raw strings.Builder
	for _, h := range []*hist{res, can} {
		for _, r := range h.recs {
			if r.Envelope != nil {
				raw.WriteString(base64.StdEncoding.EncodeToString(r.Envelope.Payload))
			}
		}
	}
	for _, c := range canaries {
		hit := false
		for _, f := range forms(c) {
			hit = hit || strings.Contains(raw.String(), f)
		}
		if !hit {
			t.Fatalf("the check would miss %s in base64 history", c)
		}
	}
	strict := keyOpts
	strict.Profile = snapshot.ProfileStrict
	var texts []string
	for _, h := range []*hist{res, can} {
		for _, o := range []snapshot.Options{keyOpts, strict} {
			sealed := seal(t, h.recs, o)
			rep, err := snapshot.NewReport(sealed).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			texts = append(texts, string(sealed.Bytes), string(rep))
		}
	}
	for i, text := range texts {
		for _, c := range canaries {
			for _, f := range forms(c) {
				if strings.Contains(text, f) {
					t.Errorf("text %d holds %s as %q", i, c, f)
				}
			}
		}
	}
}
