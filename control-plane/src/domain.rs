//! What the domain modules (`workloads`, `services`, `policies`, `tenancy`, `archive`, `budgets`,
//! `what_if`, `users`, `invitations`, `settings`, `auth::tokens`) return and take: [`Error`], a failure in the domain's
//! words, and [`Scope`], who acts and which tenants they may see and change. Neither knows HTTP:
//! `api/` maps an [`Error`] to a status and the JSON error body (`impl From<domain::Error> for
//! ApiError`), and builds a [`Scope`] from the authenticated caller (`Caller::scope`). The tidy test
//! keeps `ApiError`, `Caller` and axum out of the domain modules, and SQL and transactions out of
//! `api/`.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A domain failure. Each variant says what went wrong, not how a transport shows it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The thing does not exist, or is another tenant's (indistinguishable on purpose).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The input is well formed but breaks a rule (a value out of range, parameters a policy
    /// refuses). `code` is stable for clients.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// A read's options are out of bounds (a follow window, a tail length).
    #[error("{message}")]
    BadQuery { code: &'static str, message: String },
    /// The request conflicts with the current state (cancelling a finished workload).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// The actor sees the thing but their role does not allow the change.
    #[error("{0}")]
    Forbidden(String),
    /// The database answered with an error (unavailable, or a bug: told apart by the API layer).
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The control plane cannot answer now (it is shutting down): the caller retries.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else unexpected: logged in full, never shown.
    #[error("internal: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl Error {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid { code, message: message.into() }
    }
    pub fn bad_query(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadQuery { code, message: message.into() }
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::Conflict { code, message: message.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Who acts, in which tenant and role: the tenant scope every domain read and change is checked
/// against. Its rules are [`Access`]'s (reached through `Deref`).
#[derive(Debug, Clone)]
pub struct Scope {
    pub access: Access,
    /// The person acting (the owner of an API token).
    pub user_id: Uuid,
    /// Who the audit log names.
    pub actor: AuditActor,
}

impl std::ops::Deref for Scope {
    type Target = Access;
    fn deref(&self) -> &Access {
        &self.access
    }
}

/// A role in a tenant, and the one definition of the access rules, for people, API tokens and the
/// dashboard alike (the API's `Caller` asks the same).
///
/// Invariant: `tenant` is `None` exactly when `role` is [`Role::PlatformAdmin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub role: Role,
    pub tenant: Option<Uuid>,
}

impl Access {
    pub fn is_platform_admin(&self) -> bool {
        self.role == Role::PlatformAdmin
    }

    /// The tenant every query must be restricted to: `None` means all tenants (platform admins).
    pub fn tenant_filter(&self) -> Option<Uuid> {
        if self.is_platform_admin() { None } else { self.tenant }
    }

    /// Whether the actor may see the data of `tenant`.
    pub fn can_read_tenant(&self, tenant: Uuid) -> bool {
        self.is_platform_admin() || self.tenant == Some(tenant)
    }

    /// Whether the actor may submit and cancel work in `tenant`.
    pub fn can_write_tenant(&self, tenant: Uuid) -> bool {
        self.can_read_tenant(tenant) && self.role >= Role::TenantMember
    }

    /// Whether the actor may manage `tenant`'s policies, members and tokens.
    pub fn can_admin_tenant(&self, tenant: Uuid) -> bool {
        self.can_read_tenant(tenant) && self.role >= Role::TenantAdmin
    }

    /// Forbidden unless the actor is a platform admin. For platform routes (fleet changes, tenants,
    /// quotas, the platform policy): their existence is no secret.
    pub fn require_platform_admin(&self) -> Result<()> {
        if self.is_platform_admin() { Ok(()) } else { Err(Error::Forbidden("this needs a platform admin".into())) }
    }

    /// Forbidden unless the actor's role is at least `min` (in its own tenant).
    pub fn require_role(&self, min: Role) -> Result<()> {
        if self.role >= min {
            Ok(())
        } else {
            Err(Error::Forbidden(format!("this needs the {min} role; you have {}", self.role)))
        }
    }

    /// Not found unless the actor may see `tenant`'s data: another tenant's resource is
    /// indistinguishable from one that does not exist.
    pub fn ensure_visible(&self, tenant: Uuid, what: &'static str) -> Result<()> {
        if self.can_read_tenant(tenant) { Ok(()) } else { Err(Error::NotFound(what)) }
    }

    /// Not found for another tenant's resource, forbidden when the actor sees it but may not
    /// change it.
    pub fn ensure_can_write(&self, tenant: Uuid, what: &'static str) -> Result<()> {
        self.ensure_visible(tenant, what)?;
        self.require_role(Role::TenantMember)
    }

    /// Not found for another tenant's resource, forbidden when the actor sees it but is not its
    /// admin.
    pub fn ensure_can_admin(&self, tenant: Uuid, what: &'static str) -> Result<()> {
        self.ensure_visible(tenant, what)?;
        self.require_role(Role::TenantAdmin)
    }
}

/// Who reports a service's load: a token scoped to one service (what its replicas or its gateway
/// hold), or someone acting in a scope who may write in the service's tenant.
#[derive(Debug, Clone)]
pub enum Reporter {
    ServiceToken { service_id: Uuid },
    Scope(Scope),
}

impl Reporter {
    /// Not found unless a service token is this service's (it cannot learn whether another service
    /// exists), or the scope may write in the service's tenant.
    pub fn ensure_service(&self, service_id: Uuid, tenant_id: Uuid) -> Result<()> {
        match self {
            Reporter::ServiceToken { service_id: own } if *own == service_id => Ok(()),
            Reporter::ServiceToken { .. } => Err(Error::NotFound("service")),
            Reporter::Scope(scope) => scope.ensure_can_write(tenant_id, "service"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(role: Role, tenant: Option<Uuid>) -> Scope {
        Scope { access: Access { role, tenant }, user_id: Uuid::nil(), actor: AuditActor::system("test") }
    }

    #[test]
    fn another_tenants_resource_is_not_found_and_a_viewer_may_not_change_their_own() {
        let own = Uuid::from_u128(1);
        let other = Uuid::from_u128(2);
        let viewer = scope(Role::Viewer, Some(own));
        assert!(matches!(viewer.ensure_visible(other, "workload"), Err(Error::NotFound("workload"))));
        assert!(viewer.ensure_visible(own, "workload").is_ok());
        assert!(matches!(viewer.ensure_can_write(own, "workload"), Err(Error::Forbidden(_))));
        assert!(matches!(viewer.ensure_can_write(other, "workload"), Err(Error::NotFound(_))));
        let admin = scope(Role::TenantAdmin, Some(own));
        assert!(admin.ensure_can_admin(own, "policy").is_ok());
        assert!(matches!(admin.require_platform_admin(), Err(Error::Forbidden(_))));
        let platform = scope(Role::PlatformAdmin, None);
        assert_eq!(platform.tenant_filter(), None);
        assert!(platform.ensure_can_admin(other, "policy").is_ok());
    }
}

/// A role: what a caller may do. Within a tenant, `Viewer < TenantMember < TenantAdmin`; a platform
/// admin may do everything, in every tenant.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum Role {
    /// Read-only access to a tenant's data.
    Viewer,
    /// Submit and cancel the tenant's workloads; read the tenant's data.
    TenantMember,
    /// The tenant's policies, members and tokens, and everything a member may do.
    TenantAdmin,
    /// The fleet, tenants, quotas, priority settings and the platform policy; every tenant.
    PlatformAdmin,
}

impl Role {
    pub const ALL: [Role; 4] = [Self::Viewer, Self::TenantMember, Self::TenantAdmin, Self::PlatformAdmin];
    /// The roles a membership in a tenant can carry.
    pub const TENANT_ROLES: [Role; 3] = [Self::Viewer, Self::TenantMember, Self::TenantAdmin];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::TenantMember => "tenant_member",
            Self::TenantAdmin => "tenant_admin",
            Self::PlatformAdmin => "platform_admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who made a change.
#[derive(Debug, Clone)]
pub struct AuditActor {
    /// `user`, `api_token`, `node` or `system`.
    pub kind: &'static str,
    pub id: Option<Uuid>,
    pub name: String,
    pub source_ip: Option<IpAddr>,
}

impl AuditActor {
    /// The control plane itself (bootstrap, start-up).
    pub fn system(name: &str) -> Self {
        Self { kind: "system", id: None, name: name.to_owned(), source_ip: None }
    }
    /// Someone not yet authenticated (a login, an enrolment): named by what they claimed.
    pub fn anonymous(kind: &'static str, name: &str, source_ip: Option<IpAddr>) -> Self {
        Self { kind, id: None, name: name.chars().take(254).collect(), source_ip }
    }
}
