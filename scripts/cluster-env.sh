#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for cluster mode's tests:
# etcd, kube-apiserver, kube-controller-manager and kube-scheduler built by
# tools/cluster/build.sh (the version its go.mod pins), set up as kubeadm
# sets up a control plane that nodes join with a bootstrap token.
#
#   scripts/cluster-env.sh up        build, make the PKI, start everything, wait until ready (idempotent)
#   scripts/cluster-env.sh down      stop everything and remove its state
#   scripts/cluster-env.sh status    what runs
#   scripts/cluster-env.sh env       print the variables tests read
#   scripts/cluster-env.sh partition cut|heal [vm]
#                                    drop (cut) or let through (heal) every packet of the
#                                    partitionable port (with `vm`: the VM's): a network
#                                    partition between the nodes that use it and the API
#                                    server (idempotent)
#
# Everything is private: state in PODWARDEN_CLUSTER_DIR
# (/var/lib/podwarden-cluster), pid files in PODWARDEN_CLUSTER_RUN
# (/run/podwarden-cluster), binaries in PODWARDEN_CLUSTER_BIN_DIR
# (target/cluster-bin), loopback ports of its own (overridable:
# PODWARDEN_CLUSTER_API_PORT 16443, _ETCD_PORT 23790, _ETCD_PEER_PORT 23800,
# _KCM_PORT 20257, _SCHEDULER_PORT 20259). No address or route of the host
# changes; two loopback firewall rules of its own make a second API port
# (PODWARDEN_CLUSTER_PARTITION_PORT 16444, redirected to the API port) that
# `partition cut` silences (packets dropped both ways, connections left
# half-open, as a pulled cable does) while the API port itself still
# answers the tests' kubectl. The VM tests' node (a guest of
# scripts/vm-env.sh, whose connections QEMU carries to this port) has a
# partitionable port of its own (PODWARDEN_CLUSTER_VM_PARTITION_PORT 16445),
# so that its partition and the host nodes' are independent.
#
# kubectl (/usr/lib/google-cloud-sdk/bin/kubectl.1.33 here; 1.33 talks to
# this 1.34 server) reaches it with --kubeconfig $PODWARDEN_CLUSTER_ADMIN_KUBECONFIG.
#
# PODWARDEN_CLUSTER_SIGNING_DURATION (8760h) is the lifetime of the
# certificates the controller-manager issues (a rotation test wants
# minutes); `up` with another value restarts the controller-manager only.
#
# The audit log (PODWARDEN_CLUSTER_AUDIT_LOG in `env`) has one line for each
# request, at Metadata level (the RequestReceived stage is left out; a
# watch also has a ResponseStarted line), for tests that count a node's
# requests.
set -euo pipefail
# The daemons started here must not inherit the caller's descriptors: a lock
# the caller holds (flock around a test run) would live as long as they do.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CL_DIR="${PODWARDEN_CLUSTER_DIR:-/var/lib/podwarden-cluster}"
RUN_DIR="${PODWARDEN_CLUSTER_RUN:-/run/podwarden-cluster}"
BIN_DIR="${PODWARDEN_CLUSTER_BIN_DIR:-$ROOT/target/cluster-bin}"
API_PORT="${PODWARDEN_CLUSTER_API_PORT:-16443}"
PART_PORT="${PODWARDEN_CLUSTER_PARTITION_PORT:-16444}"
VM_PART_PORT="${PODWARDEN_CLUSTER_VM_PARTITION_PORT:-16445}"
ETCD_PORT="${PODWARDEN_CLUSTER_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${PODWARDEN_CLUSTER_ETCD_PEER_PORT:-23800}"
KCM_PORT="${PODWARDEN_CLUSTER_KCM_PORT:-20257}"
SCHED_PORT="${PODWARDEN_CLUSTER_SCHEDULER_PORT:-20259}"
SIGNING_DURATION="${PODWARDEN_CLUSTER_SIGNING_DURATION:-8760h}"
# The nodes' address: the API server calls a node's server (logs, exec,
# port-forward) at the address the Node reports, and refuses loopback for
# some paths; a veth pair whose other end is in a network namespace of the
# test bed's own gives the nodes a routable address that is no part of
# this machine's networks.
NODE_NET="${PODWARDEN_CLUSTER_NODE_NET:-10.251.0}"
NODE_IP="$NODE_NET.1"
NODE_VETH="${PODWARDEN_CLUSTER_NODE_VETH:-pwcl0}"
NODE_NETNS="${PODWARDEN_CLUSTER_NODE_NETNS:-podwarden-cluster}"
SERVICE_CIDR="10.96.0.0/12"
SERVICE_IP="10.96.0.1"
SERVER="https://127.0.0.1:$API_PORT"
PKI="$CL_DIR/pki"
LOGS="$CL_DIR/logs"
AUDIT_LOG="$LOGS/audit.log"
ADMIN_KUBECONFIG="$CL_DIR/admin.kubeconfig"
# the group kubeadm gives its default node token: the RBAC below binds it
TOKEN_GROUP="system:bootstrappers:kubeadm:default-node-token"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)

log() { printf 'cluster-env: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- PKI

# openssl's extensions for one kind of certificate
ext_file() {
  local kind="$1" sans="${2:-}"
  case "$kind" in
    ca) printf '%s\n' 'basicConstraints=critical,CA:TRUE' \
          'keyUsage=critical,digitalSignature,keyCertSign,cRLSign' 'subjectKeyIdentifier=hash' ;;
    server) printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
          'extendedKeyUsage=serverAuth' 'authorityKeyIdentifier=keyid' "subjectAltName=$sans" ;;
    client) printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
          'extendedKeyUsage=clientAuth' 'authorityKeyIdentifier=keyid' ;;
  esac
}

# A P-256 key and a certificate signed by the cluster CA: NAME KIND SUBJECT [SANS]
issue() {
  local name="$1" kind="$2" subj="$3" sans="${4:-}"
  [ -s "$PKI/$name.crt" ] && return
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  ext_file "$kind" "$sans" > "$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAserial "$PKI/ca.srl" -CAcreateserial -days 3650 -extfile "$PKI/$name.ext" \
    -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$CL_DIR" "$PKI"
  if [ ! -s "$PKI/ca.crt" ]; then
    log "making the cluster CA and certificates"
    rm -f "$PKI"/*   # certificates of an older CA are worthless
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key" 2>/dev/null
    # self-signed, with the CA's extensions from a config of its own
    {
      printf '%s\n' '[req]' 'distinguished_name=dn' 'x509_extensions=v3' '[dn]' '[v3]'
      ext_file ca
    } > "$PKI/ca.cnf"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=podwarden-cluster-ca" -days 3650 \
      -config "$PKI/ca.cnf" -out "$PKI/ca.crt" 2>/dev/null
    rm -f "$PKI/ca.cnf"
  fi
  issue apiserver server "/CN=kube-apiserver" \
    "IP:127.0.0.1,DNS:localhost,IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue apiserver-kubelet-client client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  issue admin client "/O=system:masters/CN=kubernetes-admin"
  issue controller-manager client "/CN=system:kube-controller-manager"
  issue scheduler client "/CN=system:kube-scheduler"
  if [ ! -s "$PKI/sa.key" ]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

# sha256:HEX of the CA's SubjectPublicKeyInfo, as kubeadm's
# --discovery-token-ca-cert-hash
ca_hash() {
  echo "sha256:$(openssl x509 -in "$PKI/ca.crt" -noout -pubkey | openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1)"
}

# kubeconfig FILE USER CERT_NAME: the server, the CA and a client certificate
kubeconfig() {
  local file="$1" user="$2" name="$3"
  cat > "$file.new" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: podwarden
  cluster:
    server: $SERVER
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: $user@podwarden
  context:
    cluster: podwarden
    user: $user
current-context: $user@podwarden
YAML
  chmod 600 "$file.new"
  mv "$file.new" "$file"
}

make_files() {
  make_pki
  kubeconfig "$ADMIN_KUBECONFIG" kubernetes-admin admin
  kubeconfig "$CL_DIR/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  kubeconfig "$CL_DIR/scheduler.kubeconfig" system:kube-scheduler scheduler
  # a bootstrap token: ID (6) and secret (16) of [a-z0-9], made once
  if [ ! -s "$CL_DIR/token" ]; then
    (umask 077; echo "$(openssl rand -hex 3).$(openssl rand -hex 8)" > "$CL_DIR/token")
  fi
  cat > "$CL_DIR/audit-policy.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
YAML
  mkdir -p "$LOGS" "$CL_DIR/etcd" "$CL_DIR/apiserver-certs"
  chmod 700 "$CL_DIR/etcd"
}

# ---------------------------------------------------------------- processes

# The arguments of component $1, one a line. Facts they rely on:
# - the apiserver's endpoint reconciler is off: it would write 127.0.0.1 as
#   the endpoint of the kubernetes Service, which validation refuses (a
#   loopback address), and log the failure every 10 s; the Service has no
#   endpoints (nothing here routes service IPs anyway);
# - there is no front proxy: the controller-manager and the scheduler do
#   not look up its CA (--authentication-skip-lookup), or they log its
#   absence again and again; they trust the cluster CA for client
#   certificates and the apiserver for tokens;
# - '*' holds the controllers nodes need (csrapproving, csrsigning,
#   serviceaccount-token, serviceaccount, root-ca-cert-publisher,
#   nodelifecycle, garbagecollector, deployment, replicaset, namespace...);
#   bootstrapsigner and tokencleaner are off by default and named, as
#   kubeadm does;
# - etcd speaks plain HTTP on the loopback (a test bed: no client TLS).
args_of() {
  case "$1" in
    etcd) printf '%s\n' \
      --name=podwarden --data-dir="$CL_DIR/etcd" \
      --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster="podwarden=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state=new \
      --log-level=warn ;;
    kube-apiserver) printf '%s\n' \
      --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
      --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
      --cert-dir="$CL_DIR/apiserver-certs" \
      --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
      --client-ca-file="$PKI/ca.crt" \
      --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
      --enable-bootstrap-token-auth=true --allow-privileged=true \
      --service-account-issuer=https://kubernetes.default.svc.cluster.local \
      --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
      --service-cluster-ip-range="$SERVICE_CIDR" \
      --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
      --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
      --kubelet-preferred-address-types=InternalIP,Hostname \
      --audit-policy-file="$CL_DIR/audit-policy.yaml" --audit-log-path="$AUDIT_LOG" \
      --audit-log-maxsize=4096 --audit-log-maxbackup=1 \
      --endpoint-reconciler-type=none ;;
    kube-controller-manager) printf '%s\n' \
      --kubeconfig="$CL_DIR/controller-manager.kubeconfig" \
      --authentication-kubeconfig="$CL_DIR/controller-manager.kubeconfig" \
      --authorization-kubeconfig="$CL_DIR/controller-manager.kubeconfig" \
      --authentication-skip-lookup=true --client-ca-file="$PKI/ca.crt" \
      --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
      --controllers='*,bootstrapsigner,tokencleaner' \
      --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
      --cluster-signing-duration="$SIGNING_DURATION" \
      --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
      --use-service-account-credentials=true --leader-elect=false ;;
    kube-scheduler) printf '%s\n' \
      --kubeconfig="$CL_DIR/scheduler.kubeconfig" \
      --authentication-kubeconfig="$CL_DIR/scheduler.kubeconfig" \
      --authorization-kubeconfig="$CL_DIR/scheduler.kubeconfig" \
      --authentication-skip-lookup=true --client-ca-file="$PKI/ca.crt" \
      --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false ;;
  esac
}

ports_of() {
  case "$1" in
    etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
    kube-apiserver) echo "$API_PORT" ;;
    kube-controller-manager) echo "$KCM_PORT" ;;
    kube-scheduler) echo "$SCHED_PORT" ;;
  esac
}

# The pid of component $1 if it runs (as this state's pid file records it;
# the binary may be another checkout's BIN_DIR: `start` then restarts it).
pid_of() {
  local pid argv0
  pid="$(cat "$RUN_DIR/$1.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  argv0="$(tr '\0' '\n' < "/proc/$pid/cmdline" | head -1)"
  [ "${argv0##*/}" = "$1" ] || return 1
  echo "$pid"
}

stop() {
  local name="$1" pid
  pid="$(pid_of "$name")" || { rm -f "$RUN_DIR/$name.pid"; return 0; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name did not stop in 10s: killed"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN_DIR/$name.pid"
}

# Starts component $1 unless it runs with the same arguments and binary;
# one that runs with others (a changed environment) or an older binary (a
# rebuild) is restarted.
start() {
  local name="$1" pid
  local -a args
  mapfile -t args < <(args_of "$name")
  printf '%s\n' "${args[@]}" > "$RUN_DIR/$name.args.new"
  if pid="$(pid_of "$name")"; then
    if cmp -s "$RUN_DIR/$name.args.new" "$RUN_DIR/$name.args" \
      && [ "$(tr '\0' '\n' < "/proc/$pid/cmdline" | head -1)" = "$BIN_DIR/$name" ] \
      && [[ "$(readlink "/proc/$pid/exe")" != *" (deleted)" ]]; then
      rm -f "$RUN_DIR/$name.args.new"
      return
    fi
    log "restarting $name (its arguments or binary changed, or another checkout's binary runs)"
    stop "$name"
  fi
  mv "$RUN_DIR/$name.args.new" "$RUN_DIR/$name.args"
  # a port that another process holds would have the readiness check
  # below ask that process
  local port
  for port in $(ports_of "$name"); do
    if [ -n "$(ss -Hltn "sport = :$port")" ]; then
      log "port $port, which $name needs, is in use: $(ss -Hltnp "sport = :$port" | grep -o 'users:.*' || true)"
      log "(another cluster-env? set PODWARDEN_CLUSTER_*_PORT, see the top of $0)"
      exit 1
    fi
  done
  log "starting $name"
  if [ "$name" = kube-apiserver ]; then
    # the tests read the audit log from a byte offset taken while they run
    # (tests/cluster_e2e.rs): a log rotated under them (the API server's
    # default is at 100 MB, which two runs of the tests reach) reads as
    # nothing at all. Each API server starts a new log, the last one kept
    # as audit.previous.log, and rotates only at 4 GiB.
    rm -f "$LOGS"/audit-*.log
    [ ! -f "$AUDIT_LOG" ] || mv -f "$AUDIT_LOG" "$LOGS/audit.previous.log"
  fi
  printf '\n==== %s start %s\n' "$name" "$(date -u +%FT%TZ)" >> "$LOGS/$name.log"
  nohup "$BIN_DIR/$name" "${args[@]}" >>"$LOGS/$name.log" 2>&1 &
  echo $! > "$RUN_DIR/$name.pid"
}

# wait_for NAME WHAT SECONDS COMMAND...: until COMMAND succeeds; the tail
# of NAME's log and exit 1 when NAME dies or the deadline passes
wait_for() {
  local name="$1" what="$2" secs="$3" t0
  shift 3
  t0=$(now)
  local deadline=$(( $(date +%s) + secs ))
  while ! "$@" >/dev/null 2>&1; do
    if ! pid_of "$name" >/dev/null; then
      log "$name exited; the end of $LOGS/$name.log:"
      tail -30 "$LOGS/$name.log" >&2
      exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "$name: still not $what after ${secs}s; the end of $LOGS/$name.log:"
      tail -30 "$LOGS/$name.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  log "$name: $what ($(since "$t0")s)"
}

etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
api_ready() { [ "$(admin_curl /readyz)" = ok ]; }
# the controller-manager's and the scheduler's /healthz (always allowed)
healthz() { [ "$(curl -sk --max-time 2 "https://127.0.0.1:$1/healthz")" = ok ]; }

# admin_curl PATH [CURL ARGS]: a request as the cluster's admin
admin_curl() {
  local path="$1"
  shift
  curl -s --max-time 10 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@" "$SERVER$path"
}

# create PATH JSON: POSTs an object; one that exists is left as it is
create() {
  local path="$1" body="$2" out code
  out="$(mktemp)"
  code="$(admin_curl "$path" -o "$out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary "$body")"
  case "$code" in
    201|409) rm -f "$out" ;;
    *) log "POST $path: HTTP $code"; cat "$out" >&2; rm -f "$out"; exit 1 ;;
  esac
}

# crb NAME SUBJECT_KIND SUBJECT CLUSTERROLE
crb() {
  create /apis/rbac.authorization.k8s.io/v1/clusterrolebindings \
    "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":\"$1\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"$4\"},\"subjects\":[{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"$2\",\"name\":\"$3\"}]}"
}

# The objects kubeadm makes for nodes that join with a bootstrap token.
bootstrap_objects() {
  local token id secret expiration ca_data
  token="$(cat "$CL_DIR/token")"
  id="${token%%.*}"
  secret="${token#*.}"
  expiration="$(date -u -d '+10 years' +%FT%TZ)"
  create /api/v1/namespaces/kube-system/secrets "$(cat <<JSON
{"apiVersion":"v1","kind":"Secret","type":"bootstrap.kubernetes.io/token",
 "metadata":{"name":"bootstrap-token-$id","namespace":"kube-system"},
 "stringData":{"token-id":"$id","token-secret":"$secret","expiration":"$expiration",
   "usage-bootstrap-authentication":"true","usage-bootstrap-signing":"true",
   "auth-extra-groups":"$TOKEN_GROUP","description":"podwarden cluster-env"}}
JSON
)"
  # the token may ask for a node client certificate, which is approved
  crb kubeadm:kubelet-bootstrap Group "$TOKEN_GROUP" system:node-bootstrapper
  crb kubeadm:node-autoapprove-bootstrap Group "$TOKEN_GROUP" system:certificates.k8s.io:certificatesigningrequests:nodeclient
  # a node's renewal of its own client certificate is approved
  crb kubeadm:node-autoapprove-certificate-rotation Group system:nodes system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
  # a joining node may look up whether its Node exists
  create /apis/rbac.authorization.k8s.io/v1/clusterroles \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"kubeadm:get-nodes"},"rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get"]}]}'
  crb kubeadm:get-nodes Group "$TOKEN_GROUP" kubeadm:get-nodes
  # cluster-info: the server and the CA, which the bootstrapsigner signs
  # with each signing token (jws-kubeconfig-ID) and anyone may read
  ca_data="$(base64 -w0 "$PKI/ca.crt")"
  create /api/v1/namespaces/kube-public/configmaps \
    "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cluster-info\",\"namespace\":\"kube-public\"},\"data\":{\"kubeconfig\":\"apiVersion: v1\\nclusters:\\n- cluster:\\n    certificate-authority-data: $ca_data\\n    server: $SERVER\\n  name: \\\"\\\"\\ncontexts: null\\ncurrent-context: \\\"\\\"\\nkind: Config\\npreferences: {}\\nusers: null\\n\"}}"
  create /apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/roles \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"kubeadm:bootstrap-signer-clusterinfo","namespace":"kube-public"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"resourceNames":["cluster-info"],"verbs":["get"]}]}'
  create /apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings \
    '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"kubeadm:bootstrap-signer-clusterinfo","namespace":"kube-public"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"kubeadm:bootstrap-signer-clusterinfo"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"system:anonymous"}]}'
}

cluster_info_signed() {
  local id
  id="$(cut -d. -f1 "$CL_DIR/token")"
  admin_curl /api/v1/namespaces/kube-public/configmaps/cluster-info | grep -q "\"jws-kubeconfig-$id\""
}

# ---------------------------------------------------------------- commands

node_net_up() {
  ip netns list 2>/dev/null | grep -w "$NODE_NETNS" >/dev/null || ip netns add "$NODE_NETNS"
  if ! ip link show "$NODE_VETH" >/dev/null 2>&1; then
    ip link add "$NODE_VETH" type veth peer name "${NODE_VETH}p"
    ip link set "${NODE_VETH}p" netns "$NODE_NETNS"
  fi
  # grep reads all its input (no -q): with pipefail an early exit would be
  # ip's SIGPIPE, read as "not there"
  ip addr show dev "$NODE_VETH" | grep "inet $NODE_IP/" >/dev/null || ip addr add "$NODE_IP/30" dev "$NODE_VETH"
  ip link set "$NODE_VETH" up
  ip netns exec "$NODE_NETNS" sh -c "ip addr show dev ${NODE_VETH}p | grep 'inet $NODE_NET.2/' >/dev/null || ip addr add $NODE_NET.2/30 dev ${NODE_VETH}p; ip link set ${NODE_VETH}p up; ip link set lo up"
}

node_net_down() {
  ip link del "$NODE_VETH" 2>/dev/null || true
  ip netns del "$NODE_NETNS" 2>/dev/null || true
}

up() {
  [ "$(id -u)" = 0 ] || { log "run as root"; exit 1; }
  for tool in openssl curl go ss ip; do
    command -v "$tool" >/dev/null || { log "$tool is not installed"; exit 1; }
  done
  local t0
  t0=$(now)
  "$ROOT/tools/cluster/build.sh" "$BIN_DIR"
  mkdir -p "$CL_DIR" "$RUN_DIR"
  make_files
  node_net_up
  partition_port_up
  start etcd
  wait_for etcd healthy 30 etcd_healthy
  start kube-apiserver
  wait_for kube-apiserver ready 120 api_ready
  bootstrap_objects
  start kube-controller-manager
  start kube-scheduler
  wait_for kube-controller-manager healthy 60 healthz "$KCM_PORT"
  wait_for kube-scheduler healthy 60 healthz "$SCHED_PORT"
  wait_for kube-controller-manager "cluster-info signed" 60 cluster_info_signed
  log "up in $(since "$t0")s"
  env_vars
}

partition_port_up() {
  command -v iptables >/dev/null || { log "iptables is not installed"; exit 1; }
  local p
  for p in "$PART_PORT" "$VM_PART_PORT"; do
    iptables -t nat -C OUTPUT -p tcp -d 127.0.0.1 --dport "$p" -j REDIRECT --to-ports "$API_PORT" 2>/dev/null ||
      iptables -t nat -A OUTPUT -p tcp -d 127.0.0.1 --dport "$p" -j REDIRECT --to-ports "$API_PORT"
  done
}

partition_port_down() {
  local p
  for p in "$PART_PORT" "$VM_PART_PORT"; do
    partition_heal "$p"
    while iptables -t nat -D OUTPUT -p tcp -d 127.0.0.1 --dport "$p" -j REDIRECT --to-ports "$API_PORT" 2>/dev/null; do :; done
  done
}

# PORT: a partitionable port
partition_cut() {
  iptables -C OUTPUT -p tcp -m conntrack --ctorigdstport "$1" -j DROP 2>/dev/null ||
    iptables -I OUTPUT -p tcp -m conntrack --ctorigdstport "$1" -j DROP
}

partition_heal() {
  while iptables -D OUTPUT -p tcp -m conntrack --ctorigdstport "$1" -j DROP 2>/dev/null; do :; done
}

down() {
  local i
  for (( i=${#COMPONENTS[@]}-1; i>=0; i-- )); do stop "${COMPONENTS[$i]}"; done
  node_net_down
  command -v iptables >/dev/null && partition_port_down
  rm -rf "$RUN_DIR" "$CL_DIR"
}

status() {
  local name pid rc=0
  for name in "${COMPONENTS[@]}"; do
    if pid="$(pid_of "$name")"; then
      printf '%-24s running, pid %s\n' "$name" "$pid"
    else
      printf '%-24s not running\n' "$name"
      rc=1
    fi
  done
  if [ -s "$PKI/admin.crt" ] && api_ready; then
    echo "apiserver $SERVER ready"
  else
    echo "apiserver $SERVER not ready"
    rc=1
  fi
  return "$rc"
}

env_vars() {
  if [ ! -s "$PKI/ca.crt" ] || [ ! -s "$CL_DIR/token" ]; then log "no cluster: run $0 up"; exit 1; fi
  echo "PODWARDEN_CLUSTER_SERVER=$SERVER"
  echo "PODWARDEN_CLUSTER_CA=$PKI/ca.crt"
  echo "PODWARDEN_CLUSTER_ADMIN_KUBECONFIG=$ADMIN_KUBECONFIG"
  echo "PODWARDEN_CLUSTER_TOKEN=$(cat "$CL_DIR/token")"
  echo "PODWARDEN_CLUSTER_CA_HASH=$(ca_hash)"
  echo "PODWARDEN_CLUSTER_AUDIT_LOG=$AUDIT_LOG"
  echo "PODWARDEN_CLUSTER_BIN_DIR=$BIN_DIR"
  echo "PODWARDEN_CLUSTER_NODE_IP=$NODE_IP"
  echo "PODWARDEN_CLUSTER_PARTITIONABLE_SERVER=https://127.0.0.1:$PART_PORT"
  echo "PODWARDEN_CLUSTER_VM_PARTITION_PORT=$VM_PART_PORT"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) env_vars ;;
  partition)
    case "${3:-}" in
      "") port="$PART_PORT" ;;
      vm) port="$VM_PART_PORT" ;;
      *) echo "usage: $0 partition cut|heal [vm]" >&2; exit 2 ;;
    esac
    case "${2:-}" in
      cut) partition_cut "$port" ;;
      heal) partition_heal "$port" ;;
      *) echo "usage: $0 partition cut|heal [vm]" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: $0 up|down|status|env|partition cut|heal [vm]" >&2; exit 2 ;;
esac
