//! The extractors that authenticate a request: [`Caller`] for people and API tokens, [`NodeCaller`]
//! for node agents. Put one in a handler's arguments and the handler runs only for an authenticated
//! caller; then ask it what the caller may see and do.
//!
//! Every check reads the database: a session of a user who was disabled, lost the membership or
//! changed the password a second ago is refused now, not when the JWT expires; an API token acts
//! with the lesser of its own role and its owner's current one. One exception, for the rate of agent
//! reports: a node credential verified in the last second is taken again without its row
//! ([`NODE_CREDENTIAL_CACHE`]); revoked on this replica it is refused at once, on another within
//! that second.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRef, FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{Method, header};
use uuid::Uuid;

use crate::auth::audit::AuditActor;
use crate::auth::jwt::JwtError;
use crate::auth::tokens::{self, TokenKind};
use crate::auth::{AuthContext, Role};
use crate::domain::{Access, Scope};
use crate::error::{ApiError, ApiResult};

const MISSING: &str = "authentication required: send Authorization: Bearer <token>";
const INVALID: &str = "invalid, expired or revoked credentials";
const EXPIRED: &str = "the session has expired; log in again";
const SERVICE_TOKEN_ONLY: &str = "a service token may only report its service's load (POST /api/v1/services/{id}/load)";
const NOT_AN_AGENT: &str = "this endpoint is for node agents; authenticate with the node's credential";

/// How the caller authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A session from `POST /auth/login` (its JWT id).
    Session { jti: Uuid },
    /// An API token (its id and name).
    ApiToken { id: Uuid, name: String },
}

/// An authenticated person or API token, with the role and tenant it acts in.
///
/// Invariant: `tenant` is `None` exactly when `role` is [`Role::PlatformAdmin`].
#[derive(Debug, Clone)]
pub struct Caller {
    pub user_id: Uuid,
    /// The user's login name (for messages and the audit log).
    pub user_name: String,
    pub credential: Credential,
    pub role: Role,
    pub tenant: Option<Uuid>,
    pub source_ip: Option<IpAddr>,
}

impl Caller {
    /// The tenant scope this caller acts in: what the domain modules take. The access rules live
    /// there, once; the methods below are the API's view of them.
    pub fn scope(&self) -> Scope {
        Scope { access: self.rules(), user_id: self.user_id, actor: AuditActor::from(self) }
    }

    fn rules(&self) -> Access {
        Access { role: self.role, tenant: self.tenant }
    }

    pub fn is_platform_admin(&self) -> bool {
        self.role == Role::PlatformAdmin
    }

    /// 403 unless the caller is a platform admin. For platform routes (fleet changes, tenants,
    /// quotas, the platform policy): their existence is no secret.
    pub fn require_platform_admin(&self) -> ApiResult<()> {
        Ok(self.rules().require_platform_admin()?)
    }

    /// 403 unless the caller's role is at least `min` (in its own tenant).
    pub fn require_role(&self, min: Role) -> ApiResult<()> {
        Ok(self.rules().require_role(min)?)
    }

    /// The tenant every query must be restricted to: `None` means all tenants (platform admins).
    pub fn tenant_filter(&self) -> Option<Uuid> {
        self.rules().tenant_filter()
    }

    /// Whether the caller may see the data of `tenant`.
    pub fn can_read_tenant(&self, tenant: Uuid) -> bool {
        self.rules().can_read_tenant(tenant)
    }

    /// Whether the caller may submit and cancel work in `tenant`.
    pub fn can_write_tenant(&self, tenant: Uuid) -> bool {
        self.rules().can_write_tenant(tenant)
    }

    /// Whether the caller may manage `tenant`'s policies, members and tokens.
    pub fn can_admin_tenant(&self, tenant: Uuid) -> bool {
        self.rules().can_admin_tenant(tenant)
    }

    /// 404 (`what` not found) unless the caller may see `tenant`'s data: another tenant's
    /// resource is indistinguishable from one that does not exist.
    pub fn ensure_visible(&self, tenant: Uuid, what: &'static str) -> ApiResult<()> {
        Ok(self.rules().ensure_visible(tenant, what)?)
    }

    /// 404 for another tenant's resource, 403 when the caller sees it but may not change it.
    pub fn ensure_can_write(&self, tenant: Uuid, what: &'static str) -> ApiResult<()> {
        Ok(self.rules().ensure_can_write(tenant, what)?)
    }

    /// 404 for another tenant's resource, 403 when the caller sees it but is not its admin.
    pub fn ensure_can_admin(&self, tenant: Uuid, what: &'static str) -> ApiResult<()> {
        Ok(self.rules().ensure_can_admin(tenant, what)?)
    }

    /// True for a session (a person who logged in), false for an API token.
    pub fn is_session(&self) -> bool {
        matches!(self.credential, Credential::Session { .. })
    }

    /// `user` or `api_token`, for the audit log.
    pub fn actor_kind(&self) -> &'static str {
        match self.credential {
            Credential::Session { .. } => "user",
            Credential::ApiToken { .. } => "api_token",
        }
    }

    /// The user's id for a session, the token's id for an API token.
    pub fn actor_id(&self) -> Uuid {
        match &self.credential {
            Credential::Session { .. } => self.user_id,
            Credential::ApiToken { id, .. } => *id,
        }
    }

    /// `ada@example.com` or `ada@example.com (token ci-deploy)`.
    pub fn actor_name(&self) -> String {
        match &self.credential {
            Credential::Session { .. } => self.user_name.clone(),
            Credential::ApiToken { name, .. } => format!("{} (token {name})", self.user_name),
        }
    }

    fn rate_key(&self) -> String {
        match &self.credential {
            Credential::Session { .. } => format!("user:{}", self.user_id),
            Credential::ApiToken { id, .. } => format!("token:{id}"),
        }
    }
}

/// An authenticated node agent, acting for one node only.
#[derive(Debug, Clone)]
pub struct NodeCaller {
    pub credential_id: Uuid,
    pub node_name: String,
    /// The node's id once it has registered.
    pub node_id: Option<Uuid>,
    pub source_ip: Option<IpAddr>,
}

impl NodeCaller {
    /// `404 node_not_found` unless `node_id` is this agent's own node: an agent cannot act for
    /// another node, nor learn whether another node id exists (the answer is the one an unknown
    /// node gets, which also tells the agent to register again).
    pub fn ensure_node(&self, node_id: Uuid) -> ApiResult<()> {
        if self.node_id == Some(node_id) { Ok(()) } else { Err(ApiError::NodeNotFound) }
    }

    /// `404 node_not_found` unless `name` is the node this credential was enrolled for.
    pub fn ensure_node_name(&self, name: &str) -> ApiResult<()> {
        if self.node_name == name { Ok(()) } else { Err(ApiError::NodeNotFound) }
    }
}

/// The bearer token of a request: `Ok(None)` when there is no Authorization header.
pub fn bearer(parts: &Parts) -> ApiResult<Option<&str>> {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| ApiError::Unauthorized(INVALID))?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(ApiError::Unauthorized(INVALID))?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.len() > 4096 {
        return Err(ApiError::Unauthorized(INVALID));
    }
    Ok(Some(token))
}

/// The peer address, when the server was started with connect info.
pub fn source_ip(parts: &Parts) -> Option<IpAddr> {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip())
}

/// The peer address as an extractor (never fails; `None` without connect info), for the routes
/// that run before authentication (login, enrolment).
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientIp(source_ip(parts)))
    }
}

fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S> FromRequestParts<S> for Caller
where
    Arc<AuthContext>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let auth = Arc::<AuthContext>::from_ref(state);
        let token = bearer(parts)?.ok_or(ApiError::Unauthorized(MISSING))?;
        let ip = source_ip(parts);
        let caller = match TokenKind::of(token) {
            Some(TokenKind::Api) => api_token_caller(&auth, token, ip).await?,
            Some(TokenKind::Node) => {
                // A valid node credential is known, but may only use the agent endpoints.
                node_caller(&auth, token, ip).await?;
                return Err(ApiError::forbidden("node credentials may only use the agent endpoints"));
            }
            Some(TokenKind::Enrolment) => {
                return Err(ApiError::Unauthorized("an enrolment token is only exchanged at POST /agent/enrol"));
            }
            Some(TokenKind::Service) => {
                service_caller(&auth, token).await?;
                return Err(ApiError::forbidden(SERVICE_TOKEN_ONLY));
            }
            None => session_caller(&auth, token, ip).await?,
        };
        if is_mutating(&parts.method) {
            auth.mutations.check(&caller.rate_key(), Instant::now()).map_err(ApiError::too_many_requests)?;
        }
        Ok(caller)
    }
}

impl<S> FromRequestParts<S> for NodeCaller
where
    Arc<AuthContext>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let auth = Arc::<AuthContext>::from_ref(state);
        let token = bearer(parts)?.ok_or(ApiError::Unauthorized(MISSING))?;
        match TokenKind::of(token) {
            Some(TokenKind::Node) => {}
            Some(TokenKind::Enrolment) => {
                return Err(ApiError::Unauthorized("exchange the enrolment token at POST /agent/enrol first"));
            }
            // A person's or an API token's credential is refused like a bad one: agents' endpoints
            // are for agents only.
            _ => return Err(ApiError::Unauthorized(NOT_AN_AGENT)),
        }
        let caller = node_caller(&auth, token, source_ip(parts)).await?;
        // Every agent route naming a node is scoped to the caller's own node, checked here before
        // any body is read.
        if let Ok(params) = RawPathParams::from_request_parts(parts, state).await
            && let Some((_, value)) = params.iter().find(|(key, _)| *key == "node_id")
        {
            let node_id = Uuid::parse_str(value)
                .map_err(|_| ApiError::bad_request("invalid_path", "invalid path parameter: node_id is not a UUID"))?;
            caller.ensure_node(node_id)?;
        }
        if is_mutating(&parts.method) {
            // Agents report telemetry and events often: their bucket is ten times larger.
            let key = crate::auth::Reporter::Node(caller.credential_id);
            auth.node_mutations.check(&key, Instant::now()).map_err(ApiError::too_many_requests)?;
        }
        Ok(caller)
    }
}

async fn session_caller(auth: &AuthContext, token: &str, ip: Option<IpAddr>) -> ApiResult<Caller> {
    let claims = auth.keys.verify(token).map_err(|err| match err {
        JwtError::Expired => ApiError::Unauthorized(EXPIRED),
        JwtError::Invalid => ApiError::Unauthorized(INVALID),
    })?;
    let row: Option<(String, bool, bool, i64, Option<Role>)> = sqlx::query_as(
        "SELECT u.email, u.disabled, u.platform_admin, u.session_generation, \
                m.role \
         FROM users u LEFT JOIN memberships m ON m.user_id = u.id AND m.tenant_id = $2 WHERE u.id = $1",
    )
    .bind(claims.sub)
    .bind(claims.tenant)
    .fetch_optional(&auth.db)
    .await?;
    let Some((email, disabled, platform_admin, generation, member_role)) = row else {
        return Err(ApiError::Unauthorized(INVALID));
    };
    // Sessions issued before a password change or a disable are over: exactly, whatever the clock.
    if disabled || claims.generation != generation {
        return Err(ApiError::Unauthorized(INVALID));
    }
    let role = match (claims.role, claims.tenant) {
        (Role::PlatformAdmin, None) if platform_admin => Role::PlatformAdmin,
        // The role the user holds now, which may be lower (or higher) than when the session began.
        (claimed, Some(_)) if claimed != Role::PlatformAdmin => member_role.ok_or(ApiError::Unauthorized(INVALID))?,
        _ => return Err(ApiError::Unauthorized(INVALID)),
    };
    Ok(Caller {
        user_id: claims.sub,
        user_name: email,
        credential: Credential::Session { jti: claims.jti },
        role,
        tenant: claims.tenant,
        source_ip: ip,
    })
}

#[derive(sqlx::FromRow)]
struct ApiTokenAuth {
    id: Uuid,
    name: String,
    tenant_id: Option<Uuid>,
    role: Role,
    expired: bool,
    revoked: bool,
    owner_id: Uuid,
    owner: String,
    disabled: bool,
    platform_admin: bool,
    member_role: Option<Role>,
    stale: bool,
}

async fn api_token_caller(auth: &AuthContext, token: &str, ip: Option<IpAddr>) -> ApiResult<Caller> {
    if !tokens::well_formed(token, TokenKind::Api) {
        return Err(ApiError::Unauthorized(INVALID));
    }
    let row: Option<ApiTokenAuth> = sqlx::query_as(
        "SELECT k.id, k.name, k.tenant_id, k.role, COALESCE(k.expires_at <= now(), false) AS expired, \
                k.revoked_at IS NOT NULL AS revoked, u.id AS owner_id, u.email AS owner, u.disabled, \
                u.platform_admin, m.role AS member_role, \
                (k.last_used_at IS NULL OR k.last_used_at < now() - interval '60 seconds') AS stale \
         FROM api_tokens k JOIN users u ON u.id = k.owner_id \
         LEFT JOIN memberships m ON m.user_id = u.id AND m.tenant_id = k.tenant_id \
         WHERE k.secret_sha256 = $1",
    )
    .bind(tokens::hash(token))
    .fetch_optional(&auth.db)
    .await?;
    let Some(t) = row else {
        return Err(ApiError::Unauthorized(INVALID));
    };
    if t.expired || t.revoked || t.disabled {
        return Err(ApiError::Unauthorized(INVALID));
    }
    // The owner's authority now: a token never outlives or outranks its owner's role.
    let owner_role = if t.platform_admin { Some(Role::PlatformAdmin) } else { t.member_role };
    let role = match owner_role {
        Some(owner_role) if t.tenant_id.is_some() || owner_role == Role::PlatformAdmin => t.role.min(owner_role),
        _ => return Err(ApiError::Unauthorized(INVALID)),
    };
    // A platform admin's tenant token acts in its tenant with at most tenant_admin.
    let role = if t.tenant_id.is_some() { role.min(Role::TenantAdmin) } else { role };
    if t.stale {
        // Last use, to the minute: one write per token per minute at most.
        sqlx::query("UPDATE api_tokens SET last_used_at = now() WHERE id = $1").bind(t.id).execute(&auth.db).await?;
    }
    Ok(Caller {
        user_id: t.owner_id,
        user_name: t.owner,
        credential: Credential::ApiToken { id: t.id, name: t.name },
        role,
        tenant: t.tenant_id,
        source_ip: ip,
    })
}

/// How long a verified node credential is taken without reading its row again. Revoking a node's
/// credential refuses it at most this long after the revocation (every other credential is read at
/// every request): an agent reports every heartbeat, and at a thousand nodes the credential's row
/// was read a few thousand times a second (measured in `tests/benches/telemetry_ingest.rs`).
pub const NODE_CREDENTIAL_CACHE: std::time::Duration = std::time::Duration::from_secs(1);
/// How often [`sweep_node_credentials`] reads again, in one statement, every credential kept: often
/// enough that a credential in use never ages past [`NODE_CREDENTIAL_CACHE`].
pub const NODE_CREDENTIAL_SWEEP: std::time::Duration = std::time::Duration::from_millis(400);
/// The most credentials kept; past it, those older than [`NODE_CREDENTIAL_CACHE`] are forgotten.
const NODE_CREDENTIAL_CACHE_ENTRIES: usize = 100_000;

/// Node credentials verified recently, by the SHA-256 of the secret (never the secret). Only a
/// credential bound to a node is kept: one not yet registered is read until it is.
///
/// A kept credential is verified again by the replica's sweep ([`sweep_node_credentials`]): every
/// kept credential's row in one statement, every [`NODE_CREDENTIAL_SWEEP`]. A request's own read is
/// then the exception (a credential first seen, or one the sweep could not reach in time), where
/// before every node read its row once a second, a thousand statements a second at 1,000 nodes.
#[derive(Default)]
pub struct NodeCredentialCache(std::sync::Mutex<std::collections::HashMap<String, Verified>>);

/// A node credential as last verified.
struct Verified {
    /// When the read that verified it began: any revocation committed before then was seen.
    at: Instant,
    credential_id: Uuid,
    node_name: String,
    node_id: Uuid,
    /// Used since the last sweep (whose `last_used_at` it then records).
    used: bool,
}

impl NodeCredentialCache {
    fn get(&self, hash: &str, now: Instant) -> Option<(Uuid, String, Uuid)> {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let verified = map.get_mut(hash)?;
        if now.duration_since(verified.at) >= NODE_CREDENTIAL_CACHE {
            return None;
        }
        verified.used = true;
        Some((verified.credential_id, verified.node_name.clone(), verified.node_id))
    }

    /// Forgets every verified credential: called when this replica revokes one (rare), so it is
    /// refused here at once.
    pub fn forget_all(&self) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    fn put(&self, hash: String, now: Instant, credential_id: Uuid, node_name: String, node_id: Uuid) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= NODE_CREDENTIAL_CACHE_ENTRIES {
            map.retain(|_, v| now.duration_since(v.at) < NODE_CREDENTIAL_CACHE);
        }
        // Its request reads (and, when due, records) the row itself: not used since that read.
        map.insert(hash, Verified { at: now, credential_id, node_name, node_id, used: false });
    }

    /// What a sweep reads: every kept credential, and which of them were used since the last sweep
    /// (their use flag cleared: this sweep records it).
    fn to_sweep(&self) -> (Vec<Uuid>, Vec<Uuid>) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = map.values().map(|v| v.credential_id).collect();
        let used = map.values_mut().filter_map(|v| std::mem::take(&mut v.used).then_some(v.credential_id)).collect();
        (kept, used)
    }

    /// A sweep's answer: of the credentials it read (`swept`), those still valid (`live`, each
    /// with its node) are verified as of `began`; the others are forgotten (revoked, deleted, or
    /// bound to another node), so their next request reads its row and is refused. A credential
    /// kept since the sweep began is left as it is.
    fn swept(&self, began: Instant, swept: &[Uuid], live: &[(Uuid, Option<Uuid>)]) {
        let live: std::collections::HashMap<Uuid, Option<Uuid>> = live.iter().copied().collect();
        let swept: std::collections::HashSet<Uuid> = swept.iter().copied().collect();
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, v| {
            if !swept.contains(&v.credential_id) {
                return true;
            }
            match live.get(&v.credential_id) {
                Some(&node) if node == Some(v.node_id) => {
                    v.at = v.at.max(began);
                    true
                }
                _ => false,
            }
        });
    }
}

/// Verifies again every node credential this replica keeps, in one statement: those revoked (or
/// deleted) since are forgotten, the rest are taken for another [`NODE_CREDENTIAL_CACHE`]; the ones
/// used since the last sweep have `last_used_at` recorded (at most once a minute, as a request's
/// own read records it). Revocation is refused as before: within a second of its commit.
pub async fn sweep_node_credentials(auth: &AuthContext) -> sqlx::Result<()> {
    let (kept, used) = auth.node_credentials.to_sweep();
    if kept.is_empty() {
        return Ok(());
    }
    let began = Instant::now();
    let live: Vec<(Uuid, Option<Uuid>)> = sqlx::query_as(
        "WITH recorded AS (UPDATE node_credentials SET last_used_at = now() \
                           WHERE id = ANY($2) AND revoked_at IS NULL \
                             AND (last_used_at IS NULL OR last_used_at < now() - interval '60 seconds')) \
         SELECT id, node_id FROM node_credentials WHERE id = ANY($1) AND revoked_at IS NULL",
    )
    .bind(&kept)
    .bind(&used)
    .fetch_all(&auth.db)
    .await?;
    auth.node_credentials.swept(began, &kept, &live);
    Ok(())
}

/// Sweeps this replica's kept node credentials every [`NODE_CREDENTIAL_SWEEP`] until shutdown. A
/// sweep that fails (the database away) changes nothing: kept credentials then age out within
/// [`NODE_CREDENTIAL_CACHE`], and each request reads its own row again.
pub async fn run_node_credential_sweeps(auth: Arc<AuthContext>, shutdown: crate::signals::Shutdown) {
    let mut ticker = tokio::time::interval(NODE_CREDENTIAL_SWEEP);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match sweep_node_credentials(&auth).await {
            Ok(()) => failing = false,
            Err(err) if !failing => {
                failing = true;
                tracing::warn!(error = %err, "cannot verify the kept node credentials; each request reads its own");
            }
            Err(_) => {}
        }
    }
}

async fn node_caller(auth: &AuthContext, token: &str, ip: Option<IpAddr>) -> ApiResult<NodeCaller> {
    if !tokens::well_formed(token, TokenKind::Node) {
        return Err(ApiError::Unauthorized(INVALID));
    }
    let hash = tokens::hash(token);
    let now = Instant::now();
    if let Some((credential_id, node_name, node_id)) = auth.node_credentials.get(&hash, now) {
        return Ok(NodeCaller { credential_id, node_name, node_id: Some(node_id), source_ip: ip });
    }
    let row: Option<(Uuid, String, Option<Uuid>, bool, bool)> = sqlx::query_as(
        "SELECT id, node_name, node_id, revoked_at IS NOT NULL, \
                (last_used_at IS NULL OR last_used_at < now() - interval '60 seconds') \
         FROM node_credentials WHERE secret_sha256 = $1",
    )
    .bind(&hash)
    .fetch_optional(&auth.db)
    .await?;
    let Some((credential_id, node_name, node_id, revoked, stale)) = row else {
        return Err(ApiError::Unauthorized(INVALID));
    };
    if revoked {
        return Err(ApiError::Unauthorized(INVALID));
    }
    if let Some(node_id) = node_id {
        auth.node_credentials.put(hash, now, credential_id, node_name.clone(), node_id);
    }
    if stale {
        sqlx::query("UPDATE node_credentials SET last_used_at = now() WHERE id = $1")
            .bind(credential_id)
            .execute(&auth.db)
            .await?;
    }
    Ok(NodeCaller { credential_id, node_name, node_id, source_ip: ip })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn caller(role: Role, tenant: Option<Uuid>) -> Caller {
        Caller {
            user_id: Uuid::new_v4(),
            user_name: "ada@example.com".into(),
            credential: Credential::Session { jti: Uuid::new_v4() },
            role,
            tenant,
            source_ip: None,
        }
    }

    fn parts(authorization: Option<&str>) -> Parts {
        let mut req = Request::builder().uri("/api/v1/workloads");
        if let Some(value) = authorization {
            req = req.header(header::AUTHORIZATION, value);
        }
        req.body(()).expect("request").into_parts().0
    }

    #[test]
    fn a_platform_admin_sees_every_tenant() {
        let admin = caller(Role::PlatformAdmin, None);
        let any = Uuid::new_v4();
        assert_eq!(admin.tenant_filter(), None);
        assert!(admin.can_read_tenant(any) && admin.can_write_tenant(any) && admin.can_admin_tenant(any));
        assert!(admin.require_platform_admin().is_ok());
    }

    #[test]
    fn another_tenants_resource_is_not_found_whatever_the_role() {
        let mine = Uuid::new_v4();
        let theirs = Uuid::new_v4();
        for role in Role::TENANT_ROLES {
            let c = caller(role, Some(mine));
            assert_eq!(c.tenant_filter(), Some(mine));
            assert!(!c.can_read_tenant(theirs));
            for result in [
                c.ensure_visible(theirs, "workload"),
                c.ensure_can_write(theirs, "workload"),
                c.ensure_can_admin(theirs, "workload"),
            ] {
                assert!(matches!(result, Err(ApiError::NotFound("workload"))), "{role}: {result:?}");
            }
            assert!(matches!(c.require_platform_admin(), Err(ApiError::Forbidden(_))));
        }
    }

    #[test]
    fn within_its_tenant_a_role_allows_what_it_names() {
        let mine = Uuid::new_v4();
        let viewer = caller(Role::Viewer, Some(mine));
        assert!(viewer.ensure_visible(mine, "w").is_ok());
        assert!(matches!(viewer.ensure_can_write(mine, "w"), Err(ApiError::Forbidden(_))));
        let member = caller(Role::TenantMember, Some(mine));
        assert!(member.ensure_can_write(mine, "w").is_ok());
        assert!(matches!(member.ensure_can_admin(mine, "w"), Err(ApiError::Forbidden(_))));
        let admin = caller(Role::TenantAdmin, Some(mine));
        assert!(admin.ensure_can_admin(mine, "w").is_ok());
    }

    #[test]
    fn an_agent_acts_only_for_its_own_node() {
        let own = Uuid::new_v4();
        let agent = NodeCaller {
            credential_id: Uuid::new_v4(),
            node_name: "gpu-1".into(),
            node_id: Some(own),
            source_ip: None,
        };
        assert!(agent.ensure_node(own).is_ok());
        assert!(matches!(agent.ensure_node(Uuid::new_v4()), Err(ApiError::NodeNotFound)));
        assert!(agent.ensure_node_name("gpu-1").is_ok());
        assert!(agent.ensure_node_name("gpu-2").is_err());
        let unregistered = NodeCaller { node_id: None, ..agent };
        assert!(unregistered.ensure_node(own).is_err());
    }

    #[test]
    fn the_bearer_scheme_is_parsed_strictly() {
        assert_eq!(bearer(&parts(None)).expect("absent"), None);
        assert_eq!(bearer(&parts(Some("Bearer abc"))).expect("ok"), Some("abc"));
        assert_eq!(bearer(&parts(Some("bearer   abc "))).expect("ok"), Some("abc"));
        for bad in ["Basic YWRhOnB3", "Bearer", "Bearer ", "abc", "Token abc"] {
            assert!(matches!(bearer(&parts(Some(bad))), Err(ApiError::Unauthorized(_))), "{bad}");
        }
    }

    #[test]
    fn the_actor_names_the_token_and_its_owner() {
        let mut c = caller(Role::TenantMember, Some(Uuid::new_v4()));
        assert_eq!((c.actor_kind(), c.actor_name().as_str()), ("user", "ada@example.com"));
        let id = Uuid::new_v4();
        c.credential = Credential::ApiToken { id, name: "ci".into() };
        assert_eq!(c.actor_kind(), "api_token");
        assert_eq!(c.actor_id(), id);
        assert_eq!(c.actor_name(), "ada@example.com (token ci)");
        assert!(!c.is_session());
    }

    #[test]
    fn a_sweep_keeps_the_live_credentials_it_read_and_forgets_the_revoked_and_the_rebound() {
        let cache = NodeCredentialCache::default();
        let t0 = Instant::now();
        let (live, revoked, rebound, later) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let node = Uuid::new_v4();
        for (hash, id) in [("live", live), ("revoked", revoked), ("rebound", rebound)] {
            cache.put(hash.into(), t0, id, hash.into(), node);
        }
        assert!(cache.get("live", t0).is_some());
        let (kept, used) = cache.to_sweep();
        assert_eq!(kept.len(), 3);
        assert_eq!(used, vec![live], "only the one used since it was put");
        assert!(cache.to_sweep().1.is_empty(), "a use is recorded by one sweep");

        // A credential verified by a request after the sweep read its list is not the sweep's.
        cache.put("later".into(), t0, later, "later".into(), node);
        let began = t0 + NODE_CREDENTIAL_CACHE / 2;
        cache.swept(began, &kept, &[(live, Some(node)), (rebound, Some(Uuid::new_v4()))]);
        let after_a_second = t0 + NODE_CREDENTIAL_CACHE;
        assert!(cache.get("live", after_a_second).is_some(), "taken a second from the sweep's start");
        assert!(cache.get("live", began + NODE_CREDENTIAL_CACHE).is_none(), "never longer");
        assert!(cache.get("revoked", t0).is_none(), "revoked: forgotten");
        assert!(cache.get("rebound", t0).is_none(), "bound to another node: forgotten");
        assert!(cache.get("later", t0).is_some(), "kept since the sweep began: left");
        assert!(cache.get("later", after_a_second).is_none());
    }
}

/// Who reports a service's load: a token scoped to that one service (what its replicas or its
/// gateway hold), or a person or API token that may write in the service's tenant. The handler
/// checks the service against it ([`LoadReporter::ensure_service`]).
#[derive(Debug, Clone)]
pub enum LoadReporter {
    Service { token_id: Uuid, service_id: Uuid, token_name: String },
    Caller(Caller),
}

impl LoadReporter {
    /// Who reports, as the domain checks it ([`crate::domain::Reporter::ensure_service`]).
    pub fn reporter(&self) -> crate::domain::Reporter {
        match self {
            LoadReporter::Service { service_id, .. } => {
                crate::domain::Reporter::ServiceToken { service_id: *service_id }
            }
            LoadReporter::Caller(caller) => crate::domain::Reporter::Scope(caller.scope()),
        }
    }
}

impl<S> FromRequestParts<S> for LoadReporter
where
    Arc<AuthContext>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let auth = Arc::<AuthContext>::from_ref(state);
        let token = bearer(parts)?.ok_or(ApiError::Unauthorized(MISSING))?;
        if TokenKind::of(token) != Some(TokenKind::Service) {
            return Ok(LoadReporter::Caller(Caller::from_request_parts(parts, state).await?));
        }
        let (token_id, service_id, token_name) = service_caller(&auth, token).await?;
        // Replicas report every few seconds: the agents' larger bucket, per token.
        let key = crate::auth::Reporter::Service(token_id);
        auth.node_mutations.check(&key, Instant::now()).map_err(ApiError::too_many_requests)?;
        Ok(LoadReporter::Service { token_id, service_id, token_name })
    }
}

/// A live service token's id, service and name; 401 for anything else (revoked, unknown, or its
/// service deleted).
async fn service_caller(auth: &AuthContext, token: &str) -> ApiResult<(Uuid, Uuid, String)> {
    if !tokens::well_formed(token, TokenKind::Service) {
        return Err(ApiError::Unauthorized(INVALID));
    }
    let row: Option<(Uuid, Uuid, String, bool)> = sqlx::query_as(
        "SELECT k.id, k.service_id, k.name, \
                (k.last_used_at IS NULL OR k.last_used_at < now() - interval '60 seconds') AS stale \
         FROM service_tokens k JOIN services s ON s.id = k.service_id \
         WHERE k.sha256 = $1 AND k.revoked_at IS NULL AND s.state <> 'deleted'",
    )
    .bind(tokens::hash(token))
    .fetch_optional(&auth.db)
    .await?;
    let Some((id, service_id, name, stale)) = row else {
        return Err(ApiError::Unauthorized(INVALID));
    };
    if stale {
        sqlx::query("UPDATE service_tokens SET last_used_at = now() WHERE id = $1").bind(id).execute(&auth.db).await?;
    }
    Ok((id, service_id, name))
}
