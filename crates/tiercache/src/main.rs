//! The `tiercache` command: `sim` replays workloads and traces against the engine, `bench`
//! measures it. Errors are one line on stderr naming the flag, file or line at fault.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
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
    /// Replay a synthetic workload or a block trace against cache configurations.
    Sim(Box<cmd::sim::SimArgs>),
    /// Run the benchmarks whose figures README quotes.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line names the flag; usage follows on --help.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!(
                "tiercache: {} (see --help)",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Sim(args) => cmd::sim::run(*args),
        Command::Bench(b) => cmd::bench::run(b),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tiercache: {e}");
            ExitCode::FAILURE
        }
    }
}
