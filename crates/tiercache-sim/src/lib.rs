//! tiercache-sim: replays workloads and block traces against the tiercache engine, metadata only.
//!
//! Parts:
//! - [`workload`]: synthetic streams (`uniform`, `zipf`, `exponential`, `loop`, `scan`);
//! - [`trace`]: readers for libCacheSim CSV, MSR Cambridge CSV and libCacheSim oracleGeneral
//!   (plain or zstd) traces;
//! - [`replay`]: tier specs, setups and the replay loop over `tiercache_core::hierarchy`;
//! - [`remote`]: the `remote` tier kind (paper 002's sequential-run bypass);
//! - [`report`]: the `--json` report and text tables;
//! - [`curves`]: each class's LRU miss-ratio curve, exact and SHARDS-estimated (`--curves`);
//! - [`timeseries`] and [`plot`]: per-window rows, CSV and PNG (paper 000's Fig. 5).

pub mod curves;
pub mod plot;
pub mod remote;
pub mod replay;
pub mod report;
pub mod timeseries;
pub mod trace;
pub mod workload;
