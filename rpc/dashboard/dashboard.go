package dashboard

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"math/big"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short": short, "tnzo": tnzo, "pct": pct, "hash": shortHash, "sub": func(a, b int) int { return a - b }, "sci": sci,
}).ParseFS(assets, "assets/*.html"))

// Source is what the dashboard reads: the syncer's views (syncer.Node has
// all of them).
type Source interface {
	ListRuns(ctx context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error)
	GetRun(ctx context.Context, taskID string) (*wire.RunView, error)
	GetTranscript(ctx context.Context, taskID string) ([]wire.RoundCommit, error)
	GetReceipt(ctx context.Context, taskID string) (*wire.Receipt, error)
	ReportedMetrics(ctx context.Context, taskID string) ([]wire.MetricsReport, error)
	Info(ctx context.Context) wire.NodeInfo
}

// VerifyFunc checks a receipt as tenzro_training_verifyReceipt does
// (root nil: the receipt's own run root).
type VerifyFunc func(receipt, root []byte) (valid byte, reason string)

// Options configure the handler.
type Options struct {
	// Verify backs the receipt's verify button (hidden when nil).
	Verify VerifyFunc
	// Refresh is how often a running run's page reloads itself (default 5 s).
	Refresh time.Duration
	Logger  *slog.Logger
}

// Handler serves the dashboard: / (runs), /runs/{task} (one run) and
// /runs/{task}/verify (the run page with the receipt checked).
func Handler(src Source, opts Options) http.Handler {
	if opts.Refresh <= 0 {
		opts.Refresh = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &handler{src: src, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.index)
	mux.HandleFunc("GET /runs/{task}", func(w http.ResponseWriter, r *http.Request) { h.run(w, r, false) })
	mux.HandleFunc("GET /runs/{task}/verify", func(w http.ResponseWriter, r *http.Request) { h.run(w, r, true) })
	mux.HandleFunc("GET /style.css", h.css)
	return mux
}

type handler struct {
	src  Source
	opts Options
}

func (h *handler) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		h.opts.Logger.Warn("dashboard template", "page", name, "err", err)
		http.Error(w, "dashboard: cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY") // browsers without frame-ancestors
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(buf.Bytes())
}

func (h *handler) css(w http.ResponseWriter, _ *http.Request) {
	b, _ := assets.ReadFile("assets/style.css")
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(b)
}

func (h *handler) fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	msg := "dashboard: internal error"
	switch machine.KindOf(err) {
	case machine.KindNotFound:
		status, msg = http.StatusNotFound, err.Error()
	case machine.KindInvalid:
		status, msg = http.StatusBadRequest, err.Error()
	default:
		h.opts.Logger.Warn("dashboard", "err", err)
	}
	w.WriteHeader(status)
	h.render(w, "error.html", map[string]any{"Status": status, "Message": msg})
}

type indexPage struct {
	Title   string
	Refresh int
	Node    wire.NodeInfo
	Runs    []runRow
}

type runRow struct {
	wire.RunSummary
	Progress  float64
	Committed uint64 // rounds committed: the current round's index while running, all once sealed
}

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	runs, err := h.src.ListRuns(r.Context(), wire.ListRunsParams{})
	if err != nil {
		h.fail(w, err)
		return
	}
	p := indexPage{Title: "Runs", Refresh: int(h.opts.Refresh / time.Second), Node: h.src.Info(r.Context())}
	for _, s := range runs {
		committed := s.Round
		if s.Status == wire.StatusSealed {
			committed = uint64(s.Rounds)
		}
		p.Runs = append(p.Runs, runRow{RunSummary: s, Progress: progress(s.Status, s.Round, s.Rounds), Committed: committed})
	}
	h.render(w, "index.html", p)
}

func progress(status string, round uint64, rounds int) float64 {
	if status == wire.StatusSealed {
		return 100
	}
	if rounds <= 0 {
		return 0
	}
	return 100 * float64(round) / float64(rounds)
}

// runPage is everything the run template shows.
type runPage struct {
	Title     string
	Node      wire.NodeInfo
	Run       *wire.RunView
	Spec      *wire.TaskSpec
	Refresh   int
	Progress  float64
	Committed int
	Trainers  []trainerRow
	Loss      *lossChart
	Timeline  timeline
	Receipt   *wire.Receipt
	Prog      machine.Progress
	// RoundLine and FinalLine say where the open round stands and when
	// pending submissions count (running runs only).
	RoundLine, FinalLine string
	Rule                 string
	CanVerify            bool
	Verified             bool
	VerifyOK             bool
	VerifyMessage        string
}

type trainerRow struct {
	DID        string
	Status     string
	Shards     []int
	From       uint64
	Submitted  uint64
	Accepted   uint64
	Pending    string // submissions not final yet ("0", "2 recorded", "2: 1 kept, 1 rejected")
	Scores     string // scored inputs: "3/4 passed, Δown +1.2e-03" ("unscored" when the run is not)
	Missed     uint64
	Acceptance float64
	Reward     string
	Stake      string
	Last       string // latest reported train loss
}

func (h *handler) run(w http.ResponseWriter, r *http.Request, verify bool) {
	ctx := r.Context()
	task := r.PathValue("task")
	v, err := h.src.GetRun(ctx, task)
	if err != nil {
		h.fail(w, err)
		return
	}
	spec, _, err := wire.ParseSpec(v.TaskSpec)
	if err != nil {
		h.fail(w, fmt.Errorf("stored spec of %s: %w", task, err))
		return
	}
	tr, err := h.src.GetTranscript(ctx, task)
	if err != nil {
		h.fail(w, err)
		return
	}
	reports, err := h.src.ReportedMetrics(ctx, task)
	if err != nil {
		h.fail(w, err)
		return
	}
	p := runPage{Title: task, Node: h.src.Info(ctx), Run: v, Spec: spec, Committed: len(tr), CanVerify: h.opts.Verify != nil,
		Progress: progress(v.Status, uint64(len(tr)), spec.MaxRounds)}
	var rule struct{ Name string }
	if json.Unmarshal(v.Aggregation, &rule) == nil {
		p.Rule = rule.Name
	}
	if v.Status == wire.StatusRunning || v.Status == wire.StatusAwaiting {
		p.Refresh = int(h.opts.Refresh / time.Second)
	}
	p.Prog = machine.RunProgress(v, tr)
	if v.Status == wire.StatusRunning {
		p.RoundLine, p.FinalLine = roundLine(p.Prog, time.Now()), p.Prog.FinalWhen
	}
	lastLoss := map[string]float64{}
	for _, m := range reports {
		if x, ok := m.Metrics[wire.MetricTrainLoss]; ok {
			lastLoss[m.TrainerDID] = x
		}
	}
	scores := scoreTexts(tr)
	for _, t := range v.Trainers {
		m := v.TrainerMetrics[t.DID]
		row := trainerRow{DID: t.DID, Status: t.Status, Shards: t.ShardAssignments, From: t.ShardsFromRound, Submitted: m.Submitted,
			Accepted: m.Accepted, Pending: pendingText(p.Prog.Trainers[t.DID]), Scores: scores(t.DID), Missed: m.MissedRounds, Reward: m.CurrentReward, Stake: t.Stake, Last: "–"}
		if m.Submitted > 0 {
			row.Acceptance = 100 * float64(m.Accepted) / float64(m.Submitted)
		}
		if x, ok := lastLoss[t.DID]; ok {
			row.Last = fmt.Sprintf("%.4f", x)
		}
		p.Trainers = append(p.Trainers, row)
	}
	p.Loss = newLossChart(reports)
	p.Timeline = newTimeline(v, tr, spec.MaxRounds)
	if v.Status == wire.StatusSealed {
		rc, err := h.src.GetReceipt(ctx, task)
		if err != nil {
			h.fail(w, err)
			return
		}
		p.Receipt = rc
		if verify && h.opts.Verify != nil {
			raw, err := json.Marshal(rc)
			if err != nil {
				h.fail(w, err)
				return
			}
			ok, why := h.opts.Verify(raw, nil)
			p.Verified, p.VerifyOK, p.VerifyMessage = true, ok == 1, why
		}
	} else if verify {
		h.fail(w, machine.Errf(machine.KindInvalid, "run %s is %s: there is no receipt to verify before it seals", task, v.Status))
		return
	}
	h.render(w, "run.html", p)
}

// scoreTexts summarizes each trainer's scored inputs in the committed
// rounds of tr (docs/protocol/scoring.md): passed / scored, evaluator
// failures, and the mean own-shard loss change s_own of the scored inputs.
// A run none of whose commits carries scoring says "unscored".
func scoreTexts(tr []wire.RoundCommit) func(did string) string {
	type acc struct {
		scored, passed, failed int
		own                    float64
	}
	by := map[string]*acc{}
	scoredRun := false
	for _, rc := range tr {
		for _, fc := range rc.Fragments {
			if fc.Scoring == nil {
				continue
			}
			scoredRun = true
			for _, in := range fc.Inputs {
				if in.Score == nil {
					continue
				}
				a := by[in.TrainerDID]
				if a == nil {
					a = &acc{}
					by[in.TrainerDID] = a
				}
				if in.Score.Failed != "" {
					a.failed++
					continue
				}
				a.scored++
				if in.Score.Pass {
					a.passed++
				}
				a.own += in.Score.OwnDelta()
			}
		}
	}
	return func(did string) string {
		if !scoredRun {
			return "unscored"
		}
		a := by[did]
		if a == nil {
			return "–"
		}
		s := fmt.Sprintf("%d/%d passed", a.passed, a.scored)
		if a.scored > 0 {
			s += fmt.Sprintf(", Δown %+.2e", a.own/float64(a.scored))
		}
		if a.failed > 0 {
			s += fmt.Sprintf(", %d not scorable", a.failed)
		}
		return s
	}
}

// pendingText renders a trainer's submissions that are not final yet.
func pendingText(pc machine.PendingCounts) string {
	switch {
	case pc.Pending == 0:
		return "0"
	case pc.Kept+pc.Rejected == 0:
		return fmt.Sprintf("%d recorded", pc.Pending)
	}
	return fmt.Sprintf("%d: %d kept, %d rejected", pc.Pending, pc.Kept, pc.Rejected)
}

// roundLine says where the open round stands at now: fragments committed,
// records, the grace window and the round deadline.
func roundLine(p machine.Progress, now time.Time) string {
	s := fmt.Sprintf("round %d of %d: %d of %d fragments committed, %d submissions recorded; a fragment commits at K=%d records once every active trainer sent or %s after the K-th",
		p.Round, p.MaxRounds, p.FragmentsCommitted, p.Fragments, p.Records, p.Quorum, time.Duration(p.GraceWindowMs)*time.Millisecond)
	if p.RoundDeadlineMs > 0 {
		at := time.UnixMilli(p.RoundDeadlineMs)
		if left := at.Sub(now).Round(time.Second); left > 0 {
			s += fmt.Sprintf("; round deadline in %s (%s UTC)", left, at.UTC().Format("15:04:05"))
		} else {
			s += fmt.Sprintf("; round deadline passed %s ago: the next syncer in succession may commit", -left)
		}
	}
	return s
}

// timeline is the per-fragment commit grid: one row per fragment, one cell
// per round.
type timeline struct {
	Rounds []int
	Rows   []timelineRow
}

type timelineRow struct {
	Fragment int
	Cells    []timelineCell
}

type timelineCell struct {
	Round  uint64
	Class  string // aggregated, no_quorum, rule_failed, open, future
	Title  string
	Symbol string
}

func newTimeline(v *wire.RunView, tr []wire.RoundCommit, maxRounds int) timeline {
	var t timeline
	show := maxRounds
	if show > 60 { // a long run shows its last 60 rounds
		show = 60
	}
	// The window ends after the open round (or the last one) and holds show rounds.
	end := min(maxRounds, max(show, len(tr)+1))
	for rd := end - show; rd < end; rd++ {
		t.Rounds = append(t.Rounds, rd)
	}
	for i := range v.Fragments {
		row := timelineRow{Fragment: i}
		for _, rd := range t.Rounds {
			c := timelineCell{Round: uint64(rd), Class: "future", Symbol: ""}
			switch {
			case rd < len(tr):
				for _, fc := range tr[rd].Fragments {
					if fc.Fragment != i {
						continue
					}
					sel := 0
					for _, in := range fc.Inputs {
						if in.Selected {
							sel++
						}
					}
					c.Class = fc.Status
					c.Title = fmt.Sprintf("round %d fragment %d: %s, %d inputs (%d selected), fuel %d %s", rd, i, fc.Status, len(fc.Inputs), sel, fc.Fuel, fc.Reason)
					c.Symbol = map[string]string{wire.FragAggregated: "✓", wire.FragNoQuorum: "–", wire.FragRuleFailed: "✗"}[fc.Status]
				}
			case rd == int(v.Round) && v.Status == wire.StatusRunning:
				f := v.Fragments[i]
				c.Class, c.Symbol = "open", fmt.Sprint(f.Accepted)
				c.Title = fmt.Sprintf("round %d fragment %d: %d submissions accepted so far", rd, i, f.Accepted)
				if f.Committed {
					c.Class, c.Symbol = wire.FragAggregated, "✓"
				}
			}
			row.Cells = append(row.Cells, c)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// lossChart is an inline SVG of the mean reported train and eval loss per
// round (the band is the trainers' min..max train loss).
type lossChart struct {
	W, H, PadL, PadR, PadT, PadB int
	Series                       []lossSeries
	Band                         string
	YTicks                       []tick
	XTicks                       []tick
	Points                       int
	Last                         string
}

type lossSeries struct {
	Name, Class, Path string
	Dots              []dot
}

type dot struct{ X, Y float64 }

type tick struct {
	Pos   float64
	Label string
}

func newLossChart(reports []wire.MetricsReport) *lossChart {
	type agg struct {
		sum, min, max float64
		n             int
	}
	byRound := map[string]map[uint64]*agg{}
	for _, r := range reports {
		for _, name := range []string{wire.MetricTrainLoss, wire.MetricEvalLoss} {
			x, ok := r.Metrics[name]
			if !ok {
				continue
			}
			if byRound[name] == nil {
				byRound[name] = map[uint64]*agg{}
			}
			a := byRound[name][r.Round]
			if a == nil {
				a = &agg{min: x, max: x}
				byRound[name][r.Round] = a
			}
			a.sum += x
			a.n++
			a.min, a.max = math.Min(a.min, x), math.Max(a.max, x)
		}
	}
	train := byRound[wire.MetricTrainLoss]
	if len(train) == 0 && len(byRound[wire.MetricEvalLoss]) == 0 {
		return nil
	}
	c := &lossChart{W: 940, H: 260, PadL: 52, PadR: 16, PadT: 12, PadB: 30}
	lo, hi := math.Inf(1), math.Inf(-1)
	var maxRound uint64
	for _, m := range byRound {
		for rd, a := range m {
			lo, hi = math.Min(lo, a.min), math.Max(hi, a.max)
			maxRound = max(maxRound, rd)
		}
	}
	if hi-lo < 1e-9 {
		hi, lo = hi+0.5, lo-0.5
	}
	span := hi - lo
	lo, hi = lo-0.05*span, hi+0.05*span
	pw, ph := float64(c.W-c.PadL-c.PadR), float64(c.H-c.PadT-c.PadB)
	xr := float64(max(maxRound, 1))
	x := func(rd uint64) float64 { return float64(c.PadL) + pw*float64(rd)/xr }
	y := func(v float64) float64 { return float64(c.PadT) + ph*(1-(v-lo)/(hi-lo)) }
	for i := 0; i <= 4; i++ {
		v := lo + (hi-lo)*float64(i)/4
		c.YTicks = append(c.YTicks, tick{Pos: y(v), Label: fmt.Sprintf("%.3g", v)})
	}
	step := max(uint64(1), (maxRound+5)/6)
	for rd := uint64(0); rd <= maxRound; rd += step {
		c.XTicks = append(c.XTicks, tick{Pos: x(rd), Label: fmt.Sprint(rd)})
	}
	for _, s := range []struct{ name, label, class string }{
		{wire.MetricTrainLoss, "train loss (mean of trainers)", "train"},
		{wire.MetricEvalLoss, "eval loss (mean of trainers)", "eval"},
	} {
		m := byRound[s.name]
		if len(m) == 0 {
			continue
		}
		rounds := make([]uint64, 0, len(m))
		for rd := range m {
			rounds = append(rounds, rd)
		}
		sort.Slice(rounds, func(i, j int) bool { return rounds[i] < rounds[j] })
		var b strings.Builder
		ls := lossSeries{Name: s.label, Class: s.class}
		for i, rd := range rounds {
			a := m[rd]
			px, py := x(rd), y(a.sum/float64(a.n))
			fmt.Fprintf(&b, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[i == 0], px, py)
			ls.Dots = append(ls.Dots, dot{px, py})
		}
		ls.Path = strings.TrimSpace(b.String())
		c.Series = append(c.Series, ls)
		c.Points += len(rounds)
		if s.name == wire.MetricTrainLoss {
			var top, bottom strings.Builder
			for i, rd := range rounds {
				fmt.Fprintf(&top, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[i == 0], x(rd), y(m[rd].max))
			}
			for i := len(rounds) - 1; i >= 0; i-- {
				fmt.Fprintf(&bottom, "L%.1f,%.1f ", x(rounds[i]), y(m[rounds[i]].min))
			}
			c.Band = top.String() + bottom.String() + "Z"
			last := m[rounds[len(rounds)-1]]
			c.Last = fmt.Sprintf("%.4f at round %d", last.sum/float64(last.n), rounds[len(rounds)-1])
		}
	}
	return c
}

func short(did string) string {
	if i := strings.LastIndexByte(did, ':'); i >= 0 && len(did)-i > 12 {
		return did[:i+1] + did[i+1:i+7] + "…" + did[len(did)-4:]
	}
	return did
}

func shortHash(h wire.Hash) string {
	s := h.String()
	if len(s) > 16 {
		return s[:12] + "…" + s[len(s)-4:]
	}
	return s
}

var (
	attoPerTNZO          = new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)
	attoPerTenThousandth = new(big.Int).Exp(big.NewInt(10), big.NewInt(14), nil)
)

// tnzo renders an attoTNZO decimal string as TNZO with up to 4 decimals.
func tnzo(atto string) string {
	v, ok := new(big.Int).SetString(atto, 10)
	if !ok {
		return atto
	}
	r := new(big.Rat).SetFrac(v, attoPerTNZO)
	if v.Sign() != 0 && new(big.Int).Abs(v).Cmp(attoPerTenThousandth) < 0 {
		f, _ := r.Float64() // too small for 4 decimals: 4 significant digits
		return strconv.FormatFloat(f, 'g', 4, 64) + " TNZO"
	}
	s := strings.TrimRight(strings.TrimRight(r.FloatString(4), "0"), ".")
	return s + " TNZO"
}

// sci renders a long decimal (an election ticket) in 4 significant digits.
func sci(s string) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	return strconv.FormatFloat(f, 'g', 4, 64)
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", f) }
