// Package policy holds governance policies (RFC-MACP-0012) as pure values:
// the descriptor bound to a session at SessionStart, its parsed rules, and
// the checks the session core runs when a Commitment arrives.
//
// Contract: no clock, no I/O, no goroutines. A Policy is immutable once
// parsed; sessions keep the exact descriptor they were bound to, so a later
// registry change never affects them (RFC-MACP-0012 §6.1) and replay
// evaluates the same rules (RFC-MACP-0003 §3).
//
// Rule schema versions 1, 2 and 3 are accepted and a policy is evaluated
// under the version it declares (RFC-MACP-0012 §8); schema.go holds each
// standard mode's rule keys per version, and a document using any other
// key is refused (CheckRuleKeys; at registration for every version, at
// binding for 2 and 3). docs/policies.md is the reference.
package policy
