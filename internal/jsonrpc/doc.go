// Package jsonrpc is a small JSON-RPC 2.0 dispatcher shared by the
// WebSocket binding (/macp/ws, one request per text message) and
// POST /macp/rpc (one request per body): it parses one request, calls the registered method and
// encodes the response. It does no I/O and starts no goroutines; a
// transport reads messages, calls Dispatcher.Handle, and writes what it
// returns.
//
// Batches (JSON arrays) are refused with -32600: MACP needs per-session
// order, which one request per message keeps obvious. A request without
// "id" is a notification and gets no response, even on error.
package jsonrpc
