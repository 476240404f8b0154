//! `vramtrace completions SHELL` and `vramtrace man`: shell completions and the manual
//! page, generated from the command line's own definition (clap_complete, clap_mangen),
//! so that neither can fall behind the options.

use super::common;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The completion script for `shell`, on stdout (e.g. `vramtrace completions bash >
/// ~/.local/share/bash-completion/completions/vramtrace`).
pub fn completions(mut cli: clap::Command, args: CompletionsArgs) -> Result<i32, String> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "vramtrace", &mut out);
    common::print(&String::from_utf8_lossy(&out))?;
    Ok(0)
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write one page for the command and one for each subcommand (vramtrace.1,
    /// vramtrace-run.1, ...) into DIR, as git and cargo ship theirs; without it, the
    /// command's own page on stdout.
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<std::path::PathBuf>,
    /// Replace pages that exist in DIR.
    #[arg(long)]
    pub force: bool,
}

/// The manual pages (roff): `vramtrace man > vramtrace.1; man ./vramtrace.1`.
pub fn man(cli: clap::Command, args: ManArgs) -> Result<i32, String> {
    let render = |c: clap::Command| -> Result<String, String> {
        let mut out = Vec::new();
        clap_mangen::Man::new(c)
            .render(&mut out)
            .map_err(|e| format!("man: {e}"))?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    };
    let cli = cli.name("vramtrace");
    let Some(dir) = args.output else {
        common::print(&render(cli)?)?;
        return Ok(0);
    };
    let mut pages = vec![("vramtrace.1".to_string(), render(cli.clone())?)];
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("vramtrace-{}", sub.get_name());
        pages.push((format!("{name}.1"), render(sub.clone().name(name))?));
    }
    // As `run -o` does: a reader's ~/.local/share/man/man1 may not exist yet.
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("{}: cannot create the directory: {e}", dir.display()))?;
    for (file, page) in &pages {
        common::write(&dir.join(file), page, args.force)?;
    }
    Ok(0)
}
