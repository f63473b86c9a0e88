// Package grpcmetrics counts gRPC server calls for Prometheus: a unary and
// a stream server interceptor pair and the collector that exports what they
// count.
//
//	macpd_grpc_requests_total{method,code}         counter: finished calls, unary and streaming
//	macpd_grpc_request_duration_seconds{method}    histogram: unary call latency
//	macpd_grpc_streams_active{method}              gauge: streaming calls in progress
//
// method is the full gRPC method name ("/macp.v1.MACPRuntimeService/Send");
// code is the gRPC status code the server returns for the call ("OK",
// "Unauthenticated", ...; see Code). A streaming call is counted in
// requests_total when it ends, with the code its handler returned: a watch
// the client cancels usually ends with OK on the server side although the
// client sees Canceled. The method label is bounded by the
// methods registered on the server: grpc-go answers calls to unknown
// methods itself, without running interceptors.
//
// Install the interceptors outermost (grpc.UnaryInterceptor and
// grpc.StreamInterceptor, which grpc-go places before every
// ChainUnaryInterceptor / ChainStreamInterceptor) so that calls rejected
// by authentication or limits are counted too.
//
// Per call, the interceptors do one sync.Map lookup for the method's
// pre-resolved label children (created on the method's first call, and for
// each code on its first occurrence) and no formatting or allocation.
package grpcmetrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DurationBuckets are the upper bounds, in seconds, of
// macpd_grpc_request_duration_seconds: from sub-millisecond reads to the
// 30 s default unary timeout (MACP_UNARY_TIMEOUT_MS).
var DurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics holds the gRPC server metrics. It is a prometheus.Collector:
// register it on a registry, and install UnaryServerInterceptor and
// StreamServerInterceptor on the server. The zero value is not usable; call
// New.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	active   *prometheus.GaugeVec

	unary  sync.Map // full method -> *unaryMethod
	stream sync.Map // full method -> *streamMethod
}

// New returns unregistered metrics.
func New() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "macpd", Subsystem: "grpc", Name: "requests_total",
			Help: "gRPC calls finished, by full method and status code (unary and streaming; a stream counts when it ends).",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "macpd", Subsystem: "grpc", Name: "request_duration_seconds",
			Help:    "Latency of unary gRPC calls, by full method, including calls rejected by authentication or limits.",
			Buckets: DurationBuckets,
		}, []string{"method"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "macpd", Subsystem: "grpc", Name: "streams_active",
			Help: "Streaming gRPC calls in progress, by full method.",
		}, []string{"method"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.duration.Describe(ch)
	m.active.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.duration.Collect(ch)
	m.active.Collect(ch)
}

// numCodes covers the codes grpc-go defines (OK .. Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// codeCounters resolves one method's requests_total children lazily, one
// per code, so that only codes that occurred are exported.
type codeCounters struct {
	method string
	vec    *prometheus.CounterVec
	once   [numCodes]sync.Once
	c      [numCodes]prometheus.Counter
}

func (cc *codeCounters) inc(c codes.Code) {
	if int(c) >= numCodes { // not a code grpc-go defines; rare, resolve each time
		cc.vec.WithLabelValues(cc.method, c.String()).Inc()
		return
	}
	cc.once[c].Do(func() { cc.c[c] = cc.vec.WithLabelValues(cc.method, c.String()) })
	cc.c[c].Inc()
}

type unaryMethod struct {
	codeCounters
	duration prometheus.Observer
}

type streamMethod struct {
	codeCounters
	active prometheus.Gauge
}

func (m *Metrics) unaryFor(method string) *unaryMethod {
	if v, ok := m.unary.Load(method); ok {
		return v.(*unaryMethod)
	}
	um := &unaryMethod{codeCounters: codeCounters{method: method, vec: m.requests}, duration: m.duration.WithLabelValues(method)}
	v, _ := m.unary.LoadOrStore(method, um)
	return v.(*unaryMethod)
}

func (m *Metrics) streamFor(method string) *streamMethod {
	if v, ok := m.stream.Load(method); ok {
		return v.(*streamMethod)
	}
	sm := &streamMethod{codeCounters: codeCounters{method: method, vec: m.requests}, active: m.active.WithLabelValues(method)}
	v, _ := m.stream.LoadOrStore(method, sm)
	return v.(*streamMethod)
}

// UnaryServerInterceptor counts and times unary calls.
func (m *Metrics) UnaryServerInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	um := m.unaryFor(info.FullMethod)
	start := time.Now()
	resp, err := h(ctx, req)
	um.duration.Observe(time.Since(start).Seconds())
	um.inc(Code(err))
	return resp, err
}

// StreamServerInterceptor tracks streaming calls in progress and counts
// them when they end.
func (m *Metrics) StreamServerInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	sm := m.streamFor(info.FullMethod)
	sm.active.Inc()
	err := h(srv, ss)
	sm.active.Dec()
	sm.inc(Code(err))
	return err
}

// Code is the status code grpc-go sends for a handler's error: the error's
// own status, or for an error without one Canceled / DeadlineExceeded for
// context errors and Unknown otherwise.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return status.FromContextError(err).Code()
}
