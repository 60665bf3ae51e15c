// Package scoretest is the scored test run that the syncer's and the e2e
// tests share (a family's model of plugins/testdata/score — TimesFM, the
// "odd" TimesFM-class model, or another family's Model — a CSV corpus, and
// the scored spec's architecture, dataset hash and scoring members from
// testdata/scored_spec.json.tmpl), so that the runs cannot drift apart: it
// owns nothing else.
package scoretest
