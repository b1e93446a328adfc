// The client-library scenario (../SCENARIO.md) with @kubernetes/client-node:
// prints `ok STEP` after each step; at the first answer that differs from
// the Kubernetes API server's, prints what it expected and got, and exits 1.
import { randomBytes } from 'node:crypto';
import { PassThrough, Writable } from 'node:stream';
import * as k8s from '@kubernetes/client-node';

const L = 'js';
const CALL_MS = 30_000; // any one call
const TOTAL_MS = 90_000; // the whole scenario

let current = 'setup';
function fail(expected, got) {
  console.log(`FAIL ${current}\n  expected: ${expected}\n  got:      ${got}`);
  process.exit(1);
}
function check(ok, expected, got) {
  if (!ok) fail(expected, typeof got === 'function' ? got() : got);
}
const json = (v) => JSON.stringify(v);
function describe(e) {
  if (e instanceof k8s.ApiException) return `HTTP ${e.code}: ${typeof e.body === 'string' ? e.body : json(e.body)}`;
  return e?.stack ?? String(e);
}
process.on('uncaughtException', (e) => fail('no error', describe(e)));
process.on('unhandledRejection', (e) => fail('no error', describe(e)));
setTimeout(() => fail(`the scenario done within ${TOTAL_MS / 1000} s`, 'still running'), TOTAL_MS).unref();

async function step(name, fn) {
  current = name;
  try {
    await fn();
  } catch (e) {
    fail('no error', describe(e));
  }
  console.log(`ok ${name}`);
}

// `promise`, or a failure after `ms`
function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms / 1000} s: timed out`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// a Writable keeping what it is given; until(pred) waits for pred() to hold
function sink() {
  const chunks = [];
  const waiters = new Set();
  const poke = () => waiters.forEach((w) => w());
  const w = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(Buffer.from(chunk));
      cb();
      poke();
    },
  });
  w.on('finish', poke);
  w.buf = () => Buffer.concat(chunks);
  w.text = () => w.buf().toString();
  w.size = () => chunks.reduce((n, c) => n + c.length, 0);
  w.until = (pred, ms, what) =>
    within(ms, what, new Promise((resolve) => {
      const test = () => pred() && (waiters.delete(test), resolve());
      waiters.add(test);
      test();
    }));
  return w;
}

// waits for a websocket to close (closing it if `close`)
function closed(ws, close) {
  if (ws.readyState === ws.CLOSED) return Promise.resolve();
  const done = new Promise((resolve) => ws.once('close', resolve));
  if (close) ws.close();
  return within(CALL_MS, 'the websocket closed', done).catch((e) => {
    ws.terminate();
    throw e;
  });
}

const env = (name) => process.env[name] || fail(`$${name} set`, 'unset');
const NS = env('PW_NAMESPACE');
const POD = env('PW_POD');
const IMAGE = env('PW_IMAGE');
const MADE = `made-${L}`;

const kc = new k8s.KubeConfig();
kc.loadFromDefault();
const core = kc.makeApiClient(k8s.CoreV1Api);
// every API call aborts after CALL_MS
const of = (v) => new k8s.Observable(Promise.resolve(v));
const timeout = { pre: (req) => (req.setSignal(AbortSignal.timeout(CALL_MS)), of(req)), post: of };
const opts = { middleware: [timeout], middlewareMergeStrategy: 'append' };

const lineRe = /^line (\d+)$/;
// the numbers of `line N` lines, failing on any other line
function lineNumbers(lines) {
  return lines.map((l) => {
    const m = lineRe.exec(l);
    check(m, '`line N` lines', json(lines));
    return Number(m[1]);
  });
}
const consecutive = (ns) => ns.every((n, i) => i === 0 || n === ns[i - 1] + 1);

await step('list', async () => {
  const list = await core.listNamespacedPod({ namespace: NS }, opts);
  const pod = list.items.find((p) => p.metadata?.name === POD);
  check(pod, `${POD} among the pods`, json(list.items.map((p) => p.metadata?.name)));
  check(pod.status?.phase === 'Running', 'status.phase Running', pod.status?.phase);
});

await step('get', async () => {
  const pod = await core.readNamespacedPod({ name: POD, namespace: NS }, opts);
  check(pod.status?.phase === 'Running', 'status.phase Running', pod.status?.phase);
  const statuses = pod.status?.containerStatuses ?? [];
  for (const name of ['main', 'reader']) {
    const s = statuses.find((c) => c.name === name);
    check(s?.ready === true && s.containerID, `${name} ready with a containerID`, json(statuses));
  }
});

const log = new k8s.Log(kc);

await step('logs-tail', async () => {
  const out = sink();
  const ctl = await within(CALL_MS, 'the log', log.log(NS, POD, 'main', out, { tailLines: 3 }));
  await out.until(() => out.writableFinished, CALL_MS, 'the end of the log').finally(() => ctl.abort());
  const text = out.text();
  const lines = text.split('\n');
  check(lines.length === 4 && lines[3] === '', 'exactly three lines', json(text));
  const ns = lineNumbers(lines.slice(0, 3));
  check(consecutive(ns), 'consecutive numbers', json(text));
});

await step('logs-follow', async () => {
  const out = sink();
  const complete = () => out.text().split('\n').slice(0, -1);
  const start = Date.now();
  const ctl = await within(10_000, 'the log', log.log(NS, POD, 'main', out, { follow: true, tailLines: 1 }));
  try {
    await out.until(() => complete().length >= 4 || out.writableFinished, 10_000 - (Date.now() - start), 'four lines');
  } finally {
    ctl.abort(); // stop reading
  }
  const lines = complete();
  check(lines.length >= 4, 'the first line and three more', `the stream ended after ${json(out.text())}`);
  check(consecutive(lineNumbers(lines)), 'numbers increasing by one', json(lines));
});

// runs `command` in `main`, writing `input` (if any) to its stdin; the
// stdout, stderr and the status from the status channel
async function exec(command, input) {
  const stdout = sink();
  const stderr = sink();
  const stdin = input === undefined ? null : new PassThrough();
  let status;
  const ws = await within(CALL_MS, 'the exec connection', new k8s.Exec(kc).exec(
    NS, POD, 'main', command, stdout, stderr, stdin, false, (s) => { status = s; }));
  if (stdin) stdin.write(input);
  await closed(ws, false); // Exec closes it on the status
  check(status, 'a status on the status channel', 'the connection closed without one');
  return { stdout: stdout.text(), stderr: stderr.text(), status };
}
const exitCode = (status) =>
  status?.status === 'Success' ? 0
    : status?.status === 'Failure' && status.reason === 'NonZeroExitCode'
      ? Number(status.details?.causes?.find((c) => c.reason === 'ExitCode')?.message)
      : undefined;

await step('exec-exit-code', async () => {
  const r = await exec(['sh', '-c', 'echo out; echo err >&2; exit 3']);
  check(r.stdout === 'out\n', json('out\n'), json(r.stdout));
  check(r.stderr === 'err\n', json('err\n'), json(r.stderr));
  check(exitCode(r.status) === 3, 'a NonZeroExitCode status with cause ExitCode 3', json(r.status));
  const t = await exec(['true']);
  check(exitCode(t.status) === 0 && t.stdout === '' && t.stderr === '', 'a Success status, no output', json(t));
});

await step('exec-stdin', async () => {
  const hello = `hello from ${L}\n`;
  const r = await exec(['head', '-n', '1'], hello);
  check(r.stdout === hello, json(hello), json(r.stdout));
  check(exitCode(r.status) === 0, 'a Success status', json(r.status));
});

await step('attach', async () => {
  const ping = `ping from ${L}\n`;
  const stdin = new PassThrough();
  const stdout = sink();
  const ws = await within(CALL_MS, 'the attach connection',
    new k8s.Attach(kc).attach(NS, POD, 'reader', stdout, null, stdin, false));
  stdin.write(ping);
  try {
    await stdout.until(() => stdout.text().includes(ping), 10_000, 'the line back');
  } catch (e) {
    fail(json(ping), `${json(stdout.text())} (${e.message})`);
  }
  await closed(ws, true);
});

await step('port-forward', async () => {
  const data = randomBytes(256 * 1024);
  const input = new PassThrough();
  const output = sink();
  const errors = sink();
  const ws = await within(CALL_MS, 'the port-forward connection',
    new k8s.PortForward(kc).portForward(NS, POD, [8080], output, errors, input));
  for (let i = 0; i < data.length; i += 32 * 1024) input.write(data.subarray(i, i + 32 * 1024));
  try {
    await output.until(() => output.size() >= data.length || errors.size() > 0, CALL_MS, '256 KiB back');
  } catch (e) {
    fail(`${data.length} bytes back`, `${output.size()} (${e.message})`);
  }
  check(errors.size() === 0, 'nothing on the error stream', json(errors.text()));
  const got = output.buf();
  const at = [...got].findIndex((b, i) => b !== data[i]);
  check(got.length === data.length && at === -1, 'the bytes sent',
    `${got.length} bytes, the first difference at ${at}`);
  await closed(ws, true);
});

// the pod made by create-watch as it ran: uid, creationTimestamp, main's containerID
let created;
// a time as the typed API gives it (a Date) or a watch's raw object (RFC 3339 text)
const iso = (t) => (t ? new Date(t).toISOString() : String(t));

await step('create-watch', async () => {
  const list = await core.listNamespacedPod({ namespace: NS }, opts);
  const rv = list.metadata?.resourceVersion;
  check(rv, "the list's resourceVersion", json(list.metadata));
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: MADE, namespace: NS },
    spec: {
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: 'main',
        image: IMAGE,
        imagePullPolicy: 'Never',
        command: ['sh', '-c', "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"],
      }],
    },
  };
  const res = await core.createNamespacedPodWithHttpInfo({ namespace: NS, body: pod }, opts);
  check(res.httpStatusCode === 201, 'HTTP 201', `HTTP ${res.httpStatusCode}`);
  check(res.data.metadata?.name === MADE, `the pod ${MADE}`, json(res.data.metadata));
  check(res.data.metadata?.uid && res.data.metadata?.creationTimestamp,
    'a uid and a creationTimestamp', json(res.data.metadata));

  let ctl;
  const seen = [];
  const running = new Promise((resolve, reject) => {
    const onEvent = (type, obj) => {
      seen.push(`${type} ${obj?.metadata?.name} ${obj?.status?.phase}`);
      if (type === 'ERROR') reject(new Error(`an ERROR event: ${json(obj)}`));
      else if (obj?.metadata?.name === MADE && obj.status?.phase === 'Running') resolve(obj);
    };
    const onDone = (err) => reject(new Error(`the watch ended (${err?.message ?? err ?? 'by the server'})`));
    new k8s.Watch(kc)
      .watch(`/api/v1/namespaces/${NS}/pods`, { resourceVersion: rv }, onEvent, onDone)
      .then((c) => { ctl = c; }, reject);
  });
  try {
    const obj = await within(60_000, `an event with ${MADE} Running`, running);
    check(obj.metadata.uid === res.data.metadata.uid, `the uid the create answered (${res.data.metadata.uid})`,
      obj.metadata.uid);
    created = { uid: obj.metadata.uid, since: iso(obj.metadata.creationTimestamp),
      id: obj.status?.containerStatuses?.[0]?.containerID };
  } catch (e) {
    fail(`an event with ${MADE} Running`, `${e.message}; events: ${json(seen)}`);
  } finally {
    ctl?.abort();
  }
});

await step('apply', async () => {
  const manager = `${L}-test`;
  const body = { apiVersion: 'v1', kind: 'Pod', metadata: { name: MADE, labels: { 'applied-by': L } } };
  const pod = await core.patchNamespacedPod(
    { name: MADE, namespace: NS, body, fieldManager: manager },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.ServerSideApply, opts));
  check(pod.metadata?.labels?.['applied-by'] === L, `label applied-by: ${L}`, json(pod.metadata?.labels));
  const fields = pod.metadata?.managedFields ?? [];
  check(fields.some((f) => f.manager === manager && f.operation === 'Apply'),
    `a managedFields entry ${manager} Apply`, json(fields));
  // a change of metadata only: the same pod, nothing restarted
  check(pod.metadata?.uid === created.uid && iso(pod.metadata?.creationTimestamp) === created.since,
    `the same uid and creationTimestamp (${json(created)})`, json(pod.metadata));
  const want = json(['Running', L, created.id]);
  let seen;
  for (const deadline = Date.now() + 10_000; ;) {
    const now = await core.readNamespacedPod({ name: MADE, namespace: NS }, opts);
    seen = json([now.status?.phase, now.metadata?.labels?.['applied-by'], now.status?.containerStatuses?.[0]?.containerID]);
    if (seen === want || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  check(seen === want, `phase, label and main's containerID read after the apply: ${want}`, seen);
});

await step('delete', async () => {
  await core.deleteNamespacedPod({ name: MADE, namespace: NS }, opts);
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await core.readNamespacedPod({ name: MADE, namespace: NS }, opts);
    } catch (e) {
      if (!(e instanceof k8s.ApiException) || e.code !== 404) throw e;
      let status;
      try { status = JSON.parse(e.body); } catch { /* checked below */ }
      check(status?.kind === 'Status' && status.reason === 'NotFound', 'a NotFound Status', e.body);
      break;
    }
    check(Date.now() < deadline, '404 NotFound within 30 s', `${MADE} still there`);
    await new Promise((r) => setTimeout(r, 250));
  }
});
