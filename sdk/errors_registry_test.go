package sdk_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/sdk"
)

// coordCodes parses internal/coord/errors.go and returns the string value
// of every constant declared with type Code: the runtime's own list, read
// from its source so that a code added there without the SDK fails here.
func coordCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../internal/coord/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			vs := sp.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					t.Fatalf("non-literal Code constant in coord: %#v", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// The SDK's codes are exactly the runtime's (spec registries/error-codes.md),
// with the same retry classification and HTTP status.
func TestCodesEqualRuntime(t *testing.T) {
	want := coordCodes(t)
	if len(want) < 17 {
		t.Fatalf("parsed only %d codes from internal/coord: %v", len(want), want)
	}
	var got []string
	for _, c := range sdk.Codes() {
		got = append(got, string(c))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("sdk.Codes() = %v\ninternal/coord = %v", got, want)
	}
	for _, c := range sdk.Codes() {
		rc := coord.Code(c)
		if c.Retryable() != rc.Retryable() || c.HTTPStatus() != rc.HTTPStatus() || !c.Known() {
			t.Errorf("%s: sdk retryable=%v http=%d, runtime retryable=%v http=%d", c, c.Retryable(), c.HTTPStatus(), rc.Retryable(), rc.HTTPStatus())
		}
	}
	if sdk.Code("NOPE").Known() || sdk.Code("NOPE").HTTPStatus() != 500 {
		t.Fatal("unknown code")
	}
	if !sdk.Retryable(&sdk.Error{Code: sdk.CodeRateLimited}) || sdk.Retryable(&sdk.Error{Code: sdk.CodeForbidden}) || sdk.Retryable(nil) {
		t.Fatal("Retryable(err)")
	}
}
