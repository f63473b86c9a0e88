package cmthash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Label names the projection and preimage rules implemented here
// (RFC-MACP-0013 §5, §7). It appears only inside the preimage.
const Label = "macp-commitment-hash/1"

// Prefix is the wire prefix of every canonical commitment hash.
const Prefix = "sha256:"

var (
	// ErrCannotVerify: the payload's shape is outside what Label covers
	// (RFC-MACP-0013 §5): no hash under this label exists for it.
	ErrCannotVerify = errors.New("cmthash: cannot verify: payload outside the macp-commitment-hash/1 field set")
	// ErrMismatch: the payload is hashable and its hash differs from the
	// claimed value (RFC-MACP-0013 §6).
	ErrMismatch = errors.New("cmthash: commitment hash mismatch")
)

// frozen field numbers of CommitmentPayload (1..9) and CommitmentRef (1..2)
// under Label (RFC-MACP-0013 §5).
const (
	payloadFields = 9
	refFields     = 2
)

// Projection returns the RFC-MACP-0013 §3 projection of p as a JSON value
// (map[string]any with string, bool and nested map values). It fails with
// ErrCannotVerify when p carries anything outside the frozen field set, and
// with an error for a nil payload or a string that is not valid UTF-8
// (which no proto3 string on the wire can be).
func Projection(p *macpv1.CommitmentPayload) (map[string]any, error) {
	if p == nil {
		return nil, errors.New("cmthash: nil CommitmentPayload")
	}
	if err := checkShape(p.ProtoReflect(), payloadFields, "CommitmentPayload"); err != nil {
		return nil, err
	}
	strs := []struct{ key, val string }{
		{"commitment_id", p.GetCommitmentId()},
		{"action", p.GetAction()},
		{"authority_scope", p.GetAuthorityScope()},
		{"reason", p.GetReason()},
		{"mode_version", p.GetModeVersion()},
		{"policy_version", p.GetPolicyVersion()},
		{"configuration_version", p.GetConfigurationVersion()},
	}
	out := make(map[string]any, payloadFields)
	for _, s := range strs {
		if !utf8.ValidString(s.val) {
			return nil, fmt.Errorf("cmthash: %s is not valid UTF-8", s.key)
		}
		out[s.key] = s.val
	}
	out["outcome_positive"] = p.GetOutcomePositive()
	if ref := p.GetSupersedes(); ref != nil {
		if err := checkShape(ref.ProtoReflect(), refFields, "supersedes"); err != nil {
			return nil, err
		}
		if !utf8.ValidString(ref.GetSessionId()) || !utf8.ValidString(ref.GetCommitmentHash()) {
			return nil, errors.New("cmthash: supersedes holds a string that is not valid UTF-8")
		}
		out["supersedes"] = map[string]any{
			"session_id":      ref.GetSessionId(),
			"commitment_hash": ref.GetCommitmentHash(),
		}
	}
	return out, nil
}

// checkShape fails with ErrCannotVerify when m has unknown fields or a
// populated field numbered above maxField.
func checkShape(m protoreflect.Message, maxField protoreflect.FieldNumber, what string) error {
	if len(m.GetUnknown()) > 0 {
		return fmt.Errorf("%w (%s carries unknown fields)", ErrCannotVerify, what)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Number() > maxField {
			err = fmt.Errorf("%w (%s field %s = %d)", ErrCannotVerify, what, fd.Name(), fd.Number())
			return false
		}
		return true
	})
	return err
}

// Canonical returns C: the RFC 8785 (JCS) UTF-8 bytes of p's projection.
func Canonical(p *macpv1.CommitmentPayload) ([]byte, error) {
	proj, err := Projection(p)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(proj); err != nil {
		return nil, fmt.Errorf("cmthash: %w", err)
	}
	c, err := jcs.Transform(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err != nil {
		return nil, fmt.Errorf("cmthash: canonicalization: %w", err)
	}
	return c, nil
}

// Preimage returns P = "macp-commitment-hash/1:" || C (RFC-MACP-0013 §4
// step 3).
func Preimage(p *macpv1.CommitmentPayload) ([]byte, error) {
	c, err := Canonical(p)
	if err != nil {
		return nil, err
	}
	return append([]byte(Label+":"), c...), nil
}

// Hash returns the canonical commitment hash of p: "sha256:" followed by
// the 64 lowercase hex characters of SHA-256 of its preimage.
func Hash(p *macpv1.CommitmentPayload) (string, error) {
	pre, err := Preimage(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pre)
	return Prefix + hex.EncodeToString(sum[:]), nil
}

// Verify recomputes p's hash and compares it with claimed: nil when equal,
// an error matching ErrMismatch when p is hashable and the values differ,
// an error matching ErrCannotVerify when p is outside the label's field
// set.
func Verify(p *macpv1.CommitmentPayload, claimed string) error {
	got, err := Hash(p)
	if err != nil {
		return err
	}
	if got != claimed {
		return fmt.Errorf("%w: computed %s, claimed %q", ErrMismatch, got, claimed)
	}
	return nil
}
