//! Joining a tenant: a tenant admin invites a login name; the person behind it accepts.
//!
//! Login names are global (one account may belong to several tenants), so a tenant admin who could
//! create accounts by name, or add any user id to their tenant, could learn who has an account
//! elsewhere and pull other tenants' users (or a platform admin) into theirs. Instead, a tenant
//! admin's `POST /users` always answers the same `202 invited`, with the same work done (the
//! password is hashed either way, so the time taken says nothing either):
//! - a login name without an account gets one, with the password the tenant admin chose; its first
//!   login accepts the invitation (it is the account they made);
//! - a login name with an account gets an invitation its owner accepts or declines — unless the
//!   account was made through another tenant's invitation: then its password is that tenant
//!   admin's choice, and the invitation is held (the inviting tenant sees it pending, the account
//!   cannot accept it), so no tenant admin can pre-claim a name and collect other tenants'
//!   invitations to it. A platform admin adds such a person directly.
//!
//! Until then the tenant sees the invitation only. Platform admins add users directly. The HTTP
//! handlers are `api/invitations.rs`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::audit::{self, Change};
use crate::auth::{Role, SecretString, password};
use crate::domain::{self, Scope};

/// What a tenant admin's `POST /users` answers, whatever the login name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Invited {
    pub email: String,
    pub tenant: String,
    pub role: Role,
    /// Always `invited`: the person joins when they log in (a new account) or accept.
    pub status: &'static str,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct InvitationView {
    pub email: String,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub role: Role,
    pub invited_at: DateTime<Utc>,
}

/// Invites `email` to `tenant_id` with `role`, creating the account with `password` when the name
/// has none. Uniform in answer and in work, whether the account existed or not. The actor must
/// administer the tenant (`users::admit` checked the request).
pub async fn invite(
    db: &PgPool,
    scope: &Scope,
    tenant_id: Uuid,
    email: &str,
    password: SecretString,
    role: Role,
) -> domain::Result<Invited> {
    scope.ensure_can_admin(tenant_id, "tenant")?;
    let hash = password::hash_blocking(password).await?;
    let mut tx = db.begin().await?;
    let (tenant,): (String,) =
        sqlx::query_as("SELECT name FROM tenants WHERE id = $1").bind(tenant_id).fetch_one(&mut *tx).await?;
    let created = sqlx::query(
        "INSERT INTO users (id, email, password_hash, platform_admin, created_by_tenant) \
         VALUES ($1, $2, $3, false, $4) ON CONFLICT DO NOTHING",
    )
    .bind(Uuid::now_v7())
    .bind(email)
    .bind(&hash)
    .bind(tenant_id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    // An existing account made through another tenant's invitation: that tenant's admin chose its
    // password, so the invitation waits for a platform admin.
    let (made_through,): (Option<Uuid>,) =
        sqlx::query_as("SELECT created_by_tenant FROM users WHERE lower(email) = lower($1)")
            .bind(email)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or((None,));
    let held = made_through.is_some_and(|t| t != tenant_id);
    sqlx::query(
        "INSERT INTO membership_invitations (email, tenant_id, role, created_account, invited_by, held) \
         VALUES (lower($1), $2, $3, $4, $5, $6) \
         ON CONFLICT (email, tenant_id) DO UPDATE SET role = EXCLUDED.role, invited_at = now(), held = EXCLUDED.held",
    )
    .bind(email)
    .bind(tenant_id)
    .bind(role)
    .bind(created)
    .bind(scope.user_id)
    .bind(held)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("user.invite", "tenant", tenant_id)
            .tenant(Some(tenant_id))
            .detail(serde_json::json!({"email": email, "role": role})),
    )
    .await?;
    tx.commit().await?;
    Ok(Invited { email: email.to_owned(), tenant, role, status: "invited" })
}

/// At login: the invitations that created this account are accepted (the person knows the
/// password the tenant admin chose for it).
pub async fn accept_on_first_login(db: &PgPool, user_id: Uuid, email: &str) -> domain::Result<()> {
    sqlx::query(
        "WITH accepted AS (DELETE FROM membership_invitations WHERE email = lower($2) AND created_account \
                           RETURNING tenant_id, role) \
         INSERT INTO memberships (user_id, tenant_id, role) SELECT $1, tenant_id, role FROM accepted \
         ON CONFLICT (user_id, tenant_id) DO NOTHING",
    )
    .bind(user_id)
    .bind(email)
    .execute(db)
    .await?;
    Ok(())
}

const SELECT: &str = "SELECT i.email, i.tenant_id, t.name AS tenant, i.role, i.invited_at \
     FROM membership_invitations i JOIN tenants t ON t.id = i.tenant_id";

/// The actor's own invitations, to accept or decline.
pub async fn mine(db: &PgPool, scope: &Scope) -> domain::Result<Vec<InvitationView>> {
    scope.require_role(Role::Viewer)?;
    let email = own_email(db, scope).await?;
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE i.email = lower($1) AND NOT i.held ORDER BY t.name"
    )))
    .bind(&email)
    .fetch_all(db)
    .await?)
}

/// Accepts the invitation of the tenant named `tenant`: the actor becomes a member of it with the
/// invited role, audited in the same transaction.
pub async fn accept(db: &PgPool, scope: &Scope, tenant: &str) -> domain::Result<InvitationView> {
    scope.require_role(Role::Viewer)?;
    let email = own_email(db, scope).await?;
    let mut tx = db.begin().await?;
    let taken: Option<InvitationView> = sqlx::query_as(
        "WITH taken AS (DELETE FROM membership_invitations i USING tenants t \
                        WHERE t.id = i.tenant_id AND t.name = $2 AND i.email = lower($1) AND NOT i.held \
                        RETURNING i.email, i.tenant_id, t.name AS tenant, i.role, i.invited_at) \
         SELECT * FROM taken",
    )
    .bind(&email)
    .bind(tenant)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(invitation) = taken else {
        return Err(no_invitation(tenant));
    };
    sqlx::query(
        "INSERT INTO memberships (user_id, tenant_id, role) VALUES ($1, $2, $3) \
         ON CONFLICT (user_id, tenant_id) DO UPDATE SET role = EXCLUDED.role",
    )
    .bind(scope.user_id)
    .bind(invitation.tenant_id)
    .bind(invitation.role)
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("membership.accept", "user", scope.user_id)
            .tenant(Some(invitation.tenant_id))
            .detail(serde_json::json!({"role": invitation.role})),
    )
    .await?;
    tx.commit().await?;
    Ok(invitation)
}

/// Declines the invitation of the tenant named `tenant`.
pub async fn decline(db: &PgPool, scope: &Scope, tenant: &str) -> domain::Result<()> {
    scope.require_role(Role::Viewer)?;
    let email = own_email(db, scope).await?;
    let removed = sqlx::query(
        "DELETE FROM membership_invitations i USING tenants t \
         WHERE t.id = i.tenant_id AND t.name = $2 AND i.email = lower($1)",
    )
    .bind(&email)
    .bind(tenant)
    .execute(db)
    .await?
    .rows_affected();
    if removed == 0 {
        return Err(no_invitation(tenant));
    }
    Ok(())
}

/// A tenant's pending invitations (tenant admins of it, platform admins).
pub async fn of_tenant(db: &PgPool, scope: &Scope, tenant_id: Uuid) -> domain::Result<Vec<InvitationView>> {
    scope.ensure_can_admin(tenant_id, "tenant")?;
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE i.tenant_id = $1 ORDER BY i.invited_at")))
        .bind(tenant_id)
        .fetch_all(db)
        .await?)
}

fn no_invitation(tenant: &str) -> domain::Error {
    domain::Error::invalid("no_invitation", format!("there is no invitation to {tenant:?} for this account"))
}

async fn own_email(db: &PgPool, scope: &Scope) -> domain::Result<String> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT email FROM users WHERE id = $1").bind(scope.user_id).fetch_optional(db).await?;
    row.map(|(e,)| e).ok_or(domain::Error::NotFound("user"))
}
