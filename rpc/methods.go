package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/creachadair/jrpc2"
	"github.com/creachadair/jrpc2/handler"

	"github.com/tenzro/train/wire"
)

// MethodDiscover is the OpenRPC service-discovery method.
const MethodDiscover = "rpc.discover"

// GetPayloadParams is tenzro_training_getPayload: a stored payload by its
// content hash (wire.ContentHash, BLAKE3-256).
type GetPayloadParams struct {
	Hash wire.Hash `json:"hash"`
}

// Payload answers tenzro_training_getPayload.
type Payload struct {
	Hash    wire.Hash `json:"hash"`
	Payload []byte    `json:"payload"`
}

// GetPluginParams is tenzro_plugin_get.
type GetPluginParams struct {
	Hash wire.Hash `json:"hash"`
}

// PluginModule answers tenzro_plugin_get: the plugin's info and module bytes.
type PluginModule struct {
	wire.PluginInfo
	Module []byte `json:"module"`
}

// paramMode says how a method takes params.
type paramMode int

const (
	paramsRequired paramMode = iota // an object must be sent
	paramsOptional                  // an object, or nothing
	paramsNone                      // nothing, {} or []
)

// typed adapts fn to a jrpc2 handler: strict decoding of the params object
// into P, the required-field check, error mapping, panic recovery and the
// observer.
func typed[P any](s *Server, method string, mode paramMode, required func(*P) string, fn func(ctx context.Context, p *P) (any, error)) handler.Func {
	return func(ctx context.Context, req *jrpc2.Request) (res any, err error) {
		start := time.Now()
		defer func() {
			if r := recover(); r != nil {
				ref := newRef()
				s.log.ErrorContext(ctx, "rpc: handler panic", "method", method, "ref", ref, "panic", r, "stack", string(debug.Stack()))
				res, err = nil, newError(CodeInternal, &errData{Kind: "internal", Ref: ref}, "internal error (node log ref %s)", ref)
			}
			if s.opts.Observer != nil {
				code := 0
				if err != nil {
					code = int(jrpc2.ErrorCode(err))
				}
				s.opts.Observer.ObserveRPC(method, code, time.Since(start))
			}
		}()
		p := new(P)
		if jerr := decodeParams(&s.stash, req, method, mode, p); jerr != nil {
			return nil, jerr
		}
		if required != nil {
			if missing := required(p); missing != "" {
				return nil, invalidParams(method, "missing required param %q", missing)
			}
		}
		out, ferr := fn(ctx, p)
		if ferr != nil {
			return nil, mapError(ctx, s.log, method, ferr)
		}
		return out, nil
	}
}

// strictObject decodes a params object into target with unknown fields
// refused. It implements json.Unmarshaler so that jrpc2 hands it the params
// bytes without copying them; a reference object is resolved from the
// server's stash (large.go).
type strictObject struct {
	stash  *paramStash
	target any
	raw    *json.RawMessage // set instead of target for raw params
	none   bool
}

func (o *strictObject) UnmarshalJSON(data []byte) error {
	if big, ok := o.stash.take(data); ok {
		data = big
	}
	data = bytes.TrimLeft(data, " \t\r\n")
	if o.none {
		if t := string(bytes.TrimSpace(data)); t == "{}" || t == "[]" {
			return nil
		}
		return errors.New("this method takes no params")
	}
	if len(data) == 0 || data[0] != '{' {
		return errNotObject
	}
	if o.raw != nil {
		if !json.Valid(data) {
			return errors.New("params are not valid JSON")
		}
		if err := wire.CheckStrictJSON(data, wire.StrictJSONOptions{}); err != nil {
			return err
		}
		*o.raw = append(json.RawMessage(nil), data...)
		return nil
	}
	return decodeStrict(data, o.target)
}

func decodeParams(stash *paramStash, req *jrpc2.Request, method string, mode paramMode, target any) *jrpc2.Error {
	if !req.HasParams() {
		if mode == paramsRequired {
			return invalidParams(method, "missing params: want a JSON object")
		}
		return nil
	}
	so := &strictObject{stash: stash, target: target, none: mode == paramsNone}
	if raw, ok := target.(*json.RawMessage); ok {
		so.raw = raw
	}
	if err := req.UnmarshalParams(so); err != nil {
		var je *jrpc2.Error
		if errors.As(err, &je) && len(je.Data) > 0 {
			var detail string
			if json.Unmarshal(je.Data, &detail) == nil {
				return invalidParams(method, "%s", strings.TrimPrefix(detail, "json: "))
			}
		}
		return invalidParams(method, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func needTask(id string) string {
	if id == "" {
		return "task_id"
	}
	return ""
}

func first(pairs ...string) string {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return pairs[i]
		}
	}
	return ""
}

func signedMissing(s wire.Signed) string {
	if len(s.Signature) == 0 {
		return "signature"
	}
	if s.Nonce == 0 {
		return "nonce"
	}
	return ""
}

// nonNil turns a nil slice into an empty one so results encode as [].
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

type empty struct{}

// methods builds the method table.
func (s *Server) methods() handler.Map {
	svc := s.svc
	m := handler.Map{
		wire.MethodPostTask: typed(s, wire.MethodPostTask, paramsRequired, func(p *wire.PostTaskParams) string {
			if len(p.Spec) == 0 || string(p.Spec) == "null" {
				return "spec"
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.PostTaskParams) (any, error) { return svc.PostTask(ctx, p) }),

		wire.MethodSetInitWeights: typed(s, wire.MethodSetInitWeights, paramsRequired, func(p *wire.SetInitWeightsParams) string {
			if m := needTask(p.TaskID); m != "" {
				return m
			}
			if len(p.Weights) == 0 && p.WeightsHash.IsZero() {
				return "weights"
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.SetInitWeightsParams) (any, error) {
			return svc.SetInitWeights(ctx, p)
		}),

		wire.MethodListRuns: typed(s, wire.MethodListRuns, paramsOptional, nil, func(ctx context.Context, p *wire.ListRunsParams) (any, error) {
			runs, err := svc.ListRuns(ctx, *p)
			return nonNil(runs), err
		}),

		wire.MethodGetRun: typed(s, wire.MethodGetRun, paramsRequired, func(p *wire.TaskIDParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.TaskIDParams) (any, error) { return svc.GetRun(ctx, p.TaskID) }),

		wire.MethodGetReceipt: typed(s, wire.MethodGetReceipt, paramsRequired, func(p *wire.TaskIDParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.TaskIDParams) (any, error) { return svc.GetReceipt(ctx, p.TaskID) }),

		wire.MethodGetTranscript: typed(s, wire.MethodGetTranscript, paramsRequired, func(p *wire.TaskIDParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.TaskIDParams) (any, error) {
				t, err := svc.GetTranscript(ctx, p.TaskID)
				return nonNil(t), err
			}),

		wire.MethodGetPayload: typed(s, wire.MethodGetPayload, paramsRequired, func(p *GetPayloadParams) string {
			if p.Hash.IsZero() {
				return "hash"
			}
			return ""
		}, func(ctx context.Context, p *GetPayloadParams) (any, error) {
			release, err := s.acquireHeavy(ctx, wire.MethodGetPayload, s.payloadWeight(ctx, p.Hash))
			if err != nil {
				return nil, err
			}
			defer release()
			b, err := svc.GetPayload(ctx, p.Hash)
			if err != nil {
				return nil, err
			}
			return &Payload{Hash: p.Hash, Payload: b}, nil
		}),

		wire.MethodEnrollTrainer: typed(s, wire.MethodEnrollTrainer, paramsRequired, func(p *wire.EnrollParams) string {
			if m := first("task_id", p.TaskID, "trainer_did", p.TrainerDID, "stake", p.Stake); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.EnrollParams) (any, error) { return svc.Enroll(ctx, p) }),

		wire.MethodLeaveRun: typed(s, wire.MethodLeaveRun, paramsRequired, func(p *wire.LeaveParams) string {
			if m := first("task_id", p.TaskID, "trainer_did", p.TrainerDID); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.LeaveParams) (any, error) { return svc.Leave(ctx, p) }),

		wire.MethodSubmitGradient: typed(s, wire.MethodSubmitGradient, paramsRequired, func(g *wire.OuterGradient) string {
			if m := first("task_id", g.TaskID, "trainer_did", g.TrainerDID); m != "" {
				return m
			}
			// Without gradient_payload the submission refers to a blob
			// uploaded with PUT /blobs/<payload_hash>.
			switch {
			case g.PayloadHash.IsZero():
				return "payload_hash"
			case len(g.Signature) == 0:
				return "signature"
			}
			return ""
		}, func(ctx context.Context, g *wire.OuterGradient) (any, error) { return svc.Submit(ctx, g) }),

		wire.MethodFinalizeRound: typed(s, wire.MethodFinalizeRound, paramsRequired, func(p *wire.FinalizeParams) string {
			if m := first("task_id", p.TaskID, "syncer_did", p.SyncerDID); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.FinalizeParams) (any, error) { return svc.FinalizeRound(ctx, p) }),

		wire.MethodGetWeights: typed(s, wire.MethodGetWeights, paramsRequired, func(p *wire.GetWeightsParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.GetWeightsParams) (any, error) {
				// Weights of one fragment, held at their stored size (the
				// blob cap when the run or its weights cannot be looked up).
				release, err := s.acquireHeavy(ctx, wire.MethodGetWeights, s.weightsWeight(ctx, p))
				if err != nil {
					return nil, err
				}
				defer release()
				return svc.GetWeights(ctx, *p)
			}),

		wire.MethodGetBalance: typed(s, wire.MethodGetBalance, paramsRequired, func(p *wire.BalanceParams) string { return first("did", p.DID) },
			func(ctx context.Context, p *wire.BalanceParams) (any, error) { return svc.Balance(ctx, p.DID) }),

		wire.MethodFaucet: typed(s, wire.MethodFaucet, paramsRequired, func(p *wire.FaucetParams) string { return first("did", p.DID, "amount", p.Amount) },
			func(ctx context.Context, p *wire.FaucetParams) (any, error) { return svc.Faucet(ctx, *p) }),

		wire.MethodTransfer: typed(s, wire.MethodTransfer, paramsRequired, func(p *wire.TransferParams) string {
			if m := first("from", p.From, "to", p.To, "amount", p.Amount); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.TransferParams) (any, error) {
			return svc.Transfer(ctx, p)
		}),

		wire.MethodRegisterSyncer: typed(s, wire.MethodRegisterSyncer, paramsRequired, func(p *wire.RegisterSyncerParams) string {
			if m := first("did", p.DID, "stake", p.Stake); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.RegisterSyncerParams) (any, error) {
			return svc.RegisterSyncer(ctx, p)
		}),

		wire.MethodElectionProof: typed(s, wire.MethodElectionProof, paramsRequired, func(p *wire.ElectionProofParams) string {
			if m := first("task_id", p.TaskID, "did", p.DID); m != "" {
				return m
			}
			if len(p.Proof) == 0 {
				return "missing required param: proof"
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.ElectionProofParams) (any, error) {
			return svc.SubmitElectionProof(ctx, p)
		}),

		wire.MethodCancelRun: typed(s, wire.MethodCancelRun, paramsRequired, func(p *wire.CancelRunParams) string {
			if m := needTask(p.TaskID); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.CancelRunParams) (any, error) { return svc.CancelRun(ctx, p) }),

		wire.MethodUnbondSyncer: typed(s, wire.MethodUnbondSyncer, paramsRequired, func(p *wire.UnbondParams) string {
			if m := first("did", p.DID); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.UnbondParams) (any, error) { return svc.Unbond(ctx, p) }),

		wire.MethodListSyncers: typed(s, wire.MethodListSyncers, paramsNone, nil, func(ctx context.Context, _ *empty) (any, error) {
			c, err := svc.ListSyncers(ctx)
			return nonNil(c), err
		}),

		wire.MethodNodeInfo: typed(s, wire.MethodNodeInfo, paramsNone, nil, func(ctx context.Context, _ *empty) (any, error) {
			info := svc.Info(ctx)
			return &info, nil
		}),

		wire.MethodRequestNonce: typed(s, wire.MethodRequestNonce, paramsRequired, func(p *wire.NonceParams) string { return first("task_id", p.TaskID, "did", p.DID) },
			func(ctx context.Context, p *wire.NonceParams) (any, error) { return svc.AttestNonce(ctx, *p) }),

		MethodDiscover: typed(s, MethodDiscover, paramsNone, nil, func(context.Context, *empty) (any, error) {
			return json.RawMessage(openRPCDoc), nil
		}),
	}
	if v := s.opts.VerifyReceipt; v != nil {
		m[wire.MethodVerifyReceipt] = typed(s, wire.MethodVerifyReceipt, paramsRequired, func(p *wire.VerifyReceiptParams) string {
			if len(p.Receipt) == 0 || string(p.Receipt) == "null" {
				return "receipt"
			}
			return ""
		}, func(ctx context.Context, p *wire.VerifyReceiptParams) (any, error) {
			var root []byte
			if p.Root != "" {
				h, err := wire.ParseHash(p.Root)
				if err != nil {
					return nil, invalidParams(wire.MethodVerifyReceipt, "root: %v", err)
				}
				root = h[:]
			}
			return v(ctx, p.Receipt, root), nil
		})
	}
	if cs := s.opts.Challenges; cs != nil {
		m[wire.MethodChallenge] = typed(s, wire.MethodChallenge, paramsRequired, func(p *wire.ChallengeTx) string {
			if m := first("task_id", p.TaskID, "challenger_did", p.ChallengerDID, "bond", p.Bond); m != "" {
				return m
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.ChallengeTx) (any, error) { return cs.SubmitChallenge(ctx, p) })
		m[wire.MethodGetChallenges] = typed(s, wire.MethodGetChallenges, paramsRequired, func(p *wire.TaskIDParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.TaskIDParams) (any, error) {
				l, err := cs.Challenges(ctx, p.TaskID)
				return nonNil(l), err
			})
		m[wire.MethodReplayFragment] = typed(s, wire.MethodReplayFragment, paramsRequired, func(p *wire.ReplayFragmentParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.ReplayFragmentParams) (any, error) {
				return s.replayOnce(ctx, p, cs.ReplayFragment)
			})
		m[wire.MethodGetFragmentState] = typed(s, wire.MethodGetFragmentState, paramsRequired, func(p *wire.ReplayFragmentParams) string { return needTask(p.TaskID) },
			func(ctx context.Context, p *wire.ReplayFragmentParams) (any, error) { return cs.FragmentState(ctx, p) })
	}
	if pr := s.opts.Plugins; pr != nil {
		m[wire.MethodPublishPlugin] = typed(s, wire.MethodPublishPlugin, paramsRequired, func(p *wire.PublishPluginParams) string {
			if m := first("did", p.DID); m != "" {
				return m
			}
			if len(p.Module) == 0 {
				return "module"
			}
			return signedMissing(p.Signed)
		}, func(ctx context.Context, p *wire.PublishPluginParams) (any, error) { return pr.Publish(ctx, p) })
		m[wire.MethodListPlugins] = typed(s, wire.MethodListPlugins, paramsNone, nil, func(ctx context.Context, _ *empty) (any, error) {
			l, err := pr.List(ctx)
			return nonNil(l), err
		})
		m[wire.MethodGetPlugin] = typed(s, wire.MethodGetPlugin, paramsRequired, func(p *GetPluginParams) string {
			if p.Hash.IsZero() {
				return "hash"
			}
			return ""
		}, func(ctx context.Context, p *GetPluginParams) (any, error) {
			info, mod, err := pr.Get(ctx, p.Hash)
			if err != nil {
				return nil, err
			}
			if info == nil {
				return nil, fmt.Errorf("plugin registry returned no info for %s", p.Hash)
			}
			return &PluginModule{PluginInfo: *info, Module: mod}, nil
		})
	}
	if at := s.opts.Attest; at != nil {
		raw := func(name string, fn func(context.Context, json.RawMessage) (json.RawMessage, error)) handler.Func {
			return typed(s, name, paramsOptional, nil, func(ctx context.Context, p *json.RawMessage) (any, error) {
				out, err := fn(ctx, *p)
				if err != nil {
					return nil, err
				}
				if len(out) == 0 {
					out = json.RawMessage("null")
				}
				return out, nil
			})
		}
		m[wire.MethodSubmitEvidence] = raw(wire.MethodSubmitEvidence, at.SubmitEvidence)
		m[wire.MethodGetEvidence] = raw(wire.MethodGetEvidence, at.GetEvidence)
		m[wire.MethodGetPolicy] = raw(wire.MethodGetPolicy, at.GetPolicy)
		m[wire.MethodReleaseKey] = raw(wire.MethodReleaseKey, at.ReleaseKey)
	}
	return m
}
