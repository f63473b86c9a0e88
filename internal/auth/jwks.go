package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// Signing algorithms the JWT authenticator knows.
const (
	algRS256 = "RS256"
	algES256 = "ES256"
	algHS256 = "HS256"
)

// minRSABits is the smallest RSA modulus accepted for RS256 keys.
const minRSABits = 2048

// minHS256Bytes is the shortest HS256 secret (RFC 7518 §3.2: at least the
// hash size).
const minHS256Bytes = 32

// jwk is one usable verification key.
type jwk struct {
	kid string
	alg string // RS256, ES256 or HS256: the only algorithm the key verifies
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or []byte
}

// rawJWK holds the JWK members macpd reads (RFC 7517 §4, RFC 7518 §6).
type rawJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

// parseJWKS parses a JWK Set. It keeps the RSA keys (RS256, modulus of at
// least 2048 bits), P-256 EC keys (ES256) and, only when allowOct,
// symmetric "oct" keys (HS256). Keys for other uses, types or algorithms
// are skipped with a note in skipped. A malformed key is an error when
// strict (a configured JWKS) and skipped otherwise (a fetched JWKS, where
// one odd key must not disable the others). A set without any usable key
// is an error.
func parseJWKS(data []byte, allowOct, strict bool) (keys []jwk, skipped []string, err error) {
	var set struct {
		Keys *[]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, nil, fmt.Errorf("invalid JWKS JSON: %v", err)
	}
	if set.Keys == nil {
		return nil, nil, errors.New(`invalid JWKS: no "keys" array`)
	}
	for i, raw := range *set.Keys {
		var k rawJWK
		if err := json.Unmarshal(raw, &k); err != nil {
			if strict {
				return nil, nil, fmt.Errorf("JWKS key %d: %v", i, err)
			}
			skipped = append(skipped, fmt.Sprintf("JWKS key %d: %v", i, err))
			continue
		}
		name := fmt.Sprintf("JWKS key %d (kid %q)", i, k.Kid)
		malformed := func(err error) error {
			if strict {
				return fmt.Errorf("%s: %v", name, err)
			}
			skipped = append(skipped, fmt.Sprintf("%s: %v", name, err))
			return nil
		}
		if k.Use != "" && k.Use != "sig" {
			skipped = append(skipped, fmt.Sprintf("%s: use %q is not sig", name, k.Use))
			continue
		}
		switch k.Kty {
		case "RSA":
			if k.Alg != "" && k.Alg != algRS256 {
				skipped = append(skipped, fmt.Sprintf("%s: algorithm %s is not supported (RS256, ES256, HS256)", name, k.Alg))
				continue
			}
			pub, err := rsaKey(k.N, k.E)
			if err != nil {
				if err := malformed(err); err != nil {
					return nil, nil, err
				}
				continue
			}
			if pub.N.BitLen() < minRSABits {
				skipped = append(skipped, fmt.Sprintf("%s: RSA modulus of %d bits is below %d", name, pub.N.BitLen(), minRSABits))
				continue
			}
			keys = append(keys, jwk{kid: k.Kid, alg: algRS256, key: pub})
		case "EC":
			if (k.Alg != "" && k.Alg != algES256) || k.Crv != "P-256" {
				skipped = append(skipped, fmt.Sprintf("%s: curve %q / algorithm %q is not supported (ES256 on P-256)", name, k.Crv, k.Alg))
				continue
			}
			pub, err := p256Key(k.X, k.Y)
			if err != nil {
				if err := malformed(err); err != nil {
					return nil, nil, err
				}
				continue
			}
			keys = append(keys, jwk{kid: k.Kid, alg: algES256, key: pub})
		case "oct":
			if !allowOct {
				skipped = append(skipped, fmt.Sprintf("%s: symmetric (oct) key ignored: HS256 is not enabled", name))
				continue
			}
			if k.Alg != "" && k.Alg != algHS256 {
				skipped = append(skipped, fmt.Sprintf("%s: algorithm %s is not supported (RS256, ES256, HS256)", name, k.Alg))
				continue
			}
			secret, err := decodeB64(k.K)
			if err != nil || len(secret) == 0 {
				err = errors.New(`"k" is not base64url`)
			} else if len(secret) < minHS256Bytes {
				err = fmt.Errorf("HS256 secret is %d bytes, at least %d are required", len(secret), minHS256Bytes)
			}
			if err != nil {
				if err := malformed(err); err != nil {
					return nil, nil, err
				}
				continue
			}
			keys = append(keys, jwk{kid: k.Kid, alg: algHS256, key: secret})
		default:
			skipped = append(skipped, fmt.Sprintf("%s: key type %q is not supported", name, k.Kty))
		}
	}
	if len(keys) == 0 {
		msg := "JWKS has no usable key (RSA keys of at least 2048 bits for RS256, P-256 EC keys for ES256"
		if allowOct {
			msg += ", oct keys for HS256"
		}
		msg += ")"
		if len(skipped) > 0 {
			msg += ": " + strings.Join(skipped, "; ")
		}
		return nil, skipped, errors.New(msg)
	}
	return keys, skipped, nil
}

// decodeB64 decodes base64url without padding (RFC 7515 §2), also
// accepting padded and standard-alphabet encodings that some tools write.
func decodeB64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err := decodeB64(n)
	if err != nil || len(nb) == 0 {
		return nil, errors.New(`RSA key: "n" is missing or not base64url`)
	}
	eb, err := decodeB64(e)
	if err != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New(`RSA key: "e" is missing or not a base64url integer`)
	}
	exp := int(new(big.Int).SetBytes(eb).Int64())
	if exp < 3 || exp%2 == 0 {
		return nil, errors.New(`RSA key: "e" is not a valid public exponent`)
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: exp}, nil
}

func p256Key(x, y string) (*ecdsa.PublicKey, error) {
	xb, errX := decodeB64(x)
	yb, errY := decodeB64(y)
	if errX != nil || errY != nil || len(xb) != 32 || len(yb) != 32 {
		return nil, errors.New(`EC key: "x" and "y" must be 32-byte base64url coordinates`)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, xb...), yb...))
	if err != nil {
		return nil, fmt.Errorf("EC key: %v", err)
	}
	return pub, nil
}
