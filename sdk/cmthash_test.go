package sdk_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/testutil"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The SDK computes the RFC-MACP-0013 commitment hash itself (it imports no
// internal package). It must reproduce the spec's vectors, read from the
// shared fixture directory (never copied into the repository), byte for
// byte at every stage, and agree with the runtime's internal/cmthash.
func TestCommitmentHashVectors(t *testing.T) {
	dir := filepath.Join(testutil.ConformanceLatestDir(t), "cmt-hash")
	files, err := filepath.Glob(filepath.Join(dir, "cmt_hash_*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d commitment-hash vectors in %s, expected 5", len(files), dir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Label       string          `json:"label"`
				Payload     json.RawMessage `json:"payload"`
				JCSHex      string          `json:"jcs_utf8_hex"`
				PreimageHex string          `json:"preimage_utf8_hex"`
				Hash        string          `json:"hash"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if v.Label != sdk.CommitmentHashLabel {
				t.Fatalf("label %q, SDK %q", v.Label, sdk.CommitmentHashLabel)
			}
			var p macpv1.CommitmentPayload
			if err := protojson.Unmarshal(v.Payload, &p); err != nil {
				t.Fatal(err)
			}
			pre, err := sdk.CommitmentPreimage(&p)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(pre); got != v.PreimageHex {
				t.Errorf("preimage\n got  %s\n want %s", pre, mustUnhex(t, v.PreimageHex))
			}
			if want := sdk.CommitmentHashLabel + ":" + string(mustUnhex(t, v.JCSHex)); string(pre) != want {
				t.Errorf("preimage is not label:JCS\n got  %s\n want %s", pre, want)
			}
			h, err := sdk.CommitmentHash(&p)
			if err != nil || h != v.Hash {
				t.Fatalf("CommitmentHash = %s, %v; vector %s", h, err, v.Hash)
			}
			// A Supersedes option built from this payload carries the hash.
			ref, err := sdk.CommitmentRefOf("prior", &p)
			if err != nil || ref.CommitmentHash != v.Hash || ref.SessionId != "prior" {
				t.Fatalf("CommitmentRefOf = %v, %v", ref, err)
			}
		})
	}
}

func mustUnhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Random payloads, control characters, quotes, non-ASCII and astral
// code points included, hash as the runtime hashes them.
func TestCommitmentHashMatchesRuntime(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x01", "\x1f", "\x7f",
		"é", "\u2028", "\u2029", "—", "🜂", "\ufeff", "<", ">", "&"}
	str := func() string {
		var b strings.Builder
		for range r.IntN(8) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := range 2000 {
		p := &macpv1.CommitmentPayload{CommitmentId: str(), Action: str(), AuthorityScope: str(), Reason: str(),
			ModeVersion: str(), PolicyVersion: str(), ConfigurationVersion: str(), OutcomePositive: r.IntN(2) == 0}
		if r.IntN(3) == 0 {
			p.Supersedes = &macpv1.CommitmentRef{SessionId: str(), CommitmentHash: str()}
		}
		got, err := sdk.CommitmentHash(p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := cmthash.Hash(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			pre, _ := sdk.CommitmentPreimage(p)
			wpre, _ := cmthash.Preimage(p)
			t.Fatalf("payload %d: SDK %s, runtime %s\n SDK     %q\n runtime %q", i, got, want, pre, wpre)
		}
	}
}

func TestCommitmentHashRefusals(t *testing.T) {
	if _, err := sdk.CommitmentHash(&macpv1.CommitmentPayload{Reason: "\xff"}); err == nil {
		t.Error("invalid UTF-8 hashed")
	}
	unknown := &macpv1.CommitmentPayload{Action: "a"}
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	if _, err := sdk.CommitmentHash(unknown); !errors.Is(err, sdk.ErrCannotHash) {
		t.Errorf("a payload with unknown fields: %v, want ErrCannotHash", err)
	}
	b, _ := proto.Marshal(unknown)
	if _, err := cmthash.Hash(unknown); err == nil || len(b) == 0 {
		t.Errorf("the runtime hashed a payload with unknown fields")
	}
	// An empty supersedes is not an absent one (cmt_hash_003 vs 004).
	a, _ := sdk.CommitmentHash(&macpv1.CommitmentPayload{})
	e, _ := sdk.CommitmentHash(&macpv1.CommitmentPayload{Supersedes: &macpv1.CommitmentRef{}})
	if a == e {
		t.Error("an empty supersedes hashes as an absent one")
	}
}
