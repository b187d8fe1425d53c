/work/wt/reflow/daemon/term/vt100/target/debug/deps/vt100-83887cc3a0b855ea.d: src/lib.rs src/attrs.rs src/callbacks.rs src/capture.rs src/cell.rs src/grid.rs src/parser.rs src/perform.rs src/reflow.rs src/row.rs src/screen.rs src/term.rs

/work/wt/reflow/daemon/term/vt100/target/debug/deps/libvt100-83887cc3a0b855ea.rlib: src/lib.rs src/attrs.rs src/callbacks.rs src/capture.rs src/cell.rs src/grid.rs src/parser.rs src/perform.rs src/reflow.rs src/row.rs src/screen.rs src/term.rs

/work/wt/reflow/daemon/term/vt100/target/debug/deps/libvt100-83887cc3a0b855ea.rmeta: src/lib.rs src/attrs.rs src/callbacks.rs src/capture.rs src/cell.rs src/grid.rs src/parser.rs src/perform.rs src/reflow.rs src/row.rs src/screen.rs src/term.rs

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
