//! The OpenAPI documents kubectl reads before `apply` (to learn that the
//! server validates fields: the `fieldValidation` query parameter of each
//! kind's PATCH) and for `explain` (the definitions): `/openapi/v2` as the
//! protobuf kubectl 1.27–1.28 insist on (gnostic's `openapi.v2.Document`,
//! encoded here by hand: only the fields these documents use), and
//! `/openapi/v3` (the index, then the `api/v1` document, JSON) for 1.29+.
//!
//! Only the kinds podwarden serves are described: Pod, ConfigMap, Secret,
//! Event, Node, Namespace, with every definition they reference. The
//! schemas come from k8s-openapi's types (`schemars` feature: the same
//! descriptions the API server publishes), with the patch strategies of
//! `patch::list_kind` added as `x-kubernetes-patch-*` extensions so that
//! kubectl's client-side apply merges lists the way podwarden does.
//! Nothing is kept in memory: a document is built when asked for (a few
//! milliseconds); kubectl caches it.

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Pod, Secret};
use serde_json::{Map, Value, json};

use super::patch::{ListKind, list_kind};

/// The Kubernetes version whose schemas these are (k8s-openapi's `v1_34`).
pub const SCHEMA_VERSION: &str = "v1.34.0";

/// A served kind: name, resource (plural), namespaced, definition name.
struct Served {
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const SERVED: &[Served] = &[
    Served { kind: "Pod", plural: "pods", namespaced: true },
    Served { kind: "ConfigMap", plural: "configmaps", namespaced: true },
    Served { kind: "Secret", plural: "secrets", namespaced: true },
    Served { kind: "Event", plural: "events", namespaced: true },
    Served { kind: "Node", plural: "nodes", namespaced: false },
    Served { kind: "Namespace", plural: "namespaces", namespaced: false },
];

fn definition_name(kind: &str) -> String {
    format!("io.k8s.api.core.v1.{kind}")
}

/// Every definition the served kinds use, by name, `$ref`s as
/// `#/definitions/<name>` (OpenAPI v2), with the group-version-kind and
/// patch-strategy extensions.
pub fn definitions() -> Map<String, Value> {
    let mut generator = k8s_openapi::schemars::generate::SchemaSettings::draft07()
        .with(|s| {
            s.transforms.clear();
            s.meta_schema = None;
        })
        .into_generator();
    let _ = generator.subschema_for::<Pod>();
    let _ = generator.subschema_for::<ConfigMap>();
    let _ = generator.subschema_for::<Secret>();
    let _ = generator.subschema_for::<Event>();
    let _ = generator.subschema_for::<Node>();
    let _ = generator.subschema_for::<Namespace>();
    let mut defs = generator.take_definitions(false);
    for s in SERVED {
        if let Some(Value::Object(d)) = defs.get_mut(&definition_name(s.kind)) {
            d.insert("x-kubernetes-group-version-kind".into(), json!([{"group": "", "kind": s.kind, "version": "v1"}]));
        }
    }
    for s in SERVED {
        let mut seen = Vec::new();
        add_patch_strategies(&mut defs, s.kind, &definition_name(s.kind), "", &mut seen);
    }
    defs
}

fn ref_name(schema: &Value) -> Option<String> {
    schema.get("$ref")?.as_str()?.strip_prefix("#/definitions/").map(str::to_string)
}

/// Walk definition `name` found at object path `path` of `kind`, marking
/// each list property with the strategy `patch::list_kind` gives it.
fn add_patch_strategies(defs: &mut Map<String, Value>, kind: &str, name: &str, path: &str, seen: &mut Vec<(String, String)>) {
    if seen.iter().any(|(n, p)| n == name && p == path) || path.split('.').count() > 12 {
        return;
    }
    seen.push((name.to_string(), path.to_string()));
    let Some(Value::Object(props)) = defs.get(name).and_then(|d| d.get("properties")).cloned() else { return };
    for (field, schema) in props {
        let at = if path.is_empty() { field.clone() } else { format!("{path}.{field}") };
        if let Some(target) = ref_name(&schema) {
            add_patch_strategies(defs, kind, &target, &at, seen);
            continue;
        }
        if schema.get("type").and_then(Value::as_str) != Some("array") {
            continue;
        }
        let extensions = match list_kind(kind, &at) {
            ListKind::Atomic => None,
            ListKind::Set => Some(json!({"x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"})),
            ListKind::Map { keys } => Some(json!({
                "x-kubernetes-patch-strategy": "merge",
                "x-kubernetes-patch-merge-key": keys[0],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": keys,
            })),
        };
        if let (Some(Value::Object(ext)), Some(Value::Object(p))) =
            (extensions, defs.get_mut(name).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(&field)))
        {
            p.extend(ext);
        }
        if let Some(target) = schema.get("items").and_then(ref_name) {
            add_patch_strategies(defs, kind, &target, &format!("{at}[]"), seen);
        }
    }
}

/// The API path of a kind's objects (`/api/v1/namespaces/{namespace}/pods/{name}`).
fn object_path(s: &Served) -> String {
    if s.namespaced {
        format!("/api/v1/namespaces/{{namespace}}/{}/{{name}}", s.plural)
    } else {
        format!("/api/v1/{}/{{name}}", s.plural)
    }
}

const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

const QUERY_PARAMS: [(&str, &str, &str); 4] = [
    ("dryRun", "string", "When present, indicates that modifications should not be persisted."),
    ("fieldManager", "string", "fieldManager is a name associated with the actor or entity that is making these changes."),
    (
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields: Ignore, Warn (the default) or Strict.",
    ),
    ("force", "boolean", "Force is going to \"force\" Apply requests. It must be unset for non-apply patch requests."),
];

fn gvk(kind: &str) -> Value {
    json!({"group": "", "kind": kind, "version": "v1"})
}

fn operation_id(verb: &str, s: &Served) -> String {
    let scope = if s.namespaced { "Namespaced" } else { "" };
    format!("{verb}CoreV1{scope}{}", s.kind)
}

/// The OpenAPI v2 document as JSON (what the protobuf encodes).
pub fn v2_json() -> Value {
    let mut paths = Map::new();
    for s in SERVED {
        let reference = json!({"$ref": format!("#/definitions/{}", definition_name(s.kind))});
        let mut path_params = vec![json!({"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": format!("name of the {}", s.kind)})];
        if s.namespaced {
            path_params.push(json!({"name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "object name and auth scope, such as for teams and projects"}));
        }
        let mut patch_params = vec![json!({"name": "body", "in": "body", "required": true, "schema": {"type": "object"}})];
        patch_params.extend(QUERY_PARAMS.iter().map(|(name, ty, desc)| json!({"name": name, "in": "query", "type": ty, "uniqueItems": true, "description": desc})));
        let response = json!({"200": {"description": "OK", "schema": reference}});
        paths.insert(
            object_path(s),
            json!({
                "get": {
                    "description": format!("read the specified {}", s.kind),
                    "operationId": operation_id("read", s),
                    "produces": ["application/json", "application/yaml"],
                    "schemes": ["https"],
                    "tags": ["core_v1"],
                    "responses": response,
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk(s.kind),
                },
                "patch": {
                    "description": format!("partially update the specified {}", s.kind),
                    "operationId": operation_id("patch", s),
                    "consumes": PATCH_TYPES,
                    "produces": ["application/json", "application/yaml"],
                    "schemes": ["https"],
                    "tags": ["core_v1"],
                    "parameters": patch_params,
                    "responses": response,
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk(s.kind),
                },
                "parameters": path_params,
            }),
        );
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes (podwarden)", "version": SCHEMA_VERSION},
        "paths": paths,
        "definitions": definitions(),
    })
}

/// `/openapi/v2` as protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
pub fn v2_protobuf() -> Vec<u8> {
    proto::document(&v2_json())
}

/// The hash kubectl caches a group-version document by.
fn doc_hash(doc: &[u8]) -> String {
    crate::model::fnv128_hex(&[doc]).to_uppercase()
}

/// `/openapi/v3`: the index of group-version documents.
pub fn v3_index() -> Vec<u8> {
    let hash = doc_hash(&v3_doc("api/v1").unwrap_or_default());
    let index = json!({"paths": {"api/v1": {"serverRelativeURL": format!("/openapi/v3/api/v1?hash={hash}")}}});
    serde_json::to_vec(&index).unwrap_or_default()
}

/// `/openapi/v3/<group_version>` (`api/v1`; `None` for others: 404).
pub fn v3_doc(group_version: &str) -> Option<Vec<u8>> {
    (group_version.trim_matches('/') == "api/v1").then(|| serde_json::to_vec(&v3_json()).unwrap_or_default())
}

/// A v2 schema as v3: `$ref`s into `components/schemas`, a `$ref` with
/// siblings wrapped in `allOf` (as the API server publishes them).
fn to_v3(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out: Map<String, Value> = m.iter().map(|(k, v)| (k.clone(), to_v3(v))).collect();
            if let Some(Value::String(r)) = out.remove("$ref") {
                let r = Value::String(r.replace("#/definitions/", "#/components/schemas/"));
                if out.is_empty() {
                    out.insert("$ref".into(), r);
                } else {
                    out.insert("allOf".into(), json!([{"$ref": r}]));
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v3).collect()),
        other => other.clone(),
    }
}

/// The `api/v1` OpenAPI v3 document.
pub fn v3_json() -> Value {
    let mut paths = Map::new();
    for s in SERVED {
        let reference = json!({"$ref": format!("#/components/schemas/{}", definition_name(s.kind))});
        let mut path_params = vec![json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}, "description": format!("name of the {}", s.kind)})];
        if s.namespaced {
            path_params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}, "description": "object name and auth scope, such as for teams and projects"}));
        }
        let query: Vec<Value> = QUERY_PARAMS
            .iter()
            .map(|(name, ty, desc)| json!({"name": name, "in": "query", "schema": {"type": ty, "uniqueItems": true}, "description": desc}))
            .collect();
        let body: Map<String, Value> = PATCH_TYPES.iter().map(|t| (t.to_string(), json!({"schema": {"type": "object"}}))).collect();
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
        paths.insert(
            object_path(s),
            json!({
                "get": {
                    "tags": ["core_v1"],
                    "description": format!("read the specified {}", s.kind),
                    "operationId": operation_id("read", s),
                    "responses": ok,
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk(s.kind),
                },
                "patch": {
                    "tags": ["core_v1"],
                    "description": format!("partially update the specified {}", s.kind),
                    "operationId": operation_id("patch", s),
                    "parameters": query,
                    "requestBody": {"content": body, "required": true},
                    "responses": ok,
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk(s.kind),
                },
                "parameters": path_params,
            }),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (podwarden)", "version": SCHEMA_VERSION},
        "paths": paths,
        "components": {"schemas": to_v3(&Value::Object(definitions()))},
    })
}

/// gnostic's `openapi.v2` messages, encoded by hand: only the fields the
/// documents above use (field numbers from the message definitions; every
/// field is length-delimited, a varint or a double).
mod proto {
    use serde_json::{Map, Value};

    /// A message under construction.
    #[derive(Default)]
    pub(super) struct Msg(pub(super) Vec<u8>);

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    impl Msg {
        fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
            varint(&mut self.0, u64::from(field << 3 | 2));
            varint(&mut self.0, b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        pub(super) fn string(&mut self, field: u32, s: &str) -> &mut Self {
            if !s.is_empty() {
                self.bytes(field, s.as_bytes());
            }
            self
        }
        fn msg(&mut self, field: u32, m: Msg) -> &mut Self {
            self.bytes(field, &m.0)
        }
        fn boolean(&mut self, field: u32, b: bool) -> &mut Self {
            if b {
                varint(&mut self.0, u64::from(field << 3));
                varint(&mut self.0, 1);
            }
            self
        }
        fn int(&mut self, field: u32, i: i64) -> &mut Self {
            varint(&mut self.0, u64::from(field << 3));
            varint(&mut self.0, i as u64);
            self
        }
        fn double(&mut self, field: u32, d: f64) -> &mut Self {
            varint(&mut self.0, u64::from(field << 3 | 1));
            self.0.extend_from_slice(&d.to_le_bytes());
            self
        }
    }

    fn s<'a>(v: &'a Value, key: &str) -> &'a str {
        v.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// `Any { yaml = 2 }`: JSON is YAML.
    fn any(v: &Value) -> Msg {
        let mut m = Msg::default();
        m.string(2, &v.to_string());
        m
    }

    /// `NamedAny { name = 1, value = 2 }` for each `x-` key of `v`.
    fn extensions(m: &mut Msg, field: u32, v: &Value) {
        if let Value::Object(map) = v {
            for (k, x) in map.iter().filter(|(k, _)| k.starts_with("x-")) {
                let mut named = Msg::default();
                named.string(1, k).msg(2, any(x));
                m.msg(field, named);
            }
        }
    }

    /// `Schema`.
    pub(super) fn schema(v: &Value) -> Msg {
        let mut m = Msg::default();
        let mut ty = s(v, "type");
        let mut format = s(v, "format");
        // as the API server publishes IntOrString and Quantity in v2
        if ty.is_empty() && v.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            ty = "string";
            format = "int-or-string";
        }
        m.string(1, s(v, "$ref")).string(2, format).string(3, s(v, "title")).string(4, s(v, "description"));
        if let Some(d) = v.get("default") {
            m.msg(5, any(d));
        }
        for (key, field) in [("maximum", 7), ("minimum", 9)] {
            if let Some(x) = v.get(key).and_then(Value::as_f64) {
                m.double(field, x);
            }
        }
        for (key, field) in [("maxLength", 11), ("minLength", 12), ("maxItems", 14), ("minItems", 15)] {
            if let Some(x) = v.get(key).and_then(Value::as_i64) {
                m.int(field, x);
            }
        }
        m.string(13, s(v, "pattern"));
        for r in v.get("required").and_then(Value::as_array).into_iter().flatten() {
            m.string(19, r.as_str().unwrap_or(""));
        }
        for e in v.get("enum").and_then(Value::as_array).into_iter().flatten() {
            m.msg(20, any(e));
        }
        match v.get("additionalProperties") {
            Some(Value::Bool(b)) => {
                let mut a = Msg::default();
                varint(&mut a.0, 2 << 3);
                varint(&mut a.0, u64::from(*b));
                m.msg(21, a);
            }
            Some(sub @ Value::Object(_)) => {
                let mut a = Msg::default();
                a.msg(1, schema(sub));
                m.msg(21, a);
            }
            _ => {}
        }
        if !ty.is_empty() {
            let mut t = Msg::default();
            t.string(1, ty);
            m.msg(22, t);
        }
        if let Some(items) = v.get("items") {
            let mut i = Msg::default();
            i.msg(1, schema(items));
            m.msg(23, i);
        }
        for a in v.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            m.msg(24, schema(a));
        }
        if let Some(Value::Object(props)) = v.get("properties") {
            m.msg(25, named_schemas(props));
        }
        m.boolean(27, v.get("readOnly") == Some(&Value::Bool(true)));
        extensions(&mut m, 31, v);
        m
    }

    /// `Properties` / `Definitions`: `repeated NamedSchema additional_properties = 1`.
    fn named_schemas(map: &Map<String, Value>) -> Msg {
        let mut m = Msg::default();
        for (name, v) in map {
            let mut named = Msg::default();
            named.string(1, name).msg(2, schema(v));
            m.msg(1, named);
        }
        m
    }

    /// `ParametersItem { Parameter parameter = 1 }`.
    fn parameter(p: &Value) -> Msg {
        let mut param = Msg::default();
        if s(p, "in") == "body" {
            let mut body = Msg::default();
            body.string(1, s(p, "description")).string(2, s(p, "name")).string(3, "body");
            body.boolean(4, p.get("required") == Some(&Value::Bool(true)));
            body.msg(5, schema(p.get("schema").unwrap_or(&Value::Null)));
            param.msg(1, body);
        } else {
            // QueryParameterSubSchema = 3 and PathParameterSubSchema = 4 of NonBodyParameter
            let path = s(p, "in") == "path";
            let mut sub = Msg::default();
            sub.boolean(1, p.get("required") == Some(&Value::Bool(true)));
            sub.string(2, s(p, "in")).string(3, s(p, "description")).string(4, s(p, "name"));
            sub.string(if path { 5 } else { 6 }, s(p, "type"));
            sub.boolean(if path { 19 } else { 20 }, p.get("uniqueItems") == Some(&Value::Bool(true)));
            let mut non_body = Msg::default();
            non_body.msg(if path { 4 } else { 3 }, sub);
            param.msg(2, non_body);
        }
        let mut item = Msg::default();
        item.msg(1, param);
        item
    }

    /// `Operation`.
    fn operation(op: &Value) -> Msg {
        let mut m = Msg::default();
        let strings = |m: &mut Msg, key: &str, field: u32| {
            for t in op.get(key).and_then(Value::as_array).into_iter().flatten() {
                m.string(field, t.as_str().unwrap_or(""));
            }
        };
        strings(&mut m, "tags", 1);
        m.string(3, s(op, "description")).string(5, s(op, "operationId"));
        strings(&mut m, "produces", 6);
        strings(&mut m, "consumes", 7);
        for p in op.get("parameters").and_then(Value::as_array).into_iter().flatten() {
            m.msg(8, parameter(p));
        }
        if let Some(Value::Object(responses)) = op.get("responses") {
            // Responses { repeated NamedResponseValue response_code = 1 }
            let mut rs = Msg::default();
            for (code, r) in responses {
                let mut response = Msg::default();
                response.string(1, s(r, "description"));
                if let Some(sc) = r.get("schema") {
                    let mut item = Msg::default();
                    item.msg(1, schema(sc));
                    response.msg(2, item);
                }
                let mut value = Msg::default();
                value.msg(1, response);
                let mut named = Msg::default();
                named.string(1, code).msg(2, value);
                rs.msg(1, named);
            }
            m.msg(9, rs);
        }
        strings(&mut m, "schemes", 10);
        extensions(&mut m, 13, op);
        m
    }

    /// `Document`.
    pub(super) fn document(doc: &Value) -> Vec<u8> {
        let mut d = Msg::default();
        d.string(1, s(doc, "swagger"));
        let info = doc.get("info").unwrap_or(&Value::Null);
        let mut i = Msg::default();
        i.string(1, s(info, "title")).string(2, s(info, "version"));
        d.msg(2, i);
        let mut paths = Msg::default();
        if let Some(Value::Object(ps)) = doc.get("paths") {
            for (path, item) in ps {
                let mut pi = Msg::default();
                for (verb, field) in [("get", 2), ("put", 3), ("post", 4), ("delete", 5), ("patch", 8)] {
                    if let Some(op) = item.get(verb) {
                        pi.msg(field, operation(op));
                    }
                }
                for p in item.get("parameters").and_then(Value::as_array).into_iter().flatten() {
                    pi.msg(9, parameter(p));
                }
                let mut named = Msg::default();
                named.string(1, path).msg(2, pi);
                paths.msg(2, named);
            }
        }
        d.msg(8, paths);
        if let Some(Value::Object(defs)) = doc.get("definitions") {
            d.msg(9, named_schemas(defs));
        }
        d.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_cover_the_served_kinds_and_their_references() {
        let defs = definitions();
        for s in SERVED {
            let d = &defs[&definition_name(s.kind)];
            assert_eq!(d["x-kubernetes-group-version-kind"][0]["kind"], s.kind);
        }
        // every reference resolves
        let text = Value::Object(defs.clone()).to_string();
        for r in text.split("\"$ref\":\"#/definitions/").skip(1) {
            let name = &r[..r.find('"').unwrap()];
            assert!(defs.contains_key(name), "{name} is referenced but not defined");
        }
        let spec = &defs["io.k8s.api.core.v1.PodSpec"]["properties"];
        assert!(spec["containers"]["description"].as_str().unwrap().starts_with("List of containers"));
        assert_eq!(spec["containers"]["x-kubernetes-patch-merge-key"], "name");
        assert!(spec["tolerations"].get("x-kubernetes-patch-strategy").is_none());
        let c = &defs["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(c["ports"]["x-kubernetes-patch-merge-key"], "containerPort");
        assert_eq!(c["ports"]["x-kubernetes-list-map-keys"], json!(["containerPort", "protocol"]));
        assert_eq!(c["volumeMounts"]["x-kubernetes-patch-merge-key"], "mountPath");
        let meta = &defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
        assert_eq!(meta["finalizers"]["x-kubernetes-patch-strategy"], "merge");
    }

    #[test]
    fn every_patch_declares_field_validation_with_its_kind() {
        for doc in [v2_json(), v3_json()] {
            for s in SERVED {
                let patch = &doc["paths"][object_path(s)]["patch"];
                assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], s.kind);
                let params = patch["parameters"].as_array().unwrap();
                assert!(params.iter().any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
            }
        }
    }

    #[test]
    fn v3_index_names_the_api_v1_document_by_its_hash() {
        let index: Value = serde_json::from_slice(&v3_index()).unwrap();
        let url = index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap();
        let doc = v3_doc("api/v1").unwrap();
        assert_eq!(url, format!("/openapi/v3/api/v1?hash={}", doc_hash(&doc)));
        assert!(v3_doc("apis/apps/v1").is_none());
        let v3: Value = serde_json::from_slice(&doc).unwrap();
        let pod_spec = &v3["components"]["schemas"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
        assert_eq!(pod_spec["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.core.v1.PodSpec");
        assert!(!String::from_utf8(doc).unwrap().contains("#/definitions/"));
    }

    #[test]
    fn varints_and_lengths_are_protobuf_encoded() {
        let mut m = proto::Msg::default();
        m.string(1, "2.0");
        assert_eq!(m.0, [0x0a, 3, b'2', b'.', b'0']);
        let long = "x".repeat(300);
        let mut m = proto::Msg::default();
        m.string(4, &long);
        assert_eq!(&m.0[..3], [0x22, 0xac, 0x02]);
    }
}
