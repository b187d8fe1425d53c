//! Rebuilds the binary when anything under `static/` changes: the UI is embedded at build time,
//! and a file added or removed there must not be missed.

fn main() {
    println!("cargo:rerun-if-changed=static");
}
