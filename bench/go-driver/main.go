// go-driver: the bench's client for the speed scenarios (throughput, dial latency), built on
// the upstream Go konnectivity-client so that kctl and upstream are both measured from the
// same client kube-apiserver uses. Three ways to reach the target:
//
//	grpc:    a new single-use gRPC tunnel per dial over the proxy's unix socket (as the
//	         kube-apiserver egress selector dials), then tunnel.DialContext("tcp", address)
//	connect: HTTP CONNECT on a new unix-socket connection per dial, then raw bytes
//	direct:  plain TCP to the target
//	floor:   grpc, to a ProxyService in this process that echoes (floor.go): the client's own cost
//
// Subcommands print one JSON line on stdout; any failure exits 1 with one line on stderr.
//
//	go-driver throughput   --mode M [--uds PATH] --source HOST:PORT --conns N --bytes B   -> {"mibps": X}
//	go-driver dial-latency --mode M [--uds PATH] --echo HOST:PORT --count N               -> {"ms": [...]}
//	go-driver cancel --mode grpc --uds PATH --count N [--shape S] [--answer-after D]      -> cancel.go
//	go-driver probe --mode M [--uds PATH] --echo HOST:PORT --give-up D [--try-timeout D] [--every D] -> probe.go
//	go-driver beside-stalled --mode M [--uds PATH] --source HOST:PORT --stalled N --fill D --bytes B --give-up D -> stalled.go
//
// --klog-v N shows konnectivity-client's log on stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

const mib = 1024 * 1024

// dialer opens one connection to address through the chosen path.
type dialer func(ctx context.Context, address string) (net.Conn, error)

func newDialer(mode, uds string) (dialer, error) {
	if mode != "direct" && uds == "" {
		return nil, fmt.Errorf("--mode %s needs --uds", mode)
	}
	switch mode {
	case "direct":
		return func(ctx context.Context, address string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", address)
		}, nil
	case "grpc":
		return func(ctx context.Context, address string) (net.Conn, error) { return dialGRPC(ctx, uds, address) }, nil
	case "connect":
		return func(ctx context.Context, address string) (net.Conn, error) { return dialConnect(ctx, uds, address) }, nil
	}
	return nil, fmt.Errorf("unknown --mode %q (grpc, connect or direct)", mode)
}

// dialGRPC: one gRPC connection and one Proxy stream for this dial only; closing the returned
// connection closes the tunnel too.
func dialGRPC(ctx context.Context, uds, address string) (net.Conn, error) {
	udsDialer := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", uds)
	})
	createCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tunnel, err := client.CreateSingleUseGrpcTunnelWithContext(createCtx, context.Background(), uds,
		udsDialer, grpc.WithBlock(), grpc.WithReturnConnectionError(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gRPC tunnel over %s: %w", uds, err)
	}
	c, err := tunnel.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("dial %s through the tunnel: %w", address, err)
	}
	return c, nil
}

var okStatus = regexp.MustCompile(`^HTTP/1\.[01] 200( |$)`)

// dialConnect: HTTP CONNECT on a new unix-socket connection; bytes the proxy sent after the
// response header are handed out first by the returned connection.
func dialConnect(ctx context.Context, uds, address string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", uds)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %w", address, err)
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", address, address); err != nil {
		return fail(err)
	}
	r := bufio.NewReaderSize(c, 4096)
	status, err := r.ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("no response: %w", err))
	}
	status = strings.TrimRight(status, "\r\n")
	if !okStatus.MatchString(status) {
		return fail(errors.New(status))
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fail(fmt.Errorf("response header: %w", err))
		}
		if line == "\r\n" || line == "\n" {
			break
		}
	}
	if n := r.Buffered(); n > 0 {
		early, _ := r.Peek(n)
		return &prefixedConn{Conn: c, prefix: append([]byte(nil), early...)}, nil
	}
	return c, nil
}

// prefixedConn returns prefix before anything read from Conn.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixedConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// throughput: conns connections dialed at once, then each asks the source for bytesEach bytes;
// MiB/s in total from the requests to the last byte of the last connection.
func throughput(dial dialer, source string, conns int, bytesEach int64) (float64, error) {
	ctx := context.Background()
	cs := make([]net.Conn, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[i], errs[i] = dial(ctx, source)
		}()
	}
	wg.Wait()
	defer closeAll(cs)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	start := make(chan struct{})
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = download(c, bytesEach)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("connection %d: %w", i, errs[i])
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	secs := time.Since(began).Seconds()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(conns) * float64(bytesEach) / mib / secs, nil
}

func download(c net.Conn, want int64) error {
	if _, err := fmt.Fprintf(c, "%d\n", want); err != nil {
		return err
	}
	buf := make([]byte, 128*1024)
	var got int64
	for got < want {
		n, err := c.Read(buf)
		got += int64(n)
		if err != nil {
			if got >= want {
				break
			}
			return fmt.Errorf("ended after %d of %d bytes: %w", got, want, err)
		}
	}
	return nil
}

// closeAll closes every connection at once and waits a bounded time: a tunnel connection's
// Close waits for the proxy's CLOSE_RSP.
func closeAll(cs []net.Conn) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// dialLatencies: count sequential short connections (dial, 1 KiB to the echo port and the same
// 1 KiB back, close), milliseconds each, close included.
func dialLatencies(dial dialer, echo string, count int) ([]float64, error) {
	ctx := context.Background()
	out := make([]float64, 0, count)
	msg := make([]byte, 1024)
	for i := range msg {
		msg[i] = 'a'
	}
	back := make([]byte, len(msg))
	for i := 0; i < count; i++ {
		began := time.Now()
		c, err := dial(ctx, echo)
		if err != nil {
			return nil, fmt.Errorf("dial %d: %w", i, err)
		}
		if _, err := c.Write(msg); err != nil {
			c.Close()
			return nil, fmt.Errorf("dial %d: write: %w", i, err)
		}
		if _, err := io.ReadFull(c, back); err != nil {
			c.Close()
			return nil, fmt.Errorf("dial %d: echo: %w", i, err)
		}
		// A tunnel connection's Close waits for the proxy's CLOSE_RSP; "tunnel closed" only means
		// the single-use tunnel ended first, which is what closing it is for.
		if err := c.Close(); err != nil && err.Error() != "tunnel closed" {
			return nil, fmt.Errorf("dial %d: close: %w", i, err)
		}
		out = append(out, float64(time.Since(began).Nanoseconds())/1e6)
	}
	return out, nil
}

func run(args []string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("usage: go-driver throughput|dial-latency|cancel|probe|beside-stalled --mode grpc|connect|direct|floor [--uds PATH] ...")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mode := fs.String("mode", "", "grpc, connect, direct, or floor (grpc to an echoing ProxyService in this process)")
	uds := fs.String("uds", "", "the proxy's unix socket (grpc, connect)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	source := fs.String("source", "", "throughput: HOST:PORT of the source port")
	conns := fs.Int("conns", 1, "throughput: connections at once")
	bytesEach := fs.Int64("bytes", 0, "throughput: bytes per connection")
	echo := fs.String("echo", "", "dial-latency: HOST:PORT of the echo port")
	count := fs.Int("count", 0, "dial-latency, cancel: connections, one after another")
	shape := fs.String("shape", "test", "cancel: test (one ctx for tunnel and request) or apiserver (tunnel ctx Background)")
	answerAfter := fs.Duration("answer-after", 0, "cancel: how long after the cancel the target answers (negative: never)")
	giveUp := fs.Duration("give-up", 0, "probe: stop trying after this long; beside-stalled: count what arrived within this long")
	tryTimeout := fs.Duration("try-timeout", 0, "probe: at most this long per try (default: --give-up, one try)")
	stalled := fs.Int("stalled", 1, "beside-stalled: connections asked for data and never read")
	fill := fs.Duration("fill", 3*time.Second, "beside-stalled: wait this long after the stalled requests")
	every := fs.Duration("every", 250*time.Millisecond, "probe: a new try this long after the last one started")
	verbose := fs.Int("klog-v", 0, "konnectivity-client's klog verbosity, to stderr (0: none; 5 traces every packet)")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *verbose > 0 {
		klogToStderr(*verbose)
	}
	if *mode == "floor" {
		floorUDS, stop, err := startFloorProxy()
		if err != nil {
			return nil, err
		}
		defer stop()
		*mode, *uds = "grpc", floorUDS
	}
	dial, err := newDialer(*mode, *uds)
	if err != nil {
		return nil, err
	}
	time.AfterFunc(*timeout, func() {
		fmt.Fprintf(os.Stderr, "go-driver %s --mode %s: timed out after %s\n", args[0], *mode, *timeout)
		os.Exit(1)
	})
	switch args[0] {
	case "throughput":
		if *source == "" || *conns < 1 || *bytesEach < 1 {
			return nil, errors.New("throughput needs --source, --conns >= 1 and --bytes >= 1")
		}
		v, err := throughput(dial, *source, *conns, *bytesEach)
		return map[string]float64{"mibps": v}, err
	case "dial-latency":
		if *echo == "" || *count < 1 {
			return nil, errors.New("dial-latency needs --echo and --count >= 1")
		}
		ms, err := dialLatencies(dial, *echo, *count)
		return map[string][]float64{"ms": ms}, err
	case "cancel":
		if *mode != "grpc" || *count < 1 {
			return nil, errors.New("cancel needs --mode grpc, --uds and --count >= 1")
		}
		return cancelRuns(*uds, *shape, *count, *answerAfter)
	case "probe":
		if *tryTimeout == 0 {
			*tryTimeout = *giveUp
		}
		if *echo == "" {
			return nil, errors.New("probe needs --echo")
		}
		if err := probeArgs(*every, *tryTimeout, *giveUp); err != nil {
			return nil, err
		}
		return probe(dial, *echo, *every, *tryTimeout, *giveUp), nil
	case "beside-stalled":
		if *source == "" || *stalled < 1 || *bytesEach < 1 || *giveUp <= 0 {
			return nil, errors.New("beside-stalled needs --source, --stalled >= 1, --bytes >= 1 and --give-up > 0")
		}
		return besideStalled(dial, *source, *stalled, *fill, *bytesEach, *giveUp)
	}
	return nil, fmt.Errorf("unknown command %q (throughput, dial-latency, cancel, probe or beside-stalled)", args[0])
}

// klogToStderr shows konnectivity-client's own log (and cancel's per-request lines) at verbosity v.
func klogToStderr(v int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.Set("v", fmt.Sprint(v))
	klog.LogToStderr(true)
	klog.SetOutput(os.Stderr)
}

func main() {
	// konnectivity-client logs through klog; keep stderr for our own one-line error.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	res, err := run(os.Args[1:])
	if err == nil {
		var line []byte
		if line, err = json.Marshal(res); err == nil {
			_, err = fmt.Printf("%s\n", line)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-driver: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}
