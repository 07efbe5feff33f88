//! Node enrolment, beside the agent API it opens: platform admins mint one-time enrolment tokens
//! and see and revoke node credentials; an agent exchanges a token for its node's own credential
//! (`POST /agent/enrol`, public, throttled per address).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use chrono::{Duration as ChronoDuration, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use airtime_protocol::model::NodeName;

use crate::api::extract::{Json, Path};
use crate::api::openapi::ErrorResponse;
use crate::auth::audit::AuditActor;
use crate::auth::caller::ClientIp;
use crate::auth::tokens::{self, EnrolmentTokenView, NodeCredentialView};
use crate::auth::{AuthContext, Caller, SecretString};
use crate::error::{ApiError, ApiResult};

/// Default lifetime of an enrolment token, minutes.
pub const DEFAULT_ENROLMENT_MINUTES: u32 = 60;
/// Longest lifetime of an enrolment token: a week.
pub const MAX_ENROLMENT_MINUTES: u32 = 7 * 24 * 60;

const BAD_ENROLMENT: &str = "invalid, used or expired enrolment token";

pub fn routes<S>() -> OpenApiRouter<S>
where
    Arc<AuthContext>: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    OpenApiRouter::new()
        .routes(routes!(list_enrolment_tokens, create_enrolment_token))
        .routes(routes!(revoke_enrolment_token))
        .routes(routes!(list_node_credentials))
        .routes(routes!(revoke_node_credential))
        .routes(routes!(enrol))
}

#[derive(Debug, Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEnrolmentToken {
    /// Only a node of this name may enrol with it; it then replaces that node's credential.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Minutes until it expires: 60 by default, at most a week.
    #[serde(default)]
    pub expires_in_minutes: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedEnrolmentToken {
    /// The one-time token: shown this once. Give it to the agent (`--enrolment-token`).
    pub token: String,
    #[serde(flatten)]
    pub view: EnrolmentTokenView,
}

#[utoipa::path(
    post,
    path = "/enrolment-tokens",
    tag = "auth",
    request_body(content = CreateEnrolmentToken, example = json!({"expires_in_minutes": 60})),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 201, description = "The one-time token, shown this once", body = CreatedEnrolmentToken), (status = 422, body = ErrorResponse))
)]
async fn create_enrolment_token(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Json(req): Json<CreateEnrolmentToken>,
) -> ApiResult<(StatusCode, axum::Json<CreatedEnrolmentToken>)> {
    caller.require_platform_admin()?;
    let node_name = match &req.node_name {
        Some(name) => Some(NodeName::parse(name).map_err(|m| ApiError::unprocessable("invalid_node_name", m))?),
        None => None,
    };
    let minutes = req.expires_in_minutes.unwrap_or(DEFAULT_ENROLMENT_MINUTES);
    if minutes == 0 || minutes > MAX_ENROLMENT_MINUTES {
        return Err(ApiError::unprocessable(
            "invalid_enrolment_token",
            format!("expires_in_minutes must be 1 to {MAX_ENROLMENT_MINUTES}"),
        ));
    }
    let expires_at = Utc::now() + ChronoDuration::minutes(i64::from(minutes));
    let (view, secret) =
        tokens::create_enrolment_token(&auth.db, &caller.scope(), node_name.as_ref().map(NodeName::as_str), expires_at)
            .await?;
    Ok((StatusCode::CREATED, axum::Json(CreatedEnrolmentToken { token: secret.expose().to_owned(), view })))
}

#[utoipa::path(
    get,
    path = "/enrolment-tokens",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Enrolment tokens, never the secrets", body = [EnrolmentTokenView]))
)]
async fn list_enrolment_tokens(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
) -> ApiResult<axum::Json<Vec<EnrolmentTokenView>>> {
    caller.require_platform_admin()?;
    Ok(axum::Json(tokens::list_enrolment_tokens(&auth.db).await?))
}

#[utoipa::path(
    delete,
    path = "/enrolment-tokens/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "Enrolment token id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Revoked", body = EnrolmentTokenView), (status = 404, body = ErrorResponse))
)]
async fn revoke_enrolment_token(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<EnrolmentTokenView>> {
    Ok(axum::Json(tokens::revoke_enrolment_token(&auth.db, &caller.scope(), id).await?))
}

#[utoipa::path(
    get,
    path = "/node-credentials",
    tag = "auth",
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Node credentials, never the secrets", body = [NodeCredentialView]))
)]
async fn list_node_credentials(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
) -> ApiResult<axum::Json<Vec<NodeCredentialView>>> {
    caller.require_platform_admin()?;
    Ok(axum::Json(tokens::list_node_credentials(&auth.db).await?))
}

/// Revokes a node's credential: its agent is refused from now on (a compromised or retired host).
#[utoipa::path(
    delete,
    path = "/node-credentials/{id}",
    tag = "auth",
    params(("id" = Uuid, Path, description = "Node credential id")),
    security(("session" = []), ("api_token" = [])),
    extensions(("x-airtime-access" = json!("platform_admin"))),
    responses((status = 200, description = "Revoked: the node's agent is refused from now on", body = NodeCredentialView), (status = 404, body = ErrorResponse))
)]
async fn revoke_node_credential(
    State(auth): State<Arc<AuthContext>>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<NodeCredentialView>> {
    let view = tokens::revoke_node_credential(&auth.db, &caller.scope(), id).await?;
    // This replica refuses it from now on; another refuses it within NODE_CREDENTIAL_CACHE.
    auth.node_credentials.forget_all();
    Ok(axum::Json(view))
}

pub use airtime_protocol::agent::{EnrolRequest, Enrolled};

/// The agent's exchange: a one-time enrolment token for the node's own credential. Every refusal is
/// the same 401 (the reason is logged); failures are throttled per address.
#[utoipa::path(
    post,
    path = "/agent/enrol",
    tag = "agent",
    request_body(content = EnrolRequest, example = json!({"enrolment_token": "et_0000000000000000000000000000000000000000000000000000000000000000", "name": "gpu-node-7"})),
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 201, description = "The node credential, shown this once", body = Enrolled), (status = 401, description = "Invalid, used, revoked or expired enrolment token", body = ErrorResponse), (status = 429, body = ErrorResponse))
)]
async fn enrol(
    State(auth): State<Arc<AuthContext>>,
    ClientIp(ip): ClientIp,
    Json(req): Json<EnrolRequest>,
) -> ApiResult<(StatusCode, axum::Json<Enrolled>)> {
    let name = NodeName::parse(&req.name).map_err(|m| ApiError::unprocessable("invalid_node_name", m))?;
    // Keyed on the address alone: a guesser cycling node names is throttled all the same.
    auth.logins.check(ENROL_THROTTLE_KEY, ip, Instant::now()).map_err(ApiError::too_many_requests)?;
    let enrolment_token = SecretString::new(req.enrolment_token.clone());
    let actor = AuditActor::anonymous("node", name.as_str(), ip);
    let tokens::Enrolment { view, credential, .. } =
        match tokens::enrol(&auth.db, &actor, &enrolment_token, name.as_str()).await? {
            Ok(done) => done,
            Err(refusal) => {
                auth.logins.record_failure(ENROL_THROTTLE_KEY, ip, Instant::now());
                tracing::warn!(node = %name, ip = ?ip, reason = %refusal, "enrolment refused");
                return Err(ApiError::Unauthorized(BAD_ENROLMENT));
            }
        };
    // The node's previous credential, if any, was revoked: refused here from now on.
    auth.node_credentials.forget_all();
    tracing::info!(node = %name, credential = %view.prefix, "node enrolled");
    Ok((
        StatusCode::CREATED,
        axum::Json(Enrolled {
            credential: credential.expose().to_owned(),
            credential_id: view.id,
            node_name: view.node_name,
        }),
    ))
}

const ENROL_THROTTLE_KEY: &str = "\u{0}enrolment";
