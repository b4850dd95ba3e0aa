//! Limits of the free texts the operator and callers write (names,
//! descriptions, reasons, a payment's id); the contract's formats are the
//! types of `crate::domain`.

/// Longest payment_id accepted.
pub const PAYMENT_ID_MAX_LEN: usize = 255;
/// Longest project, server or token name accepted.
pub const NAME_MAX_LEN: usize = 200;
/// Longest token description accepted.
pub const DESCRIPTION_MAX_LEN: usize = 500;
/// Longest reason for a balance change accepted.
pub const REASON_MAX_LEN: usize = 500;

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
