// The client-go scenario (tools/clients/SCENARIO.md): the steps an
// operator's program would take with k8s.io/client-go against podwarden's
// Kubernetes API, each checked against what the API server would answer.
// It prints `ok STEP` after each step that passed; at the first difference
// it prints what it expected and what it got, and exits 1.
//
// -streams=spdy|websocket picks the transport of exec, attach and
// port-forward (websocket is what kubectl 1.31+ uses).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Bounds: every network call, and the whole scenario (a hang anywhere,
// even outside a context, ends the program).
const (
	callTimeout  = 30 * time.Second
	totalTimeout = 2 * time.Minute
)

// scenario is what every step reads.
type scenario struct {
	cs        *kubernetes.Clientset
	codes     *statusCodes
	config    *rest.Config
	websocket bool   // exec, attach and port-forward over WebSocket (else SPDY)
	tag       string // L in SCENARIO.md: go-spdy or go-websocket
	ns, pod   string
	image     string
	made      string // the pod the scenario creates: made-L
}

func main() {
	streams := flag.String("streams", "spdy", "transport of exec, attach and port-forward: spdy or websocket")
	flag.Parse()
	if *streams != "spdy" && *streams != "websocket" {
		fmt.Fprintf(os.Stderr, "-streams: spdy or websocket, not %q\n", *streams)
		os.Exit(2)
	}
	time.AfterFunc(totalTimeout, func() {
		fmt.Fprintf(os.Stderr, "FAIL: the scenario took over %s\n", totalTimeout)
		os.Exit(1)
	})

	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fail("setup", "kubeconfig: %v", err)
	}
	codes := &statusCodes{}
	config.Wrap(codes.wrap)
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("setup", "client: %v", err)
	}
	tag := "go-" + *streams
	s := &scenario{
		cs:        cs,
		codes:     codes,
		config:    config,
		websocket: *streams == "websocket",
		tag:       tag,
		ns:        env("PW_NAMESPACE"),
		pod:       env("PW_POD"),
		image:     env("PW_IMAGE"),
		made:      "made-" + tag,
	}

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"list", s.list},
		{"get", s.get},
		{"logs-tail", s.logsTail},
		{"logs-follow", s.logsFollow},
		{"exec-exit-code", s.execExitCode},
		{"exec-stdin", s.execStdin},
		{"attach", s.attach},
		{"port-forward", s.portForward},
		{"create-watch", s.createWatch},
		{"apply", s.apply},
		{"delete", s.delete},
	}
	start := time.Now()
	for _, step := range steps {
		if err := step.run(context.Background()); err != nil {
			fail(step.name, "%v", err)
		}
		fmt.Printf("ok %s\n", step.name)
	}
	fmt.Printf("%s: all steps passed in %.1f s\n", tag, time.Since(start).Seconds())
}

// env is a variable the test sets; the scenario cannot run without it.
func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fail("setup", "%s is not set", name)
	}
	return v
}

// fail reports the step's failure and exits 1.
func fail(step, format string, args ...any) {
	fmt.Printf("FAIL %s: %s\n", step, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// differ is a mismatch: what the API server would answer and what came.
func differ(what string, expected, got any) error {
	return fmt.Errorf("%s:\n  expected %v\n  got      %v", what, expected, got)
}

// statusCodes keeps the status code of each method and path's last
// answer: the typed clients give the object, not the code.
type statusCodes struct {
	mu    sync.Mutex
	codes map[string]int
}

func (c *statusCodes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.mu.Lock()
			if c.codes == nil {
				c.codes = map[string]int{}
			}
			c.codes[req.Method+" "+req.URL.Path] = resp.StatusCode
			c.mu.Unlock()
		}
		return resp, err
	})
}

// last is the code of the last answer to method on path (0: none).
func (c *statusCodes) last(method, path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.codes[method+" "+path]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// describe is an error as the API server's Status says it: code, reason
// and message (else the error's text).
func describe(err error) string {
	var status *apierrors.StatusError
	if errors.As(err, &status) {
		st := status.Status()
		return fmt.Sprintf("%d %s: %s", st.Code, st.Reason, st.Message)
	}
	return err.Error()
}

// bounded is ctx with the call timeout.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}
