package gossip

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

var testGenesis = []byte(`{"chain_id":"tenzro-testnet","genesis_time":"2026-01-01T00:00:00Z","app_state":{"accounts":[]}}`)

func testChainInfo() *ChainInfo {
	return &ChainInfo{ChainID: "tenzro-testnet", NodeID: strings.Repeat("ab", 20), P2PAddr: "0.0.0.0:26656", Genesis: testGenesis}
}

// TestChainInfo: a node without a chain asks a node that has one; the answer
// is what the server handed out, byte for byte, and the unspecified P2P host
// becomes the address the requester reached the server at.
func TestChainInfo(t *testing.T) {
	ctx := testCtx(t)
	server := newNode(t, ctx, Config{}, Handlers{ChainInfo: func() (*ChainInfo, error) { return testChainInfo(), nil }})
	plain := newNode(t, ctx, Config{}, Handlers{})
	joiner := newNode(t, ctx, Config{}, Handlers{})
	ci, remote, err := joiner.RequestChainInfo(ctx, server.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ci.Genesis, testGenesis) || ci.ChainID != "tenzro-testnet" || ci.NodeID != strings.Repeat("ab", 20) {
		t.Fatalf("chain info %+v", ci)
	}
	if remote != "127.0.0.1" || ci.ChainPeer(remote) != strings.Repeat("ab", 20)+"@127.0.0.1:26656" {
		t.Fatalf("remote %q, peer %q", remote, ci.ChainPeer(remote))
	}
	named := &ChainInfo{NodeID: "x", P2PAddr: "10.0.0.5:26656"}
	if named.ChainPeer("127.0.0.1") != "x@10.0.0.5:26656" {
		t.Fatal("a named host was replaced")
	}
	// A node that serves no chain info: the stream protocol is refused.
	if _, _, err := joiner.RequestChainInfo(ctx, plain.Addrs()[0]); err == nil {
		t.Fatal("chain info from a node that serves none")
	}
	if _, _, err := joiner.RequestChainInfo(ctx, "/ip4/127.0.0.1/tcp/1"); err == nil {
		t.Fatal("an address without /p2p/")
	}
}

// TestChainInfoServeStrict: a request with bytes in it is reset without an
// answer, and a handler's invalid chain info is not served.
func TestChainInfoServeStrict(t *testing.T) {
	ctx := testCtx(t)
	bad := testChainInfo()
	bad.NodeID = "not hex"
	calls := 0
	server := newNode(t, ctx, Config{}, Handlers{ChainInfo: func() (*ChainInfo, error) {
		calls++
		if calls == 1 {
			return bad, nil
		}
		return nil, errors.New("chain not started")
	}})
	client := newNode(t, ctx, Config{}, Handlers{})
	for i := 0; i < 2; i++ {
		if _, _, err := client.RequestChainInfo(ctx, server.Addrs()[0]); err == nil {
			t.Fatalf("call %d: served", i)
		}
	}
	connect(t, ctx, client, server)
	pid, _ := peer.Decode(server.PeerID())
	s, err := client.h.NewStream(ctx, pid, protocol.ID(ChainInfoProtocol))
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("{}"))
	s.CloseWrite()
	if b, _ := io.ReadAll(s); len(b) != 0 {
		t.Fatalf("a non-empty request was answered: %q", b)
	}
}

func TestParseChainInfo(t *testing.T) {
	good, _ := json.Marshal(testChainInfo())
	if _, err := ParseChainInfo(good); err != nil {
		t.Fatal(err)
	}
	g64 := base64.StdEncoding.EncodeToString(testGenesis)
	obj := func(members string) []byte { return []byte("{" + members + "}") }
	base := `"chain_id":"c","node_id":"` + strings.Repeat("0a", 20) + `","p2p_addr":"127.0.0.1:1","genesis":"` + g64 + `"`
	cases := map[string][]byte{
		"unknown member":   obj(base + `,"x":1`),
		"duplicate member": obj(base + `,"chain_id":"d"`),
		"trailing data":    append(obj(base), []byte(` {}`)...),
		"no chain id":      obj(strings.Replace(base, `"chain_id":"c"`, `"chain_id":""`, 1)),
		"long chain id":    obj(strings.Replace(base, `"chain_id":"c"`, `"chain_id":"`+strings.Repeat("c", 51)+`"`, 1)),
		"space in id":      obj(strings.Replace(base, `"chain_id":"c"`, `"chain_id":"a b"`, 1)),
		"upper hex":        obj(strings.Replace(base, strings.Repeat("0a", 20), strings.Repeat("0A", 20), 1)),
		"short node id":    obj(strings.Replace(base, strings.Repeat("0a", 20), "0a0a", 1)),
		"port 0":           obj(strings.Replace(base, "127.0.0.1:1", "127.0.0.1:0", 1)),
		"port 65536":       obj(strings.Replace(base, "127.0.0.1:1", "127.0.0.1:65536", 1)),
		"port +1":          obj(strings.Replace(base, "127.0.0.1:1", "127.0.0.1:01", 1)),
		"no port":          obj(strings.Replace(base, "127.0.0.1:1", "127.0.0.1", 1)),
		"no host":          obj(strings.Replace(base, "127.0.0.1:1", ":1", 1)),
		"genesis array":    obj(strings.Replace(base, g64, base64.StdEncoding.EncodeToString([]byte("[1]")), 1)),
		"genesis not json": obj(strings.Replace(base, g64, base64.StdEncoding.EncodeToString([]byte("{x")), 1)),
		"no genesis":       obj(strings.Replace(base, g64, "", 1)),
		"genesis not b64":  obj(strings.Replace(base, g64, "!!", 1)),
		"not an object":    []byte(`[]`),
		"too large":        bytes.Repeat([]byte(" "), MaxChainInfoBytes+1),
	}
	for name, b := range cases {
		if _, err := ParseChainInfo(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzParseChainInfo: no input panics, and what is accepted re-encodes to
// a response that is accepted with the same content.
func FuzzParseChainInfo(f *testing.F) {
	good, _ := json.Marshal(testChainInfo())
	f.Add(good)
	f.Add([]byte(`{"chain_id":"c","node_id":"","p2p_addr":"","genesis":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ci, err := ParseChainInfo(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(ci)
		if err != nil {
			t.Fatal(err)
		}
		ci2, err := ParseChainInfo(again)
		if err != nil || ci2.ChainID != ci.ChainID || ci2.NodeID != ci.NodeID || ci2.P2PAddr != ci.P2PAddr || !bytes.Equal(ci2.Genesis, ci.Genesis) {
			t.Fatalf("re-encoded chain info: %v %+v", err, ci2)
		}
	})
}
