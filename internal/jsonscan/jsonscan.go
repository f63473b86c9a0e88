// Package jsonscan walks the member names of a JSON object without
// decoding it: the fast path of the duplicate-member checks that run on
// every HTTP/JSON and JSON-RPC request (internal/wire, internal/jsonrpc),
// which used encoding/json's token decoder for it.
package jsonscan

// Keys calls fn with each member name of the top-level JSON object b, in
// order, until fn returns false. It reports whether it could scan: false
// when b is not an object it reads with certainty (a name with an escape
// sequence, malformed input), and the caller must then take its exact,
// slower path (which also reports malformed input). Values are skipped,
// not validated; a name is passed as its raw bytes, which equal the
// decoded name since it has no escape.
func Keys(b []byte, fn func(name []byte) bool) bool {
	i := ws(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = ws(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' || b[j] < 0x20 {
				return false
			}
			j++
		}
		if j >= len(b) {
			return false
		}
		if !fn(b[i+1 : j]) {
			return true
		}
		i = ws(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i = value(b, ws(b, i+1)); i < 0 {
			return false
		}
		i = ws(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return true
		case ',':
			i = ws(b, i+1)
		default:
			return false
		}
	}
}

func ws(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// str skips the string starting at b[i] == '"'; -1 if it does not end.
func str(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// value skips one value starting at i; -1 when it cannot.
func value(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return str(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = str(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	return -1
}
