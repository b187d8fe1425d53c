//! A certificate authority of a test's own and a certificate it signed for 127.0.0.1, made
//! with rcgen at test time (TLS and the nginx proxy tests).

use rustls::pki_types::CertificateDer;

/// A CA of the test's own and a certificate it signed for 127.0.0.1.
pub struct Pki {
    pub ca: CertificateDer<'static>,
    pub ca_pem: String,
    pub leaf: CertificateDer<'static>,
    pub leaf_pem: String,
    pub key_pem: String,
}

/// A fresh pair.
pub fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("params");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = params.signed_by(&key, &issuer).expect("cert");
    Pki {
        ca: ca.der().clone(),
        ca_pem: ca.pem(),
        leaf: leaf.der().clone(),
        leaf_pem: leaf.pem(),
        key_pem: key.serialize_pem(),
    }
}
