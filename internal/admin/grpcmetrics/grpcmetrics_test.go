package grpcmetrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gather returns name{labels} -> value for the registry's macpd_grpc_*
// series (histograms: their sample count).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += fmt.Sprintf(",%s=%s", lp.GetName(), lp.GetValue())
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func newRegistered(t testing.TB) (*Metrics, *prometheus.Registry) {
	m := New()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestUnaryCountsByMethodAndCode(t *testing.T) {
	m, reg := newRegistered(t)
	call := func(method string, err error) {
		info := &grpc.UnaryServerInfo{FullMethod: method}
		resp, got := m.UnaryServerInterceptor(context.Background(), "req", info, func(context.Context, any) (any, error) {
			if err != nil {
				return nil, err
			}
			return "resp", nil
		})
		if got != err || (err == nil && resp != "resp") {
			t.Fatalf("interceptor changed the result: %v %v", resp, got)
		}
	}
	call("/s/A", nil)
	call("/s/A", nil)
	call("/s/A", status.Error(codes.Unauthenticated, "who"))
	call("/s/B", fmt.Errorf("wrapped: %w", status.Error(codes.ResourceExhausted, "slow down")))
	call("/s/B", context.DeadlineExceeded) // grpc-go sends DeadlineExceeded for it
	call("/s/B", errors.New("plain"))      // and Unknown for this
	call("/s/B", status.Error(codes.Code(99), "odd"))
	got := gather(t, reg)
	want := map[string]float64{
		"macpd_grpc_requests_total,code=OK,method=/s/A":                1 + 1,
		"macpd_grpc_requests_total,code=Unauthenticated,method=/s/A":   1,
		"macpd_grpc_requests_total,code=ResourceExhausted,method=/s/B": 1,
		"macpd_grpc_requests_total,code=DeadlineExceeded,method=/s/B":  1,
		"macpd_grpc_requests_total,code=Unknown,method=/s/B":           1,
		"macpd_grpc_requests_total,code=Code(99),method=/s/B":          1,
		"macpd_grpc_request_duration_seconds,method=/s/A":              3,
		"macpd_grpc_request_duration_seconds,method=/s/B":              4,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("unexpected series (only codes that occurred, no stream gauges for unary methods):\n%v", got)
	}
}

type fakeStream struct{ grpc.ServerStream }

func TestStreamActiveAndCounted(t *testing.T) {
	m, reg := newRegistered(t)
	info := &grpc.StreamServerInfo{FullMethod: "/s/Watch", IsServerStream: true}
	release := make(chan error)
	running := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.StreamServerInterceptor(nil, fakeStream{}, info, func(any, grpc.ServerStream) error {
				running <- struct{}{}
				return <-release
			})
			_ = err
		}()
	}
	<-running
	<-running
	if got := gather(t, reg)["macpd_grpc_streams_active,method=/s/Watch"]; got != 2 {
		t.Fatalf("streams_active = %v, want 2", got)
	}
	release <- nil
	release <- status.Error(codes.Canceled, "client left")
	wg.Wait()
	got := gather(t, reg)
	want := map[string]float64{
		"macpd_grpc_streams_active,method=/s/Watch":               0,
		"macpd_grpc_requests_total,code=OK,method=/s/Watch":       1,
		"macpd_grpc_requests_total,code=Canceled,method=/s/Watch": 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("unexpected series (no histogram for streams):\n%v", got)
	}
}

// Concurrent first calls of a method resolve one set of children.
func TestConcurrentFirstCalls(t *testing.T) {
	m, reg := newRegistered(t)
	info := &grpc.UnaryServerInfo{FullMethod: "/s/Hot"}
	h := func(context.Context, any) (any, error) { return nil, nil }
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = m.UnaryServerInterceptor(context.Background(), nil, info, h)
			}
		}()
	}
	wg.Wait()
	if got := gather(t, reg)["macpd_grpc_requests_total,code=OK,method=/s/Hot"]; got != 1600 {
		t.Fatalf("requests_total = %v, want 1600", got)
	}
}

// The per-call cost: no allocation once a method's children exist.
func TestNoAllocationPerCall(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m, _ := newRegistered(t)
	uinfo := &grpc.UnaryServerInfo{FullMethod: "/s/A"}
	sinfo := &grpc.StreamServerInfo{FullMethod: "/s/W"}
	uh := func(context.Context, any) (any, error) { return nil, nil }
	sh := func(any, grpc.ServerStream) error { return nil }
	ctx := context.Background()
	ss := &fakeStream{} // a pointer: boxing a struct value would allocate in the test itself
	if n := testing.AllocsPerRun(1000, func() { _, _ = m.UnaryServerInterceptor(ctx, nil, uinfo, uh) }); n != 0 {
		t.Errorf("unary: %v allocations per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = m.StreamServerInterceptor(nil, ss, sinfo, sh) }); n != 0 {
		t.Errorf("stream: %v allocations per call", n)
	}
}

func BenchmarkUnaryInterceptor(b *testing.B) {
	m, _ := newRegistered(b)
	info := &grpc.UnaryServerInfo{FullMethod: "/macp.v1.MACPRuntimeService/Send"}
	h := func(context.Context, any) (any, error) { return nil, nil }
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = m.UnaryServerInterceptor(ctx, nil, info, h)
		}
	})
}
