package cmthash_test

// RFC-MACP-0013 §11: "A conforming implementation MUST reproduce the
// pinned hash for each of the five vectors above, and MUST assert that
// cmt_hash_003_all_empty.json and cmt_hash_004_empty_supersedes.json
// produce different canonical commitment hashes."

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// vectorNames are the five vectors RFC-MACP-0013 §11 defines.
var vectorNames = []string{
	"cmt_hash_001_minimal",
	"cmt_hash_002_supersedes",
	"cmt_hash_003_all_empty",
	"cmt_hash_004_empty_supersedes",
	"cmt_hash_005_escapes",
}

type vector struct {
	Name           string          `json:"name"`
	Label          string          `json:"label"`
	Payload        json.RawMessage `json:"payload"`
	JCSHex         string          `json:"jcs_utf8_hex"`
	PreimageHex    string          `json:"preimage_utf8_hex"`
	Hash           string          `json:"hash"`
	MustDifferFrom string          `json:"must_differ_from"`
}

func loadVectors(t *testing.T) map[string]vector {
	t.Helper()
	dir := filepath.Join(testutil.ConformanceLatestDir(t), "cmt-hash")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]vector{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".json"); v.Name != want {
			t.Fatalf("%s: name %q, expected %q", f, v.Name, want)
		}
		out[v.Name] = v
	}
	for _, n := range vectorNames {
		if _, ok := out[n]; !ok {
			t.Errorf("vector %s missing from %s", n, dir)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

func payloadOf(t *testing.T, v vector) *macpv1.CommitmentPayload {
	t.Helper()
	p := &macpv1.CommitmentPayload{}
	if err := protojson.Unmarshal(v.Payload, p); err != nil {
		t.Fatalf("%s: payload: %v", v.Name, err)
	}
	return p
}

func TestVectors(t *testing.T) {
	vs := loadVectors(t)
	hashes := map[string]string{}
	for name, v := range vs {
		t.Run(name, func(t *testing.T) {
			if v.Label != cmthash.Label {
				t.Fatalf("label %q, expected %q", v.Label, cmthash.Label)
			}
			p := payloadOf(t, v)
			c, err := cmthash.Canonical(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(c); got != v.JCSHex {
				t.Errorf("JCS bytes differ:\n got  %s\n want %s", c, mustHex(t, v.JCSHex))
			}
			pre, err := cmthash.Preimage(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(pre); got != v.PreimageHex {
				t.Errorf("preimage differs:\n got  %s\n want %s", pre, mustHex(t, v.PreimageHex))
			}
			h, err := cmthash.Hash(p)
			if err != nil {
				t.Fatal(err)
			}
			if h != v.Hash {
				t.Errorf("hash %s, expected %s", h, v.Hash)
			}
			if !cmthash.WellFormedHash(h) {
				t.Errorf("hash %s is not of the canonical shape", h)
			}
			if err := cmthash.Verify(p, v.Hash); err != nil {
				t.Errorf("Verify: %v", err)
			}
			hashes[name] = h
		})
	}
	// §11: the unset vs empty supersedes rule is implemented.
	for name, v := range vs {
		if v.MustDifferFrom == "" {
			continue
		}
		if hashes[name] == "" || hashes[name] == hashes[v.MustDifferFrom] {
			t.Errorf("%s hashes to %q, must differ from %s (%q)", name, hashes[name], v.MustDifferFrom, hashes[v.MustDifferFrom])
		}
	}
	if hashes["cmt_hash_003_all_empty"] == hashes["cmt_hash_004_empty_supersedes"] {
		t.Error("cmt_hash_003 and cmt_hash_004 hash the same: an empty supersedes was treated as absent")
	}
	// §3 rule 4: 002 chains to 001's hash.
	if got := payloadOf(t, vs["cmt_hash_002_supersedes"]).GetSupersedes().GetCommitmentHash(); got != hashes["cmt_hash_001_minimal"] {
		t.Errorf("vector 002 supersedes %s, 001 hashes to %s", got, hashes["cmt_hash_001_minimal"])
	}
}

func mustHex(t *testing.T, s string) string {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("vector hex: %v", err)
	}
	return string(b)
}

// TestFrozenFieldSet fails when CommitmentPayload or CommitmentRef gains,
// loses or renames a field: RFC-MACP-0013 §5 makes a tenth field a label
// bump (macp-commitment-hash/2), never a silent addition.
func TestFrozenFieldSet(t *testing.T) {
	want := map[string][]string{
		"macp.v1.CommitmentPayload": {"commitment_id", "action", "authority_scope", "reason", "mode_version",
			"policy_version", "configuration_version", "outcome_positive", "supersedes"},
		"macp.v1.CommitmentRef": {"session_id", "commitment_hash"},
	}
	for _, m := range []proto.Message{&macpv1.CommitmentPayload{}, &macpv1.CommitmentRef{}} {
		md := m.ProtoReflect().Descriptor()
		names := want[string(md.FullName())]
		if md.Fields().Len() != len(names) {
			t.Errorf("%s has %d fields, label %s covers %d", md.FullName(), md.Fields().Len(), cmthash.Label, len(names))
		}
		for i, n := range names {
			fd := md.Fields().ByNumber(protowire.Number(i + 1))
			if fd == nil || string(fd.Name()) != n {
				t.Errorf("%s field %d: %v, expected %s", md.FullName(), i+1, fd, n)
			}
		}
	}
}

func TestProjectionMaterializesScalars(t *testing.T) {
	p := &macpv1.CommitmentPayload{}
	proj, err := cmthash.Projection(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(proj) != 8 {
		t.Errorf("projection of an empty payload has %d keys, expected 8 (no supersedes): %v", len(proj), proj)
	}
	if v, ok := proj["outcome_positive"]; !ok || v != false {
		t.Errorf("outcome_positive = %v (present %v), expected false materialized", v, ok)
	}
	if _, ok := proj["supersedes"]; ok {
		t.Error("an unset supersedes is projected")
	}
	p.Supersedes = &macpv1.CommitmentRef{}
	proj, err = cmthash.Projection(p)
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := proj["supersedes"].(map[string]any)
	if !ok || len(ref) != 2 || ref["session_id"] != "" || ref["commitment_hash"] != "" {
		t.Errorf("empty supersedes projected as %v, expected both strings present and empty", proj["supersedes"])
	}
}

// TestHTMLCharactersNotEscaped: RFC 8785 escapes only '"', '\\' and
// control characters; <, > and & stay literal.
func TestHTMLCharactersNotEscaped(t *testing.T) {
	c, err := cmthash.Canonical(&macpv1.CommitmentPayload{Reason: "<a & b>"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c), `"reason":"<a & b>"`) {
		t.Errorf("canonical bytes %s", c)
	}
}

func TestCannotVerify(t *testing.T) {
	base, err := proto.Marshal(&macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.approved"})
	if err != nil {
		t.Fatal(err)
	}
	withUnknown := protowire.AppendTag(append([]byte(nil), base...), 10, protowire.BytesType)
	withUnknown = protowire.AppendString(withUnknown, "extra")
	p := &macpv1.CommitmentPayload{}
	if err := proto.Unmarshal(withUnknown, p); err != nil {
		t.Fatal(err)
	}
	if _, err := cmthash.Hash(p); !errors.Is(err, cmthash.ErrCannotVerify) {
		t.Errorf("payload with field 10: err = %v, expected ErrCannotVerify", err)
	}
	if err := cmthash.Verify(p, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, cmthash.ErrCannotVerify) || errors.Is(err, cmthash.ErrMismatch) {
		t.Errorf("Verify of an unhashable payload: %v, expected cannot-verify, not mismatch", err)
	}

	refBytes := protowire.AppendTag(nil, 3, protowire.VarintType)
	refBytes = protowire.AppendVarint(refBytes, 1)
	ref := &macpv1.CommitmentRef{}
	if err := proto.Unmarshal(refBytes, ref); err != nil {
		t.Fatal(err)
	}
	ref.SessionId, ref.CommitmentHash = "s", "sha256:"+strings.Repeat("a", 64)
	if _, err := cmthash.Hash(&macpv1.CommitmentPayload{Supersedes: ref}); !errors.Is(err, cmthash.ErrCannotVerify) {
		t.Errorf("supersedes with field 3: err = %v, expected ErrCannotVerify", err)
	}

	if _, err := cmthash.Hash(nil); err == nil {
		t.Error("Hash(nil) succeeded")
	}
	if _, err := cmthash.Hash(&macpv1.CommitmentPayload{Reason: "bad \xff"}); err == nil {
		t.Error("invalid UTF-8 hashed")
	}
}

func TestVerifyMismatch(t *testing.T) {
	p := &macpv1.CommitmentPayload{CommitmentId: "c1"}
	h, err := cmthash.Hash(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmthash.Verify(p, h); err != nil {
		t.Fatalf("Verify own hash: %v", err)
	}
	p.OutcomePositive = true
	if err := cmthash.Verify(p, h); !errors.Is(err, cmthash.ErrMismatch) || errors.Is(err, cmthash.ErrCannotVerify) {
		t.Errorf("changed payload: %v, expected a mismatch", err)
	}
}

func TestWellFormedHash(t *testing.T) {
	good := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	cases := map[string]bool{
		good:                         true,
		"":                           false,
		"sha256:":                    false,
		strings.ToUpper(good):        false,
		"SHA256:" + good[7:]:         false,
		"sha256:" + good[8:]:         false, // 63 hex
		good + "0":                   false, // 65 hex
		"sha512:" + good[7:]:         false,
		good[:70] + "g":              false,
		"sha256:" + good[7:69] + "A": false,
	}
	for s, want := range cases {
		if got := cmthash.WellFormedHash(s); got != want {
			t.Errorf("WellFormedHash(%q) = %v, expected %v", s, got, want)
		}
	}
}

func TestValidateRef(t *testing.T) {
	good := "sha256:" + strings.Repeat("ab", 32)
	cases := []struct {
		name    string
		ref     *macpv1.CommitmentRef
		profile string
		ok      bool
	}{
		{"absent", nil, coord.ProfileLatest, true},
		{"canonical latest", &macpv1.CommitmentRef{SessionId: "s1", CommitmentHash: good}, coord.ProfileLatest, true},
		{"canonical april", &macpv1.CommitmentRef{SessionId: "s1", CommitmentHash: good}, coord.ProfileApril, true},
		{"empty session latest", &macpv1.CommitmentRef{CommitmentHash: good}, coord.ProfileLatest, false},
		{"empty session april", &macpv1.CommitmentRef{CommitmentHash: good}, "", false},
		{"empty hash april", &macpv1.CommitmentRef{SessionId: "s1"}, coord.ProfileApril, false},
		{"empty ref latest", &macpv1.CommitmentRef{}, coord.ProfileLatest, false},
		{"opaque hash april", &macpv1.CommitmentRef{SessionId: "s1", CommitmentHash: "abc"}, coord.ProfileApril, true},
		{"opaque hash latest", &macpv1.CommitmentRef{SessionId: "s1", CommitmentHash: "abc"}, coord.ProfileLatest, false},
		{"uppercase hash latest", &macpv1.CommitmentRef{SessionId: "s1", CommitmentHash: strings.ToUpper(good)}, coord.ProfileLatest, false},
	}
	for _, c := range cases {
		err := cmthash.ValidateRef(c.ref, c.profile)
		if c.ok {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		} else if err.Code != coord.CodeInvalidEnvelope {
			t.Errorf("%s: code %s, expected INVALID_ENVELOPE", c.name, err.Code)
		}
	}
}

// TestEmptySupersedesSurvivesTheWire: a set but empty CommitmentRef is
// still set after a protobuf round trip (field 9 with length 0), so a
// receiver hashes it as vector 004, not 003.
func TestEmptySupersedesSurvivesTheWire(t *testing.T) {
	vs := loadVectors(t)
	b, err := proto.Marshal(&macpv1.CommitmentPayload{Supersedes: &macpv1.CommitmentRef{}})
	if err != nil {
		t.Fatal(err)
	}
	var p macpv1.CommitmentPayload
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if h, err := cmthash.Hash(&p); err != nil || h != vs["cmt_hash_004_empty_supersedes"].Hash {
		t.Errorf("hash %s (%v), expected vector 004's %s", h, err, vs["cmt_hash_004_empty_supersedes"].Hash)
	}
	b, err = proto.Marshal(&macpv1.CommitmentPayload{})
	if err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if h, err := cmthash.Hash(&p); err != nil || h != vs["cmt_hash_003_all_empty"].Hash {
		t.Errorf("hash %s (%v), expected vector 003's %s", h, err, vs["cmt_hash_003_all_empty"].Hash)
	}
}
