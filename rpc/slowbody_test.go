package rpc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

// Issue 8, finding 5: two bodies declared at 100 MB and sent at 1 byte/s
// held both large-request slots for the 10-minute read timeout, and an
// honest 40 MB submission waited for them; a 270 MB chunked body was
// buffered before the 413. Real sockets; the slow clients come from other
// loopback addresses (127.0.0.2, .3) so the per-peer cap sees other peers.
func TestLargeSlotsSurviveSlowBodies(t *testing.T) {
	if !canBind("127.0.0.2") {
		t.Skip("this machine cannot bind 127.0.0.2 (loopback is not a /8)")
	}
	srv, err := rpc.New(&fakeService{}, rpc.Options{
		LargeRequestBytes: 1 << 10, MaxLargeInFlight: 2, MaxLargePerPeer: 1,
		LargeMinRate: 64 << 10, LargeGrace: 2 * time.Second, LargeWait: 2 * time.Minute,
		MaxChunkedBytes: 256 << 10,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	addr := ln.Addr().String()

	mb := 4
	if v, err := strconv.Atoi(os.Getenv("TENZRO_SLOWBODY_MB")); err == nil && v > 0 {
		mb = v // TENZRO_SLOWBODY_MB=40 gives the closing note's figure
	}
	body := honestSubmission(t, mb<<20)
	honest := func() time.Duration {
		t.Helper()
		start := time.Now()
		resp, err := http.Post("http://"+addr, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"accepted":true`)) {
			t.Fatalf("honest submission: %d %.300s", resp.StatusCode, b)
		}
		return time.Since(start)
	}
	alone := honest()

	// Two slow bodies from two peers take both slots.
	slow := []net.Conn{slowBody(t, "127.0.0.2", addr), slowBody(t, "127.0.0.3", addr)}
	waitFor(t, "both large slots taken by the slow bodies", func() bool { return srv.LargeInFlight() == 2 })
	// A second large request from a peer that holds its slot queues behind
	// it; the honest one from 127.0.0.1 still completes: the slow bodies
	// fall under the minimum rate and lose their slots.
	extra := slowBody(t, "127.0.0.2", addr)
	under := honest()
	for i, c := range append(slow, extra) {
		status := readStatus(t, c)
		if status != http.StatusRequestTimeout {
			t.Errorf("slow connection %d: HTTP %d, want 408", i, status)
		}
		c.Close()
	}
	t.Logf("honest %d MB submission: %s alone, %s with two slow-body connections open (min rate %d B/s after %s)",
		mb, alone.Round(time.Millisecond), under.Round(time.Millisecond), 64<<10, 2*time.Second)

	// A chunked body is refused once it passes MaxChunkedBytes, not buffered
	// up to MaxRequestBytes.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	sent := make(chan int64, 1)
	go func() {
		chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("a", 64<<10)))
		var n int64
		for n < 64<<20 { // would be 64 MiB; the server stops reading long before
			if _, err := c.Write(chunk); err != nil {
				break
			}
			n += 64 << 10
		}
		sent <- n
	}()
	if status := readStatus(t, c); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized chunked body: HTTP %d, want 413", status)
	}
	c.Close()
	if n := <-sent; n >= 64<<20 {
		t.Fatalf("the server read the whole %d-byte chunked body", n)
	}
}

func canBind(ip string) bool {
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// honestSubmission is a submitOuterGradient request whose payload has n bytes.
func honestSubmission(t *testing.T, n int) []byte {
	payload := bytes.Repeat([]byte{7}, n)
	params, _ := json.Marshal(map[string]any{"task_id": "t1", "trainer_did": "d", "round": 0, "fragment_index": 0,
		"gradient_payload": base64.StdEncoding.EncodeToString(payload), "payload_hash": wire.ContentHash(payload).String(), "signature": "00"})
	return []byte(`{"jsonrpc":"2.0","id":1,"method":"` + wire.MethodSubmitGradient + `","params":` + string(params) + `}`)
}

// slowBody opens a connection from localIP that declares a 100 MB body and
// sends one byte of it.
func slowBody(t *testing.T, localIP, addr string) net.Conn {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}, Timeout: time.Minute}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{")
	return c
}

func readStatus(t *testing.T, c net.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
