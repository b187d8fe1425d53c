//! TLS: the certificate and key read from `[tls]`, the acceptor every connection's handshake
//! goes through, and the reload (SIGHUP) that swaps the pair for new handshakes only.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// The daemon's TLS: one acceptor for its life, whose certificate can be replaced.
pub struct Tls {
    files: TlsConfig,
    current: Arc<Current>,
    acceptor: TlsAcceptor,
    provider: Arc<CryptoProvider>,
}

/// The certificate and key new handshakes present; a handshake holds its own `Arc`, so a
/// swap never disturbs a connection.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

impl Tls {
    /// Reads the certificate and key; the error says which file and what is wrong with it.
    pub fn load(files: &TlsConfig) -> Result<Arc<Self>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = read_pair(files, &provider)?;
        let current = Arc::new(Current(RwLock::new(Arc::new(key))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        // HTTP/1.1 only: WebSockets upgrade over it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(Tls {
            files: files.clone(),
            current,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            provider,
        }))
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// Re-reads both files; on success new handshakes present the new pair, on failure the old
    /// one stays and the error says why.
    pub fn reload(&self) -> Result<(), String> {
        let key = read_pair(&self.files, &self.provider)?;
        *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }
}

/// The pair in `files`, checked to belong together.
fn read_pair(files: &TlsConfig, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    CertifiedKey::from_der(certs, key, provider).map_err(|e| {
        format!(
            "TLS key {} does not go with certificate {}: {e}",
            files.key.display(),
            files.cert.display()
        )
    })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = read(path, "certificate")?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS certificate {}: not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate {}: no CERTIFICATE block in it",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let text = read(path, "key")?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| {
        format!(
            "TLS key {}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1): {e}",
            path.display()
        )
    })
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read TLS {what} {}: {e}", path.display()))
}
