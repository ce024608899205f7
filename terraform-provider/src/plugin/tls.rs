//! go-plugin's automatic mutual TLS, the plugin side. Terraform generates a client certificate
//! for each plugin it starts and passes it in `PLUGIN_CLIENT_CERT`; the plugin makes its own
//! self-signed server certificate and sends it in the handshake line. Each side then accepts
//! exactly the other's certificate.
//!
//! go-plugin's client keys are ECDSA P-521, which the ring crypto provider cannot verify: the
//! verifier here checks P-521 signatures with the pure-Rust `p521` crate and leaves every other
//! scheme to ring. The client certificate is pinned (byte-for-byte equal to the one Terraform
//! announced), which is stronger than chain validation and sidesteps that go-plugin's
//! certificate is a CA certificate used as an end entity (which webpki refuses).

use std::sync::Arc;

use p521::ecdsa::signature::Verifier;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use thiserror::Error;

/// The environment variable holding Terraform's client certificate (PEM).
pub const CLIENT_CERT_ENV: &str = "PLUGIN_CLIENT_CERT";

/// Errors setting up TLS.
#[derive(Debug, Error)]
pub enum Error {
    /// `PLUGIN_CLIENT_CERT` holds no certificate.
    #[error("{CLIENT_CERT_ENV} holds no PEM certificate: {0}")]
    ClientCert(String),
    /// The server certificate could not be made.
    #[error("cannot generate the server certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// `Result` with this module's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The server's certificate and key.
pub struct Identity {
    /// Certificate (DER), also sent in the handshake line.
    pub cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

/// Generates a self-signed certificate for `localhost`, shaped like go-plugin's own (a CA
/// certificate with server and client usages: Terraform trusts it as its only root).
pub fn generate_identity() -> Result<Identity> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Fabrik");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.self_signed(&key)?;
    Ok(Identity {
        cert: cert.der().clone(),
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    })
}

/// Reads the first certificate of a PEM text.
pub fn parse_client_cert(pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or_else(|| Error::ClientCert("no CERTIFICATE block".into()))?
        .map_err(|e| Error::ClientCert(e.to_string()))
}

/// Accepts exactly one client certificate.
#[derive(Debug)]
pub struct PinnedClientCert {
    expected: CertificateDer<'static>,
    /// The certificate's public key as a SEC1 point (for P-521 signatures).
    public_key: Vec<u8>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedClientCert {
    /// A verifier accepting only `expected`.
    pub fn new(expected: CertificateDer<'static>, provider: &CryptoProvider) -> Result<Self> {
        let public_key = x509_parser::parse_x509_certificate(expected.as_ref())
            .map_err(|e| Error::ClientCert(e.to_string()))?
            .1
            .public_key()
            .subject_public_key
            .data
            .to_vec();
        Ok(PinnedClientCert {
            expected,
            public_key,
            algorithms: provider.signature_verification_algorithms,
        })
    }

    fn check_cert(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if cert.as_ref() == self.expected.as_ref() {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }
}

/// Verifies an ECDSA P-521 / SHA-512 signature (DER) by a SEC1 public key.
pub fn verify_p521(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let Ok(key) = p521::ecdsa::VerifyingKey::from_sec1_bytes(public_key) else {
        return false;
    };
    let Ok(sig) = p521::ecdsa::Signature::from_der(signature) else {
        return false;
    };
    key.verify(message, &sig).is_ok()
}

impl ClientCertVerifier for PinnedClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check_cert(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.check_cert(cert)?;
        if dss.scheme == SignatureScheme::ECDSA_NISTP521_SHA512 {
            return self.p521(message, dss);
        }
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.check_cert(cert)?;
        if dss.scheme == SignatureScheme::ECDSA_NISTP521_SHA512 {
            return self.p521(message, dss);
        }
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        let mut schemes = vec![SignatureScheme::ECDSA_NISTP521_SHA512];
        schemes.extend(self.algorithms.supported_schemes());
        schemes
    }
}

impl PinnedClientCert {
    fn p521(
        &self,
        message: &[u8],
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if verify_p521(&self.public_key, message, dss.signature()) {
            Ok(HandshakeSignatureValid::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::BadSignature,
            ))
        }
    }
}

/// The server's TLS configuration: our identity, Terraform's certificate required, HTTP/2.
pub fn server_config(identity: &Identity, client_cert_pem: &str) -> Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = PinnedClientCert::new(parse_client_cert(client_cert_pem)?, &provider)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(
            vec![identity.cert.clone()],
            PrivateKeyDer::Pkcs8(identity.key.clone_key()),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p521::ecdsa::signature::Signer;

    #[test]
    fn p521_signatures_verify_and_tampering_fails() {
        let mut scalar = [0u8; 66];
        scalar[65] = 7;
        let key = p521::ecdsa::SigningKey::from_slice(&scalar).expect("key");
        let sig: p521::ecdsa::Signature = key.sign(b"handshake transcript");
        let der = sig.to_der();
        let point = p521::ecdsa::VerifyingKey::from(&key).to_encoded_point(false);
        assert!(verify_p521(
            point.as_bytes(),
            b"handshake transcript",
            der.as_bytes()
        ));
        assert!(!verify_p521(
            point.as_bytes(),
            b"another transcript",
            der.as_bytes()
        ));
        assert!(!verify_p521(
            &point.as_bytes()[1..],
            b"handshake transcript",
            der.as_bytes()
        ));
    }

    #[test]
    fn only_the_pinned_certificate_is_accepted() {
        let ours = generate_identity().expect("identity");
        let other = generate_identity().expect("identity");
        let provider = rustls::crypto::ring::default_provider();
        let v = PinnedClientCert::new(ours.cert.clone(), &provider).expect("verifier");
        assert!(v
            .verify_client_cert(&ours.cert, &[], UnixTime::now())
            .is_ok());
        assert!(v
            .verify_client_cert(&other.cert, &[], UnixTime::now())
            .is_err());
        assert_eq!(
            v.supported_verify_schemes().first(),
            Some(&SignatureScheme::ECDSA_NISTP521_SHA512)
        );
    }

    #[test]
    fn server_config_takes_a_pem_client_certificate() {
        let ours = generate_identity().expect("identity");
        let client = generate_identity().expect("identity");
        let client_pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64_lines(client.cert.as_ref())
        );
        let config = server_config(&ours, &client_pem).expect("config");
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(matches!(
            server_config(&ours, "not a certificate"),
            Err(Error::ClientCert(_))
        ));
    }

    fn base64_lines(der: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(der)
    }
}
