package main

// probe: for the WAN figures, whether and when a dial through the path works: dial, 1 KiB to
// the echo port and back. Tries until one works or --give-up has passed since the start; each try
// has at most --try-timeout, and a try starts --every after the one before it started (or when it
// ended, if later). With --try-timeout at --give-up (its default) it is one try: timed until it
// fails, when it fails.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

type probeResult struct {
	OK    bool `json:"ok"`
	Tries int  `json:"tries"`
	// Wall-clock times (Unix ms), so the harness can place them against its own events.
	StartedMs int64 `json:"startedMs"`
	// The working try's echo back, or the last try's failure.
	EndedMs int64 `json:"endedMs"`
	// The last failure, empty after a try that worked.
	Error string `json:"error,omitempty"`
}

func probe(dial dialer, echo string, every, tryTimeout, giveUp time.Duration) probeResult {
	began := time.Now()
	deadline := began.Add(giveUp)
	r := probeResult{StartedMs: began.UnixMilli()}
	for {
		tryStart := time.Now()
		err := echoWithin(dial, echo, min(tryTimeout, time.Until(deadline)))
		r.Tries++
		r.EndedMs = time.Now().UnixMilli()
		if err == nil {
			r.OK, r.Error = true, ""
			return r
		}
		r.Error = err.Error()
		if tryTimeout >= giveUp {
			return r
		}
		next := tryStart.Add(every)
		if time.Now().After(next) {
			next = time.Now()
		}
		if !next.Before(deadline) {
			return r
		}
		time.Sleep(time.Until(next))
	}
}

// echoWithin: one dial and 1 KiB echoed, within timeout. konnectivity-client's connections have
// no deadlines, so a try that runs out is left behind (closed in the background), not waited for.
func echoWithin(dial dialer, echo string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c, err := dial(ctx, echo)
		if err != nil {
			done <- err
			return
		}
		msg := make([]byte, 1024)
		_, err = c.Write(msg)
		if err == nil {
			_, err = io.ReadFull(c, msg)
		}
		done <- err
		go closeQuietly(c)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no echo within %s", timeout)
	}
}

func closeQuietly(c net.Conn) {
	_ = c.Close()
}

func probeArgs(every, tryTimeout, giveUp time.Duration) error {
	if giveUp <= 0 || tryTimeout <= 0 || every < 0 {
		return errors.New("probe needs --give-up > 0, --try-timeout > 0 and --every >= 0")
	}
	return nil
}
