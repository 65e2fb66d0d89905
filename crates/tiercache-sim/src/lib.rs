//! tiercache-sim: replays workloads and block traces against the tiercache engine, metadata only.
//!
//! Parts:
//! - [`trace`]: readers for libCacheSim CSV, MSR Cambridge CSV and libCacheSim oracleGeneral
//!   (plain or zstd) traces.

pub mod trace;
