//! go-plugin's handshake, the plugin side: the magic cookie that tells a plugin it was started
//! by Terraform, the protocol versions on offer, the port range, and the one line on stdout
//! that tells Terraform where to connect:
//! `CORE-VERSION|APP-VERSION|tcp|ADDRESS|grpc|BASE64-SERVER-CERT`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use base64::Engine;
use thiserror::Error;

/// The environment variable Terraform sets to the cookie.
pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
/// Terraform's magic cookie value (public: it only tells plugins they were started by it).
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// go-plugin's own protocol version.
pub const CORE_PROTOCOL_VERSION: u32 = 1;
/// The Terraform plugin protocol version served.
pub const APP_PROTOCOL_VERSION: u32 = 6;

/// Errors of the handshake.
#[derive(Debug, Error)]
pub enum Error {
    /// Not started by Terraform.
    #[error(
        "this is a Terraform provider: Terraform starts it, it is not meant to be run by hand.\n\
         Use it from a Terraform configuration with `source = \"fabrik.dev/fabrik/fabrik\"` and a \
         CLI config that points `dev_overrides` at the directory of this binary \
         (see terraform-provider/docs/index.md)"
    )]
    NotTerraform,
    /// Terraform does not speak protocol 6.
    #[error("Terraform offers plugin protocol versions {0:?}; this provider speaks 6 (Terraform 1.0 or later)")]
    Version(String),
    /// A port setting is not a number.
    #[error("{var}={value:?} is not a port number")]
    Port {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// No port of the range could be bound.
    #[error("cannot listen on 127.0.0.1 ports {min}..={max}: {source}")]
    Listen {
        /// Lowest port.
        min: u16,
        /// Highest port.
        max: u16,
        /// The last failure.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with this module's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks that Terraform started the plugin and offers protocol 6.
pub fn check_env(cookie: Option<&str>, versions: Option<&str>) -> Result<()> {
    if cookie != Some(MAGIC_COOKIE_VALUE) {
        return Err(Error::NotTerraform);
    }
    if let Some(v) = versions.filter(|v| !v.is_empty()) {
        let ours = APP_PROTOCOL_VERSION.to_string();
        if !v.split(',').any(|x| x.trim() == ours) {
            return Err(Error::Version(v.to_string()));
        }
    }
    Ok(())
}

fn port(var: &'static str, value: Option<String>, default: u16) -> Result<u16> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| Error::Port { var, value: v }),
    }
}

/// Binds a loopback port in `PLUGIN_MIN_PORT..=PLUGIN_MAX_PORT` (any port when unset).
pub fn listen(min: Option<String>, max: Option<String>) -> Result<TcpListener> {
    let min = port("PLUGIN_MIN_PORT", min, 0)?;
    let max = port("PLUGIN_MAX_PORT", max, 0)?;
    if min == 0 || max == 0 || min > max {
        return TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).map_err(|source| {
            Error::Listen {
                min: 0,
                max: 0,
                source,
            }
        });
    }
    let mut last = std::io::Error::other("empty port range");
    for p in min..=max {
        match TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, p))) {
            Ok(l) => return Ok(l),
            Err(e) => last = e,
        }
    }
    Err(Error::Listen {
        min,
        max,
        source: last,
    })
}

/// The handshake line (without the newline) for a server at `addr` with certificate `der`.
pub fn line(addr: SocketAddr, cert_der: &[u8]) -> String {
    let cert = base64::engine::general_purpose::STANDARD_NO_PAD.encode(cert_der);
    format!("{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|tcp|{addr}|grpc|{cert}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_and_versions() {
        assert!(matches!(check_env(None, None), Err(Error::NotTerraform)));
        assert!(matches!(
            check_env(Some("x"), None),
            Err(Error::NotTerraform)
        ));
        assert!(check_env(Some(MAGIC_COOKIE_VALUE), Some("6")).is_ok());
        assert!(check_env(Some(MAGIC_COOKIE_VALUE), Some("5,6")).is_ok());
        assert!(matches!(
            check_env(Some(MAGIC_COOKIE_VALUE), Some("5")),
            Err(Error::Version(_))
        ));
        assert!(Error::NotTerraform.to_string().contains("dev_overrides"));
    }

    #[test]
    fn handshake_line_has_unpadded_certificate() {
        let l = line(SocketAddr::from((Ipv4Addr::LOCALHOST, 1234)), &[1, 2, 3, 4]);
        assert_eq!(l, "1|6|tcp|127.0.0.1:1234|grpc|AQIDBA");
    }

    #[test]
    fn binds_in_the_port_range() {
        let any = listen(None, None).expect("any port");
        let p = any.local_addr().expect("addr").port();
        drop(any);
        let l = listen(Some(p.to_string()), Some(p.to_string())).expect("bind");
        assert_eq!(l.local_addr().expect("addr").port(), p);
        assert!(matches!(
            listen(Some("x".into()), Some("1".into())),
            Err(Error::Port { .. })
        ));
    }
}
