// Package admin is macpd's optional admin HTTP endpoint, served on its own
// listener (MACP_ADMIN_ADDR, --admin-addr) next to the gRPC one:
//
//	GET /metrics        Prometheus text exposition of the registry given to New
//	GET /healthz        200 "ok" while the endpoint serves: a liveness probe
//	                    (readiness is gRPC health, grpc.health.v1)
//	/debug/pprof/...    the Go profiler (net/http/pprof), only when
//	                    MACP_ADMIN_PPROF (--admin-pprof) is on
//
// Other paths are 404, other methods on /metrics and /healthz 405. In
// macpd the registry holds the Go runtime (go_*), process (process_*),
// gRPC server (macpd_grpc_*, package grpcmetrics), runtime (macpd_commit_*,
// macpd_sessions_*, macpd_followers, macpd_store_append_seconds; package
// runtime's Metrics) and, with the durable store, Pebble (macpd_store_*,
// pebblestore.Store.Collector) collectors and promhttp's own
// promhttp_metric_handler_*; app.App.Metrics returns it for further
// collectors.
//
// The endpoint is plaintext and unauthenticated, so it belongs on loopback
// or a private interface; metrics are harmless, but profiles and goroutine
// dumps expose the process's internals, which is why the profiler is off
// unless asked for. Loopback reports whether a listener is on loopback,
// for the startup warning.
//
// The routes live on the Server's own http.ServeMux, never on
// http.DefaultServeMux. (Importing net/http/pprof adds its handlers to
// http.DefaultServeMux as a side effect; macpd never serves that mux.)
//
// The http.Server has header, read, write and idle timeouts (the
// constants in admin.go); recent net/http/pprof releases extend the write
// deadline of a CPU profile or trace by its requested duration.
//
// New only builds the handler; Serve serves a listener the caller bound,
// Shutdown stops it (in-flight requests finish until its context ends,
// then connections are closed).
package admin
