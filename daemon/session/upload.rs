//! File uploads into a session's working directory: name sanitising, a write that never
//! leaves a partial file and never overwrites, and quoting the path for the shell.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where uploads land, under the session's working directory.
pub const UPLOAD_DIR: &str = ".ptyhub/uploads";
/// Longest file name accepted, bytes (the usual file-system limit).
pub const MAX_NAME_BYTES: usize = 255;
/// How many `name-N.ext` alternatives are tried before giving up.
const MAX_SUFFIX: u32 = 10_000;

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
    let dir = work_dir.join(UPLOAD_DIR);
    std::fs::create_dir_all(&dir)?;
    let mut temp = tempfile::Builder::new()
        .prefix(".upload-")
        .suffix(".part")
        .tempfile_in(&dir)?;
    temp.write_all(data)?;
    temp.flush()?;
    // A hard link fails if the target exists, so no upload ever replaces another file;
    // dropping `temp` removes the temporary name either way.
    for n in 0..MAX_SUFFIX {
        let target = dir.join(candidate(&name, n));
        match std::fs::hard_link(temp.path(), &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(UploadError::BadName(
        "too many files with this name already",
    ))
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
    use super::*;

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

    #[test]
    fn quoting() {
        assert_eq!(shell_quote(Path::new("/a/b-c_d.txt")), "/a/b-c_d.txt");
        assert_eq!(shell_quote(Path::new("/a/my file.txt")), "'/a/my file.txt'");
        assert_eq!(shell_quote(Path::new("/a/it's;$x")), r"'/a/it'\''s;$x'");
    }
}
