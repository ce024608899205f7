//! The cluster's certificates: a CA generated on first start and kept in the data directory,
//! a serving certificate for the listener's names, and client certificates (CN = user,
//! O = groups) such as the admin's.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Errors of certificate handling.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Generating or signing failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// Reading or writing a file failed.
    #[error("failed to access {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// A certificate and its private key, PEM-encoded.
#[derive(Clone, Debug)]
pub struct CertPair {
    /// Certificate PEM.
    pub cert_pem: String,
    /// Private key PEM.
    pub key_pem: String,
}

/// The cluster CA.
pub struct Ca {
    pair: CertPair,
    issuer: Issuer<'static, KeyPair>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a file readable only by its owner, atomically (temp file + rename).
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), PkiError> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(&tmp).map_err(io(&tmp))?;
    f.write_all(contents).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

impl Ca {
    /// Loads the CA from `dir` (`ca.crt`, `ca.key`), creating it on first start.
    pub fn load_or_create(dir: &Path, common_name: &str) -> Result<Ca, PkiError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
        if crt.exists() && key.exists() {
            let cert_pem = std::fs::read_to_string(&crt).map_err(io(&crt))?;
            let key_pem = std::fs::read_to_string(&key).map_err(io(&key))?;
            return Ca::from_pem(&cert_pem, &key_pem);
        }
        let ca = Ca::generate(common_name)?;
        write_private(&key, ca.pair.key_pem.as_bytes())?;
        write_private(&crt, ca.pair.cert_pem.as_bytes())?;
        Ok(ca)
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.pair.cert_pem
    }

    /// The CA's certificate and key (to keep it somewhere else than files, e.g. a Secret).
    pub fn pair(&self) -> &CertPair {
        &self.pair
    }

    /// A new CA named `common_name` (make it unique: clusters tell CAs apart by subject).
    pub fn generate(common_name: &str) -> Result<Ca, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let kp = KeyPair::generate()?;
        let cert = params.self_signed(&kp)?;
        let pair = CertPair {
            cert_pem: cert.pem(),
            key_pem: kp.serialize_pem(),
        };
        let issuer = Issuer::new(params, kp);
        Ok(Ca { pair, issuer })
    }

    /// A CA from its PEM certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let kp = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, kp)?;
        Ok(Ca {
            pair: CertPair {
                cert_pem: cert_pem.to_string(),
                key_pem: key_pem.to_string(),
            },
            issuer,
        })
    }

    /// A serving certificate for `hosts` (DNS names or IP addresses).
    pub fn issue_server(&self, hosts: &[String]) -> Result<CertPair, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "fabrik-apiserver");
        params.distinguished_name = dn;
        params.subject_alt_names = hosts
            .iter()
            .filter_map(|h| match h.parse::<std::net::IpAddr>() {
                Ok(ip) => Some(SanType::IpAddress(ip)),
                Err(_) => h.clone().try_into().ok().map(SanType::DnsName),
            })
            .collect();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let kp = KeyPair::generate()?;
        let cert = params.signed_by(&kp, &self.issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: kp.serialize_pem(),
        })
    }

    /// A client certificate for `user` in `group` (rcgen keeps one value per attribute type,
    /// so a certificate carries at most one O; identities with several groups use tokens).
    pub fn issue_client(&self, user: &str, group: Option<&str>) -> Result<CertPair, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, user);
        if let Some(g) = group {
            dn.push(DnType::OrganizationName, g);
        }
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let kp = KeyPair::generate()?;
        let cert = params.signed_by(&kp, &self.issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: kp.serialize_pem(),
        })
    }
}

/// Who a client certificate names, and which CA issued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The user (subject CN).
    pub user: String,
    /// The groups (subject O).
    pub groups: Vec<String>,
    /// The issuer's distinguished name, DER.
    pub issuer: Vec<u8>,
}

/// Reads the identity of a DER client certificate.
pub fn identity(der: &[u8]) -> Option<Identity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(Identity {
        user,
        groups,
        issuer: cert.issuer().as_raw().to_vec(),
    })
}

/// When a certificate expires.
pub fn not_after(der: &[u8]) -> Option<rustls::pki_types::UnixTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let secs = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    Some(rustls::pki_types::UnixTime::since_unix_epoch(
        std::time::Duration::from_secs(secs),
    ))
}

/// The subject distinguished name (DER) of a certificate.
pub fn subject(der: &[u8]) -> Option<Vec<u8>> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.subject().as_raw().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_persists_and_issues_identities() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::load_or_create(dir.path(), "test-ca").expect("ca");
        let again = Ca::load_or_create(dir.path(), "test-ca").expect("reload");
        assert_eq!(ca.cert_pem(), again.cert_pem());
        let client = again
            .issue_client("alice", Some("system:masters"))
            .expect("client");
        let der = rustls_pemfile::certs(&mut client.cert_pem.as_bytes())
            .next()
            .expect("one cert")
            .expect("parses");
        let id = identity(&der).expect("identity");
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["system:masters"]);
        let ca_der = rustls_pemfile::certs(&mut ca.cert_pem().as_bytes())
            .next()
            .expect("ca")
            .expect("parses");
        assert_eq!(Some(id.issuer), subject(&ca_der));
    }
}
