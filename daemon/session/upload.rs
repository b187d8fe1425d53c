//! File uploads into a session's working directory: name sanitising, a write that never
//! leaves a partial file, never overwrites and never goes through a symbolic link, and quoting
//! the path for the shell.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::UnlinkatFlags;

/// Where uploads land, under the session's working directory.
pub const UPLOAD_DIR: &str = ".ptyhub/uploads";
/// Longest file name accepted, bytes (the usual file-system limit).
pub const MAX_NAME_BYTES: usize = 255;
/// How many `name-N.ext` alternatives are tried before giving up.
const MAX_SUFFIX: u32 = 10_000;
/// How many random temporary names are tried before giving up (a clash is already unlikely).
const MAX_TEMP_TRIES: u32 = 100;

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The name is unusable.
    #[error("{0}")]
    BadName(&'static str),
    /// The file is over the configured limit.
    #[error("file is {size} bytes, over the upload limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A directory on the way to the uploads directory is a symbolic link: following it could
    /// write anywhere the daemon may.
    #[error("could not save the file: {} is a symbolic link: refusing to write through it", .0.display())]
    Symlink(PathBuf),
    /// Something other than a directory is where a directory on the way should be.
    #[error("could not save the file: {} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Writing failed (permission denied, disk full, ...); nothing was left behind.
    #[error("could not save the file: {0}")]
    Io(#[from] std::io::Error),
}

/// Reduces a client-sent name to a safe last path component.
pub fn sanitize_name(raw: &[u8]) -> Result<String, UploadError> {
    let name = std::str::from_utf8(raw)
        .map_err(|_| UploadError::BadName("file name is not valid UTF-8"))?;
    if name.contains('\0') || name.chars().any(char::is_control) {
        return Err(UploadError::BadName(
            "file name contains control characters",
        ));
    }
    // Browsers on Windows may send backslash paths; neither separator survives.
    let last = name.rsplit(['/', '\\']).next().unwrap_or("").trim();
    match last {
        "" => Err(UploadError::BadName("file name is empty")),
        "." | ".." => Err(UploadError::BadName("file name may not be . or ..")),
        n if n.len() > MAX_NAME_BYTES => {
            Err(UploadError::BadName("file name is longer than 255 bytes"))
        }
        n => Ok(n.to_owned()),
    }
}

/// `name-N.ext` for the N-th alternative (`N` = 0 is the name itself).
fn candidate(name: &str, n: u32) -> String {
    if n == 0 {
        return name.to_owned();
    }
    match name.rfind('.') {
        Some(dot) if dot > 0 => format!("{}-{n}{}", &name[..dot], &name[dot..]),
        _ => format!("{name}-{n}"),
    }
}

/// Writes `data` as `{work_dir}/.ptyhub/uploads/{name}` (or the first free `name-N.ext`)
/// through a temporary file, and returns the absolute path. Blocking: run it off the runtime.
///
/// Everything below the working directory is reached through directory descriptors opened
/// without following symbolic links, so a program in the session that replaces `.ptyhub` or
/// `.ptyhub/uploads` with a link (even between two checks) cannot redirect the write.
pub fn save(
    work_dir: &Path,
    raw_name: &[u8],
    data: &[u8],
    limit: usize,
) -> Result<PathBuf, UploadError> {
    let name = sanitize_name(raw_name)?;
    if data.len() > limit {
        return Err(UploadError::TooLarge {
            size: data.len(),
            limit,
        });
    }
    // The working directory itself was resolved when the session started; it is followed.
    let mut dir: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_DIRECTORY.bits())
        .open(work_dir)?
        .into();
    let mut shown = work_dir.to_path_buf();
    for component in Path::new(UPLOAD_DIR).iter() {
        shown.push(component);
        dir = open_child_dir(&dir, component, &shown)?;
    }
    let mut temp = TempFile::create(&dir)?;
    temp.file.write_all(data)?;
    temp.file.flush()?;
    // A hard link fails if the target exists (even as a dangling symbolic link), so no upload
    // ever replaces or writes through another file; dropping `temp` removes the temporary name.
    for n in 0..MAX_SUFFIX {
        let target = candidate(&name, n);
        match nix::unistd::linkat(
            Some(dir.as_raw_fd()),
            temp.name.as_str(),
            Some(dir.as_raw_fd()),
            target.as_str(),
            AtFlags::empty(),
        ) {
            Ok(()) => return Ok(shown.join(target)),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
    }
    Err(UploadError::BadName(
        "too many files with this name already",
    ))
}

/// `openat`, its descriptor owned.
fn open_at(
    dir: &OwnedFd,
    name: &(impl nix::NixPath + ?Sized),
    flags: OFlag,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    // rustix hands back an owned descriptor (nix 0.29 only a raw number), so no `unsafe`.
    let flags = rustix::fs::OFlags::from_bits_retain((flags | OFlag::O_CLOEXEC).bits() as _);
    let mode = rustix::fs::Mode::from_bits_retain(mode.bits() as _);
    name.with_nix_path(|path| rustix::fs::openat(dir, path, flags, mode))
        .map_err(|_| Errno::ENAMETOOLONG)?
        .map_err(|e| Errno::from_raw(e.raw_os_error()))
}

/// Opens (creating when missing) the directory `name` inside `parent`, refusing a symbolic
/// link. `shown` is its full path, for the error.
fn open_child_dir(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    shown: &Path,
) -> Result<OwnedFd, UploadError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
    let mut created = false;
    loop {
        match open_at(parent, name, flags, Mode::empty()) {
            Ok(fd) => return Ok(fd),
            // Made here, or by a concurrent upload: open it (once more) either way.
            Err(Errno::ENOENT) if !created => {
                // 0o777 less the umask, as `create_dir_all` did.
                match nix::sys::stat::mkdirat(
                    Some(parent.as_raw_fd()),
                    name,
                    Mode::from_bits_truncate(0o777),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => created = true,
                    Err(e) => return Err(std::io::Error::from(e).into()),
                }
            }
            // O_NOFOLLOW reports a link as ELOOP, or as ENOTDIR together with O_DIRECTORY:
            // look at the entry itself to say which it is.
            Err(e @ (Errno::ELOOP | Errno::ENOTDIR)) => {
                let kind = nix::sys::stat::fstatat(
                    Some(parent.as_raw_fd()),
                    name,
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT);
                return Err(match kind {
                    Ok(SFlag::S_IFLNK) => UploadError::Symlink(shown.to_path_buf()),
                    Ok(_) => UploadError::NotADirectory(shown.to_path_buf()),
                    Err(_) => std::io::Error::from(e).into(),
                });
            }
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
    }
}

/// A temporary file inside the uploads directory, unlinked when dropped: once the upload is
/// linked under its final name, or when anything failed, so no partial file stays.
struct TempFile<'a> {
    dir: &'a OwnedFd,
    name: String,
    file: std::fs::File,
}

impl<'a> TempFile<'a> {
    fn create(dir: &'a OwnedFd) -> Result<Self, UploadError> {
        // O_EXCL never opens an existing entry, a symbolic link included.
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
        for _ in 0..MAX_TEMP_TRIES {
            let mut random = [0u8; 8];
            getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
            let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
            let name = format!(".upload-{hex}.part");
            // Owner-only, as before (an upload may be private); the final link keeps it.
            match open_at(dir, name.as_str(), flags, Mode::from_bits_truncate(0o600)) {
                Ok(fd) => {
                    return Ok(TempFile {
                        dir,
                        name,
                        file: fd.into(),
                    })
                }
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
        Err(std::io::Error::from(Errno::EEXIST).into())
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        let _ = nix::unistd::unlinkat(
            Some(self.dir.as_raw_fd()),
            self.name.as_str(),
            UnlinkatFlags::NoRemoveDir,
        );
    }
}

/// The path as a POSIX shell reads it: bare when it holds only safe characters, otherwise in
/// single quotes (with `'` written as `'\''`).
pub fn shell_quote(path: &Path) -> String {
    let s = path.to_string_lossy();
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{candidate, sanitize_name, save, shell_quote, UploadError, UPLOAD_DIR};

    #[test]
    fn names_are_reduced_to_their_last_component() {
        assert_eq!(sanitize_name(b"../../etc/passwd").unwrap(), "passwd");
        assert_eq!(
            sanitize_name(b"C:\\Users\\me\\notes.txt").unwrap(),
            "notes.txt"
        );
        assert_eq!(sanitize_name(b"plain.bin").unwrap(), "plain.bin");
        assert_eq!(sanitize_name("日本.png".as_bytes()).unwrap(), "日本.png");
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in [
            &b""[..],
            b"/",
            b"a/..",
            b".",
            b"x/.",
            b"new\nline",
            b"nul\0",
            b"\x1b[31m",
            b"\xff\xfe",
        ] {
            assert!(sanitize_name(bad).is_err(), "{bad:?}");
        }
        assert!(sanitize_name(&[b'a'; 256]).is_err());
        assert!(sanitize_name(&[b'a'; 255]).is_ok());
    }

    #[test]
    fn alternatives_keep_the_extension() {
        assert_eq!(candidate("a.txt", 0), "a.txt");
        assert_eq!(candidate("a.txt", 2), "a-2.txt");
        assert_eq!(candidate("archive.tar.gz", 1), "archive.tar-1.gz");
        assert_eq!(candidate(".bashrc", 1), ".bashrc-1");
        assert_eq!(candidate("README", 3), "README-3");
    }

    #[test]
    fn saves_without_overwriting_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p1 = save(dir.path(), b"f.txt", b"one", 10).unwrap();
        let p2 = save(dir.path(), b"sub/f.txt", b"two", 10).unwrap();
        assert_eq!(p1, dir.path().join(".ptyhub/uploads/f.txt"));
        assert_eq!(p2, dir.path().join(".ptyhub/uploads/f-1.txt"));
        assert_eq!(std::fs::read(&p1).unwrap(), b"one");
        assert_eq!(std::fs::read(&p2).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join(UPLOAD_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(matches!(
            save(dir.path(), b"big", b"12345678901", 10),
            Err(UploadError::TooLarge { .. })
        ));
    }

    /// The names in `dir`, sorted (empty when it does not exist).
    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn a_symlinked_uploads_directory_is_refused() {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join(".ptyhub")).unwrap();
        let link = work.path().join(UPLOAD_DIR);
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        let err = save(work.path(), b"f.txt", b"secret", 10).unwrap_err();
        assert!(
            matches!(&err, UploadError::Symlink(p) if *p == link),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "could not save the file: {} is a symbolic link: refusing to write through it",
                link.display()
            )
        );
        assert!(listing(outside.path()).is_empty());
        // A dangling link is refused the same way, and nothing is created at its target.
        std::fs::remove_file(&link).unwrap();
        let gone = outside.path().join("gone");
        std::os::unix::fs::symlink(&gone, &link).unwrap();
        let err = save(work.path(), b"f.txt", b"secret", 10).unwrap_err();
        assert!(matches!(err, UploadError::Symlink(_)), "{err:?}");
        assert!(!gone.exists());
    }

    #[test]
    fn a_symlinked_ptyhub_directory_is_refused() {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join("uploads")).unwrap();
        let link = work.path().join(".ptyhub");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        let err = save(work.path(), b"f.txt", b"secret", 10).unwrap_err();
        assert!(
            matches!(&err, UploadError::Symlink(p) if *p == link),
            "{err:?}"
        );
        assert!(err.to_string().contains("refusing to write through it"));
        assert_eq!(listing(outside.path()), ["uploads"]);
        assert!(listing(&outside.path().join("uploads")).is_empty());
    }

    #[test]
    fn a_file_where_the_directory_goes_is_refused() {
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir(work.path().join(".ptyhub")).unwrap();
        let in_the_way = work.path().join(UPLOAD_DIR);
        std::fs::write(&in_the_way, b"in the way").unwrap();
        let err = save(work.path(), b"f.txt", b"data", 10).unwrap_err();
        assert!(
            matches!(&err, UploadError::NotADirectory(p) if *p == in_the_way),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("could not save the file: "));
        assert_eq!(std::fs::read(&in_the_way).unwrap(), b"in the way");
        assert_eq!(listing(&work.path().join(".ptyhub")), ["uploads"]);
    }

    #[test]
    fn a_symlinked_file_name_is_never_written_through() {
        let work = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let uploads = work.path().join(UPLOAD_DIR);
        std::fs::create_dir_all(&uploads).unwrap();
        let target = outside.path().join("victim");
        std::os::unix::fs::symlink(&target, uploads.join("f.txt")).unwrap();
        let saved = save(work.path(), b"f.txt", b"data", 10).unwrap();
        assert_eq!(saved, uploads.join("f-1.txt"));
        assert!(!target.exists());
    }

    #[test]
    fn concurrent_uploads_of_one_name_get_distinct_names() {
        let work = tempfile::tempdir().unwrap();
        let saved: Vec<(PathBuf, Vec<u8>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u8)
                .map(|i| {
                    let work = work.path();
                    s.spawn(move || {
                        let data = vec![i; 100 + usize::from(i)];
                        (save(work, b"same.txt", &data, 1000).unwrap(), data)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut paths: Vec<_> = saved.iter().map(|(p, _)| p.clone()).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), 8, "{paths:?}");
        for (path, data) in &saved {
            assert_eq!(&std::fs::read(path).unwrap(), data, "{}", path.display());
        }
        let names = listing(&work.path().join(UPLOAD_DIR));
        assert_eq!(names.len(), 8, "no temporary file left: {names:?}");
        assert!(names.contains(&"same.txt".to_owned()));
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote(Path::new("/a/b-c_d.txt")), "/a/b-c_d.txt");
        assert_eq!(shell_quote(Path::new("/a/my file.txt")), "'/a/my file.txt'");
        assert_eq!(shell_quote(Path::new("/a/it's;$x")), r"'/a/it'\''s;$x'");
    }
}
