//! Assistants: the programs a session can run, their commands for each mode, `$SHELL`
//! resolution and whether the program can be found, the way `execvp` would find it.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::patterns::{ScreenPatterns, StateHooks};

/// The one placeholder that is expanded: a program that is exactly this string.
const SHELL_PLACEHOLDER: &str = "$SHELL";

/// The program `$SHELL` stands for when the daemon's `SHELL` is unset or empty.
const FALLBACK_SHELL: &str = "bash";

/// Where programs are looked up when the daemon has no `PATH` (what `execvp` assumes).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `[assistants.KEY]`: a program a session can run. Commands are argument arrays, never split
/// on spaces and never run through a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assistant {
    /// Display name, sent to viewers in `status`.
    pub name: String,
    /// How a session starts; the first element is the program (at least one element).
    pub command: Vec<String>,
    /// How the agent restarts when YOLO mode is switched off; `None` means `command`.
    pub resume: Option<Vec<String>>,
    /// How the agent restarts when YOLO mode is switched on; `None`: YOLO unsupported.
    pub yolo: Option<Vec<String>>,
    /// Environment added for every run.
    pub env: BTreeMap<String, String>,
    /// Environment added on top of `env` in YOLO mode only.
    pub yolo_env: BTreeMap<String, String>,
    /// How the agent's own hooks are wired to tell ptyhub its state (`state_hooks`).
    pub state_hooks: StateHooks,
    /// The screen patterns that say it waits for its user or works (`[assistants.KEY.state]`).
    pub state: ScreenPatterns,
}

impl Assistant {
    /// The command with `$SHELL` resolved (see above).
    pub fn start_argv(&self) -> Vec<String> {
        resolve_argv(&self.command, shell_from_env().as_deref())
    }

    /// The command that restarts the agent in normal mode (`resume`, else `command`), with
    /// `$SHELL` resolved.
    pub fn resume_argv(&self) -> Vec<String> {
        let argv = self.resume.as_ref().unwrap_or(&self.command);
        resolve_argv(argv, shell_from_env().as_deref())
    }

    /// The command that restarts the agent in YOLO mode, with `$SHELL` resolved; `None` when
    /// YOLO is unsupported.
    pub fn yolo_argv(&self) -> Option<Vec<String>> {
        let shell = shell_from_env();
        self.yolo
            .as_ref()
            .map(|argv| resolve_argv(argv, shell.as_deref()))
    }

    /// The command for a restart into YOLO mode (`yolo == true`) or out of it; `None` when
    /// YOLO mode is asked for and unsupported.
    pub fn restart_argv(&self, yolo: bool) -> Option<Vec<String>> {
        if yolo {
            self.yolo_argv()
        } else {
            Some(self.resume_argv())
        }
    }

    /// Whether the assistant has a YOLO command.
    pub fn yolo_supported(&self) -> bool {
        self.yolo.is_some()
    }

    /// Whether the start command is itself the YOLO command, so a new session begins in YOLO
    /// mode (and should get [`Assistant::env_for`]`(true)`).
    pub fn starts_in_yolo(&self) -> bool {
        self.yolo.as_ref() == Some(&self.command)
    }

    /// The environment to add for a run in the given mode: `env`, plus `yolo_env` in YOLO
    /// mode (where it wins on a clash).
    pub fn env_for(&self, yolo: bool) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        if yolo {
            env.extend(self.yolo_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        env
    }

    /// Whether the program (first element after resolution) is found: an absolute/relative path that is an executable file, or a name found executable in PATH. Returns Err(reason) like "program `claude` not found in PATH".
    ///
    /// Relative paths are taken from the daemon's working directory.
    pub fn availability(&self) -> Result<(), String> {
        let argv = self.start_argv();
        let program = argv.first().map(String::as_str).unwrap_or_default();
        find_program(program, std::env::var_os("PATH").as_deref()).map(|_| ())
    }
}

/// What makes an argument array unusable whatever it runs, for people: no program, an empty
/// program, or a NUL, which `execve` cannot pass. `None` when it has none of these.
pub fn argv_problem(argv: &[String]) -> Option<String> {
    match argv.first() {
        None => Some(
            "the command is empty: it needs at least the program, e.g. [\"bash\", \"-l\"]"
                .to_owned(),
        ),
        Some(program) if program.is_empty() => {
            Some("the program (first element of the command) is an empty string".to_owned())
        }
        Some(_) => argv
            .iter()
            .position(|a| a.contains('\0'))
            .map(|i| format!("command arguments cannot contain NUL (element {i} does)")),
    }
}

/// Whether `program` can be run, found the way [`Assistant::availability`] finds an
/// assistant's program (no `$SHELL` substitution: the name is taken as written). Err says why,
/// e.g. "program `htop` not found in PATH".
pub fn program_available(program: &str) -> Result<(), String> {
    find_program(program, std::env::var_os("PATH").as_deref()).map(|_| ())
}

/// The daemon's `SHELL`, if it is valid UTF-8 (argument arrays are strings).
/// The daemon user's shell: `SHELL` when set and not empty, else `bash` (what `$SHELL` in an
/// assistant's command stands for).
pub fn user_shell() -> String {
    let placeholder = [SHELL_PLACEHOLDER.to_owned()];
    let mut argv = resolve_argv(&placeholder, shell_from_env().as_deref());
    argv.pop().unwrap_or_else(|| FALLBACK_SHELL.to_owned())
}

fn shell_from_env() -> Option<String> {
    std::env::var("SHELL").ok()
}

/// `argv` with a first element of exactly `$SHELL` replaced by `shell` when that is set and
/// non-empty, else by `bash`. Nothing else is touched: this is not a shell.
fn resolve_argv(argv: &[String], shell: Option<&str>) -> Vec<String> {
    let mut out = argv.to_vec();
    if let Some(program) = out.first_mut() {
        if program == SHELL_PLACEHOLDER {
            let shell = shell.filter(|s| !s.is_empty()).unwrap_or(FALLBACK_SHELL);
            shell.clone_into(program);
        }
    }
    out
}

/// Find `program` the way `execvp` would: a name with a `/` is a path, anything else is looked
/// up in `path_var` (or [`DEFAULT_PATH`]). Empty `PATH` entries are skipped rather than meaning
/// "the current directory", which would make availability depend on where the daemon started.
fn find_program(program: &str, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program name is empty".to_owned());
    }
    if program.contains('/') {
        let path = Path::new(program);
        return match std::fs::metadata(path) {
            Ok(meta) if is_executable_file(&meta) => Ok(path.to_path_buf()),
            Ok(meta) if meta.is_dir() => Err(format!("program `{program}` is a directory")),
            Ok(_) => Err(format!("program `{program}` is not an executable file")),
            Err(e) => Err(format!("program `{program}` not found: {e}")),
        };
    }
    let dirs = path_var.unwrap_or_else(|| OsStr::new(DEFAULT_PATH));
    std::env::split_paths(dirs)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| is_executable_file(&m)))
        .ok_or_else(|| format!("program `{program}` not found in PATH"))
}

#[cfg(unix)]
fn is_executable_file(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable_file(meta: &std::fs::Metadata) -> bool {
    meta.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn default_assistants_match_swe_swe() {
        let c = Config::default();
        let keys: Vec<&str> = c.assistants.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["aider", "claude", "codex", "gemini", "goose", "opencode", "shell"]
        );
        let check =
            |key: &str, name: &str, cmd: &[&str], resume: &[&str], yolo: Option<&[&str]>| {
                let a = &c.assistants[key];
                assert_eq!(a.name, name, "{key}");
                assert_eq!(a.command, argv(cmd), "{key}");
                assert_eq!(a.resume_argv(), argv(resume), "{key}");
                assert_eq!(a.yolo, yolo.map(argv), "{key}");
                assert_eq!(a.yolo_supported(), yolo.is_some(), "{key}");
                assert!(!a.starts_in_yolo(), "{key}");
            };
        check(
            "claude",
            "Claude",
            &["claude"],
            &["claude", "--continue"],
            Some(&["claude", "--dangerously-skip-permissions", "--continue"]),
        );
        check(
            "gemini",
            "Gemini",
            &["gemini"],
            &["gemini", "--resume"],
            Some(&["gemini", "--resume", "--approval-mode=yolo"]),
        );
        check(
            "codex",
            "Codex",
            &["codex"],
            &["codex", "resume", "--last"],
            Some(&["codex", "--yolo", "resume", "--last"]),
        );
        check(
            "goose",
            "Goose",
            &["goose", "session"],
            &["goose", "session", "-r"],
            Some(&["goose", "session", "-r"]),
        );
        check(
            "aider",
            "Aider",
            &["aider"],
            &["aider", "--restore-chat-history"],
            Some(&["aider", "--yes-always", "--restore-chat-history"]),
        );
        check("opencode", "OpenCode", &["opencode"], &["opencode"], None);

        let goose = &c.assistants["goose"];
        assert!(goose.env.is_empty());
        assert!(goose.env_for(false).is_empty());
        assert_eq!(
            goose.env_for(true),
            BTreeMap::from([("GOOSE_MODE".to_owned(), "auto".to_owned())])
        );
        assert_eq!(
            goose.restart_argv(true),
            Some(argv(&["goose", "session", "-r"]))
        );
        assert_eq!(c.assistants["opencode"].restart_argv(true), None);
        assert_eq!(
            c.assistants["opencode"].restart_argv(false),
            Some(argv(&["opencode"]))
        );

        let shell = &c.assistants["shell"];
        assert_eq!(shell.name, "Shell");
        assert_eq!(shell.command, argv(&["$SHELL", "-l"]));
        assert!(!shell.yolo_supported());
        let start = shell.start_argv();
        assert_eq!(
            start,
            resolve_argv(&shell.command, shell_from_env().as_deref())
        );
        assert_ne!(start[0], "$SHELL");
        assert_eq!(start[1], "-l");
    }

    #[test]
    fn shell_placeholder_resolution() {
        let cmd = argv(&["$SHELL", "-l"]);
        assert_eq!(
            resolve_argv(&cmd, Some("/bin/zsh")),
            argv(&["/bin/zsh", "-l"])
        );
        assert_eq!(resolve_argv(&cmd, Some("")), argv(&["bash", "-l"]));
        assert_eq!(resolve_argv(&cmd, None), argv(&["bash", "-l"]));
        // Only a program that is exactly `$SHELL`; nothing else is expanded.
        for unchanged in [
            argv(&["${SHELL}", "-l"]),
            argv(&["$SHELL2"]),
            argv(&["bash", "$SHELL", "$HOME", "~"]),
            argv(&[" $SHELL"]),
        ] {
            assert_eq!(resolve_argv(&unchanged, Some("/bin/zsh")), unchanged);
        }
        assert!(resolve_argv(&[], Some("/bin/zsh")).is_empty());
    }

    #[test]
    fn argv_problems_are_named() {
        assert_eq!(argv_problem(&argv(&["sh", "-c", "true"])), None);
        assert!(argv_problem(&[])
            .unwrap()
            .starts_with("the command is empty"));
        assert!(argv_problem(&argv(&["", "x"]))
            .unwrap()
            .contains("empty string"));
        assert_eq!(
            argv_problem(&argv(&["sh", "-c", "a\0b"])).as_deref(),
            Some("command arguments cannot contain NUL (element 2 does)")
        );
        assert_eq!(program_available("sh"), Ok(()));
        assert_eq!(
            program_available("no-such-program-xyz"),
            Err("program `no-such-program-xyz` not found in PATH".to_owned())
        );
    }

    #[test]
    fn availability_of_programs() {
        let with = |cmd: &[&str]| Assistant {
            name: "t".into(),
            command: argv(cmd),
            resume: None,
            yolo: None,
            env: BTreeMap::new(),
            yolo_env: BTreeMap::new(),
            state_hooks: StateHooks::None,
            state: ScreenPatterns::default(),
        };
        assert_eq!(with(&["sh", "-c", "true"]).availability(), Ok(()));
        assert_eq!(
            with(&["no-such-program-xyz"]).availability(),
            Err("program `no-such-program-xyz` not found in PATH".to_owned())
        );
        assert_eq!(with(&["/bin/sh"]).availability(), Ok(()));
        let missing = with(&["/no/such/dir/prog"]).availability().unwrap_err();
        assert!(
            missing.starts_with("program `/no/such/dir/prog` not found"),
            "{missing}"
        );
        assert_eq!(
            with(&["/"]).availability(),
            Err("program `/` is a directory".to_owned())
        );
        let not_exec = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert_eq!(
            with(&[not_exec]).availability(),
            Err(format!("program `{not_exec}` is not an executable file"))
        );
        // PATH lookup itself, independent of the test's environment.
        assert!(find_program("sh", Some(OsStr::new("/no/such:/bin"))).is_ok());
        assert!(find_program("sh", Some(OsStr::new(""))).is_err());
        assert!(find_program("sh", Some(OsStr::new("/no/such"))).is_err());
        assert!(
            find_program("sh", None).is_ok(),
            "falls back to the standard PATH"
        );
        assert!(find_program("", None).is_err());
    }
}
