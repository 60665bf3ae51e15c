package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	cmtcfg "github.com/cometbft/cometbft/config"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/privval"
	"github.com/cometbft/cometbft/types"
	cmttime "github.com/cometbft/cometbft/types/time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// NodeConfigFile is a node home's own configuration (JSON), next to
// CometBFT's key and genesis files in <home>/config. The node builds its
// CometBFT configuration from it (CometBFT's defaults otherwise), so there
// is no config.toml to keep in step.
const NodeConfigFile = "config/tenzro-chain.json"

// MaxValidators bounds a testnet.
const MaxValidators = 64

// NodeConfig is a node home's configuration.
type NodeConfig struct {
	Moniker string `json:"moniker"`
	// P2PAddr and RPCAddr are host:port listen addresses (CometBFT's peer
	// protocol and its HTTP RPC).
	P2PAddr string `json:"p2p_addr"`
	RPCAddr string `json:"rpc_addr"`
	// PersistentPeers are id@host:port of the other validators.
	PersistentPeers []string `json:"persistent_peers"`
	// TimeoutCommitMs is how long a validator waits after a commit before
	// the next height (CometBFT's timeout_commit): the block interval.
	TimeoutCommitMs int64 `json:"timeout_commit_ms"`
	// JSONRPCAddr (host:port) and ListenAddr (a libp2p multiaddr) are the
	// node's JSON-RPC and libp2p addresses when its flags do not say.
	JSONRPCAddr string `json:"json_rpc_addr,omitempty"`
	ListenAddr  string `json:"listen_addr,omitempty"`
	// BootNodes are the libp2p multiaddrs (with /p2p/<peer id>) the node
	// dials when its flags name none: the other nodes of a testnet.
	BootNodes []string `json:"boot_nodes,omitempty"`
	// SnapshotInterval takes a state-sync snapshot every this many heights
	// (0: none); SnapshotKeep is how many are kept (default 2).
	SnapshotInterval int64 `json:"snapshot_interval,omitempty"`
	SnapshotKeep     int   `json:"snapshot_keep,omitempty"`
	// StateKeepHeights is how many state tree versions are kept (0:
	// DefaultKeepHeights, -1: all): the pruning window.
	StateKeepHeights int64 `json:"state_keep_heights,omitempty"`
	// StateSync, when set, makes a node with no state join from a snapshot
	// (CometBFT state sync) instead of replaying every block.
	StateSync *StateSyncConfig `json:"state_sync,omitempty"`
}

// StateSyncConfig is CometBFT's state sync of a joining node: its light
// client verifies headers from RPCServers (at least two, may repeat one)
// starting from the trusted header (TrustHeight, TrustHash: the hash of a
// header the operator verified, e.g. with VerifySignedHeader against the
// genesis validators), within TrustPeriodMs.
type StateSyncConfig struct {
	RPCServers    []string `json:"rpc_servers"`
	TrustHeight   int64    `json:"trust_height"`
	TrustHash     string   `json:"trust_hash"`
	TrustPeriodMs int64    `json:"trust_period_ms,omitempty"`
}

// SaveNodeConfig writes a home's NodeConfigFile.
func SaveNodeConfig(home string, nc *NodeConfig) error {
	raw, err := json.MarshalIndent(nc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(home, NodeConfigFile), append(raw, '\n'), 0o600)
}

// TestnetOptions configures WriteTestnet.
type TestnetOptions struct {
	Validators int
	Dir        string
	ChainID    string
	// Allocs are the genesis allocations.
	Allocs []GenesisAccount
	// Host is the address every node listens on (default 127.0.0.1).
	Host string
	// BasePort: node i listens on BasePort+2i (P2P) and BasePort+2i+1
	// (CometBFT RPC), and serves JSON-RPC on 8545+i and libp2p on 4001+i.
	// 0 takes free ports from the kernel for all four.
	BasePort int
	// TimeoutCommit is the block interval (default 1s).
	TimeoutCommit time.Duration
	// CandidateStake, when set, makes every validator's node a syncer
	// candidate: a node key is written at <home>/node/node.key and its DID
	// registered at genesis with this stake (attoTNZO).
	CandidateStake string
	// CandidateFunds is allocated at genesis to every syncer candidate's
	// DID that has no allocation of its own: the balance its node pays its
	// transaction fees from (election proofs, fragment commits, receipt
	// signatures). Empty: DefaultCandidateFunds; "0": none.
	CandidateFunds string
	// Candidates are more syncer candidates registered at genesis.
	Candidates []GenesisAccount
	// Faucet enables the faucet (the --dev chain only).
	Faucet bool
	// Params overrides the default fees and unbonding delay.
	Params *machine.GenesisParams
	// Homes, when set, are the homes to write (one per validator) instead
	// of <Dir>/node<i>.
	Homes []string
}

// NodeKeyFile is where a home written by WriteTestnet keeps its node's
// key (the node's DID: its syncer key without an enclave).
const NodeKeyFile = "node/node.key"

// TestnetNode describes one written validator home.
type TestnetNode struct {
	Home    string `json:"home"`
	NodeID  string `json:"node_id"`
	P2PAddr string `json:"p2p_addr"`
	RPCAddr string `json:"rpc_addr"`
	// JSONRPCAddr is where the node serves JSON-RPC (NodeConfig).
	JSONRPCAddr string `json:"json_rpc_addr"`
	// NodeDID is the DID of the node key written with CandidateStake.
	NodeDID string `json:"node_did,omitempty"`
}

// WriteTestnet writes opts.Validators validator homes (<dir>/node<i>: node
// key, validator key and state, genesis, NodeConfigFile) sharing one
// genesis with the allocations. Dir must not exist or be empty.
func WriteTestnet(opts TestnetOptions) ([]TestnetNode, error) {
	if opts.Validators < 1 || opts.Validators > MaxValidators {
		return nil, fmt.Errorf("testnet: %d validators, want 1..%d", opts.Validators, MaxValidators)
	}
	if opts.Dir == "" && len(opts.Homes) == 0 {
		return nil, errors.New("testnet: --dir is empty")
	}
	if len(opts.Homes) > 0 && len(opts.Homes) != opts.Validators {
		return nil, fmt.Errorf("testnet: %d homes for %d validators", len(opts.Homes), opts.Validators)
	}
	if opts.ChainID == "" {
		opts.ChainID = "tenzro-testnet"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.TimeoutCommit <= 0 {
		opts.TimeoutCommit = time.Second
	}
	if opts.BasePort < 0 || opts.BasePort+4*opts.Validators > 65535 {
		return nil, fmt.Errorf("testnet: base port %d leaves no room for %d validators", opts.BasePort, opts.Validators)
	}
	homes := opts.Homes
	if len(homes) == 0 {
		if ents, err := os.ReadDir(opts.Dir); err == nil && len(ents) > 0 {
			return nil, fmt.Errorf("testnet: %s exists and is not empty (choose a new --dir)", opts.Dir)
		}
		for i := 0; i < opts.Validators; i++ {
			homes = append(homes, filepath.Join(opts.Dir, fmt.Sprintf("node%d", i)))
		}
	}
	for _, h := range homes {
		if ents, err := os.ReadDir(h); err == nil && len(ents) > 0 {
			return nil, fmt.Errorf("testnet: %s exists and is not empty", h)
		}
	}
	st := GenesisState{Accounts: opts.Allocs, Candidates: append([]GenesisAccount(nil), opts.Candidates...), Faucet: opts.Faucet, Params: opts.Params}
	if st.Accounts == nil {
		st.Accounts = []GenesisAccount{}
	}
	nodeDIDs := make([]string, len(homes))
	if opts.CandidateStake != "" {
		for i, h := range homes {
			k, err := did.Generate(did.KindMachine, nil)
			if err != nil {
				return nil, fmt.Errorf("testnet: node key: %w", err)
			}
			if err := os.MkdirAll(filepath.Join(h, filepath.Dir(NodeKeyFile)), 0o700); err != nil {
				return nil, fmt.Errorf("testnet: %w", err)
			}
			if err := k.Save(filepath.Join(h, NodeKeyFile)); err != nil {
				return nil, fmt.Errorf("testnet: node key: %w", err)
			}
			nodeDIDs[i] = k.DID.String()
			st.Candidates = append(st.Candidates, GenesisAccount{DID: nodeDIDs[i], Balance: opts.CandidateStake})
		}
	}
	fundCandidates(&st, opts.CandidateFunds)
	appState, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if _, err := ParseGenesisState(appState); err != nil {
		return nil, fmt.Errorf("testnet: %w", err)
	}
	ports, err := pickPorts(opts.Host, opts.BasePort, 4*opts.Validators) // with a base, only the first 2N are used
	if err != nil {
		return nil, err
	}
	jsonPorts, libp2pPorts := make([]int, opts.Validators), make([]int, opts.Validators)
	if opts.BasePort == 0 {
		copy(jsonPorts, ports[2*opts.Validators:3*opts.Validators])
		copy(libp2pPorts, ports[3*opts.Validators:])
	} else {
		for i := range jsonPorts {
			jsonPorts[i], libp2pPorts[i] = 8545+i, 4001+i
		}
	}
	nodes := make([]TestnetNode, opts.Validators)
	vals := make([]types.GenesisValidator, opts.Validators)
	for i := range nodes {
		home := homes[i]
		c := cmtcfg.DefaultConfig()
		c.SetRoot(home)
		for _, d := range []string{"config", "data"} {
			if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
				return nil, fmt.Errorf("testnet: %w", err)
			}
		}
		pv := privval.GenFilePV(c.PrivValidatorKeyFile(), c.PrivValidatorStateFile())
		pv.Save()
		nk, err := p2p.LoadOrGenNodeKey(c.NodeKeyFile())
		if err != nil {
			return nil, fmt.Errorf("testnet: node key: %w", err)
		}
		pub, err := pv.GetPubKey()
		if err != nil {
			return nil, fmt.Errorf("testnet: validator key: %w", err)
		}
		vals[i] = types.GenesisValidator{Address: pub.Address(), PubKey: pub, Power: 10, Name: fmt.Sprintf("node%d", i)}
		nodes[i] = TestnetNode{Home: home, NodeID: string(nk.ID()), NodeDID: nodeDIDs[i],
			P2PAddr: net.JoinHostPort(opts.Host, fmt.Sprint(ports[2*i])), RPCAddr: net.JoinHostPort(opts.Host, fmt.Sprint(ports[2*i+1]))}
	}
	gen := &types.GenesisDoc{ChainID: opts.ChainID, GenesisTime: cmttime.Now(), InitialHeight: 1,
		ConsensusParams: types.DefaultConsensusParams(), Validators: vals, AppState: appState}
	if err := gen.ValidateAndComplete(); err != nil {
		return nil, fmt.Errorf("testnet: genesis: %w", err)
	}
	for i, n := range nodes {
		c := cmtcfg.DefaultConfig()
		c.SetRoot(n.Home)
		if err := gen.SaveAs(c.GenesisFile()); err != nil {
			return nil, fmt.Errorf("testnet: %w", err)
		}
		var peers []string
		for j, m := range nodes {
			if j != i {
				peers = append(peers, m.NodeID+"@"+m.P2PAddr)
			}
		}
		nc := NodeConfig{Moniker: fmt.Sprintf("node%d", i), P2PAddr: n.P2PAddr, RPCAddr: n.RPCAddr,
			PersistentPeers: peers, TimeoutCommitMs: opts.TimeoutCommit.Milliseconds(),
			JSONRPCAddr: net.JoinHostPort(opts.Host, fmt.Sprint(jsonPorts[i])), ListenAddr: fmt.Sprintf("/ip4/%s/tcp/%d", opts.Host, libp2pPorts[i])}
		raw, _ := json.MarshalIndent(nc, "", "  ")
		if err := os.WriteFile(filepath.Join(n.Home, NodeConfigFile), append(raw, '\n'), 0o600); err != nil {
			return nil, fmt.Errorf("testnet: %w", err)
		}
	}
	for i := range nodes {
		nodes[i].JSONRPCAddr = net.JoinHostPort(opts.Host, fmt.Sprint(jsonPorts[i]))
	}
	return nodes, nil
}

// pickPorts returns n ports: base, base+1, … or, when base is 0, n free
// ports the kernel hands out (held open together so they differ).
func pickPorts(host string, base, n int) ([]int, error) {
	out := make([]int, n)
	if base > 0 {
		for i := range out {
			out[i] = base + i
		}
		return out, nil
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range out {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("testnet: free port: %w", err)
		}
		ls = append(ls, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// MaxNodeConfigBytes bounds NodeConfigFile.
const MaxNodeConfigBytes = 1 << 20

// LoadNodeConfig reads a home's NodeConfigFile strictly.
func LoadNodeConfig(home string) (*NodeConfig, error) {
	p := filepath.Join(home, NodeConfigFile)
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("node config: %w (is %s a node home written by `tenzro-node testnet`?)", err, home)
	}
	if len(raw) > MaxNodeConfigBytes {
		return nil, fmt.Errorf("node config %s: %d bytes, limit %d", p, len(raw), MaxNodeConfigBytes)
	}
	var nc NodeConfig
	if err := strictJSON(bytes.TrimSpace(raw), &nc); err != nil {
		return nil, fmt.Errorf("node config %s: %w", p, err)
	}
	for name, a := range map[string]string{"p2p_addr": nc.P2PAddr, "rpc_addr": nc.RPCAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("node config %s: %s %q: %w", p, name, a, err)
		}
	}
	for _, peer := range nc.PersistentPeers {
		if !strings.Contains(peer, "@") {
			return nil, fmt.Errorf("node config %s: persistent peer %q: want id@host:port", p, peer)
		}
	}
	if nc.TimeoutCommitMs < 0 {
		return nil, fmt.Errorf("node config %s: timeout_commit_ms %d", p, nc.TimeoutCommitMs)
	}
	return &nc, nil
}

// InitOptions configures InitNode.
type InitOptions struct {
	Home    string
	Genesis string // path of the network's genesis.json
	Moniker string
	P2PAddr string // host:port
	RPCAddr string // host:port
	Peers   []string
}

// InitNode writes the home of a non-validator full node (it does not wait
// after a commit, timeout_commit 0, so it keeps pace with the validators'
// blocks whatever their interval): a fresh node key, a
// validator key that is in no validator set, a copy of the network's
// genesis, and NodeConfigFile with its persistent peers. The node syncs
// every block from its peers and answers reads from its own replica.
func InitNode(o InitOptions) (*TestnetNode, error) {
	if o.Home == "" || o.Genesis == "" {
		return nil, errors.New("init: --home and --genesis are required")
	}
	if o.Moniker == "" {
		o.Moniker = filepath.Base(o.Home)
	}
	for name, a := range map[string]string{"p2p-addr": o.P2PAddr, "rpc-addr": o.RPCAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("init: --%s %q: %w", name, a, err)
		}
	}
	if len(o.Peers) == 0 {
		return nil, errors.New("init: --peers is empty: a full node needs at least one id@host:port to sync from")
	}
	for _, p := range o.Peers {
		if _, err := p2p.NewNetAddressString(p); err != nil {
			return nil, fmt.Errorf("init: peer %q: %w (want id@host:port)", p, err)
		}
	}
	gen, err := types.GenesisDocFromFile(o.Genesis)
	if err != nil {
		return nil, fmt.Errorf("init: genesis: %w", err)
	}
	if _, err := ParseGenesisState(gen.AppState); err != nil {
		return nil, fmt.Errorf("init: genesis %s: %w", o.Genesis, err)
	}
	if ents, err := os.ReadDir(o.Home); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("init: %s exists and is not empty", o.Home)
	}
	c := cmtcfg.DefaultConfig()
	c.SetRoot(o.Home)
	for _, d := range []string{"config", "data"} {
		if err := os.MkdirAll(filepath.Join(o.Home, d), 0o700); err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
	}
	privval.GenFilePV(c.PrivValidatorKeyFile(), c.PrivValidatorStateFile()).Save()
	nk, err := p2p.LoadOrGenNodeKey(c.NodeKeyFile())
	if err != nil {
		return nil, fmt.Errorf("init: node key: %w", err)
	}
	if err := gen.SaveAs(c.GenesisFile()); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	nc := NodeConfig{Moniker: o.Moniker, P2PAddr: o.P2PAddr, RPCAddr: o.RPCAddr, PersistentPeers: o.Peers, TimeoutCommitMs: 0}
	raw, _ := json.MarshalIndent(nc, "", "  ")
	if err := os.WriteFile(filepath.Join(o.Home, NodeConfigFile), append(raw, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	return &TestnetNode{Home: o.Home, NodeID: string(nk.ID()), P2PAddr: o.P2PAddr, RPCAddr: o.RPCAddr}, nil
}

// strictJSON decodes one JSON value into v, refusing unknown members,
// duplicate members and trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return wire.CheckStrictJSON(b, wire.StrictJSONOptions{})
}

// DevOptions configure InitDev.
type DevOptions struct {
	// Candidate is the node's syncer DID, registered at genesis with Stake.
	Candidate string
	Stake     string
	// BlockInterval is the pace of blocks (DevBlockInterval when 0).
	BlockInterval time.Duration
	// Params overrides the default fees and unbonding delay.
	Params *machine.GenesisParams
}

// DefaultHaltGapMs is the halt_gap_ms genesis parameter that
// "tenzro-node testnet" and the --dev chain write (machine.Params.HaltGapMs):
// a block more than 30 s after the previous one follows a halt, and running
// rounds' clocks skip it. 30 s is 30 block intervals of a testnet (150 of the
// --dev chain), so no live chain's gap reaches it.
const DefaultHaltGapMs = 30_000

// DevBlockInterval is the --dev chain's block interval. The app hash
// changes at every height (the height is in it), so CometBFT makes a block
// every interval whether or not transactions wait: block time, and so every
// grace window, round deadline and enrolment window, advances in steps of
// this size, and a write waits for the next block, half of it on average.
// 200 ms keeps a write's latency low for the demo and the tests at a cost
// of five small synced commits per second.
const DevBlockInterval = 200 * time.Millisecond

// InitDev writes the home of the --dev chain: one validator on loopback
// (free ports, picked now and kept), chain id tenzro-dev, a genesis with the
// faucet on and the node's syncer DID as the only candidate.
func InitDev(home string, o DevOptions) (*TestnetNode, error) {
	if o.BlockInterval <= 0 {
		o.BlockInterval = DevBlockInterval
	}
	if o.Stake == "" {
		o.Stake = "1000000000000000000"
	}
	nodes, err := WriteTestnet(TestnetOptions{Validators: 1, Homes: []string{home}, ChainID: "tenzro-dev", Faucet: true,
		Candidates: []GenesisAccount{{DID: o.Candidate, Balance: o.Stake}}, TimeoutCommit: o.BlockInterval, Params: o.Params})
	if err != nil {
		return nil, err
	}
	return &nodes[0], nil
}

// DefaultCandidateFunds is TestnetOptions.CandidateFunds's default: 100
// TNZO, some 10,000 fragment commits at the default fees.
const DefaultCandidateFunds = "100000000000000000000"

// fundCandidates allocates funds to every candidate DID without an
// allocation (see TestnetOptions.CandidateFunds).
func fundCandidates(st *GenesisState, funds string) {
	if funds == "" {
		funds = DefaultCandidateFunds
	}
	if funds == "0" {
		return
	}
	has := map[string]bool{}
	for _, a := range st.Accounts {
		has[a.DID] = true
	}
	for _, c := range st.Candidates {
		if !has[c.DID] {
			has[c.DID] = true
			st.Accounts = append(st.Accounts, GenesisAccount{DID: c.DID, Balance: funds})
		}
	}
}
