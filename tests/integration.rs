//! Every integration test, one module per file in `tests/`, linked into one binary: a binary
//! per file, each linking every dependency, cost gigabytes of disk and minutes of linking on a
//! small CI machine. One file's tests: `cargo test --test integration streams::`.

mod common;

mod attention;
mod audit;
mod bad_input;
mod basics;
mod board;
mod cli;
mod cluster;
mod collab;
mod dead_peer;
mod docs;
mod exec;
mod faults;
mod footprint;
mod lsp;
mod mux;
mod names;
mod notify;
mod openapi;
mod package;
mod properties;
mod proxy;
mod raw;
mod recordings;
mod reflow;
mod reliability;
mod rest;
mod rest_api;
mod schemathesis;
mod screens;
mod security;
mod session_core;
mod sso;
mod startup;
mod streams;
mod tls;
mod tokens;
mod typing;
mod ui_states;
mod upgrade;
