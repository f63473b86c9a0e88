package loadgen_test

import (
	"context"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/bench/loadgen"
)

// The fan-out measurement (RFC-MACP-0006 §3.2 passive subscribe): every
// subscriber, over several connections and watcher identities, receives
// every envelope; the result counts the deliveries of the measured phase
// and divides the server CPU read around it by them.
func TestRunFanout(t *testing.T) {
	a := startApp(t)
	var cpu time.Duration
	res, err := loadgen.RunFanout(context.Background(), loadgen.FanoutConfig{
		Addr: a.Addr(), Subscribers: loadgen.FanoutPerWatcher + 10, Conns: 4, Senders: 3, Messages: 40, Warmup: 5,
		ServerCPU: func() (time.Duration, error) { cpu += time.Second; return cpu, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	const subs = loadgen.FanoutPerWatcher + 10
	if res.Subscribers != subs || res.Messages != 40 || res.Delivered != 40*subs || res.DeliveriesPerSec <= 0 {
		t.Fatalf("result %+v", res)
	}
	if res.ServerCPUSec != 1 || res.ServerCPUPerDelivery != 1e6/float64(40*subs) {
		t.Fatalf("server CPU %v s, %v µs per delivery; want 1 s over the measured phase", res.ServerCPUSec, res.ServerCPUPerDelivery)
	}
}
