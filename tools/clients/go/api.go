// The steps on the API's objects: list, get, logs, create and watch,
// server-side apply, delete.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
)

// list: PW_POD is among the namespace's pods, Running.
func (s *scenario) list(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	pods, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return differ("listing the pods of "+s.ns, "200 with a PodList", describe(err))
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
		if p.Name == s.pod {
			if p.Status.Phase != corev1.PodRunning {
				return differ(s.pod+"'s status.phase in the list", corev1.PodRunning, p.Status.Phase)
			}
			return nil
		}
	}
	return differ("the pods of "+s.ns, "a list with "+s.pod, names)
}

// get: PW_POD is Running with both containers ready, each with an ID.
func (s *scenario) get(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	p, err := s.cs.CoreV1().Pods(s.ns).Get(ctx, s.pod, metav1.GetOptions{})
	if err != nil {
		return differ("reading pod "+s.pod, "200 with the pod", describe(err))
	}
	if p.Status.Phase != corev1.PodRunning {
		return differ("status.phase", corev1.PodRunning, p.Status.Phase)
	}
	for _, name := range []string{"main", "reader"} {
		var found *corev1.ContainerStatus
		for i := range p.Status.ContainerStatuses {
			if p.Status.ContainerStatuses[i].Name == name {
				found = &p.Status.ContainerStatuses[i]
			}
		}
		switch {
		case found == nil:
			return differ("status.containerStatuses", "an entry for "+name, p.Status.ContainerStatuses)
		case !found.Ready:
			return differ(name+"'s ready", true, found.Ready)
		case found.ContainerID == "":
			return differ(name+"'s containerID", "an ID", `""`)
		}
	}
	return nil
}

// lineNumber is N of a log line `line N`.
func lineNumber(line string) (int, error) {
	rest, ok := strings.CutPrefix(line, "line ")
	n, err := strconv.Atoi(rest)
	if !ok || err != nil || strconv.Itoa(n) != rest {
		return 0, differ("a log line", "line N", strconv.Quote(line))
	}
	return n, nil
}

// logs-tail: tailLines=3 gives exactly three consecutive lines. The
// scenario may start as soon as main runs, before it printed three lines:
// until then the log is shorter (as the API server's would be), and it is
// read again, for at most 10 s.
func (s *scenario) logsTail(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		text, err := s.tail3(ctx)
		if err != nil {
			return err
		}
		n := strings.Count(text, "\n")
		if n == 3 {
			return nil
		}
		if time.Now().After(deadline) {
			return differ("the log with tailLines=3 after 10 s", "three lines", strconv.Quote(text))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// tail3 reads main's log with tailLines=3: at most three lines, each
// `line N`, numbered consecutively.
func (s *scenario) tail3(ctx context.Context) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	opts := &corev1.PodLogOptions{Container: "main", TailLines: ptr.To[int64](3)}
	body, err := s.cs.CoreV1().Pods(s.ns).GetLogs(s.pod, opts).DoRaw(ctx)
	if err != nil {
		return "", differ("reading "+s.pod+"/main's log", "200 with the log", describe(err))
	}
	text := string(body)
	if text == "" {
		return text, nil
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if !strings.HasSuffix(text, "\n") || len(lines) > 3 {
		return "", differ("the log with tailLines=3", "three lines (fewer just after the start), each ending in \\n", strconv.Quote(text))
	}
	first, err := lineNumber(lines[0])
	if err != nil {
		return "", err
	}
	for i, line := range lines {
		n, err := lineNumber(line)
		if err != nil {
			return "", err
		}
		if n != first+i {
			return "", differ("the log's consecutive numbers", fmt.Sprintf("line %d", first+i), strconv.Quote(text))
		}
	}
	return text, nil
}

// logs-follow: follow=true, tailLines=1; the first line, then three more,
// each numbered one more, within 10 s; then the client stops reading.
func (s *scenario) logsFollow(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts := &corev1.PodLogOptions{Container: "main", Follow: true, TailLines: ptr.To[int64](1)}
	stream, err := s.cs.CoreV1().Pods(s.ns).GetLogs(s.pod, opts).Stream(ctx)
	if err != nil {
		return differ("following "+s.pod+"/main's log", "200 and the log's lines as they come", describe(err))
	}
	defer stream.Close()
	r := bufio.NewReader(stream)
	var got []string
	for len(got) < 4 {
		line, err := r.ReadString('\n')
		if err != nil {
			return differ("the followed log after "+strconv.Quote(strings.Join(got, "")),
				"a line every 200 ms", fmt.Sprintf("%q, then %v", line, err))
		}
		n, err := lineNumber(strings.TrimSuffix(line, "\n"))
		if err != nil {
			return err
		}
		if len(got) > 0 {
			prev, _ := lineNumber(strings.TrimSuffix(got[len(got)-1], "\n"))
			if n != prev+1 {
				return differ("the line after "+strconv.Quote(got[len(got)-1]), fmt.Sprintf("line %d", prev+1), strconv.Quote(line))
			}
		}
		got = append(got, line)
	}
	return nil
}

// The pod the scenario creates: one container sleeping until TERM.
func (s *scenario) madePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.made, Namespace: s.ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           s.image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"},
			}},
		},
	}
}

// create-watch: list (its resourceVersion), create made-L (201 with the
// pod), watch from the list's version until made-L is Running (60 s).
func (s *scenario) createWatch(ctx context.Context) error {
	pods := s.cs.CoreV1().Pods(s.ns)
	lctx, cancel := bounded(ctx)
	defer cancel()
	list, err := pods.List(lctx, metav1.ListOptions{})
	if err != nil {
		return differ("listing the pods of "+s.ns, "200 with a PodList", describe(err))
	}
	rv := list.ResourceVersion
	if rv == "" {
		return differ("the list's metadata.resourceVersion", "a version", `""`)
	}

	cctx, cancel := bounded(ctx)
	defer cancel()
	created, err := pods.Create(cctx, s.madePod(), metav1.CreateOptions{})
	if err != nil {
		return differ("creating pod "+s.made, "201 Created with the pod", describe(err))
	}
	if code := s.codes.last(http.MethodPost, "/api/v1/namespaces/"+s.ns+"/pods"); code != http.StatusCreated {
		return differ("the create's status code", http.StatusCreated, code)
	}
	if created.Name != s.made || created.Namespace != s.ns || created.UID == "" || created.ResourceVersion == "" {
		return differ("the created pod's metadata", fmt.Sprintf("%s/%s with a uid and a resourceVersion", s.ns, s.made),
			fmt.Sprintf("%s/%s uid %q resourceVersion %q", created.Namespace, created.Name, created.UID, created.ResourceVersion))
	}

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	w, err := pods.Watch(wctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return differ("watching the pods of "+s.ns+" from resourceVersion "+rv, "200 and a stream of events", describe(err))
	}
	defer w.Stop()
	var seen []string // made-L's events: type and phase
	for {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				return differ("the watch", s.made+" Running within 60 s", fmt.Sprintf("the watch ended after %v", seen))
			}
			if ev.Type == watch.Error {
				return differ("the watch's events", "ADDED/MODIFIED", fmt.Sprintf("ERROR %v", apierrors.FromObject(ev.Object)))
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return differ("a watch event's object", "a Pod", fmt.Sprintf("%s %T", ev.Type, ev.Object))
			}
			if p.Name != s.made || ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				return differ("the watch's events on "+s.made, "ADDED/MODIFIED until Running", fmt.Sprintf("%s after %v", ev.Type, seen))
			}
			seen = append(seen, fmt.Sprintf("%s %s", ev.Type, p.Status.Phase))
			if p.Status.Phase == corev1.PodRunning {
				return nil
			}
		case <-wctx.Done():
			return differ("the watch", s.made+" Running within 60 s", fmt.Sprintf("events %v", seen))
		}
	}
}

// apply: server-side apply of a label with field manager L-test.
func (s *scenario) apply(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	manager := s.tag + "-test"
	want := corev1ac.Pod(s.made, s.ns).WithLabels(map[string]string{"applied-by": s.tag})
	p, err := s.cs.CoreV1().Pods(s.ns).Apply(ctx, want, metav1.ApplyOptions{FieldManager: manager})
	if err != nil {
		return differ("server-side apply to "+s.made, "200 with the pod", describe(err))
	}
	if p.Labels["applied-by"] != s.tag {
		return differ("the applied pod's labels", "applied-by: "+s.tag, p.Labels)
	}
	var managers []string
	for _, m := range p.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s/%s", m.Manager, m.Operation))
		if m.Manager == manager && m.Operation == metav1.ManagedFieldsOperationApply {
			return nil
		}
	}
	return differ("metadata.managedFields", "an entry "+manager+"/Apply", managers)
}

// delete: delete made-L; reading it then answers 404 NotFound within 30 s.
func (s *scenario) delete(ctx context.Context) error {
	pods := s.cs.CoreV1().Pods(s.ns)
	dctx, cancel := bounded(ctx)
	defer cancel()
	if err := pods.Delete(dctx, s.made, metav1.DeleteOptions{}); err != nil {
		return differ("deleting "+s.made, "200 with the pod", describe(err))
	}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		gctx, cancel := context.WithDeadline(ctx, deadline)
		p, err := pods.Get(gctx, s.made, metav1.GetOptions{})
		cancel()
		var status *apierrors.StatusError
		switch {
		case err == nil:
			last = fmt.Sprintf("the pod (phase %s, deletionTimestamp %v)", p.Status.Phase, p.DeletionTimestamp)
		case errors.As(err, &status):
			st := status.Status()
			if st.Code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound {
				return differ("reading the deleted pod", "404 NotFound", fmt.Sprintf("%d %s", st.Code, st.Reason))
			}
			return nil
		default:
			return differ("reading the deleted pod", "the pod or 404 NotFound", describe(err))
		}
		if time.Now().Add(500 * time.Millisecond).After(deadline) {
			return differ("reading "+s.made+" within 30 s of its delete", "404 NotFound", last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
