//! The `tiercache` command: `mount` serves a slow directory through the cache (also as
//! `tiercache BACKING MOUNTPOINT -o OPTIONS`, for fstab), `list` shows every mount, `stats`,
//! `priority`, `class`, `flush`, `reload` and `unmount` control a running mount, `keygen` makes a
//! remote-tier key, `sim` replays workloads and traces
//! against the same engine, `bench` measures. Errors are one line on stderr naming the flag,
//! file or line at fault; argument errors keep clap's message (usage and tips).

mod bench;
mod cmd;
mod live;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use std::process::ExitCode;

#[derive(clap::Parser, Debug)]
#[command(
    name = "tiercache",
    version,
    about = "Tiered, priority-aware file cache for slow storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount BACKING on MOUNTPOINT through the cache (daemonizes unless --foreground). The
    /// mount.fuse form `tiercache BACKING MOUNTPOINT -o NAME=VALUE,...` (fstab, `mount -t
    /// fuse.tiercache`) is the same.
    Mount(Box<cmd::mount::MountArgs>),
    /// Show a mount's statistics.
    Stats(cmd::ctl::StatsArgs),
    /// List every tiercache mount: BACKING, pid, memory, tiers, dirty data, state.
    List(cmd::list::ListArgs),
    /// Manage priority directories of a running mount.
    #[command(subcommand)]
    Priority(cmd::ctl::PriorityCommand),
    /// Manage the classes of a running mount (names, hit-ratio targets, bounds, directories).
    #[command(subcommand)]
    Class(cmd::ctl::ClassCommand),
    /// Re-read the mount's config file and apply what can change without a remount.
    Reload(cmd::reload::ReloadArgs),
    /// Write back every dirty block of a mount.
    Flush { mountpoint: std::path::PathBuf },
    /// Write back, then unmount (--force detaches a mount whose daemon is dead).
    Unmount(cmd::ctl::UnmountArgs),
    /// Replay a synthetic workload or a block trace against cache configurations.
    Sim(Box<cmd::sim::SimArgs>),
    /// SSD-tier cache files: `flash check PATH [--json]`.
    #[command(subcommand)]
    Flash(cmd::flash::FlashCommand),
    /// Create a key file for the remote tier: 32 random bytes, mode 0600 (never overwrites).
    Keygen { file: std::path::PathBuf },
    /// Zero-copy clients of a `--zero-copy` mount: `zerocopy read MOUNTPOINT FILE`.
    #[command(subcommand)]
    Zerocopy(cmd::zerocopy::ZeroCopyCommand),
    /// Run the benchmarks whose figures README quotes.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Write man pages and shell completions into DIR (for packaging).
    #[command(hide = true)]
    GenerateAssets { dir: std::path::PathBuf },
}

fn main() -> ExitCode {
    // `tiercache SOURCE MOUNTPOINT -o OPTIONS` (mount.fuse, fstab) is `tiercache mount ...`.
    let argv = match cmd::fstab::rewrite(&Cli::command(), std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tiercache: {e}");
            return ExitCode::FAILURE;
        }
    };
    let parsed = Cli::command()
        .try_get_matches_from(&argv.args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) if argv.fuse_form => {
            eprintln!("tiercache: {}", cmd::fstab::one_line(&e));
            return ExitCode::FAILURE;
        }
        Err(e) => return clap_exit(&e),
    };
    if let (true, Command::Mount(m)) = (argv.fuse_form, &cli.command) {
        if let (Some(b), Some(mp)) = (&m.backing, &m.mountpoint) {
            if cmd::fstab::already_mounted(b, mp) {
                println!("tiercache: {} already serves {}", mp.display(), b.display());
                return ExitCode::SUCCESS;
            }
        }
    }
    let respawn = live::config::RespawnArgs(argv.args.iter().skip(1).cloned().collect());
    let result = match cli.command {
        Command::Mount(args) => cmd::mount::run(*args, &respawn),
        Command::Zerocopy(c) => cmd::zerocopy::run(c),
        Command::Stats(a) => cmd::ctl::stats_cmd(a),
        Command::List(a) => cmd::list::list_cmd(a),
        Command::Priority(c) => cmd::ctl::priority_cmd(c),
        Command::Class(c) => cmd::ctl::class_cmd(c),
        Command::Flush { mountpoint } => cmd::ctl::flush_cmd(&mountpoint),
        Command::Reload(a) => cmd::reload::run(a),
        Command::GenerateAssets { dir } => {
            cmd::assets::generate(<Cli as clap::CommandFactory>::command(), &dir)
        }
        Command::Unmount(a) => cmd::ctl::unmount_cmd(a),
        Command::Sim(args) => cmd::sim::run(*args),
        Command::Bench(b) => cmd::bench::run(b),
        Command::Flash(c) => cmd::flash::run(c),
        Command::Keygen { file } => tiercache_remote::keyfile::generate(&file)
            .map(|_| {
                println!(
                    "wrote a new remote-tier key to {} (mode 0600)",
                    file.display()
                )
            })
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if argv.fuse_form => {
            eprintln!("tiercache: {}", cmd::fstab::name_option(&e));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("tiercache: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout with success. Everything else keeps clap's own message (it names
/// the argument, shows the usage and "a similar argument exists" tips) and exits 2; so does a
/// bare `tiercache` (or `tiercache priority`), after printing the help.
fn clap_exit(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(2),
    }
}
