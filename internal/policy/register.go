package policy

import (
	"github.com/macpd/macpd/internal/coord"
)

// Limits of a registered descriptor. The spec sets none; they bound what
// one RegisterPolicy stores and what every SessionStart bound to the
// policy copies into its first history record.
const (
	MaxIDLen          = 256
	MaxDescriptionLen = 4096
	MaxRulesLen       = 64 << 10
)

// ValidID reports whether id is acceptable as a registered policy id: 1 to
// MaxIDLen characters of [A-Za-z0-9._:-], starting with a letter or digit.
// RFC-MACP-0012 §2.1 names the form policy.{namespace}.{name} as a naming
// convention (no MUST; the descriptor schema only requires a non-empty
// string, and the official SDKs' tests register ids such as
// "test-policy-1700000000000"), so the convention is not enforced; the
// character set keeps ids printable, unambiguous in logs and usable as
// store keys.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// CheckRegistration validates a descriptor offered to RegisterPolicy as
// far as it does not depend on the runtime's modes or registry
// (RFC-MACP-0012 §3, §7): id syntax, a target mode, the size limits,
// Parse (rules a JSON object, schema_version supported, the commitment
// section), and at every schema version no key outside the target mode's
// rule schema (CheckRuleKeys; issue 28: a misspelled key used to be
// silently accepted). The caller checks reserved and existing ids and validates the
// rules against the target mode (mode.RulesValidator). Errors carry
// INVALID_POLICY_DEFINITION.
func CheckRegistration(d Descriptor) (*Policy, error) {
	switch {
	case d.ID == "":
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "policy_id is required")
	case !ValidID(d.ID):
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition,
			"policy_id must be 1 to %d characters of [A-Za-z0-9._:-] starting with a letter or digit (convention: policy.{namespace}.{name})", MaxIDLen)
	case d.Mode == "":
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "mode is required (a mode id, or * for any mode)")
	case len(d.Description) > MaxDescriptionLen:
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "description is longer than %d bytes", MaxDescriptionLen)
	case len(d.Rules) > MaxRulesLen:
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "rules are longer than %d bytes", MaxRulesLen)
	case d.Rules == "":
		// The descriptor schema requires rules (an object); "{}" is the
		// way to say "no constraints".
		return nil, coord.Errorf(coord.CodeInvalidPolicyDefinition, "rules are required (a JSON object; {} for none)")
	}
	p, err := Parse(d)
	if err != nil {
		return nil, err
	}
	// Every schema version: no key outside the mode's rule schema (for
	// version 1 this is checked here only; see Parse).
	if err := CheckRuleKeys(d.Mode, d.SchemaVersion, d.Rules); err != nil {
		return nil, err
	}
	return p, nil
}
