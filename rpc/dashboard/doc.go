// Package dashboard owns the node's run dashboard: server-rendered HTML
// (html/template, templates and stylesheet embedded in the binary, no
// scripts, no external requests) over the same read-only Service the
// JSON-RPC API serves. It shows the runs, and per run its status, round
// progress, the loss curve trainers report in their signed submission
// metrics, acceptance, missed rounds and accrued reward per trainer, the
// per-fragment commit timeline, the syncer election and the receipt with a
// verify button. Pages of running runs refresh themselves.
//
// It holds no state and no business rules: every figure comes from the
// syncer's views (GetRun, GetTranscript, GetReceipt, ReportedMetrics).
package dashboard
