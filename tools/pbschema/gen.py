#!/usr/bin/env python3
"""Writes src/api/kube/write/pbschema.rs: the protobuf schema of the
Kubernetes types podwarden's write path takes as protobuf bodies (a v1 Pod,
ConfigMap, Secret, meta/v1 DeleteOptions and every message they reach), as
a table the decoder in pbbody.rs walks.

The facts come from the Go module cache (k8s.io/api and k8s.io/apimachinery
at the version below): each message's fields (number, proto type) from its
package's generated.proto; each field's JSON name, `omitempty`, pointer-ness
(does a zero value on the wire mean "set"?) and `,inline` from the Go
struct tags in the package's types. The build never reads the cache: the
generated file is committed. Run again when the pinned version changes:

    tools/pbschema/gen.py [GOMODCACHE]   (default /work/run/gomod)
"""
import os
import re
import sys

VERSION = "v0.34.4"
ROOTS = [
    "k8s.io.api.core.v1.Pod",
    "k8s.io.api.core.v1.ConfigMap",
    "k8s.io.api.core.v1.Secret",
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
]
META = "k8s.io.apimachinery.pkg.apis.meta.v1."
# messages with their own JSON form: decoded by pbbody.rs itself
SPECIAL = {
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    META + "Time": "Time",
    META + "MicroTime": "MicroTime",
    META + "Duration": "Duration",
    META + "FieldsV1": "FieldsV1",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "RawExtension",
}
# where a message's region begins (the file its table goes to)
ANCHORS = {
    META + "ObjectMeta": "meta",
    META + "DeleteOptions": "meta",
    "k8s.io.api.core.v1.Volume": "volumes",
    "k8s.io.api.core.v1.Container": "containers",
    "k8s.io.api.core.v1.PodStatus": "status",
}
REGIONS = {
    "pod": "The Pod, its spec (but volumes and containers), ConfigMap, Secret",
    "meta": "meta/v1: ObjectMeta and what it holds, DeleteOptions",
    "volumes": "A Pod's volumes",
    "containers": "A Pod's containers",
    "status": "A Pod's status",
}
SCALARS = {"string": "Str", "bool": "Bool", "int32": "I32", "int64": "I64", "bytes": "Bytes"}
# (proto file, Go files with the structs' tags), under the module cache
PACKAGES = [
    (f"k8s.io/api@{VERSION}/core/v1", ["types.go"]),
    (f"k8s.io/apimachinery@{VERSION}/pkg/apis/meta/v1", ["types.go"]),
    (f"k8s.io/apimachinery@{VERSION}/pkg/runtime", ["types.go"]),
    (f"k8s.io/apimachinery@{VERSION}/pkg/api/resource", []),
    (f"k8s.io/apimachinery@{VERSION}/pkg/util/intstr", []),
]


def parse_proto(path):
    """{full message name: [(number, proto name, label, type)]}"""
    text = open(path).read()
    pkg = re.search(r"^package ([\w.]+);", text, re.M).group(1)
    out = {}
    for m in re.finditer(r"^message (\w+) \{(.*?)^\}", text, re.M | re.S):
        fields = []
        for line in m.group(2).splitlines():
            line = line.strip()
            if line.startswith("//") or not line:
                continue
            f = re.match(r"(optional|repeated) ([\w.]+) (\w+) = (\d+);", line)
            if f:
                fields.append((int(f.group(4)), f.group(3), f.group(1), resolve(pkg, f.group(2))))
                continue
            f = re.match(r"map<(\w+), ([\w.]+)> (\w+) = (\d+);", line)
            if f:
                assert f.group(1) == "string", line
                fields.append((int(f.group(4)), f.group(3), "map", resolve(pkg, f.group(2))))
                continue
            raise SystemExit(f"{path}: message {m.group(1)}: cannot read {line!r}")
        out[f"{pkg}.{m.group(1)}"] = fields
    return pkg, out


def resolve(pkg, t):
    if t in SCALARS:
        return t
    return t[1:] if t.startswith(".") else f"{pkg}.{t}"


def parse_go(path):
    """{(struct, number): (json name, omitempty, pointer, inline)}"""
    out = {}
    struct = None
    for line in open(path):
        s = re.match(r"^type (\w+) struct \{", line)
        if s:
            struct = s.group(1)
            continue
        if line.startswith("}"):
            struct = None
            continue
        t = line.strip()
        if struct is None or t.startswith("//") or 'protobuf:"' not in t:
            continue
        f = re.match(r'(?:(\w+)\s+)?(\S+)\s+`(.*)`', t)
        assert f, (path, t)
        gotype, tags = f.group(2), f.group(3)
        j = re.search(r'json:"([^"]*)"', tags)
        if j is None:
            continue  # not a JSON field (runtime.Unknown's)
        j = j.group(1).split(",")
        num = int(re.search(r'protobuf:"\w+,(\d+),', tags).group(1))
        out[(struct, num)] = (j[0], "omitempty" in j[1:], gotype.startswith("*"), "inline" in j[1:])
    return out


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else "/work/run/gomod"
    messages, tags = {}, {}
    for d, gofiles in PACKAGES:
        pkg, ms = parse_proto(os.path.join(cache, d, "generated.proto"))
        messages.update(ms)
        for g in gofiles:
            for (struct, num), v in parse_go(os.path.join(cache, d, g)).items():
                tags[(f"{pkg}.{struct}", num)] = v
    # the messages the roots reach, in a stable order; each goes to the file
    # of the region it is first reached in (so a file refers only to its
    # own messages and those of files begun before it: no circle)
    order, seen, region_of = [], set(), {}

    def visit(name, region):
        if name in seen or name in SPECIAL:
            return
        region = ANCHORS.get(name, region)
        seen.add(name)
        order.append(name)
        region_of[name] = region
        for _, _, _, t in sorted(messages[name]):
            if t not in SCALARS and t not in SPECIAL:
                visit(t, region)

    for r in ROOTS:
        visit(r, "pod")
    statics = {}
    for name in order:
        short = name.rsplit(".", 1)[1]
        static = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", short).upper()
        assert static not in statics.values(), name
        statics[name] = static
    files = {}
    for name in order:
        region = region_of[name]
        fields = []
        for num, pname, label, t in sorted(messages[name]):
            key = (name, num)
            if key not in tags:
                raise SystemExit(f"{name} field {num} ({pname}): no Go struct tag found")
            json, omit, ptr, inline = tags[key]
            if label == "map":
                kind = {"string": "MapStr", "bytes": "MapBytes"}.get(t) or (
                    "MapQuantity" if SPECIAL.get(t) == "Quantity" else None)
                assert kind, (name, pname, t)
            elif t in SCALARS:
                kind = SCALARS[t]
            elif t in SPECIAL:
                kind = SPECIAL[t]
            else:
                kind = f"Msg(&{statics[t]})"
                if region_of[t] != region:
                    files.setdefault(region, {"uses": set(), "rows": []})["uses"].add((region_of[t], statics[t]))
            assert inline == (json == ""), (name, pname)
            flags = [f for f, on in (("REP", label == "repeated"), ("PTR", ptr), ("OMIT", omit), ("INLINE", inline)) if on]
            fields.append(f'        F {{ n: {num}, json: "{json}", kind: {kind}, flags: {" | ".join(flags) or "0"} }},')
        short = name.replace("k8s.io.api.", "").replace("k8s.io.apimachinery.pkg.apis.", "").replace(
            "k8s.io.apimachinery.pkg.", "")
        f = files.setdefault(region, {"uses": set(), "rows": []})
        f["rows"].append(f'pub static {statics[name]}: M = M {{\n    name: "{short}",\n    fields: &[\n'
                         + "\n".join(fields) + "\n    ],\n};")
    here = os.path.dirname(os.path.abspath(__file__))
    dest = os.path.join(here, "../../src/api/kube/write/pbschema")
    for region, f in files.items():
        uses = sorted(f["uses"])
        lines = [f"//! {REGIONS[region]}: generated by `tools/pbschema/gen.py` from k8s.io/api and",
                 f"//! k8s.io/apimachinery {VERSION} (see `pbschema`); do not edit by hand.", "",
                 "use super::Kind::*;", "use super::{F, INLINE, M, OMIT, PTR, REP};"]
        for other in sorted({r for r, _ in uses}):
            names = ", ".join(sorted(s for r, s in uses if r == other))
            lines.append(f"use super::{other}::{{{names}}};")
        text = "\n".join(lines) + "\n\n" + "\n\n".join(f["rows"]) + "\n"
        # only the flags a file uses are imported
        for flag in ("INLINE", "OMIT", "PTR", "REP"):
            if not re.search(rf"flags: [^}}]*\b{flag}\b", text):
                text = text.replace(f"{flag}, ", "").replace(f", {flag}}}", "}")
        open(os.path.join(dest, f"{region}.rs"), "w").write(text)
        print(f"{region}.rs: {len(f['rows'])} messages, {text.count(chr(10))} lines", file=sys.stderr)
    # in the repository's format (rustfmt.toml), so `cargo fmt` leaves them be
    import subprocess
    subprocess.run(["rustfmt", "--edition", "2024", "--config-path", os.path.join(here, "../../rustfmt.toml")]
                   + [os.path.join(dest, f"{r}.rs") for r in files], check=True)

main()
