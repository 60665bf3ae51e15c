package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tenzro/train/wire"
)

// A run's state by key (KSRuns; docs/RATIONALE.md "A run's state by key").
// A task id never contains '/' (wire.ParseSpec), so each run owns the keys
//
//	<task>                       the header: the Run without its trainers and
//	                             fragments, plus their counts (runHead)
//	<task>/t/<did>               one enrolment (RunTrainer JSON)
//	<task>/f/<u32 index>         one fragment's state without its records,
//	                             plus their count (fragStored)
//	<task>/r/<u32 index><did>    one accepted record of the fragment's current
//	                             round: the 32-byte payload hash
//	<task>/a/<u64 seq>           the seq-th attestation digest of the run
//	                             (32 bytes), in the order accepted
//
// A submission record reads and writes only the header, its trainer, its
// fragment, its own record key and (with evidence) one attestation key,
// whatever the size of the run (loadRunFor). A fragment commit that leaves
// another fragment open reads the header, its fragment with its records
// and the trainers it pays, and writes those (loadRunForCommit,
// loadTrainers, commitNeedsWholeRun); a scored run's seed timers read the
// header and the fragment states (timersMayFire); an enrolment, election
// proof or the initial weights, when they cannot start the run, read the
// header and the enrolment enrolling (loadRunBeforeStart); leaving reads the header and its enrolment
// (loadRunWithTrainer). Every other transition loads the whole run (LoadRun)
// and writes back only the keys whose bytes changed (putRun). Only this
// file knows the layout.

// runHead is a run's header as stored: Trainers and Fragments are shadowed
// (always empty, so omitted) and replaced by their counts.
type runHead struct {
	*Run
	Trainers     []int `json:"trainers,omitempty"`
	Fragments    []int `json:"fragments,omitempty"`
	Attestations []int `json:"attestations,omitempty"`
	NActive      int   `json:"n_active"`
	NFragments   int   `json:"n_fragments"`
	NAttest      int   `json:"n_attestations"`
}

// fragStored is a fragment's state as stored: its records are under their
// own keys; N counts them.
type fragStored struct {
	*RunFragment
	Records []int `json:"records,omitempty"`
	N       int   `json:"n_records"`
}

// RunPrefix is the KSRuns prefix of every key of a run except its header
// (RunKey).
func RunPrefix(task string) []byte { return []byte(task + "/") }

func trainerPrefix(task string) []byte { return []byte(task + "/t/") }
func trainerKey(task, d string) []byte { return []byte(task + "/t/" + d) }
func fragPrefix(task string) []byte    { return []byte(task + "/f/") }
func fragKey(task string, f int) []byte {
	return binary.BigEndian.AppendUint32(fragPrefix(task), uint32(f))
}
func recRefPrefix(task string) []byte { return []byte(task + "/r/") }
func recRefFrag(task string, f int) []byte {
	return binary.BigEndian.AppendUint32(recRefPrefix(task), uint32(f))
}
func recRefKey(task string, f int, d string) []byte { return append(recRefFrag(task, f), d...) }
func attPrefix(task string) []byte                  { return []byte(task + "/a/") }
func attKey(task string, i int) []byte {
	return binary.BigEndian.AppendUint64(attPrefix(task), uint64(i))
}

// IsRunKey says whether a KSRuns key is a run's header (the key ListRuns-
// style scans should decode), not one of its parts.
func IsRunKey(k []byte) bool { return len(k) > 0 && !bytes.ContainsRune(k, '/') }

func checkTask(task string) error {
	if task == "" {
		return Errf(KindInvalid, "task_id is empty")
	}
	if len(task) > wire.MaxTaskIDLen {
		return Errf(KindInvalid, "task_id longer than %d bytes", wire.MaxTaskIDLen)
	}
	if strings.ContainsRune(task, '/') {
		return Errf(KindInvalid, "task_id %q contains '/'", task)
	}
	return nil
}

// loadHead reads and decodes a run's header.
func loadHead(ctx context.Context, kv KV, task string) (*Run, *runHead, []byte, error) {
	if err := checkTask(task); err != nil {
		return nil, nil, nil, err
	}
	raw, err := kv.Get(ctx, KSRuns, RunKey(task))
	if errors.Is(err, ErrNotFound) {
		return nil, nil, nil, Errf(KindNotFound, "no run with task_id %q", task)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load run %s: %w", task, err)
	}
	r, h, err := decodeHead(task, raw)
	return r, h, raw, err
}

// decodeHead decodes run task's header from its stored bytes raw, which
// the run keeps (putRun compares with them).
func decodeHead(task string, raw []byte) (*Run, *runHead, error) {
	r := &Run{}
	h := &runHead{Run: r}
	if err := json.Unmarshal(raw, h); err != nil {
		return nil, nil, fmt.Errorf("load run %s: corrupt state: %w", task, err)
	}
	if h.NFragments < 0 || h.NActive < 0 || h.NAttest < 0 {
		return nil, nil, fmt.Errorf("load run %s: corrupt state: negative counts", task)
	}
	spec, err := parseRunSpec(r.Spec)
	if err != nil {
		return nil, nil, fmt.Errorf("load run %s: %w", task, err)
	}
	if spec.TaskID != task {
		return nil, nil, fmt.Errorf("load run %s: corrupt state: the header holds run %q", task, spec.TaskID)
	}
	r.spec = spec
	r.raw = map[string][]byte{string(RunKey(task)): raw}
	r.nActive = h.NActive
	r.attBase = h.NAttest // until LoadRun reads them
	return r, h, nil
}

func decodeFrag(task string, i int, raw []byte) (*RunFragment, int, error) {
	fs := &RunFragment{}
	st := fragStored{RunFragment: fs}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, 0, fmt.Errorf("load run %s: fragment %d: corrupt state: %w", task, i, err)
	}
	if st.N < 0 {
		return nil, 0, fmt.Errorf("load run %s: fragment %d: corrupt state: negative record count", task, i)
	}
	return fs, st.N, nil
}

// LoadRun reads a whole run: header, enrolments (in DID order), fragments
// and each fragment's records of the current round (in DID order).
func LoadRun(ctx context.Context, kv KV, task string) (*Run, error) {
	return loadRun(ctx, kv, task, true)
}

// loadRun is LoadRun; without atts it leaves the run's attestation digests
// unread (Attestations empty, counted in attBase), which every transition
// but the receipt's and a challengeable run's round snapshot may: their
// number grows with every record of every round.
func loadRun(ctx context.Context, kv KV, task string, atts bool) (*Run, error) {
	r, h, _, err := loadHead(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	r.Trainers = []*RunTrainer{}
	err = kv.Scan(ctx, KSRuns, trainerPrefix(task), func(k, v []byte) error {
		t := &RunTrainer{}
		if err := json.Unmarshal(v, t); err != nil {
			return fmt.Errorf("load run %s: trainer %q: corrupt state: %w", task, k, err)
		}
		if string(trainerKey(task, t.DID)) != string(k) {
			return fmt.Errorf("load run %s: corrupt state: key %q holds trainer %q", task, k, t.DID)
		}
		r.raw[string(k)] = append([]byte(nil), v...)
		r.Trainers = append(r.Trainers, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	counts := make([]int, 0, h.NFragments)
	err = scanFrags(ctx, kv, r, h, func(k, v []byte, _ *RunFragment, n int) {
		r.raw[string(k)] = append([]byte(nil), v...)
		counts = append(counts, n)
	})
	if err != nil {
		return nil, err
	}
	rp := recRefPrefix(task)
	err = kv.Scan(ctx, KSRuns, rp, func(k, v []byte) error {
		if len(k) <= len(rp)+4 || len(v) != len(wire.Hash{}) {
			return fmt.Errorf("load run %s: corrupt state: record key %q (%d-byte value)", task, k, len(v))
		}
		i := binary.BigEndian.Uint32(k[len(rp):])
		if uint64(i) >= uint64(len(r.Fragments)) {
			return fmt.Errorf("load run %s: corrupt state: record of fragment %d, the run has %d", task, i, len(r.Fragments))
		}
		ref := RecRef{DID: string(k[len(rp)+4:])}
		copy(ref.PayloadHash[:], v)
		fs := r.Fragments[i]
		fs.Records = append(fs.Records, ref)
		r.raw[string(k)] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, fs := range r.Fragments {
		if len(fs.Records) != counts[i] {
			return nil, fmt.Errorf("load run %s: corrupt state: fragment %d has %d records, its state says %d", task, i, len(fs.Records), counts[i])
		}
	}
	if !atts {
		return r, r.checkActive(h)
	}
	r.attBase = 0
	ap := attPrefix(task)
	err = kv.Scan(ctx, KSRuns, ap, func(k, v []byte) error {
		i := len(r.Attestations)
		if len(k) != len(ap)+8 || binary.BigEndian.Uint64(k[len(ap):]) != uint64(i) || len(v) != len(wire.Hash{}) {
			return fmt.Errorf("load run %s: corrupt state: attestation key %q (%d-byte value; want index %d)", task, k, len(v), i)
		}
		var a wire.Hash
		copy(a[:], v)
		r.Attestations = append(r.Attestations, a)
		r.raw[string(k)] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(r.Attestations) != h.NAttest {
		return nil, fmt.Errorf("load run %s: corrupt state: %d attestations stored, the header says %d", task, len(r.Attestations), h.NAttest)
	}
	return r, r.checkActive(h)
}

// scanFrags appends to r.Fragments each of the run's fragment states, in
// index order, checking their keys and their number against the header h,
// and calls fn with each one's key, stored bytes (valid during the call),
// state and record count.
func scanFrags(ctx context.Context, kv KV, r *Run, h *runHead, fn func(k, v []byte, fs *RunFragment, n int)) error {
	task := r.spec.TaskID
	fp := fragPrefix(task)
	err := kv.Scan(ctx, KSRuns, fp, func(k, v []byte) error {
		i := len(r.Fragments)
		if len(k) != len(fp)+4 || binary.BigEndian.Uint32(k[len(fp):]) != uint32(i) {
			return fmt.Errorf("load run %s: corrupt state: fragment key %q out of order (want index %d)", task, k, i)
		}
		fs, n, err := decodeFrag(task, i, v)
		if err != nil {
			return err
		}
		r.Fragments = append(r.Fragments, fs)
		fn(k, v, fs, n)
		return nil
	})
	if err != nil {
		return err
	}
	if len(r.Fragments) != h.NFragments {
		return fmt.Errorf("load run %s: corrupt state: %d fragments stored, the header says %d", task, len(r.Fragments), h.NFragments)
	}
	return nil
}

func (r *Run) checkActive(h *runHead) error {
	if r.Count(wire.TrainerActive) != h.NActive {
		return fmt.Errorf("load run %s: corrupt state: %d active trainers, the header says %d", r.spec.TaskID, r.Count(wire.TrainerActive), h.NActive)
	}
	return nil
}

// loadRunFor reads the part of a run one submission record needs: the
// header, trainer d's enrolment (if any) and fragment f's state without
// its records (if f is in range; every other fragment is nil). Its cost
// does not depend on the size of the run. putRun writes back only these.
func loadRunFor(ctx context.Context, kv KV, task, d string, f uint64) (*Run, error) {
	r, h, _, err := loadHead(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	r.part = true
	r.Trainers = []*RunTrainer{}
	tk := trainerKey(task, d)
	if v, err := kv.Get(ctx, KSRuns, tk); err == nil {
		t := &RunTrainer{}
		if err := json.Unmarshal(v, t); err != nil || t.DID != d {
			return nil, fmt.Errorf("load run %s: trainer %q: corrupt state (%v)", task, d, err)
		}
		r.raw[string(tk)] = v
		r.Trainers = append(r.Trainers, t)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("load run %s: %w", task, err)
	}
	if h.NFragments > 0 {
		r.Fragments = make([]*RunFragment, h.NFragments)
	}
	if f < uint64(h.NFragments) {
		fk := fragKey(task, int(f))
		v, err := kv.Get(ctx, KSRuns, fk)
		if err != nil {
			return nil, fmt.Errorf("load run %s: fragment %d: %w", task, f, err)
		}
		fs, n, err := decodeFrag(task, int(f), v)
		if err != nil {
			return nil, err
		}
		fs.base = n
		r.raw[string(fk)] = v
		r.Fragments[f] = fs
	}
	return r, nil
}

// loadRunForCommit reads the part of a run a fragment commit of fragment f
// reads when it does not close the round: the header and fragment f's state
// with its records of the current round (in DID order, as LoadRun gives
// them); every other fragment is nil and Trainers is empty until
// loadTrainers adds the ones the commit pays. Its cost grows with the
// fragment's records, not with the run. putRun writes back only these.
func loadRunForCommit(ctx context.Context, kv KV, task string, f uint64) (*Run, error) {
	r, h, _, err := loadHead(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	r.part = true
	r.Trainers = []*RunTrainer{}
	if h.NFragments > 0 {
		r.Fragments = make([]*RunFragment, h.NFragments)
	}
	if f >= uint64(h.NFragments) {
		return r, nil
	}
	i := int(f)
	fk := fragKey(task, i)
	v, err := kv.Get(ctx, KSRuns, fk)
	if err != nil {
		return nil, fmt.Errorf("load run %s: fragment %d: %w", task, f, err)
	}
	fs, n, err := decodeFrag(task, i, v)
	if err != nil {
		return nil, err
	}
	r.raw[string(fk)] = v
	pre := recRefFrag(task, i)
	err = kv.Scan(ctx, KSRuns, pre, func(k, v []byte) error {
		if len(k) <= len(pre) || len(v) != len(wire.Hash{}) {
			return fmt.Errorf("load run %s: corrupt state: record key %q (%d-byte value)", task, k, len(v))
		}
		ref := RecRef{DID: string(k[len(pre):])}
		copy(ref.PayloadHash[:], v)
		fs.Records = append(fs.Records, ref)
		r.raw[string(k)] = append([]byte(nil), v...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(fs.Records) != n {
		return nil, fmt.Errorf("load run %s: corrupt state: fragment %d has %d records, its state says %d", task, i, len(fs.Records), n)
	}
	r.Fragments[i] = fs
	return r, nil
}

// loadTrainers adds to a run loaded in part the enrolments of dids it does
// not hold yet (a DID with none stays absent, as in the whole run), keeping
// Trainers in DID order. A whole run holds every enrolment already.
func loadTrainers(ctx context.Context, kv KV, r *Run, dids []string) error {
	if !r.part {
		return nil
	}
	task := r.spec.TaskID
	n := len(r.Trainers)
	have := make(map[string]bool, n+len(dids))
	for _, t := range r.Trainers {
		have[t.DID] = true
	}
	for _, d := range dids {
		if have[d] {
			continue
		}
		have[d] = true
		tk := trainerKey(task, d)
		v, err := kv.Get(ctx, KSRuns, tk)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("load run %s: %w", task, err)
		}
		t := &RunTrainer{}
		if err := json.Unmarshal(v, t); err != nil || t.DID != d {
			return fmt.Errorf("load run %s: trainer %q: corrupt state (%v)", task, d, err)
		}
		r.raw[string(tk)] = v
		r.Trainers = append(r.Trainers, t)
	}
	if len(r.Trainers) > n {
		sort.Slice(r.Trainers, func(a, b int) bool { return r.Trainers[a].DID < r.Trainers[b].DID })
	}
	return nil
}

// loadRunBeforeStart reads the part of a run that an enrolment of d, an
// election proof (d empty) or the initial weights (setsInit) read while the
// run awaits enrolment and the transaction cannot start it: the header and
// d's enrolment (if any); every fragment is nil. Its cost does not depend
// on the number of trainers (settlementLines counts their keys, without
// decoding them, only for a new DID). Otherwise — the run started (a
// joining trainer is counted by status, not in the header), ended, or may
// start now (its initial weights are known or set now, and M trainers are
// active, counting d: maybeStart deals every trainer's shards) — it loads
// the whole run. putRun writes back only the parts read.
func loadRunBeforeStart(ctx context.Context, kv KV, task, d string, setsInit bool) (*Run, error) {
	r, h, _, err := loadHead(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	active := h.NActive
	if d != "" {
		active++
	}
	if alwaysWholeRun || r.Status != wire.StatusAwaiting || ((r.HasInit || setsInit) && active >= r.spec.TrainerCount) {
		return LoadRun(ctx, kv, task)
	}
	r.part = true
	r.Trainers = []*RunTrainer{}
	if h.NFragments > 0 {
		r.Fragments = make([]*RunFragment, h.NFragments)
	}
	if d == "" {
		return r, nil
	}
	if err := loadTrainers(ctx, kv, r, []string{d}); err != nil {
		return nil, err
	}
	return r, nil
}

// loadRunWithTrainer reads the part of a run that leaving reads: the
// header and trainer d's enrolment (if any); every fragment is nil
// (loadRunFor without a fragment). putRun writes back only these.
func loadRunWithTrainer(ctx context.Context, kv KV, task, d string) (*Run, error) {
	if alwaysWholeRun {
		return LoadRun(ctx, kv, task)
	}
	return loadRunFor(ctx, kv, task, d, math.MaxUint64)
}

// enrolled is CountActive; a run loaded by loadRunBeforeStart counts from its
// header (a run awaiting enrolment has no joining trainer).
func (r *Run) enrolled() int {
	if r.part {
		return r.nActive
	}
	return r.CountActive()
}

// errEnough stops settlementLines' scan.
var errEnough = errors.New("enough")

// settlementLines is len(Trainers): every enrolment the run holds, those
// who left included. A run loaded in part counts their keys, undecoded,
// up to wire.MaxTrainers (all that the check of a new enrolment needs).
func (r *Run) settlementLines(ctx context.Context, kv KV) (int, error) {
	if !r.part {
		return len(r.Trainers), nil
	}
	n := 0
	err := kv.Scan(ctx, KSRuns, trainerPrefix(r.spec.TaskID), func(_, _ []byte) error {
		if n++; n >= wire.MaxTrainers {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return 0, fmt.Errorf("load run %s: %w", r.spec.TaskID, err)
	}
	return n, nil
}

// otherFragmentsClosed says whether every fragment of a run loaded in part
// other than i is closed, reading their stored states one by one from i+1
// on (wrapping) and stopping at the first open one: commits that arrive in
// fragment order read one state, and a round's commits in any order read
// O(F log F) states in all. Only the closing commit reads them all.
func otherFragmentsClosed(ctx context.Context, kv KV, task string, i, n int) (bool, error) {
	for d := 1; d < n; d++ {
		j := (i + d) % n
		v, err := kv.Get(ctx, KSRuns, fragKey(task, j))
		if err != nil {
			return false, fmt.Errorf("load run %s: fragment %d: %w", task, j, err)
		}
		var st struct {
			Closed bool `json:"closed"`
		}
		if err := json.Unmarshal(v, &st); err != nil {
			return false, fmt.Errorf("load run %s: fragment %d: corrupt state: %w", task, j, err)
		}
		if !st.Closed {
			return false, nil
		}
	}
	return true, nil
}

// alwaysWholeRun makes the commit and timer paths load the whole run even
// where a part suffices: only tests set it, to compare what the partial
// loads write with what the whole run writes.
var alwaysWholeRun = false

// commitNeedsWholeRun says whether a commit of fragment i by ticket k at
// height, on a run loaded by loadRunForCommit, may change more than the
// header, fragment i and the trainers it pays: when another ticket had its
// turn before k this round (noteTurn reads every fragment's commit), when a
// pending round becomes final (finalizeRound pays and slashes every
// trainer of it, and may seal), or when every other fragment is closed (the
// commit closes the round). Then the commit loads the whole run.
func (r *Run) commitNeedsWholeRun(ctx context.Context, kv KV, i, k int, height int64) (bool, error) {
	if alwaysWholeRun {
		return true, nil
	}
	if order := r.TurnOrder(); len(order) == 0 || order[0] != k {
		return true, nil
	}
	if r.AwaitingFinal {
		return true, nil
	}
	if len(r.Pending) > 0 && height >= r.Pending[0].FinalAt && !r.openOn(r.Pending[0].Round) {
		return true, nil
	}
	return otherFragmentsClosed(ctx, kv, r.spec.TaskID, i, len(r.Fragments))
}

// putRun writes a run back: every key whose bytes changed since it was
// loaded, and (for a whole run) deletes the keys of parts it no longer
// has. A run loaded by loadRunFor writes only the parts it loaded, and
// the records appended since.
func (x *mtx) putRun(r *Run) error {
	task := r.spec.TaskID
	if r.raw == nil {
		r.raw = map[string][]byte{}
	}
	var want map[string]bool
	if !r.part {
		want = map[string]bool{}
	}
	put := func(key, val []byte) {
		k := string(key)
		if want != nil {
			want[k] = true
		}
		if old, ok := r.raw[k]; ok && bytes.Equal(old, val) {
			return
		}
		x.set(KSRuns, key, val)
		r.raw[k] = val
	}
	nActive := r.nActive
	if !r.part {
		nActive = r.Count(wire.TrainerActive)
		r.nActive = nActive
	}
	head, err := json.Marshal(runHead{Run: r, NActive: nActive, NFragments: len(r.Fragments), NAttest: r.attBase + len(r.Attestations)})
	if err != nil {
		return fmt.Errorf("encode run %s: %w", task, err)
	}
	put(RunKey(task), head)
	for i, a := range r.Attestations {
		put(attKey(task, r.attBase+i), append([]byte(nil), a[:]...))
	}
	for _, t := range r.Trainers {
		v, err := json.Marshal(t)
		if err != nil {
			return fmt.Errorf("encode run %s: trainer %s: %w", task, t.DID, err)
		}
		put(trainerKey(task, t.DID), v)
	}
	for i, fs := range r.Fragments {
		if fs == nil {
			continue // not loaded (loadRunFor)
		}
		v, err := json.Marshal(fragStored{RunFragment: fs, N: fs.accepted()})
		if err != nil {
			return fmt.Errorf("encode run %s: fragment %d: %w", task, i, err)
		}
		put(fragKey(task, i), v)
		for _, rec := range fs.Records {
			put(recRefKey(task, i, rec.DID), append([]byte(nil), rec.PayloadHash[:]...))
		}
	}
	if want != nil {
		pre := string(RunPrefix(task))
		for k := range r.raw {
			if strings.HasPrefix(k, pre) && !want[k] {
				x.del(KSRuns, []byte(k)) // the overlay orders its writes by key
				delete(r.raw, k)
			}
		}
	}
	return nil
}

// accepted is the number of records the fragment accepted in the current
// round (base: those a partial load did not read).
func (fs *RunFragment) accepted() int { return fs.base + len(fs.Records) }

// activeTrainers is Count(TrainerActive), from the header when the run was
// loaded in part.
func (r *Run) activeTrainers() int {
	if r.part {
		return r.nActive
	}
	return r.Count(wire.TrainerActive)
}

// RunJSON is a whole run as one JSON value (the Run's fields, trainers and
// fragments with their records included): what the chain answers for the
// run query.
func RunJSON(ctx context.Context, kv KV, task string) ([]byte, error) {
	r, err := LoadRun(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// RunTasks lists the task ids of every run in the state (header keys), in
// key order, whatever state they are in.
func RunTasks(ctx context.Context, kv KV) ([]string, error) {
	var out []string
	err := kv.Scan(ctx, KSRuns, nil, func(k, _ []byte) error {
		if IsRunKey(k) {
			out = append(out, string(k))
		}
		return nil
	})
	return out, err
}

// LoadRunHeader reads a run's header and, with fragments, each fragment's
// state without its records: what deciding whether a run needs work takes,
// at a cost that does not grow with its enrolments and records. The run it
// returns is a partial read-only view: Trainers is empty (Count, Trainer
// and CountActive see no one; Due and the "all in" rule use the header's
// count of active trainers) and each fragment's Records is empty (its
// count is kept for Due). Load the whole run (LoadRun) for anything else.
func LoadRunHeader(ctx context.Context, kv KV, task string, fragments bool) (*Run, error) {
	return loadRunHeader(ctx, kv, task, nil, fragments, false)
}

// loadRunHeader is LoadRunHeader; head, when not nil, is the header's
// stored bytes already read (in this state), so they are not read again;
// keep keeps each fragment's stored bytes, so putRun can write back the run
// (in part: the header and the fragments whose bytes changed).
func loadRunHeader(ctx context.Context, kv KV, task string, head []byte, fragments, keep bool) (*Run, error) {
	var r *Run
	var h *runHead
	var err error
	if head != nil {
		r, h, err = decodeHead(task, head)
	} else {
		r, h, _, err = loadHead(ctx, kv, task)
	}
	if err != nil {
		return nil, err
	}
	r.part = true
	r.Trainers = []*RunTrainer{}
	if !fragments {
		return r, nil
	}
	err = scanFrags(ctx, kv, r, h, func(k, v []byte, fs *RunFragment, n int) {
		fs.base = n
		if keep {
			r.raw[string(k)] = append([]byte(nil), v...)
		}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// timersMayFire says whether timers might change run task at blk, from its
// header and fragment states only. It is conservative: false only when
// timers would find nothing to do (it mirrors timers' conditions, each
// read the same way), so skipping the whole load then changes nothing.
// When what may fire is only scoring seeds (no deadline, finality, expiry
// or status change), seeds is the run's header and fragment states, loaded
// to be written back (loadRunHeader keeping their bytes): drawing a seed
// changes nothing else, so timers need not load the run's enrolments and
// records.
func timersMayFire(ctx context.Context, kv KV, task string, blk Block, memo *timerMemo) (fire bool, seeds *Run, err error) {
	raw, err := kv.Get(ctx, KSRuns, RunKey(task))
	if err != nil {
		// No header or a failed read: the load reports it precisely.
		_, err = LoadRunHeader(ctx, kv, task, false)
		if err == nil {
			err = fmt.Errorf("load run %s: the header changed while it was read", task)
		}
		return false, nil, err
	}
	headSum := sha256.Sum256(raw)
	e, ok := memo.entry(task, headSum)
	if !ok {
		r, err := loadRunHeader(ctx, kv, task, raw, false, false)
		if err != nil {
			return false, nil, err
		}
		e = &memoEntry{head: headSum, facts: headFacts(r)}
		memo.put(task, *e)
	}
	f := e.facts
	now := blk.TimeMs
	if !f.running() {
		memo.drop(task)
	}
	if f.status == wire.StatusAwaiting {
		return now >= f.enrollDue, nil, nil
	}
	if f.status != wire.StatusRunning {
		return true, nil, nil // the index cleanup
	}
	if f.hasOpen && blk.Height > f.openMin {
		return true, nil, nil // expireChallenges
	}
	if f.hasPending && blk.Height >= f.pendingAt {
		return true, nil, nil // advanceFinality
	}
	if f.awaitingFinal && !f.hasPending {
		return true, nil, nil // advanceFinality seals
	}
	deadline := now >= f.roundDue && !f.awaitingFinal
	if !deadline && !f.scored {
		return false, nil, nil
	}
	// Without a scorer, what follows depends on the fragment states' bytes
	// alone (not on the block's time): remembered by their hash.
	var fragSum [32]byte
	if !f.scored {
		if fragSum, err = fragsHash(ctx, kv, task); err != nil {
			return false, nil, err
		}
		if e.fragsKnown && e.frags == fragSum {
			return e.deadlineFires, nil, nil
		}
	}
	r, err := loadRunHeader(ctx, kv, task, raw, true, !deadline)
	if err != nil {
		return false, nil, err
	}
	fires := false
	for _, fs := range r.Fragments {
		if r.Scorer != nil && fs.ScoreSeed == nil && r.Due(fs, now) {
			if !deadline {
				return true, r, nil // only seeds: the deadline is the one other timer left
			}
			return true, nil, nil
		}
		if deadline && !fs.Closed && fs.accepted() < r.spec.Quorum {
			fires = true
			break
		}
	}
	if !f.scored {
		e.fragsKnown, e.frags, e.deadlineFires = true, fragSum, fires
		memo.put(task, *e)
	}
	return fires, nil, nil
}
