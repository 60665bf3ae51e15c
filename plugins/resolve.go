package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Aliases of the ABI definitions.
type (
	Manifest  = abi.Manifest
	ParamSpec = abi.ParamSpec
)

// ABI constants re-exported for callers of this package.
const (
	ABIVersion      = abi.ABIVersion
	KindAggregate   = abi.KindAggregate
	KindVerify      = abi.KindVerify
	KindOuter       = abi.KindOuter
	ChunkCoordinate = abi.ChunkCoordinate
)

// MaxRefBytes bounds a rule reference string.
const MaxRefBytes = 1024

// Ref is a parsed rule reference: a built-in name or a module hash, with
// inline parameters.
type Ref struct {
	Name   string
	Hash   wire.Hash
	ByHash bool
	Params map[string]float64
}

var (
	refNameRe = regexp.MustCompile(`^[A-Z][A-Za-z0-9_]{0,63}$`)
	refKeyRe  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// ParseRef parses "Name", "Name{k=v,k=v}", "sha256:<hex>" or
// "sha256:<hex>{k=v}". Values are JSON numbers (true/false read as 1/0).
func ParseRef(s string) (Ref, error) {
	var r Ref
	if len(s) > MaxRefBytes {
		return r, fmt.Errorf("rule reference: %d bytes, limit %d", len(s), MaxRefBytes)
	}
	s = strings.TrimSpace(s)
	head, body := s, ""
	if i := strings.IndexByte(s, '{'); i >= 0 {
		if !strings.HasSuffix(s, "}") {
			return r, fmt.Errorf("rule reference %q: missing closing }", s)
		}
		head, body = strings.TrimSpace(s[:i]), s[i+1:len(s)-1]
		if strings.ContainsAny(body, "{}") {
			return r, fmt.Errorf("rule reference %q: nested braces", s)
		}
	}
	switch {
	case strings.HasPrefix(head, "sha256:"):
		h, err := wire.ParseHash(head)
		if err != nil {
			return r, fmt.Errorf("rule reference: %w", err)
		}
		r.Hash, r.ByHash = h, true
	case refNameRe.MatchString(head):
		r.Name = head
	default:
		return r, fmt.Errorf("rule reference %q: want Name, Name{k=v,...} or sha256:<64 hex>", s)
	}
	r.Params = map[string]float64{}
	if strings.TrimSpace(body) == "" {
		return r, nil
	}
	for _, kv := range strings.Split(body, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !refKeyRe.MatchString(k) {
			return r, fmt.Errorf("rule reference %q: parameter %q: want key=value", s, strings.TrimSpace(kv))
		}
		if _, dup := r.Params[k]; dup {
			return r, fmt.Errorf("rule reference %q: parameter %s given twice", s, k)
		}
		x, err := parseNumber(v)
		if err != nil {
			return r, fmt.Errorf("rule reference %q: parameter %s: %w", s, k, err)
		}
		r.Params[k] = x
	}
	return r, nil
}

var jsonNumberRe = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func parseNumber(v string) (float64, error) {
	switch v {
	case "true":
		return 1, nil
	case "false":
		return 0, nil
	}
	if !jsonNumberRe.MatchString(v) {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%q is out of range", v)
	}
	return x, nil
}

// mergeParams adds a JSON object of parameters to the inline ones. A key
// given both ways must have the same value.
func mergeParams(inline map[string]float64, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if len(raw) > 16<<10 {
		return fmt.Errorf("params: %d bytes, limit 16384", len(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("params: want a JSON object of numbers: %w", err)
	}
	if dec.More() {
		return errors.New("params: trailing data")
	}
	for k, v := range obj {
		var x float64
		switch t := v.(type) {
		case json.Number:
			f, err := parseNumber(t.String())
			if err != nil {
				return fmt.Errorf("params.%s: %w", k, err)
			}
			x = f
		case bool:
			if t {
				x = 1
			}
		default:
			return fmt.Errorf("params.%s: want a number, got %T", k, v)
		}
		if old, ok := inline[k]; ok && old != x {
			return fmt.Errorf("params.%s=%v conflicts with %s=%v in the reference", k, x, k, old)
		}
		inline[k] = x
	}
	return nil
}

// completeParams checks values against the schema, fills defaults and
// returns the canonical JSON object (every parameter, RFC 8785).
func completeParams(m *abi.Manifest, vals map[string]float64) (json.RawMessage, error) {
	known := map[string]bool{}
	for _, p := range m.Params {
		known[p.Name] = true
	}
	var unknown []string
	for k := range vals {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		var names []string
		for _, p := range m.Params {
			names = append(names, p.Name)
		}
		return nil, fmt.Errorf("%s has no parameter %s (parameters: %s)", m.ID, strings.Join(unknown, ", "), orNone(names))
	}
	full := map[string]float64{}
	for _, p := range m.Params {
		v, ok := vals[p.Name]
		if !ok {
			if p.Default == nil {
				return nil, fmt.Errorf("%s: parameter %s is required", m.ID, p.Name)
			}
			v = *p.Default
		}
		if err := p.Check(v); err != nil {
			return nil, fmt.Errorf("%s: %w", m.ID, err)
		}
		full[p.Name] = v
	}
	raw, err := json.Marshal(full)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("params: canonicalize: %w", err)
	}
	return canon, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// paramVector decodes canonical params into the f64 vector the guest gets
// (schema order).
func paramVector(m *abi.Manifest, raw json.RawMessage) ([]float64, error) {
	vals := map[string]float64{}
	if err := mergeParams(vals, raw); err != nil {
		return nil, err
	}
	if _, err := completeParams(m, vals); err != nil {
		return nil, err
	}
	out := make([]float64, len(m.Params))
	for i, p := range m.Params {
		v, ok := vals[p.Name]
		if !ok {
			v = *p.Default
		}
		out[i] = v
	}
	return out, nil
}

func (e *Engine) resolve(ctx context.Context, ref string, params json.RawMessage, kind string) (syncer.RuleRef, *plugin, map[string]float64, error) {
	var rr syncer.RuleRef
	r, err := ParseRef(ref)
	if err != nil {
		return rr, nil, nil, err
	}
	if err := mergeParams(r.Params, params); err != nil {
		return rr, nil, nil, err
	}
	h := r.Hash
	if !r.ByHash {
		var ok bool
		if h, ok = e.builtin[r.Name]; !ok {
			return rr, nil, nil, fmt.Errorf("unknown rule %q (built-ins: %s; or name a published plugin by sha256:<hash>)", r.Name, strings.Join(e.builtinNames(kind), ", "))
		}
	}
	p, err := e.lookup(ctx, h)
	if err != nil {
		return rr, nil, nil, err
	}
	if p.manifest.Kind != kind {
		return rr, nil, nil, fmt.Errorf("%s is a %s plugin, not %s", p.info.Name, p.manifest.Kind, kind)
	}
	canon, err := completeParams(p.manifest, r.Params)
	if err != nil {
		return rr, nil, nil, err
	}
	full, _ := paramVector(p.manifest, canon)
	vals := map[string]float64{}
	for i, ps := range p.manifest.Params {
		vals[ps.Name] = full[i]
	}
	return syncer.RuleRef{Name: p.info.Name, Hash: h, Params: canon, RoundLevel: p.manifest.RoundLevel}, p, vals, nil
}

func (e *Engine) builtinNames(kind string) []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var out []string
	for name, h := range e.builtin {
		if e.loaded[h].manifest.Kind == kind {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ResolveRule implements syncer.Engine. k is the quorum and m the trainer
// count: rules with a minimum K refuse a quorum too small for f, both by the
// manifest's min_k and by a probe call on k zero inputs.
func (e *Engine) ResolveRule(ctx context.Context, ref string, params json.RawMessage, k, m int) (syncer.RuleRef, error) {
	rr, p, vals, err := e.resolve(ctx, ref, params, KindAggregate)
	if err != nil {
		return syncer.RuleRef{}, fmt.Errorf("aggregation: %w", err)
	}
	if k < 1 || k > MaxK {
		return syncer.RuleRef{}, fmt.Errorf("aggregation: quorum K=%d, want 1..%d", k, MaxK)
	}
	if m != 0 && m < k {
		return syncer.RuleRef{}, fmt.Errorf("aggregation: quorum K=%d exceeds the trainer count %d", k, m)
	}
	if mk := p.manifest.MinK; mk != nil && (mk.Unless == "" || vals[mk.Unless] == 0) {
		need := float64(mk.Mul)*vals[mk.Param] + float64(mk.Add)
		if float64(k) < need {
			return syncer.RuleRef{}, fmt.Errorf("aggregation: %s with %s=%g needs K >= %d*%s+%d = %g, quorum is %d",
				rr.Name, mk.Param, vals[mk.Param], mk.Mul, mk.Param, mk.Add, need, k)
		}
	}
	dt := machine.F32
	if !p.manifest.SupportsDtype("F32") {
		dt = machine.BF16
	}
	in := syncer.AggregateInput{Rule: rr, Dtype: dt, N: 8, Inputs: make([][]byte, k)}
	for i := range in.Inputs {
		in.Inputs[i] = make([]byte, 8*dt.Size())
	}
	if _, err := e.Aggregate(WithProbeBudget(ctx), in); err != nil {
		var rf *syncer.RuleFailure
		if errors.As(err, &rf) {
			return syncer.RuleRef{}, fmt.Errorf("aggregation: %s refuses quorum K=%d: %s", rr.Name, k, rf.Reason)
		}
		return syncer.RuleRef{}, fmt.Errorf("aggregation: probe %s: %w", rr.Name, err)
	}
	return rr, nil
}

// ResolveVerifier implements syncer.Engine; parameters go inline, e.g.
// "L2NormBound{max=100}".
func (e *Engine) ResolveVerifier(ctx context.Context, ref string) (syncer.RuleRef, error) {
	rr, _, _, err := e.resolve(ctx, ref, nil, KindVerify)
	if err != nil {
		return syncer.RuleRef{}, fmt.Errorf("verification: %w", err)
	}
	return rr, nil
}

// ResolveOuter implements syncer.Engine: the built-in Nesterov plugin.
func (e *Engine) ResolveOuter(ctx context.Context) (syncer.RuleRef, error) {
	rr, _, _, err := e.resolve(ctx, "Nesterov", nil, KindOuter)
	if err != nil {
		return syncer.RuleRef{}, fmt.Errorf("outer step: %w", err)
	}
	return rr, nil
}

// ParseInfoManifest decodes the manifest recorded in a PluginInfo.
func ParseInfoManifest(info *wire.PluginInfo) (*Manifest, error) {
	return abi.ParseManifest(info.Manifest)
}
