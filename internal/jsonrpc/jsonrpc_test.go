package jsonrpc

import (
	"context"
	"encoding/json"
	"testing"
)

// JSON-RPC 2.0 §4-5: responses carry the request id; notifications get
// none; parse errors, invalid requests, unknown methods and bad params
// get their standard codes; batches are refused.
func TestDispatcher(t *testing.T) {
	d := New()
	d.Register("echo", func(_ context.Context, r *Request) (any, *Error) {
		var p struct{ X int }
		if e := Params(r, &p); e != nil {
			return nil, e
		}
		return p.X, nil
	})
	code := func(msg string) (int, string) {
		out := d.Handle(context.Background(), []byte(msg))
		if out == nil {
			return 0, ""
		}
		var r struct {
			ID     json.RawMessage
			Result json.RawMessage
			Error  *Error
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if r.Error != nil {
			return r.Error.Code, string(r.ID)
		}
		return 1, string(r.ID) + "=" + string(r.Result)
	}
	for _, c := range []struct {
		msg  string
		want int
		id   string
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"echo","params":{"X":3}}`, 1, "7=3"},
		{`{"jsonrpc":"2.0","id":"a","method":"echo","params":{"X":3}}`, 1, `"a"=3`},
		{`{"jsonrpc":"2.0","method":"echo","params":{"X":3}}`, 0, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"nope"}`, CodeMethodNotFound, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"Y":1}}`, CodeInvalidParams, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"echo"}`, CodeInvalidParams, "1"},
		{`{"jsonrpc":"1.0","id":1,"method":"echo"}`, CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":{},"method":"echo"}`, CodeInvalidRequest, "{}"},
		{`{"jsonrpc":`, CodeParseError, "null"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", CodeParseError, "null"},
		{`[{"jsonrpc":"2.0","id":1,"method":"echo"}]`, CodeInvalidRequest, "null"},
		// Member names are exact and never repeated (issue 26 item 7).
		{`{"jsonrpc":"2.0","id":1,"Method":"echo","params":{"X":3}}`, CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","ID":1,"method":"echo","params":{"X":3}}`, CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":"nope","method":"echo","params":{"X":3}}`, CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"echo","params":{"X":3}}`, CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":3}}`, CodeInvalidParams, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"X":3,"X":4}}`, CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"ECHO","params":{"X":3}}`, CodeMethodNotFound, "1"},
		// A notification never gets a response, even when it fails.
		{`{"jsonrpc":"2.0","method":"echo","params":{"Y":3}}`, 0, ""},
		{`{"jsonrpc":"2.0","method":"echo"}`, 0, ""},
	} {
		if got, id := code(c.msg); got != c.want || id != c.id {
			t.Errorf("%s: %d %s, want %d %s", c.msg, got, id, c.want, c.id)
		}
	}
}

// Reply of a deferred handler: nothing for a notification.
func TestReplyNotification(t *testing.T) {
	if b := Reply(&Request{JSONRPC: Version, Method: "m"}, 1, nil); b != nil {
		t.Fatalf("reply to a notification: %s", b)
	}
	if b := Reply(&Request{JSONRPC: Version, Method: "m", ID: json.RawMessage("3")}, 1, nil); string(b) != `{"jsonrpc":"2.0","id":3,"result":1}` {
		t.Fatalf("reply %s", b)
	}
}
