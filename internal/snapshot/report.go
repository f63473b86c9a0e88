package snapshot

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaVersion and ReportVersion are the report's fixed version fields.
const (
	SchemaVersion = "session_state_window_v1"
	ReportVersion = "1"
	// Method is the canonicalization the snapshot id uses.
	Method = "canonical_json_sha256"
)

// Report is a session_state_window_v1 report (Assay ADR-029), exactly the
// vendored schema's shape.
type Report struct {
	SchemaVersion Class          `json:"schema_version"`
	ReportVersion Class          `json:"report_version"`
	Session       Key            `json:"session"`
	Window        ReportWindow   `json:"window"`
	Snapshot      ReportSnapshot `json:"snapshot"`
	Privacy       ReportPrivacy  `json:"privacy"`
}

// ReportWindow is the report's window: kind and decay runs only.
type ReportWindow struct {
	Kind      Class `json:"window_kind"`
	DecayRuns int   `json:"decay_runs,omitempty"`
}

// ReportSnapshot carries the id and the content address of the payload.
type ReportSnapshot struct {
	StateSnapshotID  Hash             `json:"state_snapshot_id"`
	Canonicalization Canonicalization `json:"canonicalization"`
	// ContentsRef is the content address ("sha256:<hex>") under which the
	// payload's canonical bytes are stored and served; never a path.
	ContentsRef Hash `json:"contents_ref"`
}

// Canonicalization names the id's method.
type Canonicalization struct {
	Method Class `json:"method"`
}

// ReportPrivacy asserts what the payload does not hold.
type ReportPrivacy struct {
	StoresRawToolArgs       bool  `json:"stores_raw_tool_args"`
	StoresRawPromptBodies   bool  `json:"stores_raw_prompt_bodies"`
	StoresRawDocumentBodies bool  `json:"stores_raw_document_bodies"`
	Notes                   Class `json:"notes"`
}

var _ = []Class{class(Method), class(SchemaVersion), class(ReportVersion)}

// Privacy notes, one per profile.
var (
	notesDefault = class("macpd profile default: ids, names, classes, counts and SHA-256 payload hashes only")
	notesStrict  = class("macpd profile strict: ids, names, classes and counts only, no payload hashes")
)

// NewReport builds the report of a sealed payload.
func NewReport(s Sealed) Report {
	p := s.Payload
	notes := notesDefault
	if p.PrivacyProfile == ProfileStrict {
		notes = notesStrict
	}
	return Report{
		SchemaVersion: SchemaVersion,
		ReportVersion: ReportVersion,
		Session:       p.Session,
		Window:        ReportWindow{Kind: p.Window.Kind, DecayRuns: p.Window.DecayRuns},
		Snapshot: ReportSnapshot{
			StateSnapshotID:  s.ID,
			Canonicalization: Canonicalization{Method: Class(Method)},
			ContentsRef:      s.ID,
		},
		Privacy: ReportPrivacy{Notes: notes},
	}
}

// Bytes returns the report's RFC 8785 JSON after validating it against
// the vendored schema; a report that does not validate is never returned.
func (r Report) Bytes() ([]byte, error) {
	if err := Validate(r); err != nil {
		return nil, err
	}
	b, err := canonicalJSON(r)
	if err != nil {
		return nil, err
	}
	if err := ValidateReportJSON(b); err != nil {
		return nil, err
	}
	return b, nil
}

//go:embed schema/session_state_window_v1.schema.json
var schemaJSON []byte

const schemaURL = "https://assay.dev/schemas/session_state_window_v1.schema.json"

// schema is the vendored schema, compiled once when the package is
// initialized (a pure package takes no lock: the compiled schema is only
// read afterwards, and Validate is safe for concurrent use).
var schema, schemaErr = compileSchema()

func compileSchema() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaURL)
}

// ValidateReportJSON checks JSON text against the vendored
// session_state_window_v1 schema.
func ValidateReportJSON(b []byte) error {
	sch, err := schema, schemaErr
	if err != nil {
		return fmt.Errorf("snapshot: compiling the vendored schema: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("snapshot: report is not JSON: %w", err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("snapshot: report does not match session_state_window_v1: %w", err)
	}
	return nil
}
