package sdk

import (
	"encoding/json"
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// ext.multi_round.v1 phases as projected.
const PhaseCollecting = "Collecting"

// MultiRoundProjection is the state of an ext.multi_round.v1 session:
// each declared participant's current value.
type MultiRoundProjection struct {
	SessionView
	// Values maps a participant to its latest contributed value.
	Values map[string]string
	// Round counts contributions that changed a value; Contributions
	// counts all of them.
	Round, Contributions int
}

// NewMultiRoundProjection returns an empty projection.
func NewMultiRoundProjection() *MultiRoundProjection {
	return &MultiRoundProjection{Values: map[string]string{}}
}

// Apply folds one accepted envelope.
func (p *MultiRoundProjection) Apply(env *macpv1.Envelope) error {
	if p.Values == nil {
		p.Values = map[string]string{}
	}
	done, err := p.begin(MultiRoundMode, env)
	if err != nil || done {
		return err
	}
	if env.MessageType != TypeContribute {
		return unknownType(env)
	}
	var m struct {
		Value *string `json:"value"`
	}
	if err := json.Unmarshal(env.Payload, &m); err != nil || m.Value == nil {
		return fmt.Errorf("sdk: projection: Contribute payload is not {\"value\": string}")
	}
	p.Contributions++
	if old, ok := p.Values[env.Sender]; !ok || old != *m.Value {
		p.Values[env.Sender] = *m.Value
		p.Round++
	}
	p.Messages++
	return nil
}

// Converged reports whether every declared participant holds the same
// value, and which.
func (p *MultiRoundProjection) Converged() (value string, ok bool) {
	if len(p.Participants) == 0 {
		return "", false
	}
	for i, id := range p.Participants {
		v, has := p.Values[id]
		if !has || (i > 0 && v != value) {
			return "", false
		}
		value = v
	}
	return value, true
}

// Phase is Collecting, Converged or Committed.
func (p *MultiRoundProjection) Phase() string {
	switch _, ok := p.Converged(); {
	case p.Resolved():
		return PhaseCommitted
	case ok:
		return PhaseConverged
	}
	return PhaseCollecting
}

// Eligible reports which Commitment outcomes the mode allows now: either,
// once converged.
func (p *MultiRoundProjection) Eligible() (positive, negative bool) {
	_, ok := p.Converged()
	ok = ok && p.Accepting()
	return ok, ok
}
