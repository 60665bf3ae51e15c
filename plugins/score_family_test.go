package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/tenzro/train/syncer"
)

// checkResolveScorer: spec resolves to the built-in evaluator name with the
// module hash and the parameters (defaults filled in) params; every spec of
// bad is refused.
func checkResolveScorer(t *testing.T, spec, name, hash, params string, bad ...string) {
	t.Helper()
	e := testEngine(t)
	rr, err := e.ResolveScorer(context.Background(), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Name != name || rr.Hash.String() != hash {
		t.Errorf("resolved %s %s", rr.Name, rr.Hash)
	}
	if string(rr.Params) != params {
		t.Errorf("params %s, want %s", rr.Params, params)
	}
	for _, b := range bad {
		if _, err := e.ResolveScorer(context.Background(), b, nil); err == nil {
			t.Errorf("%s accepted", b)
		}
	}
}

// scoreRefusal is a change of a score case's parameters (params: members
// over the case's config) and the guest's refusal of it: its code and a
// part of its text.
type scoreRefusal struct {
	name, params, want string
	code               uint32
}

// checkScoreRefusals: the score case name with each refusal's parameters is
// refused by the guest with the refusal's code and text, before any loss is
// computed.
func checkScoreRefusals(t *testing.T, name string, refusals []scoreRefusal) {
	t.Helper()
	e := testEngine(t)
	base := loadScoreCase(t, name)
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			p := maps.Clone(base.Config)
			if err := json.Unmarshal([]byte(tc.params), &p); err != nil {
				t.Fatal(err)
			}
			params, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			in := base.in
			in.Evaluator.Params = params
			_, err = e.Score(context.Background(), in)
			var rf *syncer.RuleFailure
			if !errors.As(err, &rf) || rf.Code != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want code %d %q", err, tc.code, tc.want)
			}
		})
	}
}
