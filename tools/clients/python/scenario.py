"""The client-library scenario (tools/clients/SCENARIO.md) with Python's
official `kubernetes` library: prints `ok STEP` after each step that passed;
at the first difference from what the API server would answer, prints what
it expected and what it got and exits 1."""

import json
import os
import random
import signal
import sys
import threading
import time
from contextlib import contextmanager

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

NS = os.environ["PW_NAMESPACE"]
POD = os.environ["PW_POD"]
IMAGE = os.environ["PW_IMAGE"]
TAG = "python"
MADE = f"made-{TAG}"
T = 30  # every network call's timeout (s)


class Mismatch(Exception):
    pass


def expect(what, expected, got):
    if expected != got:
        raise Mismatch(f"{what}: expected {expected!r}, got {got!r}")


@contextmanager
def step(name, limit=T):
    """Runs a step under an overall bound (SIGALRM also interrupts blocking
    reads the library leaves without a timeout, such as its websockets)."""
    def expired(*_):
        raise TimeoutError(f"no answer within {limit} s")
    signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    except Mismatch as e:
        fail(name, str(e))
    except ApiException as e:
        fail(name, f"expected a success, got HTTP {e.status} {e.reason}: {e.body}")
    except Exception as e:  # timeouts, protocol errors
        fail(name, f"{type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
    print(f"ok {name}", flush=True)


def fail(name, msg):
    print(f"FAIL {name}: {msg}", flush=True)
    sys.exit(1)


def line_number(line):
    """N of `line N`, or a mismatch."""
    parts = line.split(" ")
    if len(parts) != 2 or parts[0] != "line" or not parts[1].isdigit():
        raise Mismatch(f"log line: expected `line N`, got {line!r}")
    return int(parts[1])


def exec_status(ws):
    """The exec's end: the status from the error channel and the library's
    exit code (after the stream closed)."""
    ws.run_forever(timeout=T)
    expect("stream closed by the server", False, ws.is_open())
    status = yaml.safe_load(ws.peek_channel(ERROR_CHANNEL) or "null")
    return status, ws.returncode


config.load_kube_config()
api = client.CoreV1Api()

with step("list"):
    pods = api.list_namespaced_pod(NS, _request_timeout=T)
    phases = {p.metadata.name: p.status.phase for p in pods.items}
    expect(f"status.phase of {POD} in the list", "Running", phases.get(POD))

with step("get"):
    pod = api.read_namespaced_pod(POD, NS, _request_timeout=T)
    expect("status.phase", "Running", pod.status.phase)
    statuses = {c.name: c for c in pod.status.container_statuses or []}
    expect("containerStatuses names", ["main", "reader"], sorted(statuses))
    for c in statuses.values():
        expect(f"{c.name} ready", True, c.ready)
        expect(f"{c.name} has a containerID", True, bool(c.container_id))

with step("logs-tail"):
    log = api.read_namespaced_pod_log(POD, NS, container="main", tail_lines=3, _request_timeout=T)
    lines = log.split("\n")
    expect("the log ends with a newline", "", lines.pop())
    expect("number of lines", 3, len(lines))
    n = [line_number(l) for l in lines]
    expect("consecutive numbers", [n[0], n[0] + 1, n[0] + 2], n)

with step("logs-follow", limit=10):
    resp = api.read_namespaced_pod_log(
        POD, NS, container="main", follow=True, tail_lines=1, _preload_content=False, _request_timeout=10
    )
    n = []
    for raw in resp:  # lines as they arrive
        n.append(line_number(raw.decode().rstrip("\n")))
        if len(n) == 4:
            break
    resp.close()
    expect("lines read", 4, len(n))
    expect("numbers increasing by one", [n[0] + i for i in range(4)], n)

with step("exec-exit-code"):
    ws = stream(
        api.connect_get_namespaced_pod_exec, POD, NS, container="main",
        command=["sh", "-c", "echo out; echo err >&2; exit 3"],
        stdin=False, stdout=True, stderr=True, tty=False,
        _preload_content=False, _request_timeout=T,
    )
    status, code = exec_status(ws)
    expect("stdout", "out\n", ws.read_stdout())
    expect("stderr", "err\n", ws.read_stderr())
    expect("status", "Failure", status and status.get("status"))
    expect("status reason", "NonZeroExitCode", status.get("reason"))
    expect("status causes", [{"reason": "ExitCode", "message": "3"}], status.get("details", {}).get("causes"))
    expect("exit code", 3, code)
    ws.close()

    ws = stream(
        api.connect_get_namespaced_pod_exec, POD, NS, container="main", command=["true"],
        stdin=False, stdout=True, stderr=True, tty=False, _preload_content=False, _request_timeout=T,
    )
    status, code = exec_status(ws)
    expect("status", "Success", status and status.get("status"))
    expect("exit code", 0, code)
    ws.close()

with step("exec-stdin"):
    ws = stream(
        api.connect_get_namespaced_pod_exec, POD, NS, container="main", command=["head", "-n", "1"],
        stdin=True, stdout=True, stderr=False, tty=False, _preload_content=False, _request_timeout=T,
    )
    ws.write_stdin(f"hello from {TAG}\n")
    status, code = exec_status(ws)
    expect("stdout", f"hello from {TAG}\n", ws.read_stdout())
    expect("exit code", 0, code)
    ws.close()

with step("attach", limit=10):
    ws = stream(
        api.connect_get_namespaced_pod_attach, POD, NS, container="reader",
        stdin=True, stdout=True, stderr=False, tty=False, _preload_content=False, _request_timeout=T,
    )
    ws.write_stdin(f"ping from {TAG}\n")
    expect("the line back on stdout", f"ping from {TAG}", ws.readline_stdout(timeout=10))
    ws.close()

with step("port-forward"):
    pf = portforward(api.connect_get_namespaced_pod_portforward, POD, NS, ports="8080", _request_timeout=T)
    sock = pf.socket(8080)
    sock.settimeout(T)
    data = random.Random(8080).randbytes(256 * 1024)
    sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    sender.start()
    got = bytearray()
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    sender.join(T)
    expect("bytes echoed back", len(data), len(got))
    expect("the echoed bytes are those sent", True, bytes(got) == data)
    expect("port error", None, pf.error(8080))
    sock.close()

with step("create-watch", limit=70):
    rv = api.list_namespaced_pod(NS, _request_timeout=T).metadata.resource_version
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": MADE, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"],
            }],
        },
    }
    made, code, _ = api.create_namespaced_pod_with_http_info(NS, body, _request_timeout=T)
    expect("create status code", 201, code)
    expect("created pod's name", MADE, made.metadata.name)
    expect("created pod has a uid", True, bool(made.metadata.uid))
    expect("created pod has a creationTimestamp", True, made.metadata.creation_timestamp is not None)
    w = watch.Watch()
    phase, deadline = None, time.monotonic() + 60
    for event in w.stream(api.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=60, _request_timeout=T):
        obj = event["object"]
        if obj.metadata.name == MADE:
            phase = obj.status.phase if obj.status else None
            running = obj
        if phase == "Running" or time.monotonic() > deadline:
            w.stop()
            break
    expect(f"a watch event with {MADE} Running", "Running", phase)
    expect("the uid the create answered", made.metadata.uid, running.metadata.uid)
    created = (running.metadata.uid, running.metadata.creation_timestamp,
               running.status.container_statuses[0].container_id)

with step("apply"):
    patch = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": MADE, "labels": {"applied-by": TAG}}}
    pod = api.patch_namespaced_pod(
        MADE, NS, patch, field_manager=f"{TAG}-test",
        _content_type="application/apply-patch+yaml", _request_timeout=T,
    )
    expect("label applied-by", TAG, (pod.metadata.labels or {}).get("applied-by"))
    managers = [(m.manager, m.operation) for m in pod.metadata.managed_fields or []]
    expect(f"a managedFields entry ({TAG}-test, Apply)", True, (f"{TAG}-test", "Apply") in managers)
    # a change of metadata only: the same pod, nothing restarted
    expect("uid after the apply", created[0], pod.metadata.uid)
    expect("creationTimestamp after the apply", created[1], pod.metadata.creation_timestamp)
    deadline = time.monotonic() + 10
    while True:
        now = api.read_namespaced_pod(MADE, NS, _request_timeout=T)
        statuses = now.status.container_statuses or []
        seen = (now.status.phase, (now.metadata.labels or {}).get("applied-by"),
                statuses[0].container_id if statuses else None)
        if seen == ("Running", TAG, created[2]) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    expect("phase, label and main's containerID read after the apply", ("Running", TAG, created[2]), seen)

with step("delete"):
    api.delete_namespaced_pod(MADE, NS, _request_timeout=T)
    deadline = time.monotonic() + T
    while True:
        try:
            api.read_namespaced_pod(MADE, NS, _request_timeout=T)
        except ApiException as e:
            expect("status code of reading the deleted pod", 404, e.status)
            expect("reason", "NotFound", json.loads(e.body).get("reason"))
            break
        if time.monotonic() > deadline:
            raise Mismatch(f"reading {MADE} after its delete: expected 404 NotFound within {T} s, got 200")
        time.sleep(0.5)
