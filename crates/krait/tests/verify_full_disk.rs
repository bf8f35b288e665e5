//! `krait verify` on a history log it cannot open in place (issue 19, item 5), on real filesystems: a small
//! tmpfs that is full, one remounted read-only, and a read-only view of a log a live process holds.
//!
//! Opening a log writes to it (its run state), so a reader on a full disk or a read-only filesystem reads a private copy
//! and says so; a log in use is never copied, and the error says it is in use because its lock says so.
//!
//! Mounting needs root. Not as root, each test says so on stderr and passes without running; as root, a
//! mount that fails fails the test.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::krait;
use history::log::HistoryLog;
use history::{DiskLog, Durability, LoggedTxn, Outcome, SessionId, TxnId};

/// A tmpfs of a few MiB mounted on a fresh temporary directory, unmounted (with anything mounted on top of
/// it) when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
    binds: Vec<PathBuf>,
}

impl SmallDisk {
    /// Mounts one of `mib` MiB; `None` (after saying so) where the tests do not run as root.
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("tempdir");
        let size = format!("size={mib}m,mode=0700");
        let out =
            Command::new("mount").args(["-t", "tmpfs", "-o", &size, "krait-test"]).arg(dir.path()).output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk { dir, binds: Vec::new() }),
            _ if !running_as_root() => {
                eprintln!("skipped: mounting a small tmpfs needs root");
                None
            }
            other => panic!("cannot mount a tmpfs as root: {other:?}"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes zeros until the disk is full.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.path().join("filler")).expect("create the filler");
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
    }

    /// Remounts the whole disk read-only.
    fn make_read_only(&self) {
        mount(&["-o", "remount,ro"], &[self.path()]);
    }

    /// A read-only view of the disk at a new directory.
    fn read_only_view(&mut self, at: &Path) {
        mount(&["--bind"], &[self.path(), at]);
        mount(&["-o", "remount,bind,ro"], &[at]);
        self.binds.push(at.to_owned());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        for at in self.binds.iter().chain([&self.dir.path().to_owned()]) {
            let _ = Command::new("umount").arg("-l").arg(at).output();
        }
    }
}

fn mount(options: &[&str], paths: &[&Path]) {
    let out = Command::new("mount").args(options).args(paths).output().expect("mount runs");
    assert!(out.status.success(), "mount {options:?} {paths:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// A log at `dir` with `n` committed transactions (no reads or writes, so any order explains them).
fn write_log(dir: &Path, n: u64) -> DiskLog {
    let log = DiskLog::open(dir, Durability::Strict).expect("open");
    for id in 1..=n {
        let txn = LoggedTxn::new(TxnId(id), SessionId(1), id - 1);
        log.append_finished(txn, Outcome::Committed, Some(id)).expect("append").wait().expect("durable");
    }
    log
}

fn verify(log: &Path) -> (Option<i32>, String, String) {
    let out = krait(&["verify", log.to_str().expect("utf-8 path")]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn verify_reads_a_log_on_a_full_disk_from_a_copy_and_says_why() {
    let Some(disk) = SmallDisk::mount(8) else { return };
    let log = disk.path().join("log");
    write_log(&log, 20).close().expect("close");
    disk.fill();
    match DiskLog::open(&log, Durability::Strict) {
        Err(e) => assert!(e.to_string().contains("the disk is full"), "{e}"),
        Ok(_) => panic!("a log on a full disk opened in place"),
    }
    let (code, stdout, stderr) = verify(&log);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("ACCEPT"), "{stdout}");
    assert!(stderr.contains("the disk is full") && stderr.contains("reading a copy"), "{stderr}");
    assert!(!stderr.contains("proxy"), "nothing suggests a running proxy: {stderr}");
}

#[test]
fn verify_reads_a_log_on_a_read_only_filesystem_from_a_copy_and_says_why() {
    let Some(disk) = SmallDisk::mount(8) else { return };
    let log = disk.path().join("log");
    write_log(&log, 20).close().expect("close");
    disk.make_read_only();
    let (code, stdout, stderr) = verify(&log);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("ACCEPT"), "{stdout}");
    assert!(stderr.contains("read-only filesystem") && stderr.contains("reading a copy"), "{stderr}");
}

/// Through a read-only view, the log's own open cannot even take its lock (it opens the lock file to write); the reader's own probe finds the lock the live
/// log holds, and nothing is copied.
#[test]
fn verify_reports_a_log_in_use_as_in_use_even_where_it_cannot_be_opened() {
    let Some(mut disk) = SmallDisk::mount(8) else { return };
    let held = write_log(&disk.path().join("log"), 5);
    let view = tempfile::tempdir().expect("tempdir");
    disk.read_only_view(view.path());
    let (code, stdout, stderr) = verify(&view.path().join("log"));
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("in use by another process"), "{stderr}");
    assert!(!stderr.contains("reading a copy"), "a log in use is not copied: {stderr}");
    held.close().expect("close");
}
