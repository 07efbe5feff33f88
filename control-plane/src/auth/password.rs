//! Passwords: argon2id (RustCrypto `argon2`, the crate's defaults: 19 MiB, 2 passes, 1 lane, the
//! OWASP minimum), stored as PHC strings. Hashing and verifying take tens of milliseconds of CPU, so
//! the async wrappers run them on the blocking pool.

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHasher as _, PasswordVerifier as _};
use argon2::{Algorithm, Argon2, Params, Version};

use crate::auth::SecretString;

/// Shortest password accepted (NIST SP 800-63B asks for at least 8; we ask for more).
pub const MIN_LEN: usize = 12;
/// Longest password accepted: bounds the work an attacker can make one hash cost.
pub const MAX_LEN: usize = 1024;

fn hasher() -> Argon2<'static> {
    Argon2::new(Algorithm::Argon2id, Version::V0x13, Params::DEFAULT)
}

/// A precise reason a new password is refused.
pub fn check_strength(password: &SecretString) -> Result<(), String> {
    let p = password.expose();
    let chars = p.chars().count();
    if chars < MIN_LEN {
        return Err(format!("the password must be at least {MIN_LEN} characters"));
    }
    if p.len() > MAX_LEN {
        return Err(format!("the password must be at most {MAX_LEN} bytes"));
    }
    if p.chars().all(|c| c == p.chars().next().unwrap_or(' ')) {
        return Err("the password must not repeat one character".into());
    }
    Ok(())
}

/// Hashes a password into an argon2id PHC string with a fresh random salt.
pub fn hash(password: &SecretString) -> anyhow::Result<String> {
    let hashed = hasher()
        .hash_password(password.expose().as_bytes())
        .map_err(|err| anyhow::anyhow!("hashing a password: {err}"))?;
    Ok(hashed.to_string())
}

/// True when `password` matches the PHC string. A malformed or non-argon2 hash never matches.
pub fn verify(password: &SecretString, phc: &str) -> bool {
    if password.expose().len() > MAX_LEN || !phc.starts_with("$argon2id$") {
        return false;
    }
    // The parameters come from the PHC string itself.
    hasher().verify_password(password.expose().as_bytes(), phc).is_ok()
}

/// Spends the same work as a real verification, for a user name that does not exist, so the
/// answer's timing does not tell which names exist.
pub fn verify_dummy(password: &SecretString) {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash(&SecretString::new("airtime-no-such-user-dummy")).unwrap_or_default());
    let _ = verify(password, dummy);
}

/// [`hash`] on the blocking pool.
pub async fn hash_blocking(password: SecretString) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || hash(&password)).await?
}

/// [`verify`] on the blocking pool; `None` for the hash runs [`verify_dummy`] and answers false.
pub async fn verify_blocking(password: SecretString, phc: Option<String>) -> bool {
    tokio::task::spawn_blocking(move || match phc {
        Some(phc) => verify(&password, &phc),
        None => {
            verify_dummy(&password);
            false
        }
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_argon2id_salted_and_verifies() {
        let password = SecretString::new("correct horse battery staple");
        let first = hash(&password).expect("hash");
        let second = hash(&password).expect("hash");
        assert!(first.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{first}");
        assert_ne!(first, second, "each hash has its own salt");
        assert!(!first.contains("correct horse"), "the hash must not contain the password");
        assert!(verify(&password, &first));
        assert!(verify(&password, &second));
    }

    #[test]
    fn a_wrong_password_or_a_bad_hash_never_verifies() {
        let phc = hash(&SecretString::new("correct horse battery staple")).expect("hash");
        assert!(!verify(&SecretString::new("correct horse battery stapl"), &phc));
        assert!(!verify(&SecretString::new(""), &phc));
        assert!(!verify(&SecretString::new("correct horse battery staple"), "not a hash"));
        assert!(!verify(&SecretString::new("x"), "$argon2id$v=19$m=19456,t=2,p=1$garbage"));
        // Another algorithm, even a valid PHC string, is refused.
        assert!(!verify(&SecretString::new("x"), "$2b$12$abcdefghijklmnopqrstuv"));
    }

    #[test]
    fn weak_passwords_are_refused_with_a_reason() {
        assert!(check_strength(&SecretString::new("short")).expect_err("short").contains("12"));
        assert!(check_strength(&SecretString::new("aaaaaaaaaaaaaaaa")).is_err());
        assert!(check_strength(&SecretString::new("x".repeat(MAX_LEN) + "y")).is_err());
        assert_eq!(check_strength(&SecretString::new("a long passphrase")), Ok(()));
    }

    #[tokio::test]
    async fn the_blocking_wrappers_agree() {
        let password = SecretString::new("another long passphrase");
        let phc = hash_blocking(password.clone()).await.expect("hash");
        assert!(verify_blocking(password.clone(), Some(phc)).await);
        assert!(!verify_blocking(password, None).await, "an unknown user never verifies");
    }
}
