//! The OpenAPI 3 document of the whole API, generated from the handlers themselves: every route is
//! registered through `utoipa_axum::routes!`, which takes its path, method, parameters, bodies and
//! responses from the handler's `#[utoipa::path]`, so the document cannot drift from the router.
//! [`documented_only`] makes sure of the rest: a route under `/api/v1` that is not in the document
//! answers 500 and logs why, so an undocumented route never ships unnoticed.
//!
//! Every operation names the least role that may call it in the extension [`ACCESS_EXTENSION`]
//! (one of [`ACCESS_LEVELS`]); the access-matrix test reads it to know what to expect of each
//! role, and the security requirement says which credential it takes.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa::Modify;
use utoipa::OpenApi as _;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::error::ApiError;

/// The extension on every operation naming who may call it.
pub const ACCESS_EXTENSION: &str = "x-airtime-access";

/// The access levels, from the most open:
/// - `public`: anyone, no credential (login, enrolment, health, this document);
/// - `viewer`: any person or API token with a role (what they see is their tenant's);
/// - `tenant_member`: submit and cancel the tenant's work;
/// - `tenant_admin`: the tenant's policies, members, tokens, audit log;
/// - `platform_admin`: the fleet, tenants, quotas, priority settings, the platform policy;
/// - `agent`: a node agent's own credential, for its own node only.
pub const ACCESS_LEVELS: [&str; 6] = ["public", "viewer", "tenant_member", "tenant_admin", "platform_admin", "agent"];

/// Security scheme names used in `security(...)` of the handlers.
pub const SESSION: &str = "session";
pub const API_TOKEN: &str = "api_token";
pub const NODE_CREDENTIAL: &str = "node_credential";
pub const SERVICE_TOKEN: &str = "service_token";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Airtime API",
        description = "Airtime decides which workload runs on which GPU (or CPU) of a fleet, and explains \
            every decision. Authenticate with `Authorization: Bearer <token>`: a session from \
            `POST /api/v1/auth/login`, an API token (`at_…`), or — for node agents — the node's \
            credential (`nc_…`). Errors are always `{\"error\": {\"code\", \"message\"}}`; another \
            tenant's resource answers 404, exactly like one that does not exist.",
        license(name = "Apache-2.0"),
    ),
    modifiers(&SecuritySchemes),
    components(schemas(ErrorResponse, ErrorBody)),
    tags(
        (name = "auth", description = "Logging in, the caller's account, users and memberships, API tokens"),
        (name = "workloads", description = "Submit, list, inspect and cancel workloads"),
        (name = "services", description = "Elastic inference services: replicas that follow reported load"),
        (name = "fleet", description = "Nodes and GPUs with their latest telemetry"),
        (name = "policies", description = "Scheduling policies: Wasm modules, versions, activation"),
        (name = "decisions", description = "What policies decided, and why"),
        (name = "tenants", description = "Tenants and their quotas"),
        (name = "settings", description = "Platform priority settings"),
        (name = "audit", description = "Who changed what, when, from where"),
        (name = "agent", description = "The node agents' protocol (docs/agent-protocol.md)"),
        (name = "health", description = "Liveness, readiness, metrics, this document"),
    )
)]
pub struct ApiDoc;

/// Every error: `{"error": {"code": "...", "message": "..."}}` (one definition, in `airtime-protocol`).
pub use airtime_protocol::agent::{ErrorBody, ErrorResponse};

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |format: &str, description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format(format)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            SESSION,
            bearer("JWT", "A session from POST /api/v1/auth/login (HS256 JWT, short-lived)."),
        );
        components.add_security_scheme(
            API_TOKEN,
            bearer("at_<64 hex>", "An API token from POST /api/v1/tokens, shown once at creation."),
        );
        components.add_security_scheme(
            NODE_CREDENTIAL,
            bearer("nc_<64 hex>", "A node agent's credential from POST /api/v1/agent/enrol, scoped to its node."),
        );
        components.add_security_scheme(
            SERVICE_TOKEN,
            bearer(
                "st_<64 hex>",
                "A service token from POST /api/v1/services/{id}/tokens: reports that service's load, nothing else.",
            ),
        );
    }
}

static DOCUMENT: OnceLock<String> = OnceLock::new();

/// The set of documented paths, for [`documented_only`].
pub type DocumentedPaths = Arc<HashSet<String>>;

/// Keeps the document split from the router (`server::app`), completed with the error responses
/// every authenticated operation can give, and returns its paths. The document is the same for
/// every configuration, so the first one installed in a process is kept.
pub fn install(mut doc: utoipa::openapi::OpenApi) -> DocumentedPaths {
    complete(&mut doc);
    let paths = doc.paths.paths.keys().cloned().collect();
    let _ = DOCUMENT.set(doc.to_pretty_json().unwrap_or_else(|_| "{}".into()));
    Arc::new(paths)
}

/// Adds 401, 403 and 429 to every operation that needs a credential, and 400 to every one.
fn complete(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{RefOr, Response as DocResponse, ResponseBuilder};
    let error = |description: &str| -> RefOr<DocResponse> {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    utoipa::openapi::ContentBuilder::new()
                        .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorResponse")))
                        .build(),
                )
                .build(),
        )
    };
    for item in doc.paths.paths.values_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
            &mut item.head,
            &mut item.options,
            &mut item.trace,
        ]
        .into_iter()
        .flatten()
        {
            let public = operation.security.as_ref().is_some_and(|s| {
                s.iter().all(|r| serde_json::to_value(r).is_ok_and(|v| v.as_object().is_some_and(|o| o.is_empty())))
            });
            let responses = &mut operation.responses.responses;
            responses.entry("400".into()).or_insert_with(|| {
                error("Malformed request: body, path or query (unknown fields and NUL characters are refused)")
            });
            responses
                .entry("429".into())
                .or_insert_with(|| error("Too many requests (from this credential or address); see Retry-After"));
            if !public {
                responses
                    .entry("401".into())
                    .or_insert_with(|| error("No credential, or an invalid, expired or revoked one"));
                responses.entry("403".into()).or_insert_with(|| error("The caller's role does not allow this"));
            }
        }
    }
}

/// The document as JSON (empty until the router was built).
pub fn document_json() -> &'static str {
    DOCUMENT.get().map_or("{}", String::as_str)
}

/// Middleware (`from_fn_with_state`): a matched route absent from the document is refused (500,
/// logged) instead of served.
pub async fn documented_only(State(paths): State<DocumentedPaths>, request: Request, next: Next) -> Response {
    if let Some(path) = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str)
        && !paths.contains(path)
    {
        tracing::error!(route = path, "route missing from the OpenAPI document; annotate it with #[utoipa::path]");
        return ApiError::Internal(anyhow::anyhow!("undocumented route {path}")).into_response();
    }
    next.run(request).await
}

/// `GET /api/v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    security(()),
    extensions(("x-airtime-access" = json!("public"))),
    responses((status = 200, description = "This document", content_type = "application/json"))
)]
pub async fn openapi_json() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], document_json())
}

/// The base document (info, tags, security schemes, error schema) the routes are added to.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt as _;

    #[tokio::test]
    async fn an_undocumented_route_is_never_served() {
        let documented: DocumentedPaths = Arc::new(["/documented".to_owned()].into_iter().collect());
        let app = Router::new()
            .route("/documented", get(|| async { "ok" }))
            .route("/forgotten", get(|| async { "secret" }))
            .layer(axum::middleware::from_fn_with_state(documented, documented_only));
        let call = |uri: &'static str| {
            let app = app.clone();
            async move { app.oneshot(Request::get(uri).body(Body::empty()).expect("request")).await.expect("answer") }
        };
        assert_eq!(call("/documented").await.status(), 200);
        assert_eq!(call("/forgotten").await.status(), 500);
    }

    #[test]
    fn every_operation_has_an_id_of_its_own() {
        // Generated clients key operations by id (openapi-typescript's `operations`): two handlers
        // with one name would share one type.
        use clap::Parser;
        let config = crate::config::Config::parse_from(["airtime-control-plane", "--database-url", "postgres://none"]);
        let (_, doc) = crate::api::router(&config).split_for_parts();
        let doc = serde_json::to_value(&doc).expect("json");
        let mut seen: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                let Some(id) = op.get("operationId").and_then(|v| v.as_str()) else { continue };
                let here = format!("{method} {path}");
                if let Some(first) = seen.insert(id.to_owned(), here.clone()) {
                    panic!("operationId {id:?} names both {first} and {here}");
                }
            }
        }
        assert!(seen.len() > 50, "{} operations", seen.len());
    }

    #[test]
    fn the_document_lists_every_access_level_and_security_scheme() {
        let doc = base();
        let schemes = &doc.components.as_ref().expect("components").security_schemes;
        for name in [SESSION, API_TOKEN, NODE_CREDENTIAL, SERVICE_TOKEN] {
            assert!(schemes.contains_key(name), "{name}");
        }
        assert!(ACCESS_LEVELS.contains(&"public") && ACCESS_LEVELS.contains(&"agent"));
    }
}
