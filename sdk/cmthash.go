package sdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// CommitmentHashLabel is the RFC-MACP-0013 domain-separation label of the
// canonical commitment hash.
const CommitmentHashLabel = "macp-commitment-hash/1"

// ErrCannotHash is returned (wrapped) by [CommitmentHash] for a payload
// carrying something outside the fields the macp-commitment-hash/1 label
// covers (a newer field, or unknown fields): its hash cannot be computed
// under this label (RFC-MACP-0013 §5, §6).
var ErrCannotHash = errors.New("sdk: payload outside the macp-commitment-hash/1 field set")

// CommitmentHash returns the canonical hash of a Commitment payload,
// "sha256:" and 64 lowercase hex digits (RFC-MACP-0013): SHA-256 of
// "macp-commitment-hash/1:" followed by the RFC 8785 (JCS) serialization
// of the payload's nine fields by their proto names. The seven strings and
// outcome_positive are always present; supersedes is present exactly when
// set ({session_id, commitment_hash}, also when both are empty). The
// payload need not be well-formed to be hashed.
func CommitmentHash(c *macpv1.CommitmentPayload) (string, error) {
	pre, err := commitmentPreimage(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pre)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// commitmentPreimage returns label ":" JCS(projection).
func commitmentPreimage(c *macpv1.CommitmentPayload) ([]byte, error) {
	if c == nil {
		return nil, errors.New("sdk: CommitmentHash: nil payload")
	}
	if err := hashableShape(c.ProtoReflect(), 9, "CommitmentPayload"); err != nil {
		return nil, err
	}
	type kv struct {
		k string
		v string // already serialized JSON
	}
	var fields []kv
	for _, f := range []struct{ k, v string }{
		{"commitment_id", c.CommitmentId}, {"action", c.Action}, {"authority_scope", c.AuthorityScope},
		{"reason", c.Reason}, {"mode_version", c.ModeVersion}, {"policy_version", c.PolicyVersion},
		{"configuration_version", c.ConfigurationVersion},
	} {
		s, err := jcsString(f.k, f.v)
		if err != nil {
			return nil, err
		}
		fields = append(fields, kv{f.k, s})
	}
	fields = append(fields, kv{"outcome_positive", strconv.FormatBool(c.OutcomePositive)})
	if ref := c.Supersedes; ref != nil {
		if err := hashableShape(ref.ProtoReflect(), 2, "supersedes"); err != nil {
			return nil, err
		}
		h, err := jcsString("supersedes.commitment_hash", ref.CommitmentHash)
		if err != nil {
			return nil, err
		}
		sid, err := jcsString("supersedes.session_id", ref.SessionId)
		if err != nil {
			return nil, err
		}
		// JCS order: commitment_hash sorts before session_id.
		fields = append(fields, kv{"supersedes", `{"commitment_hash":` + h + `,"session_id":` + sid + `}`})
	}
	// Every key is ASCII, so byte order is JCS's UTF-16 code unit order.
	sort.Slice(fields, func(i, j int) bool { return fields[i].k < fields[j].k })
	var b strings.Builder
	b.WriteString(CommitmentHashLabel + ":{")
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + f.k + `":` + f.v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// hashableShape refuses unknown fields and populated fields numbered above
// maxField.
func hashableShape(m protoreflect.Message, maxField protoreflect.FieldNumber, what string) error {
	if len(m.GetUnknown()) > 0 {
		return fmt.Errorf("%w (%s carries unknown fields)", ErrCannotHash, what)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Number() > maxField {
			err = fmt.Errorf("%w (%s field %s = %d)", ErrCannotHash, what, fd.Name(), fd.Number())
			return false
		}
		return true
	})
	return err
}

// jcsString serializes s as an RFC 8785 §3.2.2.2 string: the short
// escapes for '"', '\\', \b, \f, \n, \r and \t, \u00xx (lowercase hex)
// for the other control characters, everything else as UTF-8.
func jcsString(field, s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("sdk: CommitmentHash: %s is not valid UTF-8", field)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// CommitmentRefOf returns the reference a later Commitment puts in its
// supersedes field to supersede prior, the accepted Commitment of session
// sessionID (RFC-MACP-0001 §7.3.1): the session id and prior's canonical
// hash.
func CommitmentRefOf(sessionID string, prior *macpv1.CommitmentPayload) (*macpv1.CommitmentRef, error) {
	h, err := CommitmentHash(prior)
	if err != nil {
		return nil, err
	}
	return &macpv1.CommitmentRef{SessionId: sessionID, CommitmentHash: h}, nil
}

// CommitOption adjusts the Commitment [Session.Commit] sends.
type CommitOption func(ctx context.Context, c *macpv1.CommitmentPayload) error

// Supersedes makes the Commitment supersede prior, the accepted Commitment
// of another session priorSessionID (RFC-MACP-0001 §7.3.1): it sets
// supersedes to priorSessionID and prior's canonical hash
// ([CommitmentHash]). The runtime checks the reference's shape only;
// whether it names a real commitment is the consumers' concern.
func Supersedes(priorSessionID string, prior *macpv1.CommitmentPayload) CommitOption {
	return func(_ context.Context, c *macpv1.CommitmentPayload) error {
		ref, err := CommitmentRefOf(priorSessionID, prior)
		if err != nil {
			return err
		}
		c.Supersedes = ref
		return nil
	}
}

// SupersedesHash is [Supersedes] for a prior Commitment known only by its
// hash ("sha256:<64 hex>").
func SupersedesHash(priorSessionID, commitmentHash string) CommitOption {
	return func(_ context.Context, c *macpv1.CommitmentPayload) error {
		c.Supersedes = &macpv1.CommitmentRef{SessionId: priorSessionID, CommitmentHash: commitmentHash}
		return nil
	}
}

// SupersedesSession is [Supersedes] for the Commitment that resolved
// session priorSessionID, read with the client from its history (the
// caller must be able to see that session).
func SupersedesSession(cl *Client, priorSessionID string) CommitOption {
	return func(ctx context.Context, c *macpv1.CommitmentPayload) error {
		prior, err := cl.ResolvingCommitment(ctx, priorSessionID)
		if err != nil {
			return err
		}
		return Supersedes(priorSessionID, prior)(ctx, c)
	}
}

// ResolvingCommitment returns the Commitment payload that resolved
// session sessionID, read from its accepted history (a subscription from
// sequence 0). A session that is not RESOLVED is an error naming its
// state.
func (c *Client) ResolvingCommitment(ctx context.Context, sessionID string) (*macpv1.CommitmentPayload, error) {
	md, err := c.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED {
		return nil, fmt.Errorf("sdk: session %s is %s: only a RESOLVED session has a Commitment to supersede", sessionID, md.GetState())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := c.Subscribe(ctx, sessionID, 0)
	defer sub.Close()
	for {
		ev, err := sub.Next()
		if err != nil {
			return nil, fmt.Errorf("sdk: reading the Commitment of session %s: %w", sessionID, err)
		}
		if ev.Envelope.GetMessageType() == TypeCommitment {
			var p macpv1.CommitmentPayload
			if err := proto.Unmarshal(ev.Envelope.GetPayload(), &p); err != nil {
				return nil, fmt.Errorf("sdk: Commitment of session %s: %w", sessionID, err)
			}
			return &p, nil
		}
	}
}
