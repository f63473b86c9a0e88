package gen_test

// These tests keep three things in lock-step without needing protoc:
//
//   - proto/**.proto, compiled in-process with protocompile,
//   - the descriptors embedded in the committed generated code under gen/,
//   - the MACP spec's own .proto files at the pinned commit (a golden
//     compiled from them; the spec itself with make spec or MACP_SPEC_PROTO_DIR).
//
// proto/ holds two trees: macp/ (the protocol, wire-identical to the spec)
// and macpd/ (macpd's internal formats, e.g. the store's records). The
// source/generated drift check covers both; the spec-identity checks
// (TestMatchesSpecProtos, TestWireIdentity) cover macp/ only.

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	storev1 "github.com/macpd/macpd/gen/macpd/store/v1"
	"github.com/macpd/macpd/internal/testutil"
)

// protoDir holds our .proto sources, relative to this package directory.
const protoDir = "../proto"

// macpPrefix selects the MACP files among everything a compile or the registry holds.
const macpPrefix = "macp/"

// internalPrefix selects macpd's internal formats (not part of the spec).
const internalPrefix = "macpd/"

// ourPrefixes are every tree of proto/ that gen/ is generated from.
var ourPrefixes = []string{macpPrefix, internalPrefix}

func hasAnyPrefix(s string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

// compileDir compiles every .proto file under dir (import paths relative to
// dir) whose path starts with one of prefixes, and returns the normalised
// descriptors of those files, by path.
func compileDir(t *testing.T, dir string, prefixes ...string) map[string]*descriptorpb.FileDescriptorProto {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); hasAnyPrefix(rel, prefixes) {
			names = append(names, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", dir, err)
	}
	if len(names) == 0 {
		t.Fatalf("no .proto files under %s/%v", dir, prefixes)
	}
	sort.Strings(names)
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{dir}}),
		SourceInfoMode: protocompile.SourceInfoNone,
	}
	files, err := c.Compile(context.Background(), names...)
	if err != nil {
		t.Fatalf("compiling %s: %v", dir, err)
	}
	out := make(map[string]*descriptorpb.FileDescriptorProto, len(files))
	for _, f := range files {
		if hasAnyPrefix(f.Path(), prefixes) {
			out[f.Path()] = normalize(protodesc.ToFileDescriptorProto(f))
		}
	}
	return out
}

// registeredFiles returns the normalised descriptors that the generated Go
// packages registered in protoregistry.GlobalFiles under prefixes, by path.
func registeredFiles(t *testing.T, prefixes ...string) map[string]*descriptorpb.FileDescriptorProto {
	t.Helper()
	out := map[string]*descriptorpb.FileDescriptorProto{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if hasAnyPrefix(fd.Path(), prefixes) {
			out[fd.Path()] = normalize(protodesc.ToFileDescriptorProto(fd))
		}
		return true
	})
	for _, p := range prefixes {
		if !slices.ContainsFunc(sortedKeys(out), func(k string) bool { return strings.HasPrefix(k, p) }) {
			t.Fatalf("no %s files registered by the generated packages", p)
		}
	}
	return out
}

// normalize drops what may legitimately differ between a source compile and
// the generated code: source info (comments, positions) and Go package naming.
func normalize(fdp *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	fdp = proto.Clone(fdp).(*descriptorpb.FileDescriptorProto)
	fdp.SourceCodeInfo = nil
	if o := fdp.Options; o != nil {
		o.GoPackage = nil
		if proto.Size(o) == 0 {
			fdp.Options = nil
		}
	}
	return fdp
}

// TestGeneratedCodeMatchesProtoSources fails when proto/ was edited without
// running `make generate`, or the generated code was edited by hand.
func TestGeneratedCodeMatchesProtoSources(t *testing.T) {
	src := compileDir(t, protoDir, ourPrefixes...)
	gen := registeredFiles(t, ourPrefixes...)
	for _, p := range sortedKeys(src) {
		if _, ok := gen[p]; !ok {
			t.Errorf("%s: no generated Go code registers this file (run `make generate` and import its package in drift_test.go)", p)
		}
	}
	for _, p := range sortedKeys(gen) {
		s, ok := src[p]
		if !ok {
			t.Errorf("%s: registered by generated code but missing from %s (stale gen/?)", p, protoDir)
			continue
		}
		for _, d := range diffFiles("proto source", s, "generated code", gen[p]) {
			t.Errorf("%s: %s (run `make generate`)", p, d)
		}
	}
}

// TestProtoSourcesHaveNoFileOptions keeps our descriptors option-free like the
// spec's: Go packages are mapped with protoc M flags instead of go_package.
func TestProtoSourcesHaveNoFileOptions(t *testing.T) {
	var names []string
	err := filepath.WalkDir(protoDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
			names = append(names, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "option ") {
				t.Errorf("%s:%d: file/message options are not allowed (keep descriptors identical to the spec): %s", n, i+1, strings.TrimSpace(line))
			}
		}
	}
	for p, f := range compileDir(t, protoDir, ourPrefixes...) {
		if f.Options != nil {
			t.Errorf("%s: compiled descriptor has file options: %v", p, f.Options)
		}
	}
}

// TestGoPackages pins the Go import paths and package names of the generated code.
func TestGoPackages(t *testing.T) {
	const base = "github.com/macpd/macpd/gen/macp/"
	for _, tc := range []struct {
		v       any
		pkgPath string
		file    protoreflect.FileDescriptor
		path    string
	}{
		{macpv1.Envelope{}, base + "v1", macpv1.File_macp_v1_envelope_proto, "macp/v1/envelope.proto"},
		{macpv1.InitializeRequest{}, base + "v1", macpv1.File_macp_v1_core_proto, "macp/v1/core.proto"},
		{macpv1.PolicyDescriptor{}, base + "v1", macpv1.File_macp_v1_policy_proto, "macp/v1/policy.proto"},
		{decisionv1.VotePayload{}, base + "modes/decision/v1", decisionv1.File_macp_modes_decision_v1_decision_proto, "macp/modes/decision/v1/decision.proto"},
		{proposalv1.ProposalPayload{}, base + "modes/proposal/v1", proposalv1.File_macp_modes_proposal_v1_proposal_proto, "macp/modes/proposal/v1/proposal.proto"},
		{taskv1.TaskRequestPayload{}, base + "modes/task/v1", taskv1.File_macp_modes_task_v1_task_proto, "macp/modes/task/v1/task.proto"},
		{handoffv1.HandoffOfferPayload{}, base + "modes/handoff/v1", handoffv1.File_macp_modes_handoff_v1_handoff_proto, "macp/modes/handoff/v1/handoff.proto"},
		{quorumv1.ApprovalRequestPayload{}, base + "modes/quorum/v1", quorumv1.File_macp_modes_quorum_v1_quorum_proto, "macp/modes/quorum/v1/quorum.proto"},
		// macpd's internal formats.
		{storev1.Record{}, "github.com/macpd/macpd/gen/macpd/store/v1", storev1.File_macpd_store_v1_record_proto, "macpd/store/v1/record.proto"},
	} {
		if got := reflect.TypeOf(tc.v).PkgPath(); got != tc.pkgPath {
			t.Errorf("%T: Go import path %q, want %q", tc.v, got, tc.pkgPath)
		}
		if got := tc.file.Path(); got != tc.path {
			t.Errorf("%T: descriptor path %q, want %q", tc.v, got, tc.path)
		}
	}
}

// wantField is one spec-critical field, checked against the generated code.
type wantField struct {
	field    protoreflect.FullName // message full name + "." + field name
	number   protoreflect.FieldNumber
	kind     protoreflect.Kind
	repeated bool
	typeName protoreflect.FullName // message or enum type; for maps, the value message/enum if any
	mapKV    [2]protoreflect.Kind  // key and value kinds of a map field
	oneof    protoreflect.Name
}

const (
	str    = protoreflect.StringKind
	byt    = protoreflect.BytesKind
	msg    = protoreflect.MessageKind
	enm    = protoreflect.EnumKind
	i64    = protoreflect.Int64Kind
	u32    = protoreflect.Uint32Kind
	u64    = protoreflect.Uint64Kind
	boolK  = protoreflect.BoolKind
	double = protoreflect.DoubleKind
)

var wireTable = []wantField{
	{field: "macp.v1.Envelope.macp_version", number: 1, kind: str},
	{field: "macp.v1.Envelope.mode", number: 2, kind: str},
	{field: "macp.v1.Envelope.message_type", number: 3, kind: str},
	{field: "macp.v1.Envelope.message_id", number: 4, kind: str},
	{field: "macp.v1.Envelope.session_id", number: 5, kind: str},
	{field: "macp.v1.Envelope.sender", number: 6, kind: str},
	{field: "macp.v1.Envelope.timestamp_unix_ms", number: 7, kind: i64},
	{field: "macp.v1.Envelope.payload", number: 8, kind: byt},
	{field: "macp.v1.Ack.session_state", number: 6, kind: enm, typeName: "macp.v1.SessionState"},
	{field: "macp.v1.Ack.error", number: 7, kind: msg, typeName: "macp.v1.MACPError"},
	{field: "macp.v1.Capabilities.policy_registry", number: 7, kind: msg, typeName: "macp.v1.PolicyRegistryCapability"},
	{field: "macp.v1.Capabilities.experimental", number: 100, kind: msg, typeName: "macp.v1.ExperimentalCapabilities"},
	{field: "macp.v1.ExperimentalCapabilities.features", number: 1, kind: msg, repeated: true, mapKV: [2]protoreflect.Kind{str, str}},
	{field: "macp.v1.InitializeRequest.supported_protocol_versions", number: 1, kind: str, repeated: true},
	{field: "macp.v1.SessionStartPayload.ttl_ms", number: 6, kind: i64},
	{field: "macp.v1.SessionStartPayload.roots", number: 7, kind: msg, repeated: true, typeName: "macp.v1.Root"},
	{field: "macp.v1.SessionStartPayload.context_id", number: 8, kind: str},
	{field: "macp.v1.SessionStartPayload.extensions", number: 9, kind: msg, repeated: true, mapKV: [2]protoreflect.Kind{str, byt}},
	{field: "macp.v1.SessionCancelPayload.cancelled_by", number: 2, kind: str},
	{field: "macp.v1.CommitmentPayload.outcome_positive", number: 8, kind: boolK},
	{field: "macp.v1.ParticipantActivity.last_message_at_unix_ms", number: 2, kind: i64},
	{field: "macp.v1.ParticipantActivity.message_count", number: 3, kind: u32},
	{field: "macp.v1.SessionMetadata.state", number: 3, kind: enm, typeName: "macp.v1.SessionState"},
	{field: "macp.v1.SessionMetadata.participant_activity", number: 10, kind: msg, repeated: true, typeName: "macp.v1.ParticipantActivity"},
	{field: "macp.v1.SessionMetadata.initiator", number: 11, kind: str},
	{field: "macp.v1.SessionMetadata.context_id", number: 12, kind: str},
	{field: "macp.v1.SessionMetadata.extension_keys", number: 13, kind: str, repeated: true},
	{field: "macp.v1.StreamSessionRequest.envelope", number: 1, kind: msg, typeName: "macp.v1.Envelope"},
	{field: "macp.v1.StreamSessionRequest.subscribe_session_id", number: 2, kind: str},
	{field: "macp.v1.StreamSessionRequest.after_sequence", number: 3, kind: u64},
	{field: "macp.v1.StreamSessionResponse.envelope", number: 1, kind: msg, typeName: "macp.v1.Envelope", oneof: "response"},
	{field: "macp.v1.StreamSessionResponse.error", number: 2, kind: msg, typeName: "macp.v1.MACPError", oneof: "response"},
	{field: "macp.v1.SessionLifecycleEvent.event_type", number: 1, kind: enm, typeName: "macp.v1.SessionLifecycleEvent.EventType"},
	{field: "macp.v1.ModeDescriptor.schema_uris", number: 9, kind: msg, repeated: true, mapKV: [2]protoreflect.Kind{str, str}},
	{field: "macp.v1.PolicyDescriptor.rules", number: 4, kind: str},
	{field: "macp.v1.PolicyDescriptor.schema_version", number: 5, kind: u32},
	{field: "macp.v1.PolicyDescriptor.registered_at_unix_ms", number: 6, kind: i64},
	{field: "macp.v1.WatchPoliciesResponse.descriptors", number: 1, kind: msg, repeated: true, typeName: "macp.v1.PolicyDescriptor"},
	{field: "macp.modes.decision.v1.EvaluationPayload.confidence", number: 3, kind: double},
	{field: "macp.modes.decision.v1.ProposalPayload.supporting_data", number: 4, kind: byt},
	{field: "macp.modes.proposal.v1.ProposalPayload.tags", number: 5, kind: str, repeated: true},
	{field: "macp.modes.proposal.v1.RejectPayload.terminal", number: 2, kind: boolK},
	{field: "macp.modes.task.v1.TaskRequestPayload.deadline_unix_ms", number: 6, kind: i64},
	{field: "macp.modes.task.v1.TaskUpdatePayload.progress", number: 3, kind: double},
	{field: "macp.modes.task.v1.TaskFailPayload.retryable", number: 5, kind: boolK},
	{field: "macp.modes.handoff.v1.HandoffContextPayload.context", number: 3, kind: byt},
	{field: "macp.modes.quorum.v1.ApprovalRequestPayload.required_approvals", number: 5, kind: u32},
}

var wantEnums = map[protoreflect.FullName][]string{
	"macp.v1.SessionState": {
		"SESSION_STATE_UNSPECIFIED", "SESSION_STATE_OPEN", "SESSION_STATE_RESOLVED", "SESSION_STATE_EXPIRED",
	},
	"macp.v1.SessionLifecycleEvent.EventType": {
		"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATED", "EVENT_TYPE_RESOLVED", "EVENT_TYPE_EXPIRED",
	},
}

// wantMethods is MACPRuntimeService in declaration order: name, client streaming, server streaming.
var wantMethods = []struct {
	name           protoreflect.Name
	client, server bool
}{
	{"Initialize", false, false},
	{"Send", false, false},
	{"StreamSession", true, true},
	{"GetSession", false, false},
	{"CancelSession", false, false},
	{"GetManifest", false, false},
	{"ListModes", false, false},
	{"WatchModeRegistry", false, true},
	{"ListRoots", false, false},
	{"WatchRoots", false, true},
	{"ListExtModes", false, false},
	{"RegisterExtMode", false, false},
	{"UnregisterExtMode", false, false},
	{"PromoteMode", false, false},
	{"WatchSignals", false, true},
	{"ListSessions", false, false},
	{"WatchSessions", false, true},
	{"RegisterPolicy", false, false},
	{"UnregisterPolicy", false, false},
	{"GetPolicy", false, false},
	{"ListPolicies", false, false},
	{"WatchPolicies", false, true},
}

// TestWireIdentity checks the generated code against a hard-coded table of
// spec-critical field numbers, types, enums and the RPC surface.
func TestWireIdentity(t *testing.T) {
	for _, w := range wireTable {
		msgName, fieldName := w.field.Parent(), w.field.Name()
		md, err := protoregistry.GlobalFiles.FindDescriptorByName(msgName)
		if err != nil {
			t.Errorf("%s: message not registered: %v", msgName, err)
			continue
		}
		fd := md.(protoreflect.MessageDescriptor).Fields().ByName(fieldName)
		if fd == nil {
			t.Errorf("%s: no such field", w.field)
			continue
		}
		if fd.Number() != w.number {
			t.Errorf("%s: number %d, want %d", w.field, fd.Number(), w.number)
		}
		if fd.Kind() != w.kind {
			t.Errorf("%s: kind %v, want %v", w.field, fd.Kind(), w.kind)
		}
		if got := fd.Cardinality() == protoreflect.Repeated; got != w.repeated {
			t.Errorf("%s: repeated=%v, want %v", w.field, got, w.repeated)
		}
		if fd.HasPresence() && fd.ContainingOneof() == nil && fd.Kind() != msg {
			t.Errorf("%s: unexpected explicit presence (proto3 optional?)", w.field)
		}
		var typeName protoreflect.FullName
		switch {
		case fd.IsMap():
		case fd.Message() != nil:
			typeName = fd.Message().FullName()
		case fd.Enum() != nil:
			typeName = fd.Enum().FullName()
		}
		if typeName != w.typeName {
			t.Errorf("%s: type %q, want %q", w.field, typeName, w.typeName)
		}
		isMap := w.mapKV != [2]protoreflect.Kind{}
		if fd.IsMap() != isMap {
			t.Errorf("%s: map=%v, want %v", w.field, fd.IsMap(), isMap)
		} else if isMap {
			if got := [2]protoreflect.Kind{fd.MapKey().Kind(), fd.MapValue().Kind()}; got != w.mapKV {
				t.Errorf("%s: map<%v, %v>, want map<%v, %v>", w.field, got[0], got[1], w.mapKV[0], w.mapKV[1])
			}
		}
		var oneof protoreflect.Name
		if o := fd.ContainingOneof(); o != nil {
			oneof = o.Name()
		}
		if oneof != w.oneof {
			t.Errorf("%s: oneof %q, want %q", w.field, oneof, w.oneof)
		}
	}

	for name, values := range wantEnums {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			t.Errorf("%s: enum not registered: %v", name, err)
			continue
		}
		ev := d.(protoreflect.EnumDescriptor).Values()
		if ev.Len() != len(values) {
			t.Errorf("%s: %d values, want %d", name, ev.Len(), len(values))
		}
		for i, v := range values {
			if got := ev.ByNumber(protoreflect.EnumNumber(i)); got == nil || string(got.Name()) != v {
				t.Errorf("%s: value %d is %v, want %s", name, i, got, v)
			}
		}
	}

	sd, err := protoregistry.GlobalFiles.FindDescriptorByName("macp.v1.MACPRuntimeService")
	if err != nil {
		t.Fatalf("service not registered: %v", err)
	}
	methods := sd.(protoreflect.ServiceDescriptor).Methods()
	if methods.Len() != 22 || len(wantMethods) != 22 {
		t.Errorf("MACPRuntimeService has %d methods, want 22", methods.Len())
	}
	for i := 0; i < methods.Len() && i < len(wantMethods); i++ {
		m, w := methods.Get(i), wantMethods[i]
		if m.Name() != w.name || m.IsStreamingClient() != w.client || m.IsStreamingServer() != w.server {
			t.Errorf("method %d: %s(client stream=%v, server stream=%v), want %s(%v, %v)",
				i, m.Name(), m.IsStreamingClient(), m.IsStreamingServer(), w.name, w.client, w.server)
		}
		wantIn := protoreflect.FullName("macp.v1." + string(w.name) + "Request")
		wantOut := protoreflect.FullName("macp.v1." + string(w.name) + "Response")
		if in, out := m.Input().FullName(), m.Output().FullName(); in != wantIn || out != wantOut {
			t.Errorf("method %s: %s -> %s, want macp.v1.%sRequest -> macp.v1.%sResponse", m.Name(), in, out, w.name, w.name)
		}
	}
	// The gRPC method names used on the wire.
	if got, want := macpv1.MACPRuntimeService_StreamSession_FullMethodName, "/macp.v1.MACPRuntimeService/StreamSession"; got != want {
		t.Errorf("StreamSession full method name %q, want %q", got, want)
	}
}

// specGolden is the spec's macp/ protos at testutil.SpecCommit, compiled
// and normalised (a FileDescriptorSet in text form, sorted by path): the
// spec's wire contract without its comments, so the comparison below runs
// on every machine, CI included. Regenerate it from a spec checkout with
// `make spec && go test ./gen -run TestMatchesSpecProtos -update-spec-golden`.
const specGolden = "testdata/spec-protos.txtpb"

var updateSpecGolden = flag.Bool("update-spec-golden", false, "rewrite "+specGolden+" from the spec's protos (needs make spec or MACP_SPEC_PROTO_DIR)")

func readSpecGolden(t *testing.T) map[string]*descriptorpb.FileDescriptorProto {
	t.Helper()
	raw, err := os.ReadFile(specGolden)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := prototext.Unmarshal(raw, &set); err != nil {
		t.Fatalf("%s: %v", specGolden, err)
	}
	out := make(map[string]*descriptorpb.FileDescriptorProto, len(set.File))
	for _, f := range set.File {
		out[f.GetName()] = f
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no file", specGolden)
	}
	return out
}

func writeSpecGolden(t *testing.T, files map[string]*descriptorpb.FileDescriptorProto) {
	t.Helper()
	var set descriptorpb.FileDescriptorSet
	for _, p := range sortedKeys(files) {
		set.File = append(set.File, files[p])
	}
	b, err := prototext.MarshalOptions{Multiline: true}.Marshal(&set)
	if err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("# The MACP spec's macp/ protos at %s, compiled and normalised (gen/drift_test.go).\n", testutil.SpecCommit)
	if err := os.WriteFile(specGolden, append([]byte(head), b...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// compareFiles reports every difference between the reference files and
// ours, file by file.
func compareFiles(t *testing.T, label string, ref, ours map[string]*descriptorpb.FileDescriptorProto, oursLabel string) {
	t.Helper()
	for _, p := range sortedKeys(ref) {
		o, ok := ours[p]
		if !ok {
			t.Errorf("%s: in %s but not in %s", p, label, oursLabel)
			continue
		}
		for _, d := range diffFiles(label, ref[p], oursLabel, o) {
			t.Errorf("%s: %s", p, d)
		}
	}
	for _, p := range sortedKeys(ours) {
		if _, ok := ref[p]; !ok {
			t.Errorf("%s: in %s but not in %s", p, oursLabel, label)
		}
	}
}

// TestMatchesSpecProtos compares our .proto files with the MACP spec's at
// the pinned commit, element by element: with the pinned golden always,
// and, when a spec checkout is at hand (make spec, or MACP_SPEC_PROTO_DIR),
// also the golden with the spec itself.
func TestMatchesSpecProtos(t *testing.T) {
	ours := compileDir(t, protoDir, macpPrefix)
	if dir := testutil.SpecProtoDir(t); dir != "" {
		spec := compileDir(t, dir, macpPrefix)
		if *updateSpecGolden {
			writeSpecGolden(t, spec)
		}
		compareFiles(t, "the spec at "+dir, spec, readSpecGolden(t), specGolden)
		compareFiles(t, "the spec at "+dir, spec, ours, protoDir)
	} else if *updateSpecGolden {
		t.Fatal("-update-spec-golden needs the spec's protos: run make spec or set " + testutil.SpecProtoDirEnv)
	} else {
		t.Logf("no spec checkout at hand: comparing with %s (pinned at %s)", specGolden, testutil.SpecCommit[:7])
	}
	compareFiles(t, specGolden, readSpecGolden(t), ours, protoDir)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// diffFiles describes every difference between two normalised file
// descriptors, "want" being the reference. It reports element by element
// (messages, fields, enums, services, methods), then falls back to a whole
// descriptor comparison so that nothing it does not itemise can slip through.
func diffFiles(wantLabel string, want *descriptorpb.FileDescriptorProto, gotLabel string, got *descriptorpb.FileDescriptorProto) []string {
	d := differ{want: wantLabel, got: gotLabel}
	d.eq("package", want.GetPackage(), got.GetPackage())
	d.eq("syntax", want.GetSyntax(), got.GetSyntax())
	d.eq("edition", want.GetEdition(), got.GetEdition())
	d.eq("imports", want.GetDependency(), got.GetDependency())
	d.eq("public imports", want.GetPublicDependency(), got.GetPublicDependency())
	d.opts("file options", want.GetOptions(), got.GetOptions())
	prefix := want.GetPackage()
	named(&d, "message", prefix, want.GetMessageType(), got.GetMessageType(), (*descriptorpb.DescriptorProto).GetName, d.message)
	named(&d, "enum", prefix, want.GetEnumType(), got.GetEnumType(), (*descriptorpb.EnumDescriptorProto).GetName, d.enum)
	named(&d, "service", prefix, want.GetService(), got.GetService(), (*descriptorpb.ServiceDescriptorProto).GetName, d.service)
	named(&d, "extension", prefix, want.GetExtension(), got.GetExtension(), (*descriptorpb.FieldDescriptorProto).GetName,
		func(where string, w, g *descriptorpb.FieldDescriptorProto) { d.field(where, w, g, nil, nil) })
	if len(d.diffs) == 0 && !proto.Equal(want, got) {
		d.add("descriptors differ outside the itemised elements:\n%s: %s\n%s: %s",
			d.want, prototext.Format(want), d.got, prototext.Format(got))
	}
	return d.diffs
}

type differ struct {
	want, got string // labels for the two sides
	diffs     []string
}

func (d *differ) add(format string, args ...any) {
	d.diffs = append(d.diffs, fmt.Sprintf(format, args...))
}

func (d *differ) eq(what string, want, got any) {
	if !reflect.DeepEqual(want, got) {
		d.add("%s: %s has %v, %s has %v", what, d.got, got, d.want, want)
	}
}

func (d *differ) opts(what string, want, got proto.Message) {
	if !proto.Equal(want, got) {
		d.add("%s: %s has %v, %s has %v", what, d.got, got, d.want, want)
	}
}

// named matches two declaration lists by name, reporting missing and extra
// elements and declaration-order changes, and compares matched pairs with each.
func named[T any](d *differ, kind, prefix string, want, got []T, name func(T) string, each func(where string, w, g T)) {
	index := func(xs []T) (map[string]T, []string) {
		m := make(map[string]T, len(xs))
		var order []string
		for _, x := range xs {
			m[name(x)] = x
			order = append(order, name(x))
		}
		return m, order
	}
	wm, worder := index(want)
	gm, gorder := index(got)
	var common []string
	for _, n := range worder {
		if g, ok := gm[n]; ok {
			common = append(common, n)
			each(prefix+"."+n, wm[n], g)
		} else {
			d.add("%s %s.%s: missing from %s", kind, prefix, n, d.got)
		}
	}
	for _, n := range gorder {
		if _, ok := wm[n]; !ok {
			d.add("%s %s.%s: only in %s, not in %s", kind, prefix, n, d.got, d.want)
		}
	}
	gcommon := slices.DeleteFunc(slices.Clone(gorder), func(n string) bool { _, ok := wm[n]; return !ok })
	if !slices.Equal(common, gcommon) {
		d.add("%s declaration order in %s: %s has %v, %s has %v", kind, prefix, d.got, gcommon, d.want, common)
	}
}

func (d *differ) message(where string, w, g *descriptorpb.DescriptorProto) {
	oneofName := func(m *descriptorpb.DescriptorProto) func(*descriptorpb.FieldDescriptorProto) string {
		return func(f *descriptorpb.FieldDescriptorProto) string {
			if f.OneofIndex == nil {
				return ""
			}
			return m.GetOneofDecl()[f.GetOneofIndex()].GetName()
		}
	}
	wOneof, gOneof := oneofName(w), oneofName(g)
	named(d, "field", where, w.GetField(), g.GetField(), (*descriptorpb.FieldDescriptorProto).GetName,
		func(fw string, wf, gf *descriptorpb.FieldDescriptorProto) { d.field(fw, wf, gf, wOneof, gOneof) })
	named(d, "oneof", where, w.GetOneofDecl(), g.GetOneofDecl(), (*descriptorpb.OneofDescriptorProto).GetName,
		func(ow string, a, b *descriptorpb.OneofDescriptorProto) {
			d.opts(ow+" options", a.GetOptions(), b.GetOptions())
		})
	named(d, "nested message", where, w.GetNestedType(), g.GetNestedType(), (*descriptorpb.DescriptorProto).GetName, d.message)
	named(d, "nested enum", where, w.GetEnumType(), g.GetEnumType(), (*descriptorpb.EnumDescriptorProto).GetName, d.enum)
	named(d, "nested extension", where, w.GetExtension(), g.GetExtension(), (*descriptorpb.FieldDescriptorProto).GetName,
		func(fw string, wf, gf *descriptorpb.FieldDescriptorProto) { d.field(fw, wf, gf, nil, nil) })
	d.opts(where+" options", w.GetOptions(), g.GetOptions())
	d.eq(where+" reserved names", w.GetReservedName(), g.GetReservedName())
	if !slices.EqualFunc(w.GetReservedRange(), g.GetReservedRange(), func(a, b *descriptorpb.DescriptorProto_ReservedRange) bool { return proto.Equal(a, b) }) ||
		!slices.EqualFunc(w.GetExtensionRange(), g.GetExtensionRange(), func(a, b *descriptorpb.DescriptorProto_ExtensionRange) bool { return proto.Equal(a, b) }) {
		d.add("%s: reserved or extension ranges differ between %s and %s", where, d.got, d.want)
	}
}

func (d *differ) field(where string, w, g *descriptorpb.FieldDescriptorProto, wOneof, gOneof func(*descriptorpb.FieldDescriptorProto) string) {
	d.eq(where+" number", w.GetNumber(), g.GetNumber())
	d.eq(where+" type", w.GetType(), g.GetType())
	d.eq(where+" label", w.GetLabel(), g.GetLabel())
	d.eq(where+" type_name", w.GetTypeName(), g.GetTypeName())
	d.eq(where+" extendee", w.GetExtendee(), g.GetExtendee())
	d.eq(where+" json_name", w.GetJsonName(), g.GetJsonName())
	d.eq(where+" default", w.GetDefaultValue(), g.GetDefaultValue())
	d.eq(where+" proto3_optional", w.GetProto3Optional(), g.GetProto3Optional())
	if wOneof != nil && gOneof != nil {
		d.eq(where+" oneof", wOneof(w), gOneof(g))
	}
	d.opts(where+" options", w.GetOptions(), g.GetOptions())
}

func (d *differ) enum(where string, w, g *descriptorpb.EnumDescriptorProto) {
	named(d, "enum value", where, w.GetValue(), g.GetValue(), (*descriptorpb.EnumValueDescriptorProto).GetName,
		func(vw string, wv, gv *descriptorpb.EnumValueDescriptorProto) {
			d.eq(vw+" number", wv.GetNumber(), gv.GetNumber())
			d.opts(vw+" options", wv.GetOptions(), gv.GetOptions())
		})
	d.opts(where+" options", w.GetOptions(), g.GetOptions())
	d.eq(where+" reserved names", w.GetReservedName(), g.GetReservedName())
}

func (d *differ) service(where string, w, g *descriptorpb.ServiceDescriptorProto) {
	named(d, "method", where, w.GetMethod(), g.GetMethod(), (*descriptorpb.MethodDescriptorProto).GetName,
		func(mw string, wm, gm *descriptorpb.MethodDescriptorProto) {
			d.eq(mw+" input", wm.GetInputType(), gm.GetInputType())
			d.eq(mw+" output", wm.GetOutputType(), gm.GetOutputType())
			d.eq(mw+" client_streaming", wm.GetClientStreaming(), gm.GetClientStreaming())
			d.eq(mw+" server_streaming", wm.GetServerStreaming(), gm.GetServerStreaming())
			d.opts(mw+" options", wm.GetOptions(), gm.GetOptions())
		})
	d.opts(where+" options", w.GetOptions(), g.GetOptions())
}
