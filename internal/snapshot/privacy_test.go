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

// ADR-029: session_id is opaque, and so is every other client-chosen
// identifier. Revealing session, message, proposal and commitment ids,
// participants and a commitment action appear in no payload or report,
// verbatim or in part, in either profile, in session and decay windows;
// they are replaced by Opaque digests that are the same for equal settings
// and differ when event_source or server_id differ. Before, they were
// copied verbatim.
func TestIdentifierCanaries(t *testing.T) {
	sid := "alice-ssn-123-45-6789-secret-merger-acme"
	later := "bob-ssn-987-65-4321-secret-followup-acme"
	canaries := []string{"ssn-123-45-6789", "secret-merger", "SECRET-salary-150000", "SECRET-layoffs-q3", "SECRET-action-fire-all", "ssn-987-65-4321"}
	h := newHist(t, startOpts{id: sid})
	h.nextID = "prop-SECRET-salary-150000"
	h.propose("r")
	h.nextID = "vote-SECRET-salary-150000-yes"
	h.vote("alice", "fine")
	h.commitmentID = "cid-SECRET-layoffs-q3"
	h.nextID = "commit-SECRET-layoffs-q3"
	h.commit("SECRET-action-fire-all", "ok")
	raw := ""
	for _, r := range h.recs {
		raw += r.Envelope.GetSessionId() + r.Envelope.GetMessageId() + string(r.Envelope.GetPayload())
	}
	for _, c := range canaries[:5] {
		if !strings.Contains(raw, c) {
			t.Fatalf("the check would miss %s: the history does not hold it", c)
		}
	}
	strict := keyOpts
	strict.Profile = snapshot.ProfileStrict
	decay := keyOpts
	decay.DecayRuns, decay.Subsequent = 1, []string{later}
	for _, o := range []snapshot.Options{keyOpts, strict, decay} {
		sealed := seal(t, h.recs, o)
		rep, err := snapshot.NewReport(sealed).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{string(sealed.Bytes), string(rep)} {
			for _, c := range canaries {
				if strings.Contains(strings.ToLower(text), strings.ToLower(c)) {
					t.Errorf("profile %s decay %d: %s appears in %s", o.Profile, o.DecayRuns, c, text)
				}
			}
		}
		if want := snapshot.Opaque(o.EventSource, o.ServerID, sid); sealed.Payload.Session.SessionID != want {
			t.Errorf("session_id %s, want %s", sealed.Payload.Session.SessionID, want)
		}
		if oc := sealed.Payload.Outcome; oc == nil || oc.CommitmentID != snapshot.Opaque(o.EventSource, o.ServerID, "cid-SECRET-layoffs-q3") {
			t.Errorf("outcome %+v", oc)
		}
	}
	// The digest depends on the whole key, and only on it.
	a := snapshot.Opaque("macpd", "default", sid)
	if a != snapshot.Opaque("macpd", "default", sid) || a == snapshot.Opaque("macpd", "other", sid) || a == snapshot.Opaque("other", "default", sid) ||
		snapshot.Opaque("ab", "c", sid) == snapshot.Opaque("a", "bc", sid) {
		t.Error("Opaque is not a function of (event_source, server_id, id) alone")
	}
}
