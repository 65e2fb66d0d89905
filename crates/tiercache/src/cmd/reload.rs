//! `tiercache reload MOUNTPOINT`: the mount re-reads its config file and applies what can
//! change while mounted (see `live::reload`); prints what changed and what was not applied.

use crate::live::control::{self, Request};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ReloadArgs {
    /// A running mount started with `--config FILE`.
    pub mountpoint: PathBuf,
    /// Print the daemon's answer as JSON: {"changed": [...], "not_applied": [...]}.
    #[arg(long)]
    pub json: bool,
}

/// An invalid file is the daemon's one-line error (file and key), and a non-zero exit.
pub fn run(a: ReloadArgs) -> Result<(), String> {
    let v = control::call(&a.mountpoint, &Request::Reload, Duration::from_secs(30))?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    let list = |k: &str| -> Vec<String> {
        v[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    };
    let (changed, fixed) = (list("changed"), list("not_applied"));
    println!("tiercache: reloaded {}", a.mountpoint.display());
    if changed.is_empty() {
        println!("changed: nothing");
    }
    for c in changed {
        println!("changed: {c}");
    }
    if !fixed.is_empty() {
        println!("not applied (takes a remount): {}", fixed.join(", "));
    }
    Ok(())
}
