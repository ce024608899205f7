//! Issue day-one: what a new user meets on the command line. Each case drives the real
//! `fabrik` binary and checks its exit code, its one-line message, and that nothing changed.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{fabrik_bin, Fabrik};

/// `fabrik up ARGS` run to its end (it must fail fast: a hang is an error), with
/// `RUST_BACKTRACE=1` set as many Rust users have it.
fn up_fails(args: &[&str]) -> Result<Output> {
    let mut child = Command::new(fabrik_bin())
        .arg("up")
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = std::time::Instant::now() + e2e::STARTUP;
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            bail!("fabrik up {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child.wait_with_output()?)
}

/// The error line: exactly one line on stderr starting `fabrik: error:`, no backtrace, no
/// repeated causes.
fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("fabrik: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("Caused by"),
        "user errors are not panics: {stderr}"
    );
    assert!(!out.status.success(), "a failure exits non-zero: {stderr}");
    errors[0].to_string()
}

fn listing(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        names.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.metadata()?.len(),
        ));
    }
    names.sort();
    Ok(names)
}

#[test]
fn a_second_fabrik_up_on_a_live_data_dir_touches_nothing() -> Result<()> {
    let f = Fabrik::start()?;
    let dir = f.data_dir();
    let kubeconfig = std::fs::read(f.kubeconfig())?;
    let before = listing(&dir)?;

    let out = up_fails(&[
        "--data-dir",
        &dir.display().to_string(),
        "--listen",
        "127.0.0.1:0",
        "--nodes",
        "0",
    ])?;
    let line = error_line(&out);
    assert!(
        line.contains("in use by another fabrik up") && line.contains(&dir.display().to_string()),
        "{line}"
    );
    // The running server's files are untouched, and it still serves with its kubeconfig.
    assert_eq!(std::fs::read(f.kubeconfig())?, kubeconfig);
    assert_eq!(listing(&dir)?, before);
    let ns = f.kubectl(&e2e::kubectls()[0], &["get", "ns", "default", "-o", "name"])?;
    assert!(
        !f.log().contains('\x1b'),
        "no colour codes in a log that is a file"
    );
    assert!(
        ns.status.success(),
        "{}",
        String::from_utf8_lossy(&ns.stderr)
    );
    Ok(())
}

#[test]
fn a_port_in_use_leaves_no_data_dir_behind() -> Result<()> {
    let held = TcpListener::bind("127.0.0.1:0")?;
    let port = held.local_addr()?.port();
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("never");
    let listen = format!("127.0.0.1:{port}");
    let out = up_fails(&[
        "--data-dir",
        &dir.display().to_string(),
        "--listen",
        &listen,
    ])?;
    let line = error_line(&out);
    assert!(
        line.contains(&format!("cannot listen on {listen}")),
        "{line}"
    );
    assert_eq!(
        line.matches("Address already in use").count(),
        1,
        "the cause once: {line}"
    );
    assert!(!dir.exists(), "nothing created: {:?}", listing(tmp.path()));
    Ok(())
}
