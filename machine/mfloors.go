package machine

import (
	"fmt"
	"math/big"
	"slices"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// Economic floors (issue 22, finding 9): a chain parameter, not a spec's
// choice, bounds below what a posting escrows, what a trainer stakes and
// what a challenger risks, so that none of them costs 1 atto. The bond
// must also cover what a wrong challenge costs the validators: each of
// them re-executes the fragment's commit, which reads and decodes its K
// inputs, so the floor grows with K × the fragment's payload bytes.
var (
	// DefaultMinRewardPool is the smallest reward pool (1 TNZO).
	DefaultMinRewardPool = big.NewInt(1_000_000_000_000_000_000)
	// DefaultMinStake is the smallest trainer stake (0.01 TNZO).
	DefaultMinStake = big.NewInt(10_000_000_000_000_000)
	// DefaultMinChallengeBond is the smallest challenge bond (0.1 TNZO).
	DefaultMinChallengeBond = big.NewInt(100_000_000_000_000_000)
	// DefaultReexecBondByte is the bond per payload byte re-executed:
	// 0.004 TNZO per MB, so 4 × 128 MB inputs need a 2.15 TNZO bond, and the
	// seed's own spec (200M bf16 in 12 fragments, K=6: 229 MB re-executed
	// per fragment) fits under the default 1 TNZO challenge bond.
	DefaultReexecBondByte = big.NewInt(4_000_000_000)
)

// applyFees copies a genesis's fee and floor parameters over p's defaults.
func (gp *GenesisParams) applyFees(p *Params) {
	for _, f := range []struct {
		dst *string
		v   string
	}{{&p.TxFeeBase, gp.TxFeeBase}, {&p.TxFeeByte, gp.TxFeeByte}, {&p.MinRewardPool, gp.MinRewardPool},
		{&p.MinStake, gp.MinStake}, {&p.MinChallengeBond, gp.MinChallengeBond}, {&p.ReexecBondByte, gp.ReexecBondByte}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if gp.TxFeeKind != nil {
		p.TxFeeKind = gp.TxFeeKind
	}
}

// checkFeeKinds refuses a per-kind fee table that names an unknown
// transaction type or holds a bad amount.
func checkFeeKinds(m map[string]string) error {
	for k, v := range m {
		if !slices.Contains(wire.TxTypes, k) {
			return fmt.Errorf("params.tx_fee_kind: %q is not a transaction type", k)
		}
		if _, err := wire.ParseAmount(v); err != nil {
			return fmt.Errorf("params.tx_fee_kind[%s]: %w", k, err)
		}
	}
	return nil
}

// floor reads one floor parameter (empty: 0).
func floor(name, v string) (*big.Int, error) {
	a, err := wire.ParseAmount(or0(v))
	if err != nil {
		return nil, fmt.Errorf("params.%s: %w", name, err)
	}
	return a, nil
}

// checkPostingFloors refuses a spec whose reward pool, stake floor or
// challenge bond is below the chain's floors.
func (x *mtx) checkPostingFloors(spec *wire.TaskSpec) error {
	p, err := x.params()
	if err != nil {
		return err
	}
	for _, c := range []struct {
		what, param, floorV, v string
	}{
		{"reward_pool", "min_reward_pool", p.MinRewardPool, spec.RewardPool},
		{"challenge_bond", "min_challenge_bond", p.MinChallengeBond, spec.Bond()},
		{"min_stake", "min_stake", p.MinStake, or0(spec.MinStake)},
	} {
		min, err := floor(c.param, c.floorV)
		if err != nil {
			return err
		}
		if c.what == "min_stake" && spec.MinStake == "" {
			continue // the chain's min_stake applies at enrolment
		}
		v, err := wire.ParseAmount(c.v)
		if err != nil {
			return Errf(KindInvalid, "spec: %s: %v", c.what, err)
		}
		if v.Cmp(min) < 0 {
			return Errf(KindInvalid, "spec: %s %s is below this chain's %s of %s attoTNZO", c.what, v, c.param, min)
		}
	}
	return nil
}

// checkStakeFloor refuses an enrolment stake below the chain's min_stake.
func (x *mtx) checkStakeFloor(stake *big.Int) error {
	p, err := x.params()
	if err != nil {
		return err
	}
	min, err := floor("min_stake", p.MinStake)
	if err != nil {
		return err
	}
	if stake.Cmp(min) < 0 {
		return Errf(KindInvalid, "stake %s is below this chain's min_stake of %s attoTNZO", stake, min)
	}
	return nil
}

// ReexecBond is the smallest challenge bond of a run with quorum k whose
// largest fragment holds n values of dtype: reexecByte × k × n × the
// dtype's size, the payload bytes each validator reads and decodes to
// re-execute one commit (payloads are at most the dense encoding's size).
func ReexecBond(reexecByte *big.Int, k int, n int64, dtype string) *big.Int {
	bytes := new(big.Int).Mul(big.NewInt(n), big.NewInt(int64(safetensors.DtypeSize(dtype))))
	bytes.Mul(bytes, big.NewInt(int64(k)))
	return bytes.Mul(bytes, reexecByte)
}

// checkBondCoversReexec refuses initial weights whose fragments make the
// run's challenge bond smaller than the re-execution it would buy.
func (x *mtx) checkBondCoversReexec(r *Run, l *wire.InitLayout) error {
	p, err := x.params()
	if err != nil {
		return err
	}
	per, err := floor("reexec_bond_byte", p.ReexecBondByte)
	if err != nil {
		return err
	}
	var n int64
	dtype := ""
	for _, f := range l.Fragments {
		if f.N > n {
			n, dtype = f.N, f.Dtype
		}
	}
	if n == 0 {
		return nil
	}
	need := ReexecBond(per, r.spec.Quorum, n, dtype)
	bond, err := wire.ParseAmount(r.spec.Bond())
	if err != nil {
		return Errf(KindInvalid, "spec: challenge_bond: %v", err)
	}
	if bond.Cmp(need) < 0 {
		return Errf(KindInvalid, "spec: challenge_bond %s does not cover re-executing a fragment: K=%d inputs of %d %s values need at least %s attoTNZO (reexec_bond_byte %s)",
			bond, r.spec.Quorum, n, dtype, need, per)
	}
	return nil
}
