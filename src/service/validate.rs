//! Formats fixed by the contract (openapi/v2.yaml), shared by the API
//! and the command line so that both accept exactly the same input.

use std::sync::LazyLock;

use regex::Regex;

static ORDER_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^Order:[A-Za-z0-9]{8,11}$").expect("valid regex"));
static PAYMENT_SYSTEM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^cstm:[a-z]{4,20}$").expect("valid regex"));

/// Longest e-mail address accepted (RFC 5321 path limit).
pub const EMAIL_MAX_LEN: usize = 254;
/// Longest payment_id accepted.
pub const PAYMENT_ID_MAX_LEN: usize = 255;
/// Longest project, server or token name accepted.
pub const NAME_MAX_LEN: usize = 200;
/// Longest token description accepted.
pub const DESCRIPTION_MAX_LEN: usize = 500;
/// Longest reason for a balance change accepted.
pub const REASON_MAX_LEN: usize = 500;

/// `Order:` followed by 8 to 11 letters or digits.
pub fn is_order_id(text: &str) -> bool {
    ORDER_ID.is_match(text)
}

/// `cstm:` followed by 4 to 20 lower-case letters.
pub fn is_payment_system(text: &str) -> bool {
    PAYMENT_SYSTEM.is_match(text)
}

/// A syntactically valid e-mail address (RFC 5322 addr-spec, as checked by
/// the `email_address` crate), at most [`EMAIL_MAX_LEN`] bytes long.
pub fn is_email(text: &str) -> bool {
    text.len() <= EMAIL_MAX_LEN && email_address::EmailAddress::is_valid(text)
}

/// E-mails are compared case-insensitively: stored and looked up lower-cased.
pub fn normalize_email(text: &str) -> String {
    text.to_lowercase()
}

/// A name: not blank, at most [`NAME_MAX_LEN`] characters, no control characters.
pub fn check_name(what: &str, name: &str) -> Result<String, String> {
    let trimmed = name.trim();
    if trimmed.is_empty() {
        Err(format!("{what} name must not be empty"))
    } else if trimmed.chars().count() > NAME_MAX_LEN {
        Err(format!(
            "{what} name must be at most {NAME_MAX_LEN} characters"
        ))
    } else if trimmed.chars().any(char::is_control) {
        Err(format!("{what} name must not contain control characters"))
    } else {
        Ok(trimmed.to_owned())
    }
}

/// A token's description, trimmed: at most [`DESCRIPTION_MAX_LEN`]
/// characters, no control characters; `None` when blank.
pub fn check_description(text: &str) -> Result<Option<String>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        Ok(None)
    } else if trimmed.chars().count() > DESCRIPTION_MAX_LEN {
        Err(format!(
            "the description must be at most {DESCRIPTION_MAX_LEN} characters"
        ))
    } else if trimmed.chars().any(char::is_control) {
        Err("the description must not contain control characters".to_owned())
    } else {
        Ok(Some(trimmed.to_owned()))
    }
}

/// Why a balance is set, trimmed: not blank, at most [`REASON_MAX_LEN`]
/// characters, no control characters.
pub fn check_reason(text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        Err("a reason must be given".to_owned())
    } else if trimmed.chars().count() > REASON_MAX_LEN {
        Err(format!(
            "the reason must be at most {REASON_MAX_LEN} characters"
        ))
    } else if trimmed.chars().any(char::is_control) {
        Err("the reason must not contain control characters".to_owned())
    } else {
        Ok(trimmed.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_id_format() {
        assert!(is_order_id("Order:abcd1234"));
        assert!(is_order_id("Order:ABCDEFGH123"));
        assert!(!is_order_id("Order:abc1234"));
        assert!(!is_order_id("Order:abcdefgh1234"));
        assert!(!is_order_id("order:abcd1234"));
        assert!(!is_order_id("Order:abcd-1234"));
        assert!(!is_order_id("Order:abcd1234\n"));
    }

    #[test]
    fn payment_system_format() {
        assert!(is_payment_system("cstm:abcd"));
        assert!(is_payment_system("cstm:abcdefghijklmnopqrst"));
        assert!(!is_payment_system("cstm:abc"));
        assert!(!is_payment_system("cstm:abcdefghijklmnopqrstu"));
        assert!(!is_payment_system("cstm:Abcd"));
        assert!(!is_payment_system("cstm:ab1d"));
        assert!(!is_payment_system("xstm:abcd"));
    }

    #[test]
    fn email_format() {
        assert!(is_email("alice@example.com"));
        assert!(!is_email("alice"));
        assert!(!is_email("alice@"));
        assert!(!is_email("@example.com"));
        assert!(!is_email(&format!("{}@example.com", "a".repeat(250))));
    }

    #[test]
    fn descriptions_and_reasons() {
        assert_eq!(check_description("  "), Ok(None));
        assert_eq!(
            check_description(" for the shop "),
            Ok(Some("for the shop".into()))
        );
        assert!(check_description(&"x".repeat(DESCRIPTION_MAX_LEN)).is_ok());
        assert!(check_description(&"x".repeat(DESCRIPTION_MAX_LEN + 1)).is_err());
        assert!(check_description("a\nb").is_err());
        assert_eq!(check_reason(" refund "), Ok("refund".into()));
        assert!(check_reason(" \t ").is_err());
        assert!(check_reason(&"é".repeat(REASON_MAX_LEN)).is_ok());
        assert!(check_reason(&"é".repeat(REASON_MAX_LEN + 1)).is_err());
    }

    #[test]
    fn reasons_refuse_control_characters() {
        for bad in [
            "refund\nforged line",
            "refund\r\nforged",
            "a\tb",
            "bell\u{7}",
            "esc\u{1b}[31m",
            "c1\u{85}next",
            "nul\0",
        ] {
            assert_eq!(
                check_reason(bad),
                Err("the reason must not contain control characters".to_owned()),
                "{bad:?}"
            );
        }
        // Surrounding whitespace is trimmed, not refused.
        assert_eq!(check_reason("\n refund \t"), Ok("refund".into()));
        assert_eq!(
            check_reason("remboursé · 10 €"),
            Ok("remboursé · 10 €".into())
        );
    }
}
