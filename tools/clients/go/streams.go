// The streaming steps: exec, attach and port-forward, over SPDY or over
// WebSocket (-streams).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
)

// executor runs exec or attach (sub) on PW_POD with opts, over the
// scenario's transport: SPDY posts, WebSocket gets (as kubectl does).
func (s *scenario) executor(sub string, opts *corev1.PodExecOptions) (remotecommand.Executor, error) {
	req := s.cs.CoreV1().RESTClient().Post().Namespace(s.ns).Resource("pods").Name(s.pod).SubResource(sub)
	if sub == "attach" {
		req = req.VersionedParams(&corev1.PodAttachOptions{
			Container: opts.Container, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
		}, scheme.ParameterCodec)
	} else {
		req = req.VersionedParams(opts, scheme.ParameterCodec)
	}
	if s.websocket {
		return remotecommand.NewWebSocketExecutor(s.config, http.MethodGet, req.URL().String())
	}
	return remotecommand.NewSPDYExecutor(s.config, http.MethodPost, req.URL())
}

// execIn runs command in main with stdout and stderr (and stdin if
// given); the error is the library's report of the exit.
func (s *scenario) execIn(ctx context.Context, stdin io.Reader, command ...string) (stdout, stderr string, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	e, err := s.executor("exec", &corev1.PodExecOptions{
		Container: "main", Command: command, Stdin: stdin != nil, Stdout: true, Stderr: true,
	})
	if err != nil {
		return "", "", fmt.Errorf("exec %q: %w", command, err)
	}
	var out, errOut bytes.Buffer
	err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

// exitCode is the exit code in the library's report (0 for no error).
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var exit exec.CodeExitError
	if errors.As(err, &exit) {
		return exit.ExitStatus(), nil
	}
	return 0, err
}

// exec-exit-code: separate stdout and stderr, exit code 3; then `true`, 0.
func (s *scenario) execExitCode(ctx context.Context) error {
	stdout, stderr, err := s.execIn(ctx, nil, "sh", "-c", "echo out; echo err >&2; exit 3")
	code, other := exitCode(err)
	if other != nil {
		return differ("the exec's end", "exit code 3 (NonZeroExitCode, cause ExitCode 3)", other)
	}
	if stdout != "out\n" || stderr != "err\n" || code != 3 {
		return differ("the exec's stdout, stderr and exit code", `"out\n" "err\n" 3`,
			fmt.Sprintf("%q %q %d", stdout, stderr, code))
	}
	stdout, stderr, err = s.execIn(ctx, nil, "true")
	if code, other = exitCode(err); other != nil || code != 0 || stdout != "" || stderr != "" {
		return differ("exec `true`", `"" "" exit code 0 (Success)`, fmt.Sprintf("%q %q %d %v", stdout, stderr, code, other))
	}
	return nil
}

// exec-stdin: `head -n 1` reads the line written to its stdin; stdin stays
// open, so the exec ends when the command does.
func (s *scenario) execStdin(ctx context.Context) error {
	stdin, w := io.Pipe()
	defer w.Close()
	line := "hello from " + s.tag + "\n"
	go w.Write([]byte(line))
	stdout, stderr, err := s.execIn(ctx, stdin, "head", "-n", "1")
	code, other := exitCode(err)
	if other != nil || code != 0 || stdout != line || stderr != "" {
		return differ("exec `head -n 1`", fmt.Sprintf(`%q "" exit code 0`, line), fmt.Sprintf("%q %q %d %v", stdout, stderr, code, other))
	}
	return nil
}

// watcher is a stdout that says when what it received contains a text.
type watcher struct {
	mu   sync.Mutex
	got  bytes.Buffer
	want string
	seen chan struct{}
}

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := strings.Contains(w.got.String(), w.want)
	w.got.Write(p)
	if !before && strings.Contains(w.got.String(), w.want) {
		close(w.seen)
	}
	return len(p), nil
}

func (w *watcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strconv.Quote(w.got.String())
}

// attach: to reader's stdin and stdout; the line written comes back
// within 10 s; then the client detaches (the container keeps running).
func (s *scenario) attach(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err := s.executor("attach", &corev1.PodExecOptions{Container: "reader", Stdin: true, Stdout: true})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	line := "ping from " + s.tag + "\n"
	stdin, w := io.Pipe()
	defer w.Close()
	out := &watcher{want: line, seen: make(chan struct{})}
	ended := make(chan error, 1)
	go func() {
		ended <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: out})
	}()
	go w.Write([]byte(line))
	select {
	case <-out.seen:
	case err := <-ended:
		return differ("the attach", strconv.Quote(line)+" back on stdout, the stream open", fmt.Sprintf("%s, then the stream ended: %v", out, err))
	case <-ctx.Done():
		return differ("the attach's stdout within 10 s", strconv.Quote(line), out)
	}
	// detach: the stream ends with the context
	cancel()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		return differ("detaching", "the stream ending with its context", "still open after 5 s")
	}
	return nil
}

// port-forward: 256 KiB of pseudo-random bytes through a forward to the
// pod's port 8080 (an echo server) come back identical; then the client
// half-closes and the forwarded connection ends cleanly.
func (s *scenario) portForward(ctx context.Context) error {
	u := s.cs.CoreV1().RESTClient().Post().Namespace(s.ns).Resource("pods").Name(s.pod).SubResource("portforward").URL()
	var dialer httpstream.Dialer
	if s.websocket {
		d, err := portforward.NewSPDYOverWebsocketDialer(u, s.config)
		if err != nil {
			return fmt.Errorf("port-forward dialer: %w", err)
		}
		dialer = d
	} else {
		transport, upgrader, err := spdy.RoundTripperFor(s.config)
		if err != nil {
			return fmt.Errorf("port-forward dialer: %w", err)
		}
		dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	}

	// What the forwarder reports only through the library's error handlers
	// (an error on the error stream, a broken copy) fails the step too.
	// Not the attach's: over WebSocket, detaching closes the executor's
	// own connection, and its stdin and stdout copies report that ("next
	// reader: ... use of closed network connection", from client-go's
	// WebSocket reader, which port-forward does not use) from goroutines
	// that may run after the attach step returned.
	var mu sync.Mutex
	var reported []string
	utilruntime.ErrorHandlers = append(utilruntime.ErrorHandlers,
		func(_ context.Context, err error, msg string, _ ...any) {
			if strings.HasPrefix(err.Error(), "next reader: ") && errors.Is(err, net.ErrClosed) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, strings.TrimSpace(msg+" "+err.Error()))
		})
	errorsReported := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reported...)
	}

	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return fmt.Errorf("port-forward: %w", err)
	}
	forwarded := make(chan error, 1)
	go func() { forwarded <- fw.ForwardPorts() }()
	stopForwarding := sync.OnceFunc(func() { close(stop) })
	defer stopForwarding()
	select {
	case <-ready:
	case err := <-forwarded:
		return differ("the port-forward to "+s.pod+":8080", "101 Switching Protocols, then forwarding", err)
	case <-time.After(callTimeout):
		return differ("the port-forward's upgrade", "an answer", "none within 30 s")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		return fmt.Errorf("port-forward: %w", err)
	}

	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local), callTimeout)
	if err != nil {
		return fmt.Errorf("connect to the forwarded port: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(callTimeout))
	sent := make([]byte, 256*1024)
	rand.NewChaCha8([32]byte{8, 0, 8, 0}).Read(sent)
	wrote := make(chan error, 1)
	go func() {
		_, err := conn.Write(sent)
		wrote <- err
	}()
	back := make([]byte, len(sent))
	n, err := io.ReadFull(conn, back)
	if err != nil {
		return differ("the echo through the forward", fmt.Sprintf("%d bytes", len(sent)),
			fmt.Sprintf("%d bytes, then %v (reported: %q)", n, err, errorsReported()))
	}
	if err := <-wrote; err != nil {
		return fmt.Errorf("write to the forwarded port: %w", err)
	}
	if !bytes.Equal(sent, back) {
		at := 0
		for sent[at] == back[at] {
			at++
		}
		return differ("the echoed bytes", "the bytes sent", fmt.Sprintf("a difference at byte %d", at))
	}

	// The client's end: the echo server's connection ends, so does the
	// forwarded one, with nothing more and no error.
	conn.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(conn)
	if err != nil || len(rest) != 0 {
		return differ("the forwarded connection after the client's half-close", "the end (EOF), nothing more",
			fmt.Sprintf("%d more bytes, then %v", len(rest), err))
	}
	if r := errorsReported(); len(r) != 0 {
		return differ("the forwarder's reports", "none", r)
	}
	stopForwarding()
	select {
	case err := <-forwarded:
		if err != nil {
			return differ("the port-forward's end", "a clean stop", err)
		}
	case <-time.After(5 * time.Second):
		return differ("the port-forward's end", "a clean stop", "still forwarding after 5 s")
	}
	return nil
}
