//! Generates the CRI client from proto/cri/api.proto, podwarden's local
//! API from proto/podwarden/api.proto and the gRPC health service gRPC
//! probes call from proto/health/api.proto, containerd's content service
//! (ingest progress) from proto/containerd/api.proto and its event service
//! from proto/containerd_events/api.proto, and its task service (`Get`,
//! a lost exit) from proto/containerd_tasks/api.proto: messages with
//! protobuf-codegen 3 (what grpcio's protobufv3 codec uses), service stubs with
//! grpcio-compiler, which reads protobuf 2 descriptors (a build dependency
//! only); the stubs it writes compile against the protobuf 3 messages.

use std::path::{Path, PathBuf};
use std::process::Command;

fn strip_inner_attributes(path: &Path) {
    // `include!` cannot take inner attributes (`#![...]`); the module that
    // includes the file sets the allows instead.
    let text = std::fs::read_to_string(path).expect("read generated code");
    let kept: Vec<&str> =
        text.lines().filter(|l| !l.trim_start().starts_with("#![") && !l.trim_start().starts_with("//!")).collect();
    std::fs::write(path, kept.join("\n")).expect("write generated code");
}

/// Messages and service stubs for `proto` (whose imports are under
/// `include`) into `out`: `api.rs` and `api_grpc.rs`.
fn generate(proto: &str, include: &str, out: &Path) {
    println!("cargo:rerun-if-changed={proto}");
    std::fs::create_dir_all(out).expect("create the output directory");
    protobuf_codegen::Codegen::new().protoc().include(include).input(proto).out_dir(out).run_from_script();
    strip_inner_attributes(&out.join("api.rs"));

    let set = out.join("api.desc");
    let status = Command::new(std::env::var("PROTOC").unwrap_or_else(|_| "protoc".into()))
        .arg(format!("-I{include}"))
        .args(["--include_imports", "--descriptor_set_out"])
        .arg(&set)
        .arg(proto)
        .status()
        .expect("run protoc (Debian package protobuf-compiler)");
    assert!(status.success(), "protoc failed on {proto}");
    let bytes = std::fs::read(&set).expect("read descriptor set");
    let desc: protobuf2::descriptor::FileDescriptorSet =
        protobuf2::Message::parse_from_bytes(&bytes).expect("parse descriptor set");
    let files: Vec<String> = desc.get_file().iter().map(|f| f.get_name().to_string()).collect();
    for f in grpcio_compiler::codegen::r#gen(desc.get_file(), &files) {
        let path = out.join(&f.name);
        std::fs::write(&path, f.content).expect("write grpc stubs");
        strip_inner_attributes(&path);
    }
}

/// The binary's code in the order of `link/code-order.txt.gz` (written by
/// `scripts/code-order.sh`): the functions a running agent executes first
/// and together, the rest after them. The kernel maps a binary's code 64
/// KiB around each page first touched, so code used now and then among
/// code never used would keep all of it resident. Only where the linker is
/// lld (Rust's default on x86_64 Linux since 1.90);
/// `PODWARDEN_CODE_ORDER=0` leaves the linker's own order. Names the build
/// no longer has are skipped.
fn code_order(out: &Path) {
    println!("cargo:rerun-if-changed=link/code-order.txt.gz");
    println!("cargo:rerun-if-env-changed=PODWARDEN_CODE_ORDER");
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let gz = root.join("link/code-order.txt.gz");
    let wanted = std::env::var("PODWARDEN_CODE_ORDER").map_or(true, |v| v != "0");
    if !wanted || !gz.exists() || std::env::var("TARGET").map_or(true, |t| t != "x86_64-unknown-linux-gnu") {
        return;
    }
    let mut text = Vec::new();
    let file = std::fs::File::open(&gz).expect("open link/code-order.txt.gz");
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(file), &mut text)
        .expect("decompress link/code-order.txt.gz");
    let order = out.join("code-order.txt");
    std::fs::write(&order, text).expect("write the code order");
    // The names carry hashes of the crates' dependency graphs and of the
    // compiler: made for another Cargo.lock or Rust, most of podwarden's own
    // names no longer match and the gain is mostly lost. Said at every build.
    println!("cargo:rerun-if-changed=link/code-order.lock");
    println!("cargo:rerun-if-changed=Cargo.lock");
    let made_for = std::fs::read_to_string(root.join("link/code-order.lock")).unwrap_or_default();
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-V")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let made_by = std::fs::read_to_string(root.join("link/code-order.rustc")).unwrap_or_default();
    if made_for != lock || made_by.trim() != rustc {
        println!(
            "cargo:warning=link/code-order.txt.gz was made for another Cargo.lock or compiler ({}): most of its names \
             no longer match and the binary keeps more of its code resident; run scripts/code-order.sh (as root)",
            made_by.trim()
        );
    }
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    code_order(&out);
    // the CRI client (runtime.v1)
    generate("proto/cri/api.proto", "proto/cri", &out);
    // podwarden's own local API (podwarden.v1): server and CLI client
    generate("proto/podwarden/api.proto", "proto/podwarden", &out.join("podwarden"));
    // containerd's content service: ingest progress of image pulls
    generate("proto/containerd/api.proto", "proto/containerd", &out.join("containerd"));
    // containerd's event service: task starts and exits on containerd 1.6
    generate("proto/containerd_events/api.proto", "proto/containerd_events", &out.join("containerd_events"));
    // containerd's task service: a container's process as the shim saw it
    generate("proto/containerd_tasks/api.proto", "proto/containerd_tasks", &out.join("containerd_tasks"));
    // gRPC probes: the standard health service (grpc.health.v1)
    generate("proto/health/api.proto", "proto/health", &out.join("health"));
}
