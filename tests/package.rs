//! The Debian package: built with `cargo deb` from the binary cargo built for these tests,
//! its contents and control data checked with `dpkg-deb`, and Debian's `lintian` run on it
//! with no errors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not run: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// Builds the package into `dir` and returns its path.
fn build(dir: &Path) -> PathBuf {
    // The profile of the binary this test was built with (the tests' own, so nothing is
    // compiled again): `cargo deb` finds it in target/<profile>, then strips it.
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ptyhub"));
    let profile_dir = bin.parent().unwrap().file_name().unwrap().to_str().unwrap();
    let profile = if profile_dir == "debug" {
        "dev"
    } else {
        profile_dir
    };
    let start = Instant::now();
    run(Command::new("cargo")
        .current_dir(root())
        .args(["deb", "--no-build", "--profile", profile, "--output"])
        .arg(dir));
    println!(
        "cargo deb --no-build --profile {profile}: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb")
}

#[test]
fn the_packaged_unit_is_the_shipped_one_with_usr_bin() {
    let shipped = std::fs::read_to_string(root().join("systemd/ptyhub.service")).unwrap();
    let packaged = std::fs::read_to_string(root().join("debian/ptyhub.service")).unwrap();
    assert_eq!(
        packaged,
        shipped.replace("/usr/local/bin/", "/usr/bin/"),
        "debian/ptyhub.service must be systemd/ptyhub.service with /usr/bin paths: \
         sed 's#/usr/local/bin/#/usr/bin/#g' systemd/ptyhub.service > debian/ptyhub.service"
    );
}

#[test]
fn the_packaged_man_page_is_the_cli_s_own() {
    let out = Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .arg("man")
        .output()
        .expect("ptyhub man");
    assert!(out.status.success());
    let packaged = std::fs::read(root().join("debian/ptyhub.1")).unwrap();
    assert!(
        packaged == out.stdout,
        "debian/ptyhub.1 must be what `ptyhub man` prints: cargo run -- man > debian/ptyhub.1"
    );
}

#[test]
fn the_changelog_names_this_version() {
    let changelog = std::fs::read_to_string(root().join("debian/changelog")).unwrap();
    let first = changelog.lines().next().unwrap();
    let want = format!("ptyhub ({}-1) ", env!("CARGO_PKG_VERSION"));
    assert!(
        first.starts_with(&want),
        "debian/changelog must start with an entry for {want}: {first}"
    );
}

#[test]
fn the_debian_package_has_its_files_and_passes_lintian() {
    for tool in ["cargo-deb", "dpkg-deb", "lintian"] {
        if !have(tool) {
            println!("SKIPPED: {tool} is not installed (tests/run installs it); the package was not built");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let deb = build(dir.path());

    let contents = run(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    let entry = |path: &str| {
        contents
            .lines()
            .find(|l| l.ends_with(path))
            .unwrap_or_else(|| panic!("{path} not in the package:\n{contents}"))
            .to_owned()
    };
    let bin = entry("./usr/bin/ptyhub");
    // Owned by root (cargo deb writes the ids, 0/0).
    let root_owned = |l: &str| l.contains(" root/root ") || l.contains(" 0/0 ");
    assert!(bin.starts_with("-rwxr-xr-x") && root_owned(&bin), "{bin}");
    let conf = entry("./etc/ptyhub/ptyhub.toml");
    assert!(
        conf.starts_with("-rw-r--r--") && root_owned(&conf),
        "{conf}"
    );
    entry("/systemd/system/ptyhub.service");
    entry("./usr/share/doc/ptyhub/copyright");
    entry("./usr/share/doc/ptyhub/README.md");
    entry("./usr/share/doc/ptyhub/changelog.Debian.gz");
    entry("./usr/share/man/man1/ptyhub.1.gz");

    let info = run(Command::new("dpkg-deb").arg("--info").arg(&deb));
    for want in [
        "Package: ptyhub",
        "Section: net",
        "conffiles",
        "postinst",
        "postrm",
    ] {
        assert!(
            info.contains(want),
            "{want:?} not in dpkg-deb --info:\n{info}"
        );
    }
    let depends = info
        .lines()
        .find(|l| l.trim_start().starts_with("Depends:"))
        .unwrap_or_else(|| panic!("no Depends:\n{info}"));
    assert!(
        depends.contains("adduser") && depends.contains("libc6"),
        "{depends}"
    );
    let field = |name: &str| run(Command::new("dpkg-deb").arg("--info").arg(&deb).arg(name));
    assert_eq!(field("conffiles").trim(), "/etc/ptyhub/ptyhub.toml");
    let postinst = field("postinst");
    assert!(
        postinst.contains("adduser --system --group --home /var/lib/ptyhub"),
        "{postinst}"
    );
    assert!(
        postinst.contains("dpkg-statoverride --update --add root ptyhub 0640"),
        "{postinst}"
    );
    // cargo deb's systemd snippets replaced the placeholder.
    assert!(
        !postinst.contains("#DEBHELPER#") && postinst.contains("deb-systemd-helper"),
        "{postinst}"
    );

    // The unit as packaged: the binary where the package puts it, the state directory.
    let unpacked = dir.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked));
    let unit_path = ["lib", "usr/lib"]
        .iter()
        .map(|p| unpacked.join(p).join("systemd/system/ptyhub.service"))
        .find(|p| p.exists())
        .unwrap();
    let unit = std::fs::read_to_string(unit_path).unwrap();
    assert!(unit.contains("\nExecStart=/usr/bin/ptyhub --config /etc/ptyhub/ptyhub.toml\n"));
    assert!(unit.contains("\nStateDirectory=ptyhub\n") && unit.contains("\nUser=ptyhub\n"));
    assert!(!unit.contains("/usr/local/"), "{unit}");
    // The packaged binary runs and reads the packaged config.
    let check = run(Command::new(unpacked.join("usr/bin/ptyhub"))
        .arg("--config")
        .arg(unpacked.join("etc/ptyhub/ptyhub.toml"))
        .arg("--check-config"));
    println!("packaged binary --check-config: {}", check.trim());

    // Debian's own checks. Errors fail; warnings and notes are printed for the record.
    let out = Command::new("lintian")
        .args(["--fail-on", "error", "--display-info"])
        .arg(&deb)
        .output()
        .unwrap();
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("lintian:\n{report}");
    assert!(out.status.success(), "lintian found errors:\n{report}");
    assert!(!report.lines().any(|l| l.starts_with("E: ")), "{report}");
}
