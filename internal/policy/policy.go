package policy

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/macpd/macpd/internal/coord"
)

// Descriptor mirrors macp.v1.PolicyDescriptor without the runtime-set
// registration time, which never influences evaluation (RFC-MACP-0012 §6.3:
// policy equality is id + schema_version + rules).
type Descriptor struct {
	ID            string
	Mode          string // a mode id, or "*"
	Description   string
	Rules         string // JSON object text
	SchemaVersion uint32
}

// Default is the always-registered policy.default: no constraints beyond the
// modes' own rules (RFC-MACP-0012 §4).
func Default() Descriptor {
	return Descriptor{
		ID:            coord.DefaultPolicyID,
		Mode:          "*",
		Description:   "Default policy: no additional governance constraints; mode rules apply.",
		Rules:         "{}",
		SchemaVersion: 1,
	}
}

// Authority values of commitment.authority (RFC-MACP-0012 §5).
const (
	AuthorityInitiatorOnly  = "initiator_only"
	AuthorityAnyParticipant = "any_participant"
	AuthorityDesignatedRole = "designated_role"
)

// CommitmentRules is the mode-independent commitment section every rule
// schema shares.
type CommitmentRules struct {
	Authority       string   `json:"authority"`
	DesignatedRoles []string `json:"designated_roles"`
}

// Policy is a parsed, validated descriptor. Mode-specific sections are kept
// as raw JSON for the mode that owns them to decode (see Section).
type Policy struct {
	Descriptor Descriptor
	Commitment CommitmentRules
	sections   map[string]json.RawMessage
}

// Parse validates a descriptor's common structure and returns the Policy:
// schema_version 1, 2 or 3, rules a JSON object, the commitment section,
// and for versions 2 and 3 no key outside the mode's rule schema
// (CheckRuleKeys). Errors carry INVALID_POLICY_DEFINITION.
func Parse(d Descriptor) (*Policy, error) {
	if d.ID == "" {
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy_id is required")
	}
	if d.SchemaVersion < MinSchemaVersion || d.SchemaVersion > MaxSchemaVersion {
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "unsupported schema_version %d (supported: 1, 2, 3)", d.SchemaVersion)
	}
	rules := d.Rules
	if rules == "" {
		rules = "{}"
	}
	var sections map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rules), &sections); err != nil || sections == nil {
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "rules must be a JSON object")
	}
	// Decision: schema_version 2 and 3 rules are checked for unknown keys
	// wherever they are parsed; version 1 rules only at registration
	// (CheckRegistration), because April runtimes accepted any key and a
	// session bound to such a stored v1 policy must still replay
	// (RFC-MACP-0012 §8; docs/spec-decisions.md "Policy rule schemas").
	if d.SchemaVersion >= 2 {
		if err := CheckRuleKeys(d.Mode, d.SchemaVersion, rules); err != nil {
			return nil, err
		}
	}
	p := &Policy{Descriptor: d, sections: sections}
	p.Commitment.Authority = AuthorityInitiatorOnly
	if raw, ok := sections["commitment"]; ok {
		if err := json.Unmarshal(raw, &p.Commitment); err != nil {
			return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "commitment: %v", err)
		}
		switch p.Commitment.Authority {
		case "":
			p.Commitment.Authority = AuthorityInitiatorOnly
		case AuthorityInitiatorOnly, AuthorityAnyParticipant:
		case AuthorityDesignatedRole:
			if len(p.Commitment.DesignatedRoles) == 0 {
				return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "commitment.designated_roles is required for designated_role")
			}
		default:
			return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "unknown commitment.authority %q", p.Commitment.Authority)
		}
	}
	return p, nil
}

// MustDefault returns the parsed default policy.
func MustDefault() *Policy {
	p, err := Parse(Default())
	if err != nil {
		panic(err)
	}
	return p
}

// SchemaVersion is the rule schema version the policy is evaluated under.
func (p *Policy) SchemaVersion() uint32 { return p.Descriptor.SchemaVersion }

// Section returns the raw JSON of a top-level rules section, or nil.
func (p *Policy) Section(name string) json.RawMessage {
	return p.sections[name]
}

// DecodeSection decodes the top-level rules section name into into (a
// pointer to a struct). An absent or null section leaves into untouched and
// is not an error; anything but a JSON object, or a value json.Unmarshal
// refuses, is INVALID_POLICY_DEFINITION naming the section. Modes use it
// to read their own sections (RFC-MACP-0012 §4).
func (p *Policy) DecodeSection(name string, into any) error {
	raw := bytes.TrimSpace(p.Section(name))
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition, "%s must be an object", name)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition, "%s: %v", name, err)
	}
	return nil
}

// MayCommit reports whether sender holds commitment authority in a session
// with the given initiator and declared participants (RFC-MACP-0012 §5,
// MODE-4: the default authority is the initiator).
func (p *Policy) MayCommit(sender, initiator string, participants []string) bool {
	switch p.Commitment.Authority {
	case AuthorityAnyParticipant:
		return sender == initiator || slices.Contains(participants, sender)
	case AuthorityDesignatedRole:
		return slices.Contains(p.Commitment.DesignatedRoles, sender)
	default:
		return sender == initiator
	}
}

// Lookup resolves policy ids for SessionStart. Implementations live in the
// shell (the policy registry); the core only reads.
type Lookup interface {
	// Policy returns the descriptor registered under id.
	Policy(id string) (Descriptor, bool)
}

// Lister is implemented by Lookups that can enumerate their policies (a
// runtime lists its built-in policies with it).
type Lister interface {
	// Policies returns every descriptor the Lookup resolves.
	Policies() []Descriptor
}

// DefaultOnly is a Lookup that knows only policy.default.
type DefaultOnly struct{}

// Policies implements Lister.
func (DefaultOnly) Policies() []Descriptor { return []Descriptor{Default()} }

// Policy implements Lookup.
func (DefaultOnly) Policy(id string) (Descriptor, bool) {
	if id == coord.DefaultPolicyID {
		return Default(), true
	}
	return Descriptor{}, false
}
