/work/wt/reflow/daemon/term/vt100/target/debug/deps/vte-5fe857f18aadd7a8.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/params.rs

/work/wt/reflow/daemon/term/vt100/target/debug/deps/libvte-5fe857f18aadd7a8.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/params.rs

/work/wt/reflow/daemon/term/vt100/target/debug/deps/libvte-5fe857f18aadd7a8.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/params.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/vte-0.15.0/src/params.rs:
