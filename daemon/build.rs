//! Rebuilds the binary when anything under `static/` changes: the UI is embedded at build time,
//! and a file added or removed there must not be missed. Also links the binary with packed
//! relative relocations.

fn main() {
    println!("cargo:rerun-if-changed=static");
    // DT_RELR (glibc 2.36, binutils 2.38): the loader's relocation table shrinks from about
    // 670 KB, every page of it read at each start and kept resident, to a few KB. An older
    // linker warns and ignores the flag; benches/RESULTS.md, "Footprint (issue 39 item 2)".
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
