//! The access-control routes in process (`tower::ServiceExt::oneshot`), against a fresh PostgreSQL
//! database per test (`AIRTIME_TEST_DATABASE_URL`, as the end-to-end tests use): bootstrap, login
//! and its throttling, sessions and their revocation, API tokens, enrolment, and the audit log.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use airtime_control_plane::auth::caller::NodeCaller;
use airtime_control_plane::auth::{AuthContext, AuthSettings, Caller, SecretString, bootstrap};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::{get, post};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

const SECRET: &[u8] = b"an-in-process-test-secret-of-enough-bytes";
const ADMIN: &str = "root@example.com";
const ADMIN_PASSWORD: &str = "correct horse battery staple";

struct Db {
    name: String,
    admin_url: String,
    pool: sqlx::PgPool,
}

impl Db {
    async fn create() -> Db {
        let admin_url = std::env::var("AIRTIME_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("airtime_auth_{}", uuid::Uuid::new_v4().simple());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url).await.expect("PostgreSQL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
        let base = admin_url.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap();
        let pool = airtime_control_plane::db::connect(&format!("{base}/{name}"), 4).await.expect("migrated");
        Db { name, admin_url, pool }
    }

    async fn drop_db(self) {
        self.pool.close().await;
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&self.admin_url).await.unwrap();
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)))
            .execute(&mut conn)
            .await;
    }
}

/// The auth routes, plus two probes: one for people and tokens, one for node agents.
fn app(auth: Arc<AuthContext>) -> Router {
    async fn whoami(caller: Caller) -> String {
        format!("{} {:?}", caller.role, caller.tenant)
    }
    async fn node_probe(node: NodeCaller) -> String {
        node.node_name
    }
    Router::new()
        .nest("/api/v1", Router::from(airtime_control_plane::api::auth::routes()))
        .nest("/api/v1", Router::from(airtime_control_plane::api::users::routes()))
        .nest("/api/v1", Router::from(airtime_control_plane::api::enrolment::routes()))
        .nest("/api/v1", Router::from(airtime_control_plane::api::invitations::routes()))
        .route("/probe", get(whoami).post(whoami))
        .route("/node-probe", post(node_probe))
        .with_state(auth)
}

struct Client {
    app: Router,
}

impl Client {
    async fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = match body {
            Some(b) => req.header(header::CONTENT_TYPE, "application/json").body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        (status, body)
    }

    async fn login(&self, email: &str, password: &str, tenant: Option<&str>) -> (StatusCode, Value) {
        let mut body = json!({"email": email, "password": password});
        if let Some(t) = tenant {
            body["tenant"] = json!(t);
        }
        self.call("POST", "/api/v1/auth/login", None, Some(body)).await
    }

    async fn session(&self, email: &str, password: &str) -> String {
        let (status, body) = self.login(email, password, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["token"].as_str().unwrap().to_owned()
    }
}

async fn setup(settings: AuthSettings) -> (Db, Client) {
    let db = Db::create().await;
    bootstrap::create_first_admin(&db.pool, ADMIN, &SecretString::new(ADMIN_PASSWORD)).await.expect("bootstrap");
    let auth = AuthContext::new(db.pool.clone(), SECRET, settings).unwrap();
    (db, Client { app: app(auth) })
}

async fn tenant(db: &Db, name: &str) -> uuid::Uuid {
    let id = uuid::Uuid::now_v7();
    sqlx::query("INSERT INTO tenants (id, name) VALUES ($1, $2)").bind(id).bind(name).execute(&db.pool).await.unwrap();
    id
}

#[tokio::test]
async fn bootstrap_happens_once_and_the_admin_logs_in() {
    let (db, c) = setup(AuthSettings::default()).await;
    let again = bootstrap::create_first_admin(&db.pool, "other@example.com", &SecretString::new(ADMIN_PASSWORD)).await;
    assert!(again.unwrap_err().to_string().contains("exists already"));

    let (status, body) = c.login(ADMIN, "wrong password entirely", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, body) = c.login("nobody@example.com", ADMIN_PASSWORD, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["message"], "invalid login name or password", "no hint which part was wrong");

    let token = c.session("ROOT@example.com", ADMIN_PASSWORD).await;
    let (status, me) = c.call("GET", "/api/v1/auth/me", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["role"], "platform_admin");
    assert_eq!(me["email"], ADMIN);
    db.drop_db().await;
}

#[tokio::test]
async fn missing_or_bad_credentials_are_401_with_www_authenticate() {
    let (db, c) = setup(AuthSettings::default()).await;
    for token in [None, Some("garbage"), Some("at_0000"), Some(&*format!("at_{}", "a".repeat(64)))] {
        let mut req = Request::builder().uri("/probe");
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let resp = c.app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(resp.headers()[header::WWW_AUTHENTICATE], "Bearer realm=\"airtime\"");
    }
    db.drop_db().await;
}

#[tokio::test]
async fn logins_are_throttled_per_name_and_address() {
    let settings = AuthSettings { login_max_failures: 3, ..AuthSettings::default() };
    let (db, c) = setup(settings).await;
    for _ in 0..3 {
        assert_eq!(c.login(ADMIN, "not the password at all", None).await.0, StatusCode::UNAUTHORIZED);
    }
    let (status, body) = c.login(ADMIN, ADMIN_PASSWORD, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "even the right password waits: {body}");
    assert_eq!(body["error"]["code"], "rate_limited");
    db.drop_db().await;
}

#[tokio::test]
async fn tenant_users_tokens_and_their_limits() {
    let (db, c) = setup(AuthSettings::default()).await;
    let acme = tenant(&db, "acme").await;
    let globex = tenant(&db, "globex").await;
    let root = c.session(ADMIN, ADMIN_PASSWORD).await;

    // A platform admin creates a tenant admin; the tenant admin creates a member.
    let (status, body) = c
        .call("POST", "/api/v1/users", Some(&root), Some(json!({"email": "ann@acme.io", "password": "ann's long password", "tenant": "acme", "role": "tenant_admin"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(!body.to_string().contains("ann's long password"));
    let ann = c.session("ann@acme.io", "ann's long password").await;
    let (status, body) = c
        .call(
            "POST",
            "/api/v1/users",
            Some(&ann),
            Some(json!({"email": "bob@acme.io", "password": "bob's long password"})),
        )
        .await;
    // A tenant admin invites: the same answer whether or not the login name has an account.
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"email": "bob@acme.io", "tenant": "acme", "role": "tenant_member", "status": "invited"}));
    let (status, pending) = c.call("GET", &format!("/api/v1/tenants/{acme}/invitations"), Some(&ann), None).await;
    assert_eq!((status, pending[0]["email"].clone()), (StatusCode::OK, json!("bob@acme.io")), "{pending}");
    // Bob's first login (with the password Ann chose) accepts it.
    c.session("bob@acme.io", "bob's long password").await;
    let (_, members) = c.call("GET", &format!("/api/v1/tenants/{acme}/members"), Some(&ann), None).await;
    let bob = members.as_array().unwrap().iter().find(|m| m["email"] == "bob@acme.io").unwrap().clone();
    assert_eq!(bob["role"], "tenant_member");
    let bob_id = bob["user_id"].as_str().unwrap().to_owned();
    assert_eq!(c.call("GET", &format!("/api/v1/tenants/{acme}/invitations"), Some(&ann), None).await.1, json!([]));
    // A tenant admin cannot create platform admins, nor users in another tenant (which is "not found").
    let (status, _) = c
        .call(
            "POST",
            "/api/v1/users",
            Some(&ann),
            Some(json!({"email": "eve@x.io", "password": "eve's long password", "platform_admin": true})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = c
        .call(
            "POST",
            "/api/v1/users",
            Some(&ann),
            Some(json!({"email": "eve@x.io", "password": "eve's long password", "tenant": "globex"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Nor see another tenant's members.
    let (status, _) = c.call("GET", &format!("/api/v1/tenants/{globex}/members"), Some(&ann), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, members) = c.call("GET", &format!("/api/v1/tenants/{acme}/members"), Some(&ann), None).await;
    assert_eq!((status, members.as_array().unwrap().len()), (StatusCode::OK, 2), "{members}");

    // Bob (member) makes a token: at most his own role.
    let bob = c.session("bob@acme.io", "bob's long password").await;
    let (status, _) =
        c.call("POST", "/api/v1/tokens", Some(&bob), Some(json!({"name": "ci", "role": "tenant_admin"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, created) = c.call("POST", "/api/v1/tokens", Some(&bob), Some(json!({"name": "ci"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["token"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("at_") && secret.starts_with(created["prefix"].as_str().unwrap()));
    assert_eq!(created["role"], "tenant_member");
    let (status, probe) = c.call("GET", "/probe", Some(&secret), None).await;
    assert_eq!((status, probe), (StatusCode::OK, json!(format!("tenant_member Some({acme})"))));
    // The secret is stored only as its hash.
    let stored: Vec<(String,)> =
        sqlx::query_as("SELECT secret_sha256 FROM api_tokens").fetch_all(&db.pool).await.unwrap();
    assert!(stored.iter().all(|(h,)| !h.contains(&secret[3..]) && h.len() == 64));
    // last_used_at is set on use.
    let (_, list) = c.call("GET", "/api/v1/tokens", Some(&bob), None).await;
    assert!(list[0]["last_used_at"].is_string(), "{list}");
    assert!(list[0].get("token").is_none(), "a list never shows the secret");

    // Lowering Bob to viewer lowers his token too; removing him ends it.
    let (status, _) = c
        .call("PUT", &format!("/api/v1/tenants/{acme}/members/{bob_id}"), Some(&ann), Some(json!({"role": "viewer"})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c.call("GET", "/probe", Some(&secret), None).await.1, json!(format!("viewer Some({acme})")));
    assert_eq!(c.call("GET", "/probe", Some(&bob), None).await.1, json!(format!("viewer Some({acme})")));

    // A tenant admin of another tenant cannot see or revoke it: 404.
    let (status, body) = c
        .call("POST", "/api/v1/users", Some(&root), Some(json!({"email": "gus@globex.io", "password": "gus's long password", "tenant": "globex", "role": "tenant_admin"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let gus = c.session("gus@globex.io", "gus's long password").await;
    // Gus cannot pull a user of another tenant, nor a platform admin, into his tenant: they are
    // answered like users that do not exist, and nothing about them is revealed.
    let (_, root_me) = c.call("GET", "/api/v1/auth/me", Some(&root), None).await;
    for victim in [root_me["user_id"].as_str().unwrap(), bob_id.as_str(), &uuid::Uuid::new_v4().to_string()] {
        let (status, body) = c
            .call(
                "PUT",
                &format!("/api/v1/tenants/{globex}/members/{victim}"),
                Some(&gus),
                Some(json!({"role": "viewer"})),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(!body.to_string().contains('@'), "no email revealed: {body}");
    }
    // So the victims' plain logins still work (they belong to one tenant, or none).
    c.session(ADMIN, ADMIN_PASSWORD).await;
    // Nor can Gus learn who has an account: inviting a login name that has one (Ann's, in acme)
    // answers exactly as inviting one that has none.
    let invite = |email: &str| json!({"email": email, "password": "a long enough password", "role": "viewer"});
    let (existing_status, existing) = c.call("POST", "/api/v1/users", Some(&gus), Some(invite("ann@acme.io"))).await;
    let (fresh_status, fresh) = c.call("POST", "/api/v1/users", Some(&gus), Some(invite("newcomer@globex.io"))).await;
    assert_eq!((existing_status, fresh_status), (StatusCode::ACCEPTED, StatusCode::ACCEPTED));
    assert_eq!(existing["email"], "ann@acme.io");
    assert_eq!(
        (existing["status"].clone(), existing["tenant"].clone()),
        (fresh["status"].clone(), fresh["tenant"].clone())
    );
    // Ann's account is untouched (her own password, acme alone) until she decides.
    let ann_now = c.session("ann@acme.io", "ann's long password").await;
    let (_, mine) = c.call("GET", "/api/v1/auth/invitations", Some(&ann_now), None).await;
    assert_eq!((mine[0]["tenant"].clone(), mine[0]["role"].clone()), (json!("globex"), json!("viewer")), "{mine}");
    let (status, _) =
        c.call("POST", "/api/v1/auth/invitations/decline", Some(&ann_now), Some(json!({"tenant": "globex"}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(c.call("GET", "/api/v1/auth/invitations", Some(&ann_now), None).await.1, json!([]));
    let token_id = created["id"].as_str().unwrap();
    assert_eq!(
        c.call("DELETE", &format!("/api/v1/tokens/{token_id}"), Some(&gus), None).await.0,
        StatusCode::NOT_FOUND
    );
    let (_, gus_tokens) = c.call("GET", "/api/v1/tokens", Some(&gus), None).await;
    assert_eq!(gus_tokens, json!([]));
    // Ann (its tenant's admin) revokes it; it is refused from then on.
    let (status, revoked) = c.call("DELETE", &format!("/api/v1/tokens/{token_id}"), Some(&ann), None).await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    assert_eq!(c.call("GET", "/probe", Some(&secret), None).await.0, StatusCode::UNAUTHORIZED);

    // Removing Bob's membership ends his session.
    let (status, _) = c.call("DELETE", &format!("/api/v1/tenants/{acme}/members/{bob_id}"), Some(&ann), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(c.call("GET", "/probe", Some(&bob), None).await.0, StatusCode::UNAUTHORIZED);

    // The audit log has each change; Ann sees her tenant's entries only, Bob (gone) nothing.
    let (status, entries) = c.call("GET", "/api/v1/audit", Some(&root), None).await;
    assert_eq!(status, StatusCode::OK);
    let actions: Vec<&str> = entries.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for action in
        ["user.bootstrap_admin", "user.create", "token.create", "token.revoke", "membership.set", "membership.remove"]
    {
        assert!(actions.contains(&action), "{action} missing from {actions:?}");
    }
    assert!(!entries.to_string().contains(&secret[3..]), "no secret in the audit log");
    let (_, ann_entries) = c.call("GET", "/api/v1/audit", Some(&ann), None).await;
    assert!(ann_entries.as_array().unwrap().iter().all(|e| e["tenant_id"] == json!(acme)), "{ann_entries}");
    let (_, gus_entries) = c.call("GET", "/api/v1/audit", Some(&gus), None).await;
    assert!(gus_entries.as_array().unwrap().iter().all(|e| e["tenant_id"] == json!(globex)), "{gus_entries}");
    db.drop_db().await;
}

#[tokio::test]
async fn a_password_change_ends_earlier_sessions_and_disabling_ends_all() {
    let (db, c) = setup(AuthSettings::default()).await;
    tenant(&db, "acme").await;
    let root = c.session(ADMIN, ADMIN_PASSWORD).await;
    let (_, user) = c
        .call(
            "POST",
            "/api/v1/users",
            Some(&root),
            Some(json!({"email": "ann@acme.io", "password": "ann's long password", "tenant": "acme"})),
        )
        .await;
    let ann = c.session("ann@acme.io", "ann's long password").await;
    // No pause: a session issued in the same second as the change ends too (sessions carry the
    // user's session generation, not a time to compare to the second).
    let (status, _) = c
        .call(
            "POST",
            "/api/v1/auth/password",
            Some(&ann),
            Some(json!({"current_password": "ann's long password", "new_password": "ann's new long password"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(c.call("GET", "/probe", Some(&ann), None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(c.login("ann@acme.io", "ann's long password", None).await.0, StatusCode::UNAUTHORIZED);
    // And one issued in that same second after the change is valid.
    let ann = c.session("ann@acme.io", "ann's new long password").await;
    assert_eq!(c.call("GET", "/probe", Some(&ann), None).await.0, StatusCode::OK);

    let id = user["id"].as_str().unwrap();
    let (status, _) =
        c.call("PATCH", &format!("/api/v1/users/{id}"), Some(&root), Some(json!({"disabled": true}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c.call("GET", "/probe", Some(&ann), None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(c.login("ann@acme.io", "ann's new long password", None).await.0, StatusCode::UNAUTHORIZED);

    // The last platform admin cannot be disabled.
    let (_, me) = c.call("GET", "/api/v1/auth/me", Some(&root), None).await;
    let root_id = me["user_id"].as_str().unwrap();
    let (status, body) =
        c.call("PATCH", &format!("/api/v1/users/{root_id}"), Some(&root), Some(json!({"disabled": true}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    db.drop_db().await;
}

#[tokio::test]
async fn enrolment_is_one_time_and_the_credential_is_for_agents_only() {
    let (db, c) = setup(AuthSettings::default()).await;
    let root = c.session(ADMIN, ADMIN_PASSWORD).await;
    let (status, et) = c.call("POST", "/api/v1/enrolment-tokens", Some(&root), Some(json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{et}");
    let enrolment = et["token"].as_str().unwrap().to_owned();
    assert!(enrolment.starts_with("et_"));
    // The enrolment token itself is no bearer credential.
    assert_eq!(c.call("GET", "/probe", Some(&enrolment), None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(c.call("POST", "/node-probe", Some(&enrolment), None).await.0, StatusCode::UNAUTHORIZED);

    let (status, enrolled) =
        c.call("POST", "/api/v1/agent/enrol", None, Some(json!({"enrolment_token": enrolment, "name": "gpu-1"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{enrolled}");
    let credential = enrolled["credential"].as_str().unwrap().to_owned();
    assert!(credential.starts_with("nc_"));
    // Used once: a second exchange (or another node with the same token) is refused.
    let (status, _) =
        c.call("POST", "/api/v1/agent/enrol", None, Some(json!({"enrolment_token": enrolment, "name": "gpu-2"}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    assert_eq!(c.call("POST", "/node-probe", Some(&credential), None).await, (StatusCode::OK, json!("gpu-1")));
    // A node credential is not a user's: 403 on people's routes; a user's is refused on agents' routes.
    assert_eq!(c.call("GET", "/probe", Some(&credential), None).await.0, StatusCode::FORBIDDEN);
    assert_eq!(c.call("POST", "/node-probe", Some(&root), None).await.0, StatusCode::UNAUTHORIZED);

    // A general token cannot take over an enrolled node; a token made for its name replaces the credential.
    let (_, et2) = c.call("POST", "/api/v1/enrolment-tokens", Some(&root), Some(json!({}))).await;
    let (status, _) = c
        .call("POST", "/api/v1/agent/enrol", None, Some(json!({"enrolment_token": et2["token"], "name": "gpu-1"})))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, et3) = c.call("POST", "/api/v1/enrolment-tokens", Some(&root), Some(json!({"node_name": "gpu-1"}))).await;
    let (status, again) = c
        .call("POST", "/api/v1/agent/enrol", None, Some(json!({"enrolment_token": et3["token"], "name": "gpu-1"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(
        c.call("POST", "/node-probe", Some(&credential), None).await.0,
        StatusCode::UNAUTHORIZED,
        "old one revoked"
    );
    let new_credential = again["credential"].as_str().unwrap();
    assert_eq!(c.call("POST", "/node-probe", Some(new_credential), None).await.0, StatusCode::OK);

    // Revoked by a platform admin: refused.
    let id = again["credential_id"].as_str().unwrap();
    assert_eq!(c.call("DELETE", &format!("/api/v1/node-credentials/{id}"), Some(&root), None).await.0, StatusCode::OK);
    assert_eq!(c.call("POST", "/node-probe", Some(new_credential), None).await.0, StatusCode::UNAUTHORIZED);
    db.drop_db().await;
}

#[tokio::test]
async fn mutations_are_rate_limited_per_credential() {
    let settings = AuthSettings { mutations_per_minute: 60, mutation_burst: 3, ..AuthSettings::default() };
    let (db, c) = setup(settings).await;
    let root = c.session(ADMIN, ADMIN_PASSWORD).await;
    for _ in 0..3 {
        assert_eq!(c.call("POST", "/probe", Some(&root), None).await.0, StatusCode::OK);
    }
    let (status, body) = c.call("POST", "/probe", Some(&root), None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    // Reads are not limited.
    assert_eq!(c.call("GET", "/probe", Some(&root), None).await.0, StatusCode::OK);
    db.drop_db().await;
}
