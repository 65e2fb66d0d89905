//! Subcommands.

pub mod bench;
pub mod sim;
