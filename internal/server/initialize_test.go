package server_test

import (
	"context"
	"slices"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// INIT-2/INIT-3 (RFC-MACP-0001 §4.1, §4.3): the runtime picks "1.0" from a
// list that also offers versions it does not speak, in any position.
func TestInitializeSelectsOneDotZero(t *testing.T) {
	e := startApp(t, testConfig())
	for _, offer := range [][]string{{"1.0"}, {"2.0", "1.0"}, {"1.0", "0.9"}, {"3.1", "2.0", "1.0", "0.1"}} {
		r, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: offer})
		if err != nil {
			t.Fatalf("offer %v: %v", offer, err)
		}
		if r.SelectedProtocolVersion != "1.0" {
			t.Errorf("offer %v: selected %q", offer, r.SelectedProtocolVersion)
		}
	}
}

// INIT-2 (RFC-MACP-0001 §4.1 "MUST fail with UNSUPPORTED_PROTOCOL_VERSION";
// transport mapping [RT]: FAILED_PRECONDITION, message prefixed by the code)
// and ERR-20 (the code travels in a MACPError detail).
func TestInitializeNoCommonVersion(t *testing.T) {
	e := startApp(t, testConfig())
	for _, offer := range [][]string{{"2.0"}, {"0.9", "1.1"}, {"1"}, {"1.0.0"}} {
		_, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: offer})
		wantStatus(t, err, codes.FailedPrecondition, "UNSUPPORTED_PROTOCOL_VERSION")
	}
}

// INIT-2 [RT]: an empty version list is a malformed request, INVALID_ARGUMENT.
func TestInitializeEmptyVersionList(t *testing.T) {
	e := startApp(t, testConfig())
	_, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{})
	wantStatus(t, err, codes.InvalidArgument, "")
}

// RFC-MACP-0005 / server.publicMethods: Initialize precedes authentication
// in the SDKs, so it needs no credentials; it works with them too.
func TestInitializeWithoutCredentials(t *testing.T) {
	e := startApp(t, testConfig())
	req := &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"},
		ClientInfo: &macpv1.ClientInfo{Name: "test"}}
	if _, err := e.c.Initialize(context.Background(), req); err != nil {
		t.Fatalf("without credentials: %v", err)
	}
	if _, err := e.c.Initialize(as("alice"), req); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
}

// INIT-5: unknown or unsupported client capabilities never fail
// initialization.
func TestInitializeIgnoresClientCapabilities(t *testing.T) {
	e := startApp(t, testConfig())
	caps := &macpv1.Capabilities{
		Sessions:       &macpv1.SessionsCapability{Stream: true, ListSessions: true, WatchSessions: true},
		Progress:       &macpv1.ProgressCapability{Progress: true},
		PolicyRegistry: &macpv1.PolicyRegistryCapability{RegisterPolicy: true, ListPolicies: true, ListChanged: true},
		Experimental:   &macpv1.ExperimentalCapabilities{Features: map[string]string{"x-unknown": "1"}},
	}
	r, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}, Capabilities: caps})
	if err != nil {
		t.Fatal(err)
	}
	if r.Capabilities.GetProgress().GetProgress() || r.Capabilities.GetExperimental().GetFeatures()["x-unknown"] != "" {
		t.Fatalf("runtime echoed client capabilities: %v", r.Capabilities)
	}
}

// INIT-5/INIT-6 (RFC-MACP-0001 §4.1 "MUST advertise only the capabilities
// they support") and checklist §1 (advertised-by column): exactly what this
// build implements. StreamSession is implemented (sessions.stream = true,
// RFC-MACP-0006 §3.2); the policy registry is implemented (RFC-MACP-0012
// §9: register_policy, list_policies, list_changed; policies_test.go).
func TestInitializeAdvertisesExactlyWhatIsImplemented(t *testing.T) {
	e := startApp(t, testConfig())
	r, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	want := &macpv1.Capabilities{
		Sessions:       &macpv1.SessionsCapability{Stream: true, ListSessions: true, WatchSessions: true},
		Cancellation:   &macpv1.CancellationCapability{CancelSession: true},
		Progress:       &macpv1.ProgressCapability{Progress: false},
		Manifest:       &macpv1.ManifestCapability{GetManifest: true},
		ModeRegistry:   &macpv1.ModeRegistryCapability{ListModes: true, ListChanged: true},
		Roots:          &macpv1.RootsCapability{ListRoots: true, ListChanged: true},
		PolicyRegistry: &macpv1.PolicyRegistryCapability{RegisterPolicy: true, ListPolicies: true, ListChanged: true},
		// checklist RPC-11: the reference runtime's flag for the
		// extension-mode lifecycle RPCs (RFC-MACP-0006 §3.6).
		// The profile new sessions are bound to, the profiles served, and
		// the features added after the April spec (profiles_test.go,
		// docs/spec-decisions.md "Profiles").
		Experimental: &macpv1.ExperimentalCapabilities{Features: map[string]string{
			"ext_mode_lifecycle": "true", "macpd.profile": "2026-04", "macpd.profiles": "2026-04,2026-09",
			"session_suspension": "true", "list_sessions_paging": "true", "commitment_supersedes": "true",
		}},
	}
	if !proto.Equal(r.Capabilities, want) {
		t.Errorf("capabilities\n got %v\nwant %v", r.Capabilities, want)
	}
	if !slices.Contains(r.SupportedModes, decisionMode) {
		t.Errorf("supported_modes %v lacks %s", r.SupportedModes, decisionMode)
	}
	if r.RuntimeInfo.GetName() != "macpd" || r.RuntimeInfo.GetVersion() == "" {
		t.Errorf("runtime_info %v", r.RuntimeInfo)
	}
}
