package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ipfs/go-cid"
	"github.com/spf13/cobra"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/enclave"
)

func init() { registerCommand(newDatasetCmd) }

func newDatasetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dataset",
		Short: "Publish and fetch datasets by content address (ipfs://<cid>)",
		Long: `Datasets live in the node as UnixFS DAGs (IPFS), pinned, served to peers over
bitswap and through the node's IPFS path gateway (GET /ipfs/<cid> on the --rpc
address). A task spec names one as "dataset_ref": "ipfs://<cid>" together with
its "dataset_hash"; trainers fetch it through their own node and check the hash.`,
		RunE: groupRunE,
	}
	cmd.AddCommand(newDatasetAddCmd(), newDatasetLsCmd(), newDatasetRmCmd(), newDatasetGetCmd())
	return cmd
}

func datasetClient(cmd *cobra.Command) *dataset.Client {
	u, _ := cmd.Flags().GetString("rpc")
	return &dataset.Client{Base: u}
}

// signedDatasetClient is a client that signs its requests with the key at
// keyPath (default: $TENZRO_KEY, ~/.tenzro/key.json) for the node's chain:
// the node pins what it imports or fetches for that DID and lets only it
// remove it. optional: without --key and without a default key, the client
// is anonymous (a fetch the node pins for itself).
func signedDatasetClient(cmd *cobra.Command, keyPath string, optional bool) (*dataset.Client, error) {
	c := datasetClient(cmd)
	if optional && keyPath == "" {
		if p, err := defaultKeyPath(); err != nil {
			return c, nil
		} else if _, err := os.Stat(p); err != nil {
			return c, nil
		}
	}
	k, err := loadKeyFile(keyPath)
	if err != nil {
		return nil, err
	}
	chain, err := nodeChainID(cmd)
	if err != nil {
		return nil, err
	}
	c.Key, c.ChainID = k, chain
	return c, nil
}

func newDatasetAddCmd() *cobra.Command {
	var (
		cidVersion     int
		rawLeaves      bool
		chunker        string
		onlyHash       bool
		encryptKeyFile string
		taskID         string
		keyPath        string
	)
	c := &cobra.Command{
		Use:   "add FILE|DIR",
		Short: "Add a file or directory to the node, pinned; print its ipfs:// ref and dataset_hash",
		Long: `add builds the UnixFS DAG of FILE or DIR here (default: CIDv1, raw leaves,
1 MiB fixed-size chunks; the layout is recorded with the dataset), streams it to
the node as a CAR, and the node verifies every block, checks the limits and pins
it. It prints the ipfs:// ref and, for a CSV file, the dataset_hash the spec
needs (the trainer's canonical corpus hash). The request is signed with --key
(default $TENZRO_KEY, ~/.tenzro/key.json): the node pins the dataset for that
DID, within its per-DID quota, and only that DID may remove its pin.

--cid-version 0 --raw-leaves=false --chunker size-262144 gives the classic
"ipfs add" layout (Qm... CIDs), the one Debian's ipfs_cid prints.
--only-hash prints the CID without contacting a node.

Confidential tier: --encrypt-key FILE (the 32-byte dataset key the node returned
at posting, hex) and --task-id T encrypt the file with AES-256-GCM in the
enclave.EncryptDataset layout before adding it: the CID is over the ciphertext,
the dataset_hash over the plaintext.`,
		Example: `  tenzro dataset add corpus.csv
  tenzro dataset add --cid-version 0 --raw-leaves=false --chunker size-262144 corpus.csv
  tenzro dataset add --encrypt-key dataset.key --task-id T corpus.csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l := dataset.Layout{CIDVersion: cidVersion, RawLeaves: rawLeaves, Chunker: chunker, MaxLinks: dataset.DefaultLayout.MaxLinks}
			if cidVersion == 0 && !cmd.Flags().Changed("raw-leaves") {
				l.RawLeaves = false
			}
			if err := l.Check(); err != nil {
				return usagef("%v", err)
			}
			path := args[0]
			hash := ""
			if fi, err := os.Stat(path); err != nil {
				return err
			} else if fi.Mode().IsRegular() && strings.EqualFold(filepath.Ext(path), ".csv") {
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				h, err := dataset.CorpusHashCSV(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				hash = h.String()
			}
			encrypted := false
			if encryptKeyFile != "" {
				if taskID == "" {
					return usagef("--encrypt-key needs --task-id (the ciphertext is bound to the task)")
				}
				ct, err := encryptFile(path, encryptKeyFile, taskID)
				if err != nil {
					return err
				}
				path, encrypted = ct, true
				defer os.Remove(ct)
			}
			if onlyHash {
				root, err := dataset.RootCID(cmd.Context(), path, l)
				if err != nil {
					return err
				}
				return printAdded(cmd, &dataset.Record{CID: root.String(), Ref: "ipfs://" + root.String(), Layout: l.String(), DatasetHash: hash, Encrypted: encrypted})
			}
			fi, _ := os.Stat(path)
			var done int64
			progress := func(n int64) {
				done += n
				if fi != nil && fi.Size() > 64<<20 {
					fmt.Fprintf(cmd.ErrOrStderr(), "\radding: %d MiB", done>>20)
				}
			}
			dc, err := signedDatasetClient(cmd, keyPath, false)
			if err != nil {
				return err
			}
			rec, err := dc.Add(cmd.Context(), path, dataset.AddOptions{Layout: l, Encrypted: encrypted, DatasetHash: hash, Progress: progress})
			if fi != nil && fi.Size() > 64<<20 {
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			return printAdded(cmd, rec)
		},
	}
	f := c.Flags()
	f.IntVar(&cidVersion, "cid-version", 1, "CID version: 1 (bafy…) or 0 (Qm…, implies --raw-leaves=false)")
	f.BoolVar(&rawLeaves, "raw-leaves", true, "store file chunks as raw blocks (CIDv1 only)")
	f.StringVar(&chunker, "chunker", dataset.DefaultLayout.Chunker, "fixed-size chunker size-<bytes> (at most 1 MiB)")
	f.BoolVar(&onlyHash, "only-hash", false, "print the CID without adding anything to a node")
	f.StringVar(&encryptKeyFile, "encrypt-key", "", "Confidential tier: file holding the dataset key (64 hex digits)")
	f.StringVar(&taskID, "task-id", "", "Confidential tier: the task the ciphertext is bound to")
	f.StringVar(&keyPath, "key", "", "key file that signs the import (default $TENZRO_KEY, ~/.tenzro/key.json)")
	return c
}

// encryptFile writes the enclave.EncryptDataset ciphertext of path to a
// temp file.
func encryptFile(path, keyFile, taskID string) (string, error) {
	key, err := readHexKeyFile("--encrypt-key", keyFile)
	if err != nil {
		return "", err
	}
	pt, err := readInputFile("FILE", path, dataset.MaxCorpusBytes)
	if err != nil {
		return "", err
	}
	ct, err := enclave.EncryptDataset(key, taskID, pt)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "tenzro-dataset-*.enc")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(ct); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func parseHexKey(s string) ([]byte, error) {
	s = strings.TrimPrefix(s, "0x")
	if len(s) != 64 {
		return nil, fmt.Errorf("want 64 hex digits, got %d characters", len(s))
	}
	out := make([]byte, 32)
	if _, err := fmt.Sscanf(s, "%x", &out); err != nil {
		return nil, err
	}
	return out, nil
}

func printAdded(cmd *cobra.Command, rec *dataset.Record) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, rec)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "dataset_ref:  %s\n", rec.Ref)
	if c, err := dataset.ParseCID(rec.CID); err == nil && c.Version() == 0 {
		fmt.Fprintf(w, "cid_v1:       %s (the same DAG root in CIDv1 form)\n", cid.NewCidV1(c.Type(), c.Hash()))
	}
	if rec.DatasetHash != "" {
		fmt.Fprintf(w, "dataset_hash: %s\n", rec.DatasetHash)
	} else {
		fmt.Fprintf(w, "dataset_hash: (not a CSV corpus: run tenzro-trainer dataset-hash on it)\n")
	}
	if rec.Layout != "" {
		fmt.Fprintf(w, "layout:       %s\n", rec.Layout)
	}
	if rec.Blocks > 0 {
		fmt.Fprintf(w, "pinned:       %d blocks, %d bytes", rec.Blocks, rec.DAGBytes)
		if rec.Encrypted {
			fmt.Fprint(w, " (encrypted)")
		}
		fmt.Fprintln(w)
	}
	return nil
}

func newDatasetLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Short:   "List the datasets the node holds (pinned, complete)",
		Example: `  tenzro dataset ls --rpc http://127.0.0.1:8545 --format json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := datasetClient(cmd).List(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, l)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CID\tKIND\tSIZE\tBLOCKS\tSOURCE\tNAME")
			for _, r := range l {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.CID, r.Kind, r.Size, r.Blocks, r.Source, r.Name)
			}
			return tw.Flush()
		},
	}
}

func newDatasetRmCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:   "rm CID",
		Short: "Drop your pin of a dataset; the node deletes it (blocks no other dataset uses) once no DID pins it",
		Long: `rm signs the request with --key (default $TENZRO_KEY, ~/.tenzro/key.json). Only a DID that
pinned the dataset (a signed add or get) may drop its pin; when other DIDs still pin it, the
dataset stays and rm says who still holds it.`,
		Example: `  tenzro dataset rm bafybeig... --key me.key`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := dataset.ParseCID(args[0]); err != nil {
				return usagef("%v", err)
			}
			dc, err := signedDatasetClient(cmd, keyPath, false)
			if err != nil {
				return err
			}
			res, err := dc.Remove(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			if res.Removed == "" {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "unpinned %s for %s; still pinned by %d other DID(s), so the node keeps it\n", args[0], dc.Key.DID, len(res.StillPinnedBy))
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return err
		},
	}
	c.Flags().StringVar(&keyPath, "key", "", "key file that signs the request (default $TENZRO_KEY, ~/.tenzro/key.json)")
	return c
}

func newDatasetGetCmd() *cobra.Command {
	var out, format, keyPath string
	var maxBytes int64
	c := &cobra.Command{
		Use:   "get ipfs://CID[/PATH] --out FILE",
		Short: "Fetch a dataset through the node (from its peers, verified, pinned) and write it out",
		Long: `get makes the node hold the dataset (fetching it over bitswap from its peers when
absent, every block checked against its CID, within the node's limits), then
copies the file at CID[/PATH] from the node's gateway to --out ("-" for stdout).
--as car writes the verifiable CAR of the DAG instead; --as tar a directory
as a tar archive. With a key (--key, or the default key when it exists) the
request is signed and the node pins the dataset for that DID (within its
quota; "tenzro dataset rm" drops it); without one the node pins it for itself.`,
		Example: `  tenzro dataset get ipfs://bafybeig... --out corpus.csv
  tenzro dataset get ipfs://bafybeig.../train.csv --out train.csv
  tenzro dataset get ipfs://bafybeig... --as car --out corpus.car`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := dataset.ParseRef(args[0]); err != nil {
				return usagef("%v", err)
			}
			if format != "" && format != "car" && format != "tar" && format != "raw" {
				return usagef("--as %q: want car, tar or raw", format)
			}
			dc, err := signedDatasetClient(cmd, keyPath, true)
			if err != nil {
				return err
			}
			var w io.Writer = cmd.OutOrStdout()
			if out != "-" {
				tmp := out + ".part"
				f, err := os.Create(tmp)
				if err != nil {
					return err
				}
				defer os.Remove(tmp)
				defer f.Close()
				w = f
				n, err := dc.Download(cmd.Context(), args[0], format, maxBytes, w)
				if err != nil {
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				if err := os.Rename(tmp, out); err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%d bytes)\n", out, n)
				return err
			}
			_, err = dc.Download(cmd.Context(), args[0], format, maxBytes, w)
			return err
		},
	}
	c.Flags().StringVar(&out, "out", "", `output file ("-" for stdout)`)
	c.Flags().StringVar(&format, "as", "", "car (the verifiable CAR), tar (a directory) or raw (the root block); default: the file")
	c.Flags().Int64Var(&maxBytes, "max-bytes", 0, "refuse a dataset larger than this (default: the node's limit)")
	c.Flags().StringVar(&keyPath, "key", "", "key file that signs the fetch (default $TENZRO_KEY, ~/.tenzro/key.json when it exists; none: unsigned)")
	_ = c.MarkFlagRequired("out")
	return c
}

// readHexKeyFile reads a 32-byte dataset key written as 64 hex digits.
func readHexKeyFile(flag, path string) ([]byte, error) {
	kb, err := readInputFile(flag, path, 1024)
	if err != nil {
		return nil, err
	}
	key, err := parseHexKey(strings.TrimSpace(string(kb)))
	if err != nil {
		return nil, usagef("%s %s: %v", flag, path, err)
	}
	return key, nil
}
