//! Limits of the free texts the operator and callers write (names,
//! descriptions, reasons, a payment's id); the contract's formats are the
//! types of `crate::domain`.

use super::AdminError;

/// Longest payment_id accepted.
pub const PAYMENT_ID_MAX_LEN: usize = 255;
/// Longest project, server or token name accepted.
pub const NAME_MAX_LEN: usize = 200;
/// Longest token description accepted.
pub const DESCRIPTION_MAX_LEN: usize = 500;
/// Longest reason for a balance change accepted.
pub const REASON_MAX_LEN: usize = 500;

/// `text` trimmed: at most `max` characters, no control characters; `None`
/// when blank. `subject` starts the messages ("the reason must ...").
fn check_text(text: &str, subject: &str, max: usize) -> Result<Option<String>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        Ok(None)
    } else if trimmed.chars().count() > max {
        Err(format!("{subject} must be at most {max} characters"))
    } else if trimmed.chars().any(char::is_control) {
        Err(format!("{subject} must not contain control characters"))
    } else {
        Ok(Some(trimmed.to_owned()))
    }
}

/// A name: not blank, at most [`NAME_MAX_LEN`] characters, no control characters.
pub fn check_name(what: &str, name: &str) -> Result<String, String> {
    check_text(name, &format!("{what} name"), NAME_MAX_LEN)?
        .ok_or_else(|| format!("{what} name must not be empty"))
}

/// A token's description, trimmed: at most [`DESCRIPTION_MAX_LEN`]
/// characters, no control characters; `None` when blank.
pub fn check_description(text: &str) -> Result<Option<String>, String> {
    check_text(text, "the description", DESCRIPTION_MAX_LEN)
}

/// A description given to a change (`None`: not given), refused as the
/// field `description`; `Some(None)` when blank.
pub(super) fn description(text: Option<&str>) -> Result<Option<Option<String>>, AdminError> {
    text.map(check_description)
        .transpose()
        .map_err(AdminError::invalid("description"))
}

/// Why a balance is set, trimmed: not blank, at most [`REASON_MAX_LEN`]
/// characters, no control characters.
pub fn check_reason(text: &str) -> Result<String, String> {
    check_text(text, "the reason", REASON_MAX_LEN)?
        .ok_or_else(|| "a reason must be given".to_owned())
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
