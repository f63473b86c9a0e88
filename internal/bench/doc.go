// Package bench is the home of macpd's benchmark and load tooling, kept
// apart from the product: nothing outside internal/bench, cmd/macpbench,
// cmd/echo-bench, cmd/disksync and the tests imports it (internal/lint
// checks it).
//
//   - loadgen: the load generator (macpbench load, check-acked): unary
//     Sends and pipelined StreamSession envelopes, and the echo and
//     durable-echo ceilings (cmd/echo-bench);
//   - benchrec: recovery benchmark data and measurement (macpbench
//     recovery);
//   - datasync: fdatasync for the disk and floor benchmarks.
package bench
