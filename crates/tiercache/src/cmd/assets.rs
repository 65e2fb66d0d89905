//! `tiercache generate-assets DIR` (hidden; for the Debian package): man pages generated from
//! the command line definition (`DIR/man/tiercache.1`, `tiercache-SUBCOMMAND.1` for each
//! visible subcommand) and shell completions (`DIR/completions/tiercache.bash`, `_tiercache`,
//! `tiercache.fish`). The pages and completions can therefore never disagree with `--help`.

use clap_complete::Shell;
use std::path::Path;

pub fn generate(mut cmd: clap::Command, dir: &Path) -> Result<(), String> {
    let man = dir.join("man");
    let comp = dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    cmd.build();
    write_man(&cmd, "tiercache", &man)?;
    // `help` is clap's own; hidden commands are not for users.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        // clap names are `&'static str` without its `string` feature; this runs once.
        let name: &'static str =
            Box::leak(format!("tiercache-{}", sub.get_name()).into_boxed_str());
        let page = sub.clone().name(name).display_name(name);
        write_man(&page, name, &man)?;
    }
    for (shell, file) in [
        (Shell::Bash, "tiercache.bash"),
        (Shell::Zsh, "_tiercache"),
        (Shell::Fish, "tiercache.fish"),
    ] {
        let path = comp.join(file);
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, "tiercache", &mut out);
        std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn write_man(cmd: &clap::Command, name: &str, dir: &Path) -> Result<(), String> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut out)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))
}
