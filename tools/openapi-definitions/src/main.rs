//! `cargo run` (in this directory): checks that podwarden's
//! embedded OpenAPI definitions are k8s-openapi's schemas of the served
//! kinds; `-- --write` writes them anew (after a k8s-openapi upgrade, in
//! both lock files). Exits 1 when the file is not current.

use std::io::{Read, Write};
use std::process::ExitCode;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Pod, Secret};
use serde_json::Value;

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../src/api/kube/openapi_definitions.json.gz");

/// k8s-openapi's schemas of the served kinds and every definition they
/// reference (OpenAPI v2 `$ref`s, no meta schema, no transforms).
fn generate() -> Value {
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
    Value::Object(generator.take_definitions(false))
}

fn main() -> ExitCode {
    let fresh = generate();
    if std::env::args().any(|a| a == "--write") {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(serde_json::to_string(&fresh).expect("serialize").as_bytes()).expect("compress");
        std::fs::write(FILE, gz.finish().expect("compress")).unwrap_or_else(|e| panic!("write {FILE}: {e}"));
        println!("wrote {FILE}");
        return ExitCode::SUCCESS;
    }
    let bytes = std::fs::read(FILE).unwrap_or_else(|e| panic!("read {FILE}: {e}"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut text).unwrap_or_else(|e| panic!("{FILE}: {e}"));
    let embedded: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{FILE}: {e}"));
    if embedded == fresh {
        println!("{FILE} is k8s-openapi's current schemas");
        ExitCode::SUCCESS
    } else {
        eprintln!("{FILE} is not k8s-openapi's current schemas: run `cargo run -- --write` here and commit it");
        ExitCode::FAILURE
    }
}
