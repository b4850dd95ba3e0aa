//! Webhook signing secrets: drawn, sealed at rest, opened to sign.
//!
//! A secret is `whsec_` + base64 (standard, padded) of 32 bytes from the OS
//! CSPRNG, the form Standard Webhooks libraries take; it is shown once, when
//! made. The database holds it sealed with the `webhook_secret_key` setting
//! (XChaCha20-Poly1305, a random 24-byte nonce per seal):
//! `sealed:v1:` + base64(nonce || ciphertext), so that a copy of the
//! database alone does not let anyone sign events. Without a key it is
//! stored as `plain:` + the secret (and `serve` warns at start). A secret
//! sealed with a key opens only with that key; a plain one opens with or
//! without one, so a key can be configured later (secrets made or rotated
//! from then on are sealed).

use base64::{Engine, engine::general_purpose::STANDARD};
use chacha20poly1305::{
    XChaCha20Poly1305, XNonce,
    aead::{Aead, KeyInit},
};
use rand::{TryRngCore, rngs::OsRng};

use crate::config::WebhookSecretKey;

const PREFIX: &str = "whsec_";
const SEALED: &str = "sealed:v1:";
const PLAIN: &str = "plain:";
const NONCE_LEN: usize = 24;

/// A signing secret in clear (`whsec_...`). Its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(String);

debug_as!(WebhookSecret, "WebhookSecret([redacted])");

impl WebhookSecret {
    /// A secret drawn at random: 32 bytes from the OS CSPRNG.
    pub fn generate() -> WebhookSecret {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes);
        WebhookSecret(format!("{PREFIX}{}", STANDARD.encode(bytes)))
    }

    /// The secret as the integrator configures it, to be shown once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The bytes that key the HMAC of a signature (the base64 after
    /// `whsec_`, decoded).
    pub fn key_bytes(&self) -> Vec<u8> {
        STANDARD
            .decode(&self.0[PREFIX.len()..])
            .expect("a secret is whsec_ and base64, checked when it was made or opened")
    }
}

/// Why a stored secret could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the webhook secret is sealed and no webhook_secret_key is configured")]
    NoKey,
    /// Another key sealed it, or the stored text was altered.
    #[error("the webhook secret does not open with the configured webhook_secret_key")]
    WrongKey,
    #[error("the stored webhook secret is not in a known form")]
    Malformed,
}

/// `secret` as the database stores it: sealed with `key`, or in clear
/// without one.
pub fn seal(secret: &WebhookSecret, key: Option<&WebhookSecretKey>) -> String {
    let Some(key) = key else {
        return format!("{PLAIN}{}", secret.0);
    };
    let mut nonce = [0u8; NONCE_LEN];
    fill_random(&mut nonce);
    let ciphertext = cipher(key)
        .encrypt(&XNonce::from(nonce), secret.0.as_bytes())
        .expect("XChaCha20-Poly1305 seals any message shorter than 256 GiB");
    let mut sealed = nonce.to_vec();
    sealed.extend_from_slice(&ciphertext);
    format!("{SEALED}{}", STANDARD.encode(sealed))
}

/// The secret `stored` (what [`seal`] made), opened with `key`.
pub fn open(stored: &str, key: Option<&WebhookSecretKey>) -> Result<WebhookSecret, OpenError> {
    let text = if let Some(plain) = stored.strip_prefix(PLAIN) {
        plain.to_owned()
    } else if let Some(sealed) = stored.strip_prefix(SEALED) {
        let key = key.ok_or(OpenError::NoKey)?;
        let bytes = STANDARD.decode(sealed).map_err(|_| OpenError::Malformed)?;
        if bytes.len() <= NONCE_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| OpenError::Malformed)?;
        let opened = cipher(key)
            .decrypt(&XNonce::from(nonce), ciphertext)
            .map_err(|_| OpenError::WrongKey)?;
        String::from_utf8(opened).map_err(|_| OpenError::Malformed)?
    } else {
        return Err(OpenError::Malformed);
    };
    let well_formed = text
        .strip_prefix(PREFIX)
        .is_some_and(|encoded| STANDARD.decode(encoded).is_ok_and(|b| !b.is_empty()));
    if !well_formed {
        return Err(OpenError::Malformed);
    }
    Ok(WebhookSecret(text))
}

fn cipher(key: &WebhookSecretKey) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.bytes().into())
}

fn fill_random(bytes: &mut [u8]) {
    OsRng
        .try_fill_bytes(bytes)
        .expect("the OS random number generator is available");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> WebhookSecretKey {
        WebhookSecretKey::new([byte; 32])
    }

    #[test]
    fn a_secret_is_whsec_and_32_random_bytes_in_padded_base64() {
        let secret = WebhookSecret::generate();
        let encoded = secret.expose().strip_prefix("whsec_").unwrap();
        assert_eq!(encoded.len(), 44);
        assert!(encoded.ends_with('='));
        assert_eq!(secret.key_bytes().len(), 32);
        assert_ne!(secret, WebhookSecret::generate());
        assert_eq!(format!("{secret:?}"), "WebhookSecret([redacted])");
    }

    #[test]
    fn a_sealed_secret_hides_it_and_opens_with_its_key_only() {
        let secret = WebhookSecret::generate();
        let sealed = seal(&secret, Some(&key(7)));
        assert!(sealed.starts_with("sealed:v1:"), "{sealed}");
        assert!(!sealed.contains(secret.expose()));
        assert!(!sealed.contains(&secret.expose()[6..]));
        // A nonce of its own each time.
        assert_ne!(sealed, seal(&secret, Some(&key(7))));
        assert_eq!(open(&sealed, Some(&key(7))), Ok(secret.clone()));
        assert_eq!(open(&sealed, Some(&key(8))), Err(OpenError::WrongKey));
        assert_eq!(open(&sealed, None), Err(OpenError::NoKey));
        // One character of the ciphertext changed.
        let mut altered = sealed.into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert!(open(&altered, Some(&key(7))).is_err());
    }

    #[test]
    fn without_a_key_a_secret_is_stored_plain_and_opens_with_or_without_one() {
        let secret = WebhookSecret::generate();
        let stored = seal(&secret, None);
        assert_eq!(stored, format!("plain:{}", secret.expose()));
        assert_eq!(open(&stored, None), Ok(secret.clone()));
        assert_eq!(open(&stored, Some(&key(1))), Ok(secret));
    }

    #[test]
    fn anything_else_is_refused() {
        for stored in [
            "",
            "whsec_AAAA",
            "plain:",
            "plain:whsec_",
            "plain:whsec_not base64",
            "sealed:v1:",
            "sealed:v1:AAAA",
            "sealed:v2:AAAA",
        ] {
            assert!(open(stored, Some(&key(1))).is_err(), "{stored:?}");
        }
    }
}
