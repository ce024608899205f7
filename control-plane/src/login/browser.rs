//! Opening a URL in the user's browser, without a dependency: the platform's opener command.
//!
//! `BROWSER` (the usual convention: a command that takes the URL) wins over the platform
//! default. Failure is not an error: the URL is always printed on stderr as well.

use std::process::{Command, Stdio};

/// Tries to open `url`; returns whether an opener could be started.
pub fn open(url: &str) -> bool {
    let mut cmd = match std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
    {
        Some(browser) => {
            let mut c = Command::new(browser.trim());
            c.arg(url);
            c
        }
        None => platform_opener(url),
    };
    let spawned = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(mut child) => {
            // Reap it whenever it ends (openers usually return at once).
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            true
        }
        Err(_) => false,
    }
}

#[cfg(target_os = "macos")]
fn platform_opener(url: &str) -> Command {
    let mut c = Command::new("open");
    c.arg(url);
    c
}

#[cfg(target_os = "windows")]
fn platform_opener(url: &str) -> Command {
    let mut c = Command::new("cmd");
    c.args(["/C", "start", ""]).arg(url);
    c
}

#[cfg(not(any(target_os = "macos", target_os = "windows")))]
fn platform_opener(url: &str) -> Command {
    let mut c = Command::new("xdg-open");
    c.arg(url);
    c
}
