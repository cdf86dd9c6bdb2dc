//! The rustls client config of an `mqtts://` connection: ring only (shared/CRATES.md), the
//! configured CA or the system's roots, an optional client certificate.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::MqttTls;

/// Builds the client config; errors are sentences for [`super::MqttError::Tls`].
pub(crate) fn client_config(tls: Option<&MqttTls>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match tls.and_then(|t| t.ca_pem.as_deref()) {
        Some(pem) => {
            let certs: Vec<_> = CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect();
            if certs.is_empty() {
                return Err("the CA file holds no PEM certificate".into());
            }
            for c in certs {
                roots.add(c).map_err(|e| format!("the CA certificate is not usable: {e}"))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for c in native.certs {
                // Skipping a malformed system root is what every TLS client does.
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err("no system root certificates found; set bus_tls_ca".into());
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    match tls.and_then(|t| t.client_pem.as_ref()) {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(cert).filter_map(Result::ok).collect();
            if chain.is_empty() {
                return Err("the client certificate file holds no PEM certificate".into());
            }
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("the client key file holds no usable PEM private key: {e}"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| format!("the client certificate: {e}"))
        }
    }
}
