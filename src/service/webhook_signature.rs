//! Signatures of outgoing webhooks, as Standard Webhooks v1 defines them.
//!
//! A message carries three headers: `webhook-id` (the event's, the same on
//! every attempt, so that a receiver can drop duplicates), `webhook-timestamp`
//! (Unix seconds of the attempt, so that a receiver can refuse old replays)
//! and `webhook-signature`: `v1,` and the base64 HMAC-SHA256 of
//! `{id}.{timestamp}.{body}`, keyed with the bytes the secret's base64 after
//! `whsec_` encodes. While a secret rotates, the message is signed with both
//! secrets, the entries separated by a space, so that a receiver holding
//! either accepts it. The reference libraries (the `standardwebhooks`
//! packages) verify exactly this; the unit tests pin their known answer.

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a secret as it is shown to integrators.
pub const SECRET_PREFIX: &str = "whsec_";

/// The header names of a signed message.
pub const ID_HEADER: &str = "webhook-id";
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// A secret that is not `whsec_` and base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a webhook secret is \"whsec_\" followed by base64")]
pub struct MalformedSecret;

/// A key to sign with: the bytes a `whsec_` secret encodes. Its `Debug`
/// never shows them.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

debug_as!(SigningKey, "SigningKey(..)");

impl SigningKey {
    /// The key of `secret` (`whsec_` + base64; the reference libraries
    /// accept the base64 alone too, and so does this).
    pub fn from_secret(secret: &str) -> Result<SigningKey, MalformedSecret> {
        let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
        match STANDARD.decode(encoded) {
            Ok(bytes) if !bytes.is_empty() => Ok(SigningKey(bytes)),
            _ => Err(MalformedSecret),
        }
    }

    /// `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts keys of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` value of a message signed with each of `keys`
/// (the current secret, and the previous one while a rotation overlaps).
pub fn signature_header(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| key.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `header` (a `webhook-signature` value) holds a `v1` signature of
/// the message by `key`, compared in constant time. What a receiver does;
/// the tests and the documentation's example use it.
pub fn verify(key: &SigningKey, header: &str, id: &str, timestamp: i64, body: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let expected = key.sign(id, timestamp, body);
    header
        .split(' ')
        .any(|entry| bool::from(entry.as_bytes().ct_eq(expected.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TIMESTAMP: i64 = 1_649_367_553;
    const BODY: &str = r#"{"email":"test@example.com","username":"test_user"}"#;

    #[test]
    fn signs_as_the_reference_libraries() {
        let key = SigningKey::from_secret(SECRET).unwrap();
        assert_eq!(
            key.sign(ID, TIMESTAMP, BODY.as_bytes()),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
        assert!(verify(
            &key,
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            ID,
            TIMESTAMP,
            BODY.as_bytes()
        ));
    }

    #[test]
    fn a_rotating_secret_signs_twice_and_either_verifies() {
        let current = SigningKey::from_secret(SECRET).unwrap();
        let previous = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let header = signature_header(
            &[current.clone(), previous.clone()],
            ID,
            TIMESTAMP,
            BODY.as_bytes(),
        );
        let entries: Vec<&str> = header.split(' ').collect();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], current.sign(ID, TIMESTAMP, BODY.as_bytes()));
        assert!(verify(&current, &header, ID, TIMESTAMP, BODY.as_bytes()));
        assert!(verify(&previous, &header, ID, TIMESTAMP, BODY.as_bytes()));
        // Any change of the signed content fails.
        assert!(!verify(
            &current,
            &header,
            ID,
            TIMESTAMP + 1,
            BODY.as_bytes()
        ));
        assert!(!verify(
            &current,
            &header,
            "msg_other",
            TIMESTAMP,
            BODY.as_bytes()
        ));
        assert!(!verify(&current, &header, ID, TIMESTAMP, b"{}"));
    }

    #[test]
    fn malformed_secrets_are_refused_and_keys_not_shown() {
        for bad in ["whsec_", "whsec_not base64!", ""] {
            assert_eq!(SigningKey::from_secret(bad).unwrap_err(), MalformedSecret);
        }
        let key = SigningKey::from_secret(SECRET).unwrap();
        assert_eq!(format!("{key:?}"), "SigningKey(..)");
    }
}
