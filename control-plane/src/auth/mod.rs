//! Who is calling, and what they may do.
//!
//! Four kinds of credential reach the API, all as `Authorization: Bearer <token>`:
//! - a **session** (`jwt`): an HS256 JWT from `POST /auth/login`, short-lived, for people;
//! - an **API token** (`at_…`, `tokens`): for automation and CI, shown once, stored as its sha256;
//! - a **node credential** (`nc_…`): a node agent's own, from `POST /agent/enrol`, scoped to one node;
//! - an **enrolment token** (`et_…`): one-time, only exchanged for a node credential.
//!
//! [`caller::Caller`] authenticates people and API tokens and answers the questions handlers ask
//! (`tenant_filter`, `can_write_tenant`, …); [`caller::NodeCaller`] authenticates node agents. Every
//! change is written to the audit log in the same transaction ([`audit`]). Mutating requests are
//! rate-limited per credential and logins are throttled per user name and address ([`rate_limit`]).
//!
//! **Invariants:** no secret (password, token, credential) is stored, logged or audited in clear —
//! secrets travel in [`SecretString`], whose `Debug` is redacted. Another tenant's resource is
//! answered 404, never 403, so its existence is not confirmed.

pub mod audit;
pub mod bootstrap;
pub mod caller;
pub mod jwt;
pub mod password;
pub mod rate_limit;
pub mod tokens;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use sqlx::PgPool;

/// Roles are the domain's (`domain::Scope` carries one); named here too, where access control reads them.
pub use crate::domain::Role;
pub use caller::{Caller, LoadReporter, NodeCaller};

use crate::auth::jwt::JwtKeys;
use crate::auth::rate_limit::{LoginThrottle, RateLimiter};

/// A secret (password, token) that must never reach a log: `Debug` and `Display` print a placeholder.
/// Deserializes from a plain JSON string; read it with [`SecretString::expose`].
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
    /// The secret itself. Call sites are few and greppable: hashing, verifying, the one response
    /// that shows a new token.
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for SecretString {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(«redacted»)")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("«redacted»")
    }
}

/// Limits and lifetimes of the access-control machinery (from the configuration).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Lifetime of a session token from `POST /auth/login`.
    pub session_ttl: Duration,
    /// Mutating requests per minute per credential (token bucket refill).
    pub mutations_per_minute: u32,
    /// Mutating requests a credential may send at once before the refill rate applies.
    pub mutation_burst: u32,
    /// Failed logins allowed per user name and address before each further attempt must wait.
    pub login_max_failures: u32,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            session_ttl: Duration::from_secs(3600),
            mutations_per_minute: 600,
            mutation_burst: 120,
            login_max_failures: 5,
        }
    }
}

/// Who reports often, for the larger bucket: a node credential or a service token (by id; a
/// request's key is made without formatting text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reporter {
    Node(uuid::Uuid),
    Service(uuid::Uuid),
}

/// Everything authentication needs, shared by the extractors and the auth routes.
pub struct AuthContext {
    pub db: PgPool,
    pub keys: JwtKeys,
    pub settings: AuthSettings,
    /// Token buckets for mutating requests, one per credential.
    pub mutations: RateLimiter<String>,
    /// Token buckets for node agents' reports, one per node credential (ten times larger: agents
    /// report telemetry and events often).
    pub node_mutations: RateLimiter<Reporter>,
    /// Failed-login bookkeeping per (user name, address); also failed enrolments per address.
    pub logins: LoginThrottle,
    /// Node credentials verified in the last [`caller::NODE_CREDENTIAL_CACHE`] (at most a second):
    /// an agent's reports skip the credential's row that long (see `caller::node_caller`).
    pub node_credentials: caller::NodeCredentialCache,
}

impl AuthContext {
    pub fn new(db: PgPool, jwt_secret: &[u8], settings: AuthSettings) -> anyhow::Result<Arc<Self>> {
        let keys = JwtKeys::new(jwt_secret, settings.session_ttl)?;
        let mutations = RateLimiter::per_minute(settings.mutations_per_minute, settings.mutation_burst);
        let node_mutations = RateLimiter::per_minute(
            settings.mutations_per_minute.saturating_mul(10),
            settings.mutation_burst.saturating_mul(10),
        );
        let logins = LoginThrottle::new(settings.login_max_failures);
        Ok(Arc::new(Self {
            db,
            keys,
            settings,
            mutations,
            node_mutations,
            logins,
            node_credentials: caller::NodeCredentialCache::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_power() {
        assert!(Role::Viewer < Role::TenantMember);
        assert!(Role::TenantMember < Role::TenantAdmin);
        assert!(Role::TenantAdmin < Role::PlatformAdmin);
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn a_secret_never_prints() {
        let secret = SecretString::new("hunter2-hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!format!("{secret}").contains("hunter2"));
        let parsed: SecretString = serde_json::from_str("\"hunter2-hunter2\"").expect("plain string");
        assert_eq!(parsed.expose(), "hunter2-hunter2");
    }
}
