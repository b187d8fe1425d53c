//! The trail's files: `audit.jsonl`, appended one whole line per write (mode 600), rotated at
//! its bound to `audit.jsonl.1` (older ones shift up, the oldest beyond the kept number goes),
//! and opened together for a reader, so a rotation while it reads loses or repeats nothing.
//!
//! A live upgrade's new process opens the same file and appends after the old one's last
//! line: each line is one `write` to a file opened with `O_APPEND`, and the old process
//! writes nothing once it has handed over.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The current file's name in the trail's directory.
pub const FILE_NAME: &str = "audit.jsonl";

/// The files of one trail and the one being appended to.
pub struct Trail {
    dir: PathBuf,
    max_bytes: u64,
    files: usize,
    open: Mutex<Option<Current>>,
}

/// The file appended to, and its size.
struct Current {
    file: File,
    len: u64,
}

impl Trail {
    /// The trail in `dir`, rotated at `max_bytes` with `files` rotated files kept. Nothing is
    /// opened until the first line.
    pub fn new(dir: PathBuf, max_bytes: u64, files: usize) -> Self {
        Self {
            dir,
            max_bytes,
            files: files.max(1),
            open: Mutex::new(None),
        }
    }

    /// The current file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// `audit.jsonl.N`.
    fn rotated(&self, n: usize) -> PathBuf {
        self.dir.join(format!("{FILE_NAME}.{n}"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        // Every update of the state completes before anything can panic.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `line` (one JSON object and its newline) in one write, rotating first when it
    /// would take the file past its bound. On an error the file is closed, to be opened again
    /// for the next line.
    pub fn append(&self, line: &[u8]) -> io::Result<()> {
        let mut open = self.lock();
        let result = self.append_locked(&mut open, line);
        if result.is_err() {
            *open = None;
        }
        result
    }

    fn append_locked(&self, open: &mut Option<Current>, line: &[u8]) -> io::Result<()> {
        if open.is_none() {
            *open = Some(self.open_current()?);
        }
        let current = open.as_mut().ok_or_else(|| io::Error::other("not open"))?;
        if current.len > 0 && current.len + line.len() as u64 > self.max_bytes {
            self.rotate()?;
            *open = Some(self.open_current()?);
        }
        let current = open.as_mut().ok_or_else(|| io::Error::other("not open"))?;
        current.file.write_all(line)?;
        current.len += line.len() as u64;
        Ok(())
    }

    /// Opens (or creates, mode 600) the current file for appending. A last line left unfinished
    /// (a crash mid-write) is ended first, so the next line is whole.
    fn open_current(&self) -> io::Result<Current> {
        std::fs::create_dir_all(&self.dir)?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(self.path())?;
        let mut len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
                len += 1;
            }
        }
        Ok(Current { file, len })
    }

    /// `audit.jsonl.N` becomes `.N+1` (from the oldest kept down; the one past the kept number
    /// is deleted), then `audit.jsonl` becomes `.1`.
    fn rotate(&self) -> io::Result<()> {
        match std::fs::remove_file(self.rotated(self.files)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        for n in (1..self.files).rev() {
            rename_if_there(&self.rotated(n), &self.rotated(n + 1))?;
        }
        rename_if_there(&self.path(), &self.rotated(1))
    }

    /// The trail's files as they are now, newest first, each with the length to read: opened
    /// under the writer's lock, so a rotation after this neither hides nor repeats a line, and
    /// the current file is read only as far as it was written then.
    pub fn files_now(&self) -> Vec<(File, u64)> {
        let open = self.lock();
        let mut found = Vec::new();
        let paths = std::iter::once(self.path()).chain((1..=self.files).map(|n| self.rotated(n)));
        for path in paths {
            let Ok(file) = File::open(&path) else {
                continue;
            };
            let len = match (&*open, path == self.path()) {
                (Some(current), true) => current.len,
                _ => file.metadata().map(|m| m.len()).unwrap_or(0),
            };
            found.push((file, len));
        }
        found
    }
}

fn rename_if_there(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The first `len` bytes of `file` (fewer if it is shorter).
pub fn read_prefix(file: File, len: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(len.min(64 << 20) as usize);
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_at_the_bound_and_keeps_so_many_files() {
        let dir = tempfile::tempdir().unwrap();
        let trail = Trail::new(dir.path().to_owned(), 100, 2);
        for i in 0..10 {
            trail.append(format!("{i:049}\n").as_bytes()).unwrap();
        }
        // 50 bytes a line, 100 a file: two lines each, the newest files kept.
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(trail.path()).lines().count(), 2);
        assert!(read(trail.rotated(1)).starts_with(&format!("{:049}", 6)));
        assert!(read(trail.rotated(2)).starts_with(&format!("{:049}", 4)));
        assert!(!trail.rotated(3).exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(trail.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_new_process_appends_after_an_unfinished_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"{\"cut").unwrap();
        let trail = Trail::new(dir.path().to_owned(), 1 << 20, 1);
        trail.append(b"{}\n").unwrap();
        let text = std::fs::read_to_string(trail.path()).unwrap();
        assert_eq!(text, "{\"cut\n{}\n");
    }
}
