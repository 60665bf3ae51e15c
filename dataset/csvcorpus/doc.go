// Package csvcorpus parses a CSV corpus (a header row naming the series,
// one series per column) into its series and its dataset_hash, exactly as
// the reference trainer does (trainer/src/tenzro_trainer/data.py). It is a
// leaf (it imports only wire) so that both the dataset service and the
// node's evaluator (syncer/score.go) read corpora with this one parser.
package csvcorpus
