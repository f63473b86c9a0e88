package policy

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/macpd/macpd/internal/coord"
)

// Rule schema versions this runtime evaluates (RFC-MACP-0012 §3, §8). A
// stored policy is evaluated under the version it declares, forever.
//
//   - 1: the April rule schemas (schemas/json/policy/*-rules.schema.json).
//   - 2: adds the Decision Mode decline-gating knobs
//     commitment.allow_decline_over_approval and
//     objection_handling.critical_objection_action (additive).
//   - 3: the same keys as 2; Decision Mode voting algorithms are binding on
//     an empty decisive tally (fail-closed), where 1 and 2 keep the legacy
//     fail-open rule (RFC-MACP-0012 §4.1 "Empty tally").
const (
	MinSchemaVersion uint32 = 1
	MaxSchemaVersion uint32 = 3
)

// Standard mode ids whose rule schemas this package knows (RFC-MACP-0012
// §4.1-4.5). The strings are the modes' ids; the policy package does not
// import the modes.
const (
	modeDecision = "macp.mode.decision.v1"
	modeQuorum   = "macp.mode.quorum.v1"
	modeProposal = "macp.mode.proposal.v1"
	modeTask     = "macp.mode.task.v1"
	modeHandoff  = "macp.mode.handoff.v1"
)

// node is one object of a rule schema: its known keys, each a nested
// object (non-nil) or a value (nil); free means any key is allowed (a map
// such as voting.weights).
type node struct {
	keys map[string]*node
	free bool
}

func obj(kv ...any) *node {
	n := &node{keys: map[string]*node{}}
	for i := 0; i < len(kv); i += 2 {
		var child *node
		if kv[i+1] != nil {
			child = kv[i+1].(*node)
		}
		n.keys[kv[i].(string)] = child
	}
	return n
}

var freeMap = &node{free: true}

func commitmentNode(extra ...any) *node {
	return obj(append([]any{"authority", nil, "designated_roles", nil}, extra...)...)
}

// ruleSchema returns the key tree of mode's rules at version, or nil when
// the mode declares no schema (extension modes accept any rules,
// RFC-MACP-0012 §4.6). Mode "*" accepts the union of the standard modes'
// keys at that version.
func ruleSchema(mode string, version uint32) *node {
	switch mode {
	case modeDecision:
		objection := obj("critical_severity_vetoes", nil, "veto_threshold", nil)
		commitment := commitmentNode("require_vote_quorum", nil)
		if version >= 2 {
			objection.keys["critical_objection_action"] = nil
			commitment.keys["allow_decline_over_approval"] = nil
		}
		return obj(
			"voting", obj("algorithm", nil, "threshold", nil, "quorum", obj("type", nil, "value", nil), "weights", freeMap),
			"objection_handling", objection,
			"evaluation", obj("minimum_confidence", nil, "required_before_voting", nil),
			"commitment", commitment,
		)
	case modeQuorum:
		// threshold.weights is macpd's (the schema's "weighted" threshold
		// type names participant weights but gives them no key).
		return obj(
			"threshold", obj("type", nil, "value", nil, "weights", freeMap),
			"abstention", obj("counts_toward_quorum", nil, "interpretation", nil),
			"commitment", commitmentNode(),
		)
	case modeProposal:
		return obj(
			"acceptance", obj("criterion", nil),
			"counter_proposal", obj("max_rounds", nil),
			"rejection", obj("terminal_on_any_reject", nil),
			"commitment", commitmentNode(),
		)
	case modeTask:
		return obj(
			"assignment", obj("allow_reassignment_on_reject", nil),
			"completion", obj("require_output", nil),
			"commitment", commitmentNode(),
		)
	case modeHandoff:
		return obj(
			"acceptance", obj("implicit_accept_timeout_ms", nil),
			"commitment", commitmentNode(),
		)
	case "*":
		u := obj()
		for _, m := range []string{modeDecision, modeQuorum, modeProposal, modeTask, modeHandoff} {
			merge(u, ruleSchema(m, version))
		}
		return u
	}
	return nil
}

func merge(into, from *node) {
	if from.free {
		into.free = true
	}
	for k, c := range from.keys {
		have, ok := into.keys[k]
		switch {
		case !ok:
			if c != nil {
				cp := obj()
				merge(cp, c)
				c = cp
			}
			into.keys[k] = c
		case have != nil && c != nil:
			merge(have, c)
		}
	}
}

// RuleKeys returns the known top-level sections of mode's rules at
// version, sorted, and whether the mode declares a rule schema.
func RuleKeys(mode string, version uint32) ([]string, bool) {
	n := ruleSchema(mode, version)
	if n == nil {
		return nil, false
	}
	return slices.Sorted(maps.Keys(n.keys)), true
}

// CheckRuleKeys refuses, with INVALID_POLICY_DEFINITION, a rules document
// that uses a key its mode's rule schema at version does not define, at
// any depth (e.g. {"votin":{...}} or {"voting":{"algoritm":...}}). The
// error names the key's path and lists the known keys at that level.
// Rules of a mode without a schema (extensions) are not checked; a value
// that is not an object where the schema has one is left to the mode's
// own decoding. rules must be a JSON object.
func CheckRuleKeys(mode string, version uint32, rules string) error {
	root := ruleSchema(mode, version)
	if root == nil {
		return nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rules), &doc); err != nil || doc == nil {
		return coord.Errorf(coord.CodeInvalidPolicyDefinition, "rules must be a JSON object")
	}
	return checkKeys(root, doc, "", mode, version)
}

func checkKeys(n *node, doc map[string]json.RawMessage, path, mode string, version uint32) error {
	if n.free {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) { // sorted: same error every time
		child, ok := n.keys[k]
		if !ok {
			where := "rules"
			if path != "" {
				where = path
			}
			return coord.Errorf(coord.CodeInvalidPolicyDefinition,
				"unknown key %q in %s (%s rules, schema_version %d); known keys: %s",
				strings.TrimPrefix(path+"."+k, "."), where, mode, version,
				strings.Join(slices.Sorted(maps.Keys(n.keys)), ", "))
		}
		raw := bytes.TrimSpace(doc[k])
		if child == nil || len(raw) == 0 || raw[0] != '{' {
			continue
		}
		var sub map[string]json.RawMessage
		if json.Unmarshal(raw, &sub) != nil {
			continue
		}
		if err := checkKeys(child, sub, strings.TrimPrefix(path+"."+k, "."), mode, version); err != nil {
			return err
		}
	}
	return nil
}
