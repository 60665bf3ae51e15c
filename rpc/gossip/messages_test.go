package gossip

import (
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

func TestDecodeAndVerify(t *testing.T) {
	k, _ := did.Generate(did.KindMachine, nil)
	payload := []byte("p")
	g := &wire.OuterGradient{TaskID: "task-1", TrainerDID: k.DID.String(), Round: 1, FragmentIndex: 0, GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
	g.Signature = k.Sign(g.Preimage())
	good, _ := encode(ptr(AnnouncementFor(g)))
	st := SyncerStatus{TaskID: "task-1", Round: 2, Status: SyncerSealed}
	st.Sign(k)
	goodStatus, _ := encode(&st)
	tests := []struct {
		name, data, wantErr string
	}{
		{"submission", string(good), ""},
		{"status", string(goodStatus), ""},
		{"unknown field", strings.Replace(string(good), `{"type"`, `{"x":1,"type"`, 1), "unknown field"},
		{"trailing", string(good) + "{}", "after top-level value"},
		{"unknown type", `{"type":"x"}`, "unknown type"},
		{"not an object", `[1]`, "cannot unmarshal"},
		{"oversize", `{"type":"submission","task_id":"` + strings.Repeat("a", MaxMessageSize) + `"}`, "limit"},
		{"bad round", strings.Replace(string(good), `"round":1`, `"round":2`, 1), "signature"},
		{"bad status", strings.Replace(string(goodStatus), `"sealed"`, `"done"`, 1), "unknown status"},
		{"bad task id", strings.Replace(string(good), `"task-1"`, `"-x"`, 1), "task_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Decode([]byte(tc.data))
			if err == nil {
				switch x := v.(type) {
				case *SubmissionAnnouncement:
					err = x.Verify(DefaultMaxBlob)
				case *SyncerStatus:
					err = x.Verify()
				case *FragmentAnnouncement:
					err = x.Verify(DefaultMaxBlob)
				}
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"submission","task_id":"t","round":1}`))
	f.Add([]byte(`{"type":"syncer_status","status":"sealed"}`))
	f.Add([]byte(`{"type":"fragment"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must survive verification without panicking.
		switch x := v.(type) {
		case *SubmissionAnnouncement:
			_ = x.Verify(DefaultMaxBlob)
		case *SyncerStatus:
			_ = x.Verify()
		case *FragmentAnnouncement:
			_ = x.Verify(DefaultMaxBlob)
		}
	})
}
