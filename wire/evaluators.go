package wire

import (
	"fmt"
	"slices"
	"strings"
)

// builtinEvaluatorFamilies: the model family each built-in evaluator scores,
// as the spec's architecture.family names it (the trainer's family names and
// the aliases its models.build accepts, compared in lower case). A built-in
// evaluator runs one model's forward pass; named by a spec of another family
// it could only fail on every input, so TaskSpec.Validate refuses the pair.
// An evaluator named by hash (a published plugin) is not tied to a family.
var builtinEvaluatorFamilies = map[string][]string{
	"TimesFMScore":     {"timesfm", "timesfm-class"},
	"GraniteTTMScore":  {"granite-ttm", "granite_ttm", "ttm", "granite"},
	"ChronosBoltScore": {"chronos-bolt", "chronos_bolt", "chronos"},
}

// CheckEvaluatorFamily refuses a built-in evaluator named for a model family
// it does not score (docs/protocol/scoring.md §4).
func CheckEvaluatorFamily(evaluator, family string) error {
	fams, ok := builtinEvaluatorFamilies[evaluator]
	if !ok || slices.Contains(fams, strings.ToLower(family)) {
		return nil
	}
	return fmt.Errorf("spec: scoring: evaluator %s scores the %s family, the architecture is family %q", evaluator, fams[0], trunc(family))
}
