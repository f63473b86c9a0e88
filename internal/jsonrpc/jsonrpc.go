package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/macpd/macpd/internal/jsonscan"
)

// Version is the only "jsonrpc" value accepted.
const Version = "2.0"

// Standard error codes (JSON-RPC 2.0 §5.1).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Request is one decoded request or notification.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// IsNotification reports whether r expects no response.
func (r *Request) IsNotification() bool { return len(r.ID) == 0 }

// Error is a JSON-RPC error object.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Response is a response object; exactly one of Result and Error is set.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Notification is a server-to-client notification.
type Notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// Handler runs one method. It returns the result or an error; a handler
// that answers later itself (Reply) returns Deferred.
type Handler func(ctx context.Context, req *Request) (any, *Error)

// deferred marks a response the handler sends itself.
type deferred struct{}

// Deferred is returned by a handler that replies later with Reply (so that
// its response is ordered with messages it sends itself).
var Deferred any = deferred{}

// Dispatcher maps method names to handlers. Register before use; Handle
// may then be called concurrently.
type Dispatcher struct {
	methods map[string]Handler
}

// New returns an empty dispatcher.
func New() *Dispatcher { return &Dispatcher{methods: make(map[string]Handler)} }

// Register adds a method.
func (d *Dispatcher) Register(method string, h Handler) { d.methods[method] = h }

// Handle processes one message and returns the encoded response, or nil
// when none is due (a notification, or a Deferred reply).
func (d *Dispatcher) Handle(ctx context.Context, msg []byte) []byte {
	if !utf8.Valid(msg) {
		return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeParseError, Message: "the message is not valid UTF-8"}})
	}
	t := bytes.TrimLeft(msg, " \t\r\n")
	if len(t) > 0 && t[0] == '[' {
		return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeInvalidRequest, Message: "batches are not supported: send one request per message"}})
	}
	// Member names are exact: encoding/json alone would take "Method" for
	// "method" and the last of two "method"s.
	if len(t) > 0 && t[0] == '{' {
		if bad, dup := checkMembers(msg, requestMembers); bad != "" {
			m := "unknown member " + strconv.Quote(bad) + " (member names are case-sensitive: jsonrpc, id, method, params)"
			if dup {
				m = "duplicate member " + strconv.Quote(bad)
			}
			return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeInvalidRequest, Message: m}})
		}
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(msg))
	if err := dec.Decode(&req); err != nil || dec.More() {
		m := "the message is not one JSON-RPC 2.0 request object"
		if err != nil {
			m += ": " + err.Error()
		}
		return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeParseError, Message: m}})
	}
	id := req.ID
	if len(id) == 0 {
		id = null
	}
	if req.JSONRPC != Version || req.Method == "" || !validID(req.ID) {
		if req.IsNotification() && req.JSONRPC == Version {
			return nil
		}
		return encode(Response{JSONRPC: Version, ID: id, Error: &Error{Code: CodeInvalidRequest, Message: `a request needs "jsonrpc": "2.0", a "method" and a string or number "id"`}})
	}
	h, ok := d.methods[req.Method]
	if !ok {
		if req.IsNotification() {
			return nil
		}
		return encode(Response{JSONRPC: Version, ID: id, Error: &Error{Code: CodeMethodNotFound, Message: "unknown method " + req.Method}})
	}
	res, jerr := h(ctx, &req)
	if req.IsNotification() || (jerr == nil && res == Deferred) {
		return nil
	}
	if jerr != nil {
		return encode(Response{JSONRPC: Version, ID: id, Error: jerr})
	}
	return encode(Response{JSONRPC: Version, ID: id, Result: res})
}

var null = json.RawMessage("null")

// validID: absent, a string or a number (JSON-RPC 2.0 §4).
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// Reply encodes the response to a request whose handler returned Deferred;
// nil for a notification, which gets no response.
func Reply(req *Request, result any, err *Error) []byte {
	if req.IsNotification() {
		return nil
	}
	r := Response{JSONRPC: Version, ID: req.ID}
	if err != nil {
		r.Error = err
	} else {
		r.Result = result
	}
	return encode(r)
}

// Notify encodes a notification.
func Notify(method string, params any) []byte {
	return encode(Notification{JSONRPC: Version, Method: method, Params: params})
}

// Params decodes req.Params into dst, a pointer to a struct, strictly:
// member names must equal dst's json tags exactly (case-sensitive; others
// are -32602), a duplicated member is -32600, and a missing params object
// is -32602.
func Params(req *Request, dst any) *Error {
	if len(req.Params) == 0 {
		return &Error{Code: CodeInvalidParams, Message: req.Method + " needs a params object"}
	}
	if p := bytes.TrimLeft(req.Params, " \t\r\n"); len(p) > 0 && p[0] == '{' {
		if bad, dup := checkMembers(p, fieldNames(dst)); bad != "" {
			if dup {
				return &Error{Code: CodeInvalidRequest, Message: "duplicate member " + strconv.Quote(bad) + " in the params of " + req.Method}
			}
			return &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": unknown parameter " + strconv.Quote(bad) + " (names are case-sensitive)"}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(req.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": " + err.Error()}
	}
	return nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeInternalError, Message: "the response could not be encoded"}})
	}
	return b
}

var requestMembers = map[string]bool{"jsonrpc": true, "id": true, "method": true, "params": true}

// checkMembers scans the members of the JSON object b (not nested ones).
// It returns the first name that is not in allowed (a nil allowed takes
// any name) or that occurs twice (dup). Malformed JSON returns "": the
// decoder that follows reports it.
func checkMembers(b []byte, allowed map[string]bool) (bad string, dup bool) {
	// Fast path: a scan of the names without decoding (jsonscan); the
	// token decoder below when the scan cannot tell or there are many.
	var seen [16]string
	n, many := 0, false
	ok := jsonscan.Keys(b, func(raw []byte) bool {
		if n == len(seen) {
			many = true
			return false
		}
		for _, s := range seen[:n] {
			if s == string(raw) {
				bad, dup = s, true
				return false
			}
		}
		name := string(raw)
		if allowed != nil && !allowed[name] {
			bad = name
			return false
		}
		seen[n] = name
		n++
		return true
	})
	if ok && !many {
		return bad, dup
	}
	return checkMembersSlow(b, allowed)
}

func checkMembersSlow(b []byte, allowed map[string]bool) (bad string, dup bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		name, ok := tok.(string)
		if !ok {
			return "", false
		}
		if seen[name] {
			return name, true
		}
		seen[name] = true
		if allowed != nil && !allowed[name] {
			return name, false
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// fieldNames are the json names of the struct dst points to; nil (any
// name) when dst is not a pointer to a struct.
func fieldNames(dst any) map[string]bool {
	t := reflect.TypeOf(dst)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	t = t.Elem()
	names := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}
