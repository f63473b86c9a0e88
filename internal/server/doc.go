// Package server binds the runtime to transports. grpc.go implements
// macp.v1.MACPRuntimeService (RFC-MACP-0006 §3) over internal/runtime:
// it authenticates each call (internal/auth), converts between the wire
// types and the core, and maps MACP error codes to gRPC status codes at the
// edge.
//
// Error surfaces: Send reports rejections inside SendResponse.ack with gRPC
// OK (RFC-MACP-0006 §3.1). Every other RPC reports failure as a gRPC
// status whose message starts with the MACP code ("SESSION_NOT_FOUND: ...")
// and whose details carry a macp.v1.MACPError with the code, so clients can
// branch on the code without parsing text. Code mapping: the gRPC column of
// coord's code table (grpcCode). The
// only failures without a MACP code are an Initialize without versions
// (INVALID_ARGUMENT) and GetManifest for an unknown agent (NOT_FOUND),
// which the error registry has no code for.
//
// Initialize advertises exactly what this build implements; an RPC it
// did not implement would answer UNIMPLEMENTED and not be advertised
// (today every RPC of the service is implemented).
//
// Shutdown: call Service.Drain before grpc.Server.GracefulStop. Watch
// streams never end on their own, so without Drain GracefulStop waits for
// every connected watcher; Drain ends them with UNAVAILABLE.
package server
