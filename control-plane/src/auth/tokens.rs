//! Bearer secrets that are not sessions: API tokens (`at_…`), enrolment tokens (`et_…`), node
//! credentials (`nc_…`) and service load tokens (`st_…`, which may report one service's load and do
//! nothing else). Each is 32 random bytes from the operating system, hex-encoded after its
//! kind's prefix, shown once when it is created and stored only as its sha256 (a lookup by hash
//! needs no constant-time comparison, and a leaked table holds nothing usable), with its first
//! characters kept to recognise it in a list.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::Digest as _;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::auth::audit::{self, AuditActor, Change};
use crate::auth::{Role, SecretString};
use crate::domain::{self, Scope};

/// Random bytes in every secret.
const SECRET_BYTES: usize = 32;
/// Characters of the token kept as its visible prefix (kind prefix + 8 hex digits).
const VISIBLE_HEX: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Api,
    Enrolment,
    Node,
    Service,
}

impl TokenKind {
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Api => "at_",
            Self::Enrolment => "et_",
            Self::Node => "nc_",
            Self::Service => "st_",
        }
    }

    /// The kind a bearer token claims by its prefix; `None` for anything else (a JWT).
    pub fn of(token: &str) -> Option<TokenKind> {
        [Self::Api, Self::Enrolment, Self::Node, Self::Service].into_iter().find(|k| token.starts_with(k.prefix()))
    }
}

/// A freshly generated secret: the token to show once, and what is stored.
pub struct NewSecret {
    pub token: SecretString,
    pub sha256: String,
    pub prefix: String,
}

impl std::fmt::Debug for NewSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSecret").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// A new secret of a kind, from the operating system's CSPRNG.
pub fn generate(kind: TokenKind) -> anyhow::Result<NewSecret> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|err| anyhow::anyhow!("reading random bytes: {err}"))?;
    let body = hex::encode(bytes);
    let token = format!("{}{body}", kind.prefix());
    let prefix = format!("{}{}", kind.prefix(), &body[..VISIBLE_HEX]);
    let sha256 = hash(&token);
    Ok(NewSecret { token: SecretString::new(token), sha256, prefix })
}

/// The stored form of a token: sha256, hex.
pub fn hash(token: &str) -> String {
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// A token whose shape cannot be ours is refused before any lookup.
pub fn well_formed(token: &str, kind: TokenKind) -> bool {
    token
        .strip_prefix(kind.prefix())
        .is_some_and(|body| body.len() == 2 * SECRET_BYTES && body.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An API token as listed: never its secret.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ApiTokenView {
    pub id: Uuid,
    pub name: String,
    /// None for a platform token.
    pub tenant_id: Option<Uuid>,
    pub tenant: Option<String>,
    pub owner_id: Uuid,
    pub owner: String,
    pub role: Role,
    /// The token's first characters, to recognise it.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub const API_TOKEN_SELECT: &str = "SELECT k.id, k.name, k.tenant_id, t.name AS tenant, k.owner_id, u.email AS owner, \
     k.role, k.prefix, k.created_at, k.expires_at, k.last_used_at, k.revoked_at \
     FROM api_tokens k JOIN users u ON u.id = k.owner_id LEFT JOIN tenants t ON t.id = k.tenant_id";

/// Stores a new API token owned by the actor, audited in the same transaction, and returns it with
/// its secret (to show once). The handler checked the name, the lifetime and the role's ceiling.
pub async fn create_api_token(
    db: &PgPool,
    scope: &Scope,
    tenant: Option<Uuid>,
    name: &str,
    role: Role,
    expires_at: DateTime<Utc>,
) -> domain::Result<(ApiTokenView, SecretString)> {
    let secret = generate(TokenKind::Api)?;
    let id = Uuid::now_v7();
    let mut tx = db.begin().await?;
    sqlx::query(
        "INSERT INTO api_tokens (id, tenant_id, owner_id, name, role, secret_sha256, prefix, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(id)
    .bind(tenant)
    .bind(scope.user_id)
    .bind(name)
    .bind(role)
    .bind(&secret.sha256)
    .bind(&secret.prefix)
    .bind(expires_at)
    .execute(&mut *tx)
    .await?;
    let view: ApiTokenView = sqlx::query_as(sqlx::AssertSqlSafe(format!("{API_TOKEN_SELECT} WHERE k.id = $1")))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("token.create", "api_token", view.id)
            .tenant(tenant)
            .detail(serde_json::json!({"name": name, "role": role, "prefix": view.prefix, "expires_at": expires_at})),
    )
    .await?;
    tx.commit().await?;
    Ok((view, secret.token))
}

/// An enrolment token as listed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct EnrolmentTokenView {
    pub id: Uuid,
    pub prefix: String,
    /// When set, only a node of this name may enrol with it.
    pub node_name: Option<String>,
    pub created_by: Uuid,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub const ENROLMENT_SELECT: &str =
    "SELECT id, prefix, node_name, created_by, created_at, expires_at, used_at, revoked_at FROM enrolment_tokens";

/// Stores a new enrolment token made by the actor (platform admins), audited in the same
/// transaction, and returns it with its secret (to show once).
pub async fn create_enrolment_token(
    db: &PgPool,
    scope: &Scope,
    node_name: Option<&str>,
    expires_at: DateTime<Utc>,
) -> domain::Result<(EnrolmentTokenView, SecretString)> {
    scope.require_platform_admin()?;
    let secret = generate(TokenKind::Enrolment)?;
    let id = Uuid::now_v7();
    let mut tx = db.begin().await?;
    let view: EnrolmentTokenView = sqlx::query_as(
        "INSERT INTO enrolment_tokens (id, secret_sha256, prefix, node_name, created_by, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         RETURNING id, prefix, node_name, created_by, created_at, expires_at, used_at, revoked_at",
    )
    .bind(id)
    .bind(&secret.sha256)
    .bind(&secret.prefix)
    .bind(node_name)
    .bind(scope.user_id)
    .bind(expires_at)
    .fetch_one(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("enrolment_token.create", "enrolment_token", view.id)
            .detail(serde_json::json!({"node_name": view.node_name, "prefix": view.prefix, "expires_at": expires_at})),
    )
    .await?;
    tx.commit().await?;
    Ok((view, secret.token))
}

/// Why an enrolment was refused. Every case answers the agent the same way (401) so a guesser
/// learns nothing; the reason is logged.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnrolError {
    #[error("unknown enrolment token")]
    Unknown,
    #[error("the enrolment token was used already")]
    Used,
    #[error("the enrolment token has expired")]
    Expired,
    #[error("the enrolment token was revoked")]
    Revoked,
    #[error("the enrolment token is for another node")]
    OtherNode,
    #[error("the node already holds a credential; enrol it again with a token made for its name")]
    AlreadyEnrolled,
}

/// A node credential as listed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct NodeCredentialView {
    pub id: Uuid,
    pub node_name: String,
    pub node_id: Option<Uuid>,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub const NODE_CREDENTIAL_SELECT: &str =
    "SELECT id, node_name, node_id, prefix, created_at, last_used_at, revoked_at FROM node_credentials";

/// A node's new credential: what the agent is shown once, and the enrolment token it used.
#[derive(Debug)]
pub struct Enrolment {
    pub view: NodeCredentialView,
    pub credential: SecretString,
    pub enrolment_token_id: Uuid,
}

/// Exchanges a one-time enrolment token for a node credential, audited (as `actor`, who is not
/// yet authenticated) in the same transaction; a refusal changes nothing.
pub async fn enrol(
    db: &PgPool,
    actor: &AuditActor,
    enrolment_token: &SecretString,
    node_name: &str,
) -> domain::Result<Result<Enrolment, EnrolError>> {
    let mut tx = db.begin().await?;
    let (view, credential, token_id) = match exchange(&mut tx, enrolment_token, node_name).await? {
        Ok(done) => done,
        Err(refusal) => return Ok(Err(refusal)),
    };
    audit::record(
        &mut tx,
        actor,
        Change::new("node.enrol", "node_credential", view.id)
            .detail(serde_json::json!({"node_name": node_name, "prefix": view.prefix, "enrolment_token_id": token_id})),
    )
    .await?;
    tx.commit().await?;
    Ok(Ok(Enrolment { view, credential, enrolment_token_id: token_id }))
}

/// The exchange, in the caller's transaction: the token is marked used (row-locked, so two agents
/// racing with one token cannot both win). A token made for a node name replaces that node's live
/// credential; a general token cannot take over a node that already holds one.
async fn exchange(
    conn: &mut PgConnection,
    enrolment_token: &SecretString,
    node_name: &str,
) -> anyhow::Result<Result<(NodeCredentialView, SecretString, Uuid), EnrolError>> {
    if !well_formed(enrolment_token.expose(), TokenKind::Enrolment) {
        return Ok(Err(EnrolError::Unknown));
    }
    #[derive(sqlx::FromRow)]
    struct Row {
        id: Uuid,
        node_name: Option<String>,
        expired: bool,
        used: bool,
        revoked: bool,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT id, node_name, expires_at <= now() AS expired, used_at IS NOT NULL AS used, \
                revoked_at IS NOT NULL AS revoked \
         FROM enrolment_tokens WHERE secret_sha256 = $1 FOR UPDATE",
    )
    .bind(hash(enrolment_token.expose()))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(Row { id: token_id, node_name: for_node, expired, used, revoked }) = row else {
        return Ok(Err(EnrolError::Unknown));
    };
    if revoked {
        return Ok(Err(EnrolError::Revoked));
    }
    if used {
        return Ok(Err(EnrolError::Used));
    }
    if expired {
        return Ok(Err(EnrolError::Expired));
    }
    if for_node.as_deref().is_some_and(|n| n != node_name) {
        return Ok(Err(EnrolError::OtherNode));
    }
    let live: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM node_credentials WHERE node_name = $1 AND revoked_at IS NULL FOR UPDATE")
            .bind(node_name)
            .fetch_optional(&mut *conn)
            .await?;
    if live.is_some() {
        if for_node.is_none() {
            return Ok(Err(EnrolError::AlreadyEnrolled));
        }
        sqlx::query("UPDATE node_credentials SET revoked_at = now() WHERE node_name = $1 AND revoked_at IS NULL")
            .bind(node_name)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query("UPDATE enrolment_tokens SET used_at = now() WHERE id = $1").bind(token_id).execute(&mut *conn).await?;
    let secret = generate(TokenKind::Node)?;
    let existing_node: Option<(Uuid,)> =
        sqlx::query_as("SELECT id FROM nodes WHERE name = $1").bind(node_name).fetch_optional(&mut *conn).await?;
    let view = sqlx::query_as(
        "INSERT INTO node_credentials (id, node_name, node_id, secret_sha256, prefix, enrolment_token_id) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         RETURNING id, node_name, node_id, prefix, created_at, last_used_at, revoked_at",
    )
    .bind(Uuid::now_v7())
    .bind(node_name)
    .bind(existing_node.map(|(id,)| id))
    .bind(&secret.sha256)
    .bind(&secret.prefix)
    .bind(token_id)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Ok((view, secret.token, token_id)))
}

/// The newest 1,000 enrolment tokens, never their secrets.
pub async fn list_enrolment_tokens(db: &sqlx::PgPool) -> sqlx::Result<Vec<EnrolmentTokenView>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("{ENROLMENT_SELECT} ORDER BY created_at DESC LIMIT 1000")))
        .fetch_all(db)
        .await
}

/// Revokes an enrolment token (platform admins; again is a no-op), audited in the same transaction.
pub async fn revoke_enrolment_token(db: &PgPool, scope: &Scope, id: Uuid) -> domain::Result<EnrolmentTokenView> {
    scope.require_platform_admin()?;
    let mut tx = db.begin().await?;
    let view: Option<EnrolmentTokenView> = sqlx::query_as(
        "UPDATE enrolment_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 \
         RETURNING id, prefix, node_name, created_by, created_at, expires_at, used_at, revoked_at",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let view = view.ok_or(domain::Error::NotFound("enrolment token"))?;
    audit::record(&mut tx, &scope.actor, Change::new("enrolment_token.revoke", "enrolment_token", id)).await?;
    tx.commit().await?;
    Ok(view)
}

/// Every node credential, never its secret.
pub async fn list_node_credentials(db: &sqlx::PgPool) -> sqlx::Result<Vec<NodeCredentialView>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("{NODE_CREDENTIAL_SELECT} ORDER BY node_name, created_at DESC")))
        .fetch_all(db)
        .await
}

/// Revokes a node credential (platform admins; again is a no-op), audited in the same transaction.
pub async fn revoke_node_credential(db: &PgPool, scope: &Scope, id: Uuid) -> domain::Result<NodeCredentialView> {
    scope.require_platform_admin()?;
    let mut tx = db.begin().await?;
    let view: Option<NodeCredentialView> = sqlx::query_as(
        "UPDATE node_credentials SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 \
         RETURNING id, node_name, node_id, prefix, created_at, last_used_at, revoked_at",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let view = view.ok_or(domain::Error::NotFound("node credential"))?;
    audit::record(
        &mut tx,
        &scope.actor,
        Change::new("node_credential.revoke", "node_credential", id)
            .detail(serde_json::json!({"node_name": view.node_name})),
    )
    .await?;
    tx.commit().await?;
    Ok(view)
}

/// API tokens, newest first: of `tenant` (id) and `owner` when given, of the tenant named
/// `tenant_name` when given, revoked and expired ones only with `include_revoked`.
pub async fn list_api_tokens(
    db: &sqlx::PgPool,
    tenant: Option<Uuid>,
    owner: Option<Uuid>,
    tenant_name: Option<&str>,
    include_revoked: bool,
) -> sqlx::Result<Vec<ApiTokenView>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{API_TOKEN_SELECT} WHERE ($1::uuid IS NULL OR k.tenant_id = $1) AND ($2::uuid IS NULL OR k.owner_id = $2) \
           AND ($3::text IS NULL OR t.name = $3) \
           AND ($4 OR (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()))) \
         ORDER BY k.created_at DESC"
    )))
    .bind(tenant)
    .bind(owner)
    .bind(tenant_name)
    .bind(include_revoked)
    .fetch_all(db)
    .await
}

/// Revokes an API token (again is a no-op), audited in the same transaction. A platform admin may
/// revoke any token, its owner one of the tenant they act in, a tenant admin their tenant's; anyone
/// else's is not found.
pub async fn revoke_api_token(db: &PgPool, scope: &Scope, id: Uuid) -> domain::Result<ApiTokenView> {
    let mut tx = db.begin().await?;
    let row: Option<(Option<Uuid>, Uuid)> =
        sqlx::query_as("SELECT tenant_id, owner_id FROM api_tokens WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((tenant, owner)) = row else {
        return Err(domain::Error::NotFound("token"));
    };
    let allowed = scope.is_platform_admin()
        || (owner == scope.user_id && tenant == scope.tenant)
        || tenant.is_some_and(|t| scope.can_admin_tenant(t));
    if !allowed {
        return Err(domain::Error::NotFound("token"));
    }
    sqlx::query("UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    audit::record(&mut tx, &scope.actor, Change::new("token.revoke", "api_token", id).tenant(tenant)).await?;
    tx.commit().await?;
    Ok(api_token(db, id).await?)
}

/// One API token, never its secret.
async fn api_token(db: &sqlx::PgPool, id: Uuid) -> sqlx::Result<ApiTokenView> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("{API_TOKEN_SELECT} WHERE k.id = $1"))).bind(id).fetch_one(db).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_has_its_kind_prefix_and_is_stored_only_as_its_hash() {
        for kind in [TokenKind::Api, TokenKind::Enrolment, TokenKind::Node] {
            let secret = generate(kind).expect("random");
            let token = secret.token.expose();
            assert!(token.starts_with(kind.prefix()));
            assert_eq!(token.len(), kind.prefix().len() + 64);
            assert!(well_formed(token, kind));
            assert_eq!(TokenKind::of(token), Some(kind));
            assert_eq!(secret.sha256, hash(token));
            assert_eq!(secret.sha256.len(), 64);
            assert!(!secret.sha256.contains(&token[3..]), "the hash is not the secret");
            assert!(token.starts_with(&secret.prefix) && secret.prefix.len() == 11);
            assert!(!format!("{secret:?}").contains(&token[11..]), "Debug shows the prefix only");
        }
    }

    #[test]
    fn two_secrets_differ() {
        let a = generate(TokenKind::Api).expect("random");
        let b = generate(TokenKind::Api).expect("random");
        assert_ne!(a.token, b.token);
        assert_ne!(a.sha256, b.sha256);
    }

    #[test]
    fn the_hash_is_sha256_hex() {
        // sha256("abc"), FIPS 180-2 test vector.
        assert_eq!(hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn malformed_tokens_are_recognised() {
        assert!(!well_formed("at_short", TokenKind::Api));
        assert!(!well_formed(&format!("at_{}", "g".repeat(64)), TokenKind::Api));
        assert!(!well_formed(&format!("nc_{}", "a".repeat(64)), TokenKind::Api));
        assert_eq!(TokenKind::of("eyJhbGciOiJIUzI1NiJ9.x.y"), None);
    }
}
