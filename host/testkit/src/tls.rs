//! HTTPS on loopback for tests: a certificate authority made for one test, and a server
//! certificate it issued.

use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// A fresh CA, and a leaf certificate it issued for `names` (e.g. `127.0.0.1`, a host name):
/// the TLS acceptor of a server presenting that leaf, and the CA certificate as PEM (what a
/// client must be told to trust: `--extra-ca`, Spin's `[[client_tls]]`).
pub fn acceptor(names: &[&str]) -> (TlsAcceptor, String) {
    let (ca_pem, leaf, leaf_key) = issue(names);
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .expect("server config");
    (TlsAcceptor::from(Arc::new(config)), ca_pem)
}

/// A fresh CA (as PEM) and a leaf certificate it issued for `names`, with the leaf's key.
fn issue(names: &[&str]) -> (String, rcgen::Certificate, rcgen::KeyPair) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).expect("ca cert").pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().expect("leaf key");
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let leaf = CertificateParams::new(names)
        .expect("leaf params")
        .signed_by(&leaf_key, &issuer)
        .expect("leaf cert");
    (ca_pem, leaf, leaf_key)
}

/// A fresh CA and a leaf certificate it issued for `names`, written as PEM files in `dir`
/// (`cert.pem`, the leaf; `key.pem`, its key): what `serve --tls-cert --tls-key` reads.
/// Returns the CA certificate as PEM (what a client must trust).
pub fn cert_files(dir: &std::path::Path, names: &[&str]) -> String {
    let (ca_pem, leaf, leaf_key) = issue(names);
    std::fs::write(dir.join("cert.pem"), leaf.pem()).expect("write cert.pem");
    std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).expect("write key.pem");
    ca_pem
}

/// A TLS client trusting only `ca_pem`, offering `alpn` (e.g. `h2`, `http/1.1`).
pub fn connector(ca_pem: &str, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca pem");
    roots.add(ca).expect("trust the ca");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}
