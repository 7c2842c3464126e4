//! What rea's integration tests (`tests/`) and its benchmarks
//! (`rea-bench`) both drive, written once: headless Chromium over the
//! DevTools protocol ([`chromium`]).
//!
//! Not here: anything rea itself runs. This crate is a dev-dependency of
//! the `rea` package and a dependency of `rea-bench` only; it knows none
//! of rea's crates. Its calls return errors, never panic: a test turns
//! them into its failure, a benchmark into its exit.

pub mod chromium;
