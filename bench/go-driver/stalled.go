package main

// beside-stalled: does one stream that nobody reads hold up the others through the same agent?
// `stalled` connections each ask the source for more bytes than it will ever send, and are never
// read; once `fill` has passed (every buffer on their way is full by then), one download of `want`
// bytes through the same path, given `giveUp`. Its rate counts what arrived within giveUp, so a
// stream that stalls beside the others reads as a rate near zero, not as a failure.

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

type besideResult struct {
	MiBps    float64 `json:"mibps"`
	Complete bool    `json:"complete"`
	Bytes    int64   `json:"bytes"`
}

func besideStalled(dial dialer, source string, stalled int, fill time.Duration, want int64, giveUp time.Duration) (besideResult, error) {
	ctx := context.Background()
	held := make([]net.Conn, 0, stalled)
	defer func() { closeAll(held) }()
	for i := 0; i < stalled; i++ {
		c, err := dial(ctx, source)
		if err != nil {
			return besideResult{}, fmt.Errorf("stalled connection %d: %w", i, err)
		}
		held = append(held, c)
		if _, err := fmt.Fprintf(c, "%d\n", int64(1)<<50); err != nil {
			return besideResult{}, fmt.Errorf("stalled connection %d: request: %w", i, err)
		}
	}
	time.Sleep(fill)

	c, err := dial(ctx, source)
	if err != nil {
		return besideResult{}, fmt.Errorf("the download beside the stalled ones: %w", err)
	}
	held = append(held, c)
	// konnectivity-client's connections have no read deadline: the reads run on their own and the
	// give-up is a timer; closing the connections at the end ends them.
	began := time.Now()
	if _, err := fmt.Fprintf(c, "%d\n", want); err != nil {
		return besideResult{}, fmt.Errorf("the download beside the stalled ones: request: %w", err)
	}
	var got atomic.Int64
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 128*1024)
		for got.Load() < want {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil && got.Load() < want {
				done <- fmt.Errorf("the download beside the stalled ones ended after %d of %d bytes: %w", got.Load(), want, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			return besideResult{}, err
		}
		return besideResult{MiBps: float64(want) / mib / time.Since(began).Seconds(), Complete: true, Bytes: want}, nil
	case <-time.After(giveUp):
		n := got.Load()
		return besideResult{MiBps: float64(n) / mib / giveUp.Seconds(), Bytes: n}, nil
	}
}
