/work/wt/reflow/daemon/term/vt100/target/debug/deps/vt100-3836f004137daa03.d: src/lib.rs src/attrs.rs src/callbacks.rs src/capture.rs src/cell.rs src/grid.rs src/parser.rs src/perform.rs src/reflow.rs src/row.rs src/screen.rs src/term.rs Cargo.toml

/work/wt/reflow/daemon/term/vt100/target/debug/deps/libvt100-3836f004137daa03.rmeta: src/lib.rs src/attrs.rs src/callbacks.rs src/capture.rs src/cell.rs src/grid.rs src/parser.rs src/perform.rs src/reflow.rs src/row.rs src/screen.rs src/term.rs Cargo.toml

src/lib.rs:
src/attrs.rs:
src/callbacks.rs:
src/capture.rs:
src/cell.rs:
src/grid.rs:
src/parser.rs:
src/perform.rs:
src/reflow.rs:
src/row.rs:
src/screen.rs:
src/term.rs:
Cargo.toml:

# env-dep:CLIPPY_ARGS=
# env-dep:CLIPPY_CONF_DIR
