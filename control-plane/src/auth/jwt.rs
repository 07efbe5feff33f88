//! Session tokens: HS256 JWTs signed with the control plane's key (`--jwt-secret` or
//! `--jwt-secret-file`). A session names its user (`sub`), the role and tenant it acts in, and
//! expires after `--session-ttl-secs`. The caller extractor still checks the user in the database
//! on every request (disabled, role changed, sessions revoked), so a session is never more powerful
//! than its user is now.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::auth::Role;

/// `iss` of every session token.
pub const ISSUER: &str = "airtime";
/// `aud` of every session token: the REST API.
pub const AUDIENCE: &str = "airtime-api";
/// Shortest signing key accepted: HS256 wants at least its output size.
pub const MIN_SECRET_LEN: usize = 32;
/// Clock skew tolerated when checking `exp`.
const LEEWAY_SECS: u64 = 5;

/// What a session token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    pub iss: String,
    pub aud: String,
    /// The user's id.
    pub sub: Uuid,
    /// Issued at, seconds since the epoch.
    pub iat: u64,
    /// Expires at, seconds since the epoch.
    pub exp: u64,
    /// The user's session generation when it was issued: the session ends when it moves on
    /// (a password change, a disable).
    #[serde(default, rename = "sgen")]
    pub generation: i64,
    /// A unique id for this session (for the audit log and future revocation lists).
    pub jti: Uuid,
    pub role: Role,
    /// The tenant the session acts in; absent for a platform admin's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Uuid>,
    /// The user's login name, for logs and the audit log (not an authority).
    pub name: String,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("the session has expired; log in again")]
    Expired,
    #[error("invalid session token")]
    Invalid,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the JWT signing secret must be at least {MIN_SECRET_LEN} bytes")]
    TooShort,
    #[error("the JWT signing secret is unusable: {0}")]
    Unusable(String),
}

/// The signing key and the validation rules, built once at start-up.
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl: Duration,
}

impl JwtKeys {
    pub fn new(secret: &[u8], ttl: Duration) -> Result<Self, KeyError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::TooShort);
        }
        let encoding = EncodingKey::from_secret(secret).map_err(|e| KeyError::Unusable(e.to_string()))?;
        let decoding = DecodingKey::from_secret(secret).map_err(|e| KeyError::Unusable(e.to_string()))?;
        // Only HS256: a token whose header names another algorithm ("none", RS256 with our secret as
        // a public key, …) is refused before its signature is looked at.
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_SECS;
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        Ok(Self { encoding, decoding, validation, ttl })
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Signs a session for a user, valid from now for the configured lifetime.
    pub fn issue(
        &self,
        user: Uuid,
        name: &str,
        role: Role,
        tenant: Option<Uuid>,
        generation: i64,
    ) -> anyhow::Result<(String, SessionClaims)> {
        self.issue_at(user, name, role, tenant, generation, now_secs())
    }

    /// [`JwtKeys::issue`] at a given instant (seconds since the epoch), for tests.
    pub fn issue_at(
        &self,
        user: Uuid,
        name: &str,
        role: Role,
        tenant: Option<Uuid>,
        generation: i64,
        now: u64,
    ) -> anyhow::Result<(String, SessionClaims)> {
        let claims = SessionClaims {
            iss: ISSUER.to_owned(),
            aud: AUDIENCE.to_owned(),
            sub: user,
            iat: now,
            exp: now + self.ttl.as_secs(),
            jti: Uuid::new_v4(),
            generation,
            role,
            tenant,
            name: name.to_owned(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)?;
        Ok((token, claims))
    }

    /// Checks the signature, algorithm, issuer, audience and expiry.
    pub fn verify(&self, token: &str) -> Result<SessionClaims, JwtError> {
        match jsonwebtoken::decode::<SessionClaims>(token, &self.decoding, &self.validation) {
            Ok(data) => Ok(data.claims),
            Err(err) if matches!(err.kind(), ErrorKind::ExpiredSignature) => Err(JwtError::Expired),
            Err(_) => Err(JwtError::Invalid),
        }
    }
}

/// Reads the signing secret from a file, or creates the file with a fresh random secret (64 hex
/// characters, readable by the owner only) when it does not exist.
pub fn load_or_create_secret(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    use std::io::Write as _;
    match std::fs::read_to_string(path) {
        Ok(content) => {
            let secret = content.trim().as_bytes().to_vec();
            anyhow::ensure!(
                secret.len() >= MIN_SECRET_LEN,
                "{} holds fewer than {MIN_SECRET_LEN} bytes of secret",
                path.display()
            );
            Ok(secret)
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("reading random bytes: {e}"))?;
            let secret = hex::encode(bytes);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(path).with_context(|| format!("creating {}", path.display()))?;
            file.write_all(secret.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
            tracing::info!(path = %path.display(), "created a new session signing secret");
            Ok(secret.into_bytes())
        }
        Err(err) => Err(err).with_context(|| format!("reading {}", path.display())),
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test-only";

    fn keys() -> JwtKeys {
        JwtKeys::new(SECRET, Duration::from_secs(600)).expect("keys")
    }

    #[test]
    fn a_session_round_trips_with_its_claims() {
        let user = Uuid::new_v4();
        let tenant = Some(Uuid::new_v4());
        let (token, issued) = keys().issue(user, "ada@example.com", Role::TenantMember, tenant, 0).expect("issue");
        let claims = keys().verify(&token).expect("valid");
        assert_eq!(claims, issued);
        assert_eq!((claims.sub, claims.role, claims.tenant), (user, Role::TenantMember, tenant));
        assert_eq!(claims.exp - claims.iat, 600);
        assert_eq!(claims.iss, ISSUER);
    }

    #[test]
    fn an_expired_session_is_refused_as_expired() {
        let long_ago = now_secs() - 3600;
        let (token, _) = keys().issue_at(Uuid::new_v4(), "a", Role::Viewer, None, 0, long_ago).expect("issue");
        assert_eq!(keys().verify(&token), Err(JwtError::Expired));
        // Within the leeway it is still accepted.
        let just_now = now_secs() - 600 - LEEWAY_SECS + 2;
        let (token, _) = keys().issue_at(Uuid::new_v4(), "a", Role::Viewer, None, 0, just_now).expect("issue");
        assert!(keys().verify(&token).is_ok());
    }

    #[test]
    fn a_token_signed_with_another_key_is_invalid() {
        let other = JwtKeys::new(b"another-secret-another-secret-another", Duration::from_secs(600)).expect("keys");
        let (token, _) = other.issue(Uuid::new_v4(), "a", Role::PlatformAdmin, None, 0).expect("issue");
        assert_eq!(keys().verify(&token), Err(JwtError::Invalid));
    }

    #[test]
    fn a_tampered_payload_is_invalid() {
        let (token, _) = keys().issue(Uuid::new_v4(), "a", Role::Viewer, None, 0).expect("issue");
        let parts: Vec<&str> = token.split('.').collect();
        // Swap in the payload of a platform admin's token, keeping the viewer's signature.
        let (admin, _) = keys().issue(Uuid::new_v4(), "a", Role::PlatformAdmin, None, 0).expect("issue");
        let admin_payload = admin.split('.').nth(1).expect("payload");
        let forged = format!("{}.{}.{}", parts[0], admin_payload, parts[2]);
        assert_eq!(keys().verify(&forged), Err(JwtError::Invalid));
    }

    #[test]
    fn the_none_algorithm_and_garbage_are_invalid() {
        // {"alg":"none","typ":"JWT"} . {"sub":...,"role":"platform_admin",...} . (no signature)
        let header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";
        let (token, _) = keys().issue(Uuid::new_v4(), "a", Role::PlatformAdmin, None, 0).expect("issue");
        let payload = token.split('.').nth(1).expect("payload");
        assert_eq!(keys().verify(&format!("{header}.{payload}.")), Err(JwtError::Invalid));
        assert_eq!(keys().verify("not.a.jwt"), Err(JwtError::Invalid));
        assert_eq!(keys().verify(""), Err(JwtError::Invalid));
    }

    #[test]
    fn a_token_of_another_issuer_is_invalid() {
        #[derive(Serialize)]
        struct Foreign {
            iss: &'static str,
            aud: &'static str,
            sub: Uuid,
            iat: u64,
            exp: u64,
            role: Role,
            name: &'static str,
            jti: Uuid,
        }
        let claims = Foreign {
            iss: "someone-else",
            aud: AUDIENCE,
            sub: Uuid::new_v4(),
            iat: now_secs(),
            exp: now_secs() + 60,
            role: Role::PlatformAdmin,
            name: "x",
            jti: Uuid::new_v4(),
        };
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET).expect("key"),
        )
        .expect("encode");
        assert_eq!(keys().verify(&token), Err(JwtError::Invalid));
    }

    #[test]
    fn a_short_secret_is_refused() {
        assert!(matches!(JwtKeys::new(b"short", Duration::from_secs(60)), Err(KeyError::TooShort)));
    }
}
