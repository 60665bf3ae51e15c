// Package scoretest is the scored test run that the syncer's and the e2e
// tests share (the "odd" TimesFM-class model of plugins/testdata/score,
// a CSV corpus, and the scored spec's architecture, dataset hash and
// scoring members from testdata/scored_spec.json.tmpl), so that the two
// cannot drift apart: it owns nothing else.
package scoretest
