// Package bench is the home of macpd's benchmark and load tooling, kept
// apart from the product: nothing outside internal/bench, cmd/echo-bench,
// cmd/disksync, the benchmark commands of macpctl and the tests imports
// it (internal/lint checks it).
//
//   - loadgen: the load generator (macpctl load, check-acked) and the
//     echo and durable-echo ceilings (cmd/echo-bench);
//   - benchrec: recovery benchmark data and measurement (macpctl
//     bench-recovery);
//   - datasync: fdatasync for the disk and floor benchmarks.
package bench
