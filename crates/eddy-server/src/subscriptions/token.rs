//! Random tokens: wake ids, callback and claim tokens.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// A random token (wake ids, callback and claim tokens) from the OS
/// random number generator; its failure is an error.
pub(super) fn token() -> Result<String, getrandom::Error> {
    token_with(getrandom::getrandom)
}

fn token_with(
    fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>,
) -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 18];
    // No fallback: a token from anything but the OS RNG could be guessed.
    fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: when the OS random number generator failed, tokens fell
    /// back to the clock, which anyone can guess.
    #[test]
    fn no_token_without_the_os_rng() {
        assert!(token_with(|_| Err(getrandom::Error::UNSUPPORTED)).is_err());
    }

    #[test]
    fn tokens_are_random_and_url_safe() {
        let (a, b) = (token().expect("token"), token().expect("token"));
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }
}
