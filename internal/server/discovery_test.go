package server_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/server"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
)

// RFC-MACP-0005 §3, §6 and §7.3, checklist OBS-4, DISC-1, DISC-2, DISC-5:
// an empty (or the runtime's own) agent_id asks for the runtime's manifest,
// which carries the required fields (agent_id, description,
// supported_modes, input and output content types) and the gRPC endpoint
// it serves; it needs no credentials.
func TestGetManifestSelf(t *testing.T) {
	cfg := testConfig()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.BindAddr = l.Addr().String()
	l.Close()
	e := startApp(t, cfg)
	for _, id := range []string{"", "macpd"} {
		r, err := e.c.GetManifest(context.Background(), &macpv1.GetManifestRequest{AgentId: id})
		if err != nil {
			t.Fatalf("agent_id %q: %v", id, err)
		}
		m := r.Manifest
		if m.AgentId != "macpd" || m.Description == "" || !slices.Contains(m.SupportedModes, decisionMode) {
			t.Errorf("manifest %v", m)
		}
		if !slices.Equal(m.InputContentTypes, []string{"application/macp-envelope+proto"}) ||
			!slices.Equal(m.OutputContentTypes, []string{"application/macp-envelope+proto"}) {
			t.Errorf("content types %v %v", m.InputContentTypes, m.OutputContentTypes)
		}
		want := &macpv1.TransportEndpoint{Transport: "macp.transport.grpc.v1", Uri: "grpc://" + e.app.Addr(),
			ContentTypes: []string{"application/macp-envelope+proto"}}
		if len(m.TransportEndpoints) != 1 || !proto.Equal(m.TransportEndpoints[0], want) {
			t.Errorf("endpoints %v, want %v", m.TransportEndpoints, want)
		}
	}
}

// RFC-MACP-0005 §6 and DISC-2/DISC-5: a configured endpoint is advertised
// with the registered gRPC transport id and media type.
func TestGetManifestEndpoint(t *testing.T) {
	e, _, _ := startService(t, server.Options{Info: server.Info{Name: "macpd", AgentID: "rt-1", Description: "d",
		Endpoint: "grpc://127.0.0.1:7000"}})
	r, err := e.c.GetManifest(context.Background(), &macpv1.GetManifestRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []*macpv1.TransportEndpoint{{Transport: "macp.transport.grpc.v1", Uri: "grpc://127.0.0.1:7000",
		ContentTypes: []string{"application/macp-envelope+proto"}}}
	if r.Manifest.AgentId != "rt-1" || len(r.Manifest.TransportEndpoints) != 1 || !proto.Equal(r.Manifest.TransportEndpoints[0], want[0]) {
		t.Fatalf("manifest %v", r.Manifest)
	}
}

// RFC-MACP-0005 §7.3: an agent_id the runtime has no manifest for is a
// transport-native not-found.
func TestGetManifestUnknownAgent(t *testing.T) {
	e := startApp(t, testConfig())
	_, err := e.c.GetManifest(as("alice"), &macpv1.GetManifestRequest{AgentId: "someone-else"})
	wantStatus(t, err, codes.NotFound, "")
}

// RFC-MACP-0006 §3.3, checklist OBS-5, DISC-6: ListModes lists only
// standards-track descriptors, Decision among them, each with the fields
// the ModeDescriptor schema requires.
func TestListModes(t *testing.T) {
	e := startApp(t, testConfig())
	r, err := e.c.ListModes(context.Background(), &macpv1.ListModesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var decision *macpv1.ModeDescriptor
	for _, d := range r.Modes {
		if !strings.HasPrefix(d.Mode, "macp.mode.") {
			t.Errorf("ListModes lists non-standard %s", d.Mode)
		}
		if d.ModeVersion == "" || d.Title == "" || d.Description == "" || d.ParticipantModel == "" ||
			!slices.Contains([]string{"structural-only", "semantic-deterministic", "context-frozen", "non-deterministic"}, d.DeterminismClass) ||
			len(d.MessageTypes) == 0 || len(d.TerminalMessageTypes) == 0 {
			t.Errorf("descriptor misses required fields: %v", d)
		}
		if d.Mode == decisionMode {
			decision = d
		}
	}
	d := decision
	if d == nil || d.ModeVersion != "1.0.0" || d.DeterminismClass != "semantic-deterministic" || d.ParticipantModel != "declared" ||
		!slices.Contains(d.MessageTypes, "Vote") || !slices.Equal(d.TerminalMessageTypes, []string{"Commitment"}) {
		t.Fatalf("decision descriptor %v", d)
	}
}

// checklist OBS-7: ListRoots is empty unless roots are configured.
func TestListRoots(t *testing.T) {
	e := startApp(t, testConfig())
	r, err := e.c.ListRoots(context.Background(), &macpv1.ListRootsRequest{})
	if err != nil || len(r.Roots) != 0 {
		t.Fatalf("roots %v %v", r, err)
	}
	roots := []*macpv1.Root{{Uri: "file:///data", Name: "data"}}
	e2, _, _ := startService(t, server.Options{Roots: roots})
	r, err = e2.c.ListRoots(context.Background(), &macpv1.ListRootsRequest{})
	if err != nil || len(r.Roots) != 1 || !proto.Equal(r.Roots[0], roots[0]) {
		t.Fatalf("roots %v %v", r, err)
	}
}

// grpc.health.v1 answers SERVING for the server and the MACP service,
// without credentials (orchestrator probes carry none).
func TestHealth(t *testing.T) {
	e := startApp(t, testConfig())
	h := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", "macp.v1.MACPRuntimeService"} {
		r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check(%q) = %v", svc, r.Status)
		}
	}
	_, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	wantStatus(t, err, codes.NotFound, "")
}

// Server reflection lists macp.v1.MACPRuntimeService (grpcurl, SDK tooling).
func TestReflection(t *testing.T) {
	e := startApp(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range r.GetListServicesResponse().GetService() {
		names = append(names, svc.Name)
	}
	for _, want := range []string{"macp.v1.MACPRuntimeService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	// The service's file descriptor resolves too.
	if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "macp.v1.MACPRuntimeService"}}); err != nil {
		t.Fatal(err)
	}
	r, err = s.Recv()
	if err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file containing symbol: %v %v", r, err)
	}
}
