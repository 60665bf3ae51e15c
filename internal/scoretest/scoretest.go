package scoretest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"text/template"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// ModelPath is the "odd" model's initial weights, relative to a package
// directory one level below the repository root (syncer, e2e).
const ModelPath = "../plugins/testdata/score/odd/model.safetensors"

// Model is one family's scored test run: its initial weights and the
// parameters its architecture metadata and its evaluator share.
type Model struct {
	// Path is the model's safetensors, relative to a package directory one
	// level below the repository root.
	Path string
	// Family is the architecture family, Evaluator the built-in evaluator's
	// name, Params the JSON object of the model's parameters (the
	// architecture's metadata and the evaluator's params).
	Family, Evaluator, Params string
}

// TimesFM is the TimesFM-class "odd" model scored by TimesFMScore.
var TimesFM = Model{Path: ModelPath, Family: "timesfm", Evaluator: "TimesFMScore",
	Params: `{"context_len":20,"horizon":3,"patch_len":5,"d_model":12,"n_layers":2,"n_heads":3,"d_ff":10}`}

//go:embed testdata/scored_spec.json.tmpl
var specTemplate string

var tmpl = template.Must(template.New("scored_spec").Parse(specTemplate))

// Run is the scored run's shared parts.
type Run struct {
	// Model is the initial weights (safetensors), Corpus the CSV corpus.
	Model, Corpus []byte
	// Architecture and Scoring are the spec's members of those names.
	Architecture, Scoring json.RawMessage
	// DatasetHash is the spec's dataset_hash ("0x…": the corpus hash).
	DatasetHash string
}

// Load is LoadModel of TimesFM.
func Load(scoring string) (*Run, error) { return LoadModel(TimesFM, scoring) }

// LoadModel reads m's model and fills the spec template; scoring is more
// members of the spec's scoring object, each after a comma
// (`,"rate_bps":10000`), or "".
func LoadModel(m Model, scoring string) (*Run, error) {
	model, err := os.ReadFile(m.Path)
	if err != nil {
		return nil, err
	}
	n, err := paramCount(model)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	corpus := Corpus()
	dh, err := dataset.CorpusHashCSV(bytes.NewReader(corpus))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, map[string]any{"Family": m.Family, "Evaluator": m.Evaluator, "Params": m.Params, "ParamCount": n,
		"DatasetHash": fmt.Sprintf("%x", dh[:]), "Corpus": wire.ContentHash(corpus).String(), "Scoring": scoring}); err != nil {
		return nil, err
	}
	var members struct {
		Architecture json.RawMessage `json:"architecture"`
		DatasetHash  string          `json:"dataset_hash"`
		Scoring      json.RawMessage `json:"scoring"`
	}
	dec := json.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&members); err != nil {
		return nil, fmt.Errorf("scored spec template (%s, scoring %q): %w", m.Family, scoring, err)
	}
	return &Run{Model: model, Corpus: corpus, Architecture: members.Architecture, Scoring: members.Scoring, DatasetHash: members.DatasetHash}, nil
}

// paramCount is the number of values of a safetensors model.
func paramCount(model []byte) (int64, error) {
	ts, _, err := safetensors.Parse(model, safetensors.DefaultLimits)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, x := range ts {
		k := int64(1)
		for _, d := range x.Shape {
			k *= d
		}
		n += k
	}
	return n, nil
}

// Corpus is a small CSV corpus: three series of 120 points (96 training
// points each, 74 windows of 23 points per series).
func Corpus() []byte {
	var b bytes.Buffer
	b.WriteString("a,b,c\n")
	for k := 0; k < 120; k++ {
		x := float64(k)
		fmt.Fprintf(&b, "%.6f,%.6f,%.6f\n", math.Sin(x/5), 0.01*x+math.Cos(x/3), math.Sin(x/7)*math.Cos(x/11))
	}
	return b.Bytes()
}
