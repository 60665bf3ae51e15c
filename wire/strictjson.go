package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrDuplicateMember is wrapped by CheckStrictJSON's duplicate-name errors.
var ErrDuplicateMember = errors.New("duplicate member")

// MaxExactInt is the largest integer magnitude a JSON number may have in a
// spec: 2^53, the last integer every IEEE-754 double (and so every RFC 8785
// serialisation, which prints numbers as ECMAScript doubles) represents
// exactly. Beyond it the stored canonical form is a different number.
const MaxExactInt = 1 << 53

// StrictJSONOptions select the checks of CheckStrictJSON.
type StrictJSONOptions struct {
	// ExactIntegers refuses integer literals with |x| > MaxExactInt and
	// numbers whose canonical (double) form is not the integer they spell.
	ExactIntegers bool
	// TopLevelOnly checks member names only in the top-level object and in
	// objects that are elements of a top-level array (a JSON-RPC envelope or
	// batch); nested values are skipped over.
	TopLevelOnly bool
}

// CheckStrictJSON walks valid JSON (call it after a successful decode) and
// refuses what encoding/json silently accepts: duplicate member names in any
// object (encoding/json keeps the last one; "a" and "\u0061" are the same
// name), and, with ExactIntegers, integers that do not survive RFC 8785
// canonicalisation. The error names the offending member by its path
// ("architecture.metadata.context_len"). It allocates only for member names
// that contain escapes and never copies values, so it is cheap on large
// payloads.
func CheckStrictJSON(data []byte, o StrictJSONOptions) error {
	s := strictScanner{b: data, o: o}
	s.skipWS()
	if err := s.value(); err != nil {
		return err
	}
	return nil
}

type strictScanner struct {
	b     []byte
	i     int
	o     StrictJSONOptions
	path  []string
	depth int
}

// maxJSONDepth bounds nesting as encoding/json does, so that hostile input
// cannot exhaust the stack of the recursive scan.
const maxJSONDepth = 10000

func (s *strictScanner) where() string {
	if len(s.path) == 0 {
		return "the top-level value"
	}
	return strings.Join(s.path, ".")
}

func (s *strictScanner) skipWS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *strictScanner) value() error {
	if s.i >= len(s.b) {
		return fmt.Errorf("unexpected end of JSON at %s", s.where())
	}
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		if s.depth++; s.depth > maxJSONDepth {
			return fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
		}
		defer func() { s.depth-- }()
		if c == '{' {
			return s.object()
		}
		return s.array()
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default: // true, false, null
		start := s.i
		for s.i < len(s.b) && s.b[s.i] >= 'a' && s.b[s.i] <= 'z' {
			s.i++
		}
		if s.i == start {
			return fmt.Errorf("unexpected character %q at %s", s.b[s.i], s.where())
		}
		return nil
	}
}

// str scans a string starting at '"'; it returns the raw bytes between the
// quotes and whether they contain escapes.
func (s *strictScanner) str() ([]byte, bool, error) {
	start := s.i + 1
	// bytes.IndexByte is vectorised: a 46 MB base64 payload is skipped at
	// memory speed. A quote preceded by an odd run of backslashes is escaped.
	for j := start; j < len(s.b); {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		bs := 0
		for p := q - 1; p >= start && s.b[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			s.i = q + 1
			raw := s.b[start:q]
			return raw, bytes.IndexByte(raw, '\\') >= 0, nil
		}
		j = q + 1
	}
	return nil, false, fmt.Errorf("unterminated string at %s", s.where())
}

func (s *strictScanner) object() error {
	s.i++ // {
	var seen map[string]struct{}
	var small [16]string
	names := small[:0]
	for {
		s.skipWS()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			return nil
		}
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return fmt.Errorf("expected a member name at %s", s.where())
		}
		raw, esc, err := s.str()
		if err != nil {
			return err
		}
		name := string(raw)
		if esc {
			if err := json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &name); err != nil {
				return fmt.Errorf("member name at %s: %w", s.where(), err)
			}
		}
		dup := false
		if s.o.TopLevelOnly && len(s.path) > 0 {
			// nested object: names are not tracked
		} else if seen != nil {
			_, dup = seen[name]
			seen[name] = struct{}{}
		} else {
			for _, n := range names {
				if n == name {
					dup = true
				}
			}
			names = append(names, name)
			if len(names) == cap(small) {
				seen = make(map[string]struct{}, 2*len(names))
				for _, n := range names {
					seen[n] = struct{}{}
				}
			}
		}
		if dup {
			return fmt.Errorf("%w %q in %s (each name may appear once)", ErrDuplicateMember, truncate(name), s.objName())
		}
		s.skipWS()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return fmt.Errorf("expected ':' after member %q", truncate(name))
		}
		s.i++
		s.skipWS()
		s.path = append(s.path, name)
		if err := s.value(); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		s.skipWS()
		switch {
		case s.i < len(s.b) && s.b[s.i] == ',':
			s.i++
		case s.i < len(s.b) && s.b[s.i] == '}':
		default:
			return fmt.Errorf("expected ',' or '}' after member %q", truncate(name))
		}
	}
}

func (s *strictScanner) objName() string {
	if len(s.path) == 0 {
		return "the top-level object"
	}
	return "object " + strings.Join(s.path, ".")
}

func (s *strictScanner) array() error {
	s.i++ // [
	for k := 0; ; k++ {
		s.skipWS()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return nil
		}
		if len(s.path) > 0 {
			s.path[len(s.path)-1] += "[" + strconv.Itoa(k) + "]"
		}
		var base string
		if len(s.path) > 0 {
			base = s.path[len(s.path)-1]
		}
		if err := s.value(); err != nil {
			return err
		}
		if len(s.path) > 0 {
			s.path[len(s.path)-1] = base[:strings.LastIndexByte(base, '[')]
		}
		s.skipWS()
		switch {
		case s.i < len(s.b) && s.b[s.i] == ',':
			s.i++
		case s.i < len(s.b) && s.b[s.i] == ']':
		default:
			return fmt.Errorf("expected ',' or ']' in the array at %s", s.where())
		}
	}
}

func (s *strictScanner) number() error {
	start := s.i
	isInt := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '.' || c == 'e' || c == 'E' {
			isInt = false
		} else if !(c == '-' || c == '+' || (c >= '0' && c <= '9')) {
			break
		}
		s.i++
	}
	if !s.o.ExactIntegers {
		return nil
	}
	lit := string(s.b[start:s.i])
	if isInt {
		digits := strings.TrimPrefix(lit, "-")
		if len(digits) >= 16 {
			v, err := strconv.ParseUint(digits, 10, 64)
			if err != nil || v > MaxExactInt {
				return fmt.Errorf("%s: integer %s is outside ±2^53 (%d): its canonical RFC 8785 form would be a different number", s.where(), truncate(lit), int64(MaxExactInt))
			}
		}
		return nil
	}
	// A fraction or exponent that spells an integer beyond 2^53 (1e300)
	// would not round-trip through an integer field either.
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return fmt.Errorf("%s: number %s: %w", s.where(), truncate(lit), err)
	}
	if f > MaxExactInt || f < -MaxExactInt {
		return fmt.Errorf("%s: number %s is outside ±2^53 (%d): its canonical RFC 8785 form is not exact", s.where(), truncate(lit), int64(MaxExactInt))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
