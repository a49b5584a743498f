package main

// cancel: what a client sees when it cancels an HTTP request through a tunnel while the target's
// answer is on its way. Each iteration opens a new single-use gRPC tunnel, sends GET to a target
// in this process, and once the target has the request the client cancels; the target answers
// --answer-after later (default at once, as in upstream's test; negative: never). Two shapes:
//
//	test:      one ctx is both the tunnel's and the request's (upstream's own test of this case,
//	           TestProxyHandle_TunnelContextCancelled_GRPC)
//	apiserver: the tunnel's ctx is Background, the request's is canceled (kube-apiserver's egress
//	           dialer)
//
// The result counts what http.Client.Do returned: "context canceled" (the client's own
// cancellation), an EOF, an answer (the response won the race), or another error.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

type cancelResult struct {
	Canceled int `json:"canceled"`
	EOF      int `json:"eof"`
	Answered int `json:"answered"`
	Other    int `json:"other"`
	// TunnelEndedFirst: the tunnel's stream had already ended when Do returned.
	TunnelEndedFirst int `json:"tunnelEndedFirst"`
	// Messages: each distinct error text but "context canceled" ones, with its count.
	Messages map[string]int `json:"messages"`
}

// waitingTarget answers each request once the driver lets it: it hands the driver a channel to
// close, then writes its answer.
type waitingTarget struct{ received chan chan struct{} }

func (s waitingTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	respond := make(chan struct{})
	select {
	case s.received <- respond:
	case <-r.Context().Done():
		return
	}
	select {
	case <-respond:
		w.Write([]byte("hello"))
	case <-r.Context().Done():
	}
}

func startWaitingTarget() (url string, received chan chan struct{}, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	t := waitingTarget{received: make(chan chan struct{})}
	srv := &http.Server{Handler: t}
	go srv.Serve(l)
	return "http://" + l.Addr().String() + "/", t.received, func() { srv.Close() }, nil
}

func cancelRuns(uds, shape string, count int, answerAfter time.Duration) (*cancelResult, error) {
	if shape != "test" && shape != "apiserver" {
		return nil, fmt.Errorf("unknown --shape %q (test or apiserver)", shape)
	}
	url, received, stop, err := startWaitingTarget()
	if err != nil {
		return nil, err
	}
	defer stop()
	res := &cancelResult{Messages: map[string]int{}}
	for i := 0; i < count; i++ {
		if err := cancelOnce(uds, shape, url, received, answerAfter, res); err != nil {
			return nil, fmt.Errorf("iteration %d: %w", i, err)
		}
	}
	return res, nil
}

func cancelOnce(uds, shape, url string, received chan chan struct{}, answerAfter time.Duration, res *cancelResult) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tunnelCtx := ctx
	if shape == "apiserver" {
		tunnelCtx = context.Background()
	}
	udsDialer := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", uds)
	})
	tunnel, err := client.CreateSingleUseGrpcTunnelWithContext(ctx, tunnelCtx, uds,
		udsDialer, grpc.WithBlock(), grpc.WithReturnConnectionError(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("gRPC tunnel over %s: %w", uds, err)
	}
	go func() {
		select {
		case respond := <-received:
			cancel()
			if answerAfter >= 0 {
				time.Sleep(answerAfter)
				close(respond)
			}
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{DialContext: tunnel.DialContext}}
	resp, err := c.Do(req)
	klog.V(1).InfoS("request ended", "err", err)
	select {
	case <-tunnel.Done():
		res.TunnelEndedFirst++
	default:
	}
	switch {
	case err == nil:
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		res.Answered++
	case strings.Contains(err.Error(), "context canceled"):
		res.Canceled++
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "EOF"):
		res.EOF++
		res.Messages[strings.ReplaceAll(err.Error(), url, "URL")]++
	default:
		res.Other++
		res.Messages[strings.ReplaceAll(err.Error(), url, "URL")]++
	}
	// Every tunnel ends before the next one starts: the connection's Close waits for the proxy's
	// CLOSE_RSP for up to 10 s (the client's CloseTimeout).
	c.CloseIdleConnections()
	select {
	case <-tunnel.Done():
	case <-time.After(15 * time.Second):
		return errors.New("the tunnel did not end within 15 s of the request's end")
	}
	return nil
}
