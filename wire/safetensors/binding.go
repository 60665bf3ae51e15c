package safetensors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// The __metadata__ keys that bind an outer-gradient payload to its author
// (docs/protocol/safetensors.md §6). The content hash covers the header, so
// the signature over payload_hash covers the binding too.
const (
	MetaTrainer  = "tenzro.trainer"
	MetaTask     = "tenzro.task"
	MetaRound    = "tenzro.round"
	MetaFragment = "tenzro.fragment"
)

// maxBindingField bounds the trainer DID and task id of a binding (bytes).
const maxBindingField = 256

// Binding errors; every binding error wraps one of these.
var (
	// ErrUnbound: the payload's __metadata__ has none of the binding keys.
	ErrUnbound = errors.New("safetensors: payload is not bound to a trainer (no tenzro.* metadata)")
	// ErrBinding: the binding keys are malformed, incomplete, mixed with
	// other keys, or name another trainer, task, round or fragment.
	ErrBinding = errors.New("safetensors: bad payload binding")
)

// Binding names the trainer, task, round and fragment an outer-gradient
// payload was produced for.
type Binding struct {
	Trainer  string
	Task     string
	Round    uint64
	Fragment uint64
}

// Metadata is the binding as a payload's __metadata__ map: exactly the four
// keys, round and fragment in shortest decimal.
func (b Binding) Metadata() map[string]string {
	return map[string]string{
		MetaTrainer:  b.Trainer,
		MetaTask:     b.Task,
		MetaRound:    strconv.FormatUint(b.Round, 10),
		MetaFragment: strconv.FormatUint(b.Fragment, 10),
	}
}

// ParseBinding reads a binding from a payload's __metadata__ strictly:
// exactly the four keys (no other metadata), trainer and task 1..256 bytes,
// round and fragment decimal integers without sign or leading zero that fit
// a uint64. No binding key at all is ErrUnbound.
func ParseBinding(md map[string]string) (Binding, error) {
	var b Binding
	n := 0
	for _, k := range []string{MetaTrainer, MetaTask, MetaRound, MetaFragment} {
		if _, ok := md[k]; ok {
			n++
		}
	}
	if n == 0 {
		return b, ErrUnbound
	}
	for _, k := range []string{MetaTrainer, MetaTask, MetaRound, MetaFragment} {
		if _, ok := md[k]; !ok {
			return b, fmt.Errorf("%w: __metadata__ has no %q", ErrBinding, k)
		}
	}
	if len(md) != 4 {
		for k := range md {
			switch k {
			case MetaTrainer, MetaTask, MetaRound, MetaFragment:
			default:
				return b, fmt.Errorf("%w: __metadata__ key %q: a bound payload's metadata holds only %s, %s, %s and %s", ErrBinding, trunc(k), MetaTrainer, MetaTask, MetaRound, MetaFragment)
			}
		}
	}
	for _, k := range []string{MetaTrainer, MetaTask} {
		if v := md[k]; len(v) == 0 || len(v) > maxBindingField {
			return b, fmt.Errorf("%w: %s is %d bytes, want 1..%d", ErrBinding, k, len(v), maxBindingField)
		} else if !utf8.ValidString(v) {
			return b, fmt.Errorf("%w: %s is not valid UTF-8", ErrBinding, k)
		}
	}
	b.Trainer, b.Task = md[MetaTrainer], md[MetaTask]
	var err error
	if b.Round, err = parseDecimal(md[MetaRound]); err != nil {
		return Binding{}, fmt.Errorf("%w: %s %q: %v", ErrBinding, MetaRound, trunc(md[MetaRound]), err)
	}
	if b.Fragment, err = parseDecimal(md[MetaFragment]); err != nil {
		return Binding{}, fmt.Errorf("%w: %s %q: %v", ErrBinding, MetaFragment, trunc(md[MetaFragment]), err)
	}
	return b, nil
}

// Check says whether b is the binding want, naming the first field that
// differs.
func (b Binding) Check(want Binding) error {
	switch {
	case b.Trainer != want.Trainer:
		return fmt.Errorf("%w: the payload names trainer %s, the submission is signed by %s", ErrBinding, trunc(b.Trainer), trunc(want.Trainer))
	case b.Task != want.Task:
		return fmt.Errorf("%w: the payload names task %s, the submission is for %s", ErrBinding, trunc(b.Task), trunc(want.Task))
	case b.Round != want.Round:
		return fmt.Errorf("%w: the payload names round %d, the submission is for round %d", ErrBinding, b.Round, want.Round)
	case b.Fragment != want.Fragment:
		return fmt.Errorf("%w: the payload names fragment %d, the submission is for fragment %d", ErrBinding, b.Fragment, want.Fragment)
	}
	return nil
}

// CheckBinding reads the header of payload (no tensor data is touched) and
// checks that its binding is want: ErrUnbound when it has none, ErrBinding
// when it is malformed or names anything else, a parse error when the
// header does not parse.
func CheckBinding(payload []byte, want Binding, lim Limits) error {
	_, md, err := ParseHeaderAt(bytes.NewReader(payload), int64(len(payload)), lim)
	if err != nil {
		return err
	}
	b, err := ParseBinding(md)
	if err != nil {
		return err
	}
	return b.Check(want)
}

// Bind returns payload bound to b. A payload already bound to b comes back
// unchanged (same bytes, same hash); an unbound one is re-encoded in
// canonical form with b as its only metadata (other metadata, such as
// {"format":"pt"}, is dropped: a bound payload carries only its binding);
// one bound to anything else is refused with ErrBinding.
func Bind(payload []byte, b Binding, lim Limits) ([]byte, error) {
	tensors, md, err := Parse(payload, lim)
	if err != nil {
		return nil, err
	}
	have, err := ParseBinding(md)
	switch {
	case err == nil:
		if err := have.Check(b); err != nil {
			return nil, err
		}
		return payload, nil
	case !errors.Is(err, ErrUnbound):
		return nil, err
	}
	for _, k := range []string{MetaTrainer, MetaTask} {
		if v := b.Metadata()[k]; len(v) == 0 || len(v) > maxBindingField || !utf8.ValidString(v) {
			return nil, fmt.Errorf("%w: %s is %d bytes, want 1..%d of UTF-8", ErrBinding, k, len(v), maxBindingField)
		}
	}
	return Encode(tensors, b.Metadata())
}

// BindTo writes the safetensors file of size bytes read through r, bound to
// b, to w, streaming the tensor data (a payload of any size is stamped
// without holding it in memory). It returns whether it wrote anything: a
// file already bound to b is left as it is (false, nil: use the original);
// an unbound one is written as Bind would return it; one bound to anything
// else is refused with ErrBinding.
func BindTo(w io.Writer, r io.ReaderAt, size int64, b Binding, lim Limits) (bool, error) {
	tensors, md, err := ParseHeaderAt(r, size, lim)
	if err != nil {
		return false, err
	}
	have, err := ParseBinding(md)
	switch {
	case err == nil:
		return false, have.Check(b)
	case !errors.Is(err, ErrUnbound):
		return false, err
	}
	for _, k := range []string{MetaTrainer, MetaTask} {
		if v := b.Metadata()[k]; len(v) == 0 || len(v) > maxBindingField || !utf8.ValidString(v) {
			return false, fmt.Errorf("%w: %s is %d bytes, want 1..%d of UTF-8", ErrBinding, k, len(v), maxBindingField)
		}
	}
	ts := make([]Tensor, len(tensors))
	at := make(map[string]TensorAt, len(tensors))
	for i, t := range tensors {
		ts[i] = Tensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape}
		at[t.Name] = t
	}
	sorted, h, _, err := encodeHeaderOf(ts, b.Metadata(), false)
	if err != nil {
		return false, err
	}
	if _, err := w.Write(h); err != nil {
		return false, err
	}
	for _, t := range sorted {
		src := at[t.Name]
		if _, err := io.Copy(w, io.NewSectionReader(r, src.Offset, src.Len)); err != nil {
			return false, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	return true, nil
}

// parseDecimal parses a uint64 in shortest decimal: digits only, no sign,
// no leading zero except "0" itself.
func parseDecimal(s string) (uint64, error) {
	if s == "" || len(s) > 20 {
		return 0, fmt.Errorf("want 1..20 decimal digits")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("leading zero")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("not a decimal integer")
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("does not fit 64 bits")
	}
	return v, nil
}

func trunc(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + "…"
	}
	return s
}
