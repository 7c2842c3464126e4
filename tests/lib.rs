//! Integration tests: the real `rea` binary, real processes, real files and
//! real signals. One test binary, one file per feature.

mod support;

mod check;
mod daemon;
mod generated;
mod live;
mod next;
