//! The access matrix: every operation of the served OpenAPI document × every kind of caller, each
//! answer checked against what the operation declares — its access level (`x-airtime-access`) and
//! its security schemes. The control plane serves only documented routes (an undocumented one
//! answers 500), so a new route is in this matrix the moment it exists; a new path parameter fails
//! the test until it has a fixture below.
//!
//! Callers: no token, an expired session, a session with a forged signature, a revoked API token,
//! a platform admin, tenant A's admin, member (session and API token) and viewer, tenant B's admin
//! and viewer (another tenant), node X's agent (the node in the paths) and node Y's agent (another
//! node). Every resource in a path belongs to tenant A or to the platform, and is made fresh for
//! each request, so the order of the calls does not matter.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use airtime_tests::{ADMIN_EMAIL, Api, ControlPlane, TEST_JWT_SECRET, TestDb, eventually};
use serde_json::{Value, json};
use uuid::Uuid;

/// The operations anyone may call without a credential. Adding one is a decision: it goes here.
const PUBLIC: [&str; 6] = [
    "POST /api/v1/auth/login",
    "POST /api/v1/agent/enrol",
    "GET /api/v1/openapi.json",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tenant {
    A,
    B,
    Platform,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// No credential, or one that must be refused whatever the route (expired, forged, revoked).
    Refused,
    /// A person (session) or an API token, with its rank (1 viewer … 4 platform admin).
    Person { scheme: &'static str, rank: u8, tenant: Tenant },
    /// A node agent; `own` when the node in the paths is its own.
    Node { own: bool },
}

struct Caller {
    name: &'static str,
    token: Option<String>,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Anything but 403 or 5xx: the credential plays no part.
    Public,
    /// 401 with WWW-Authenticate.
    Unauthorized,
    /// Not 401, 403, 404, 429, nor 5xx: the call was let through (it may still be a 4xx of its own).
    Allowed,
    /// 401, 403 or 404.
    Denied,
    /// Exactly 404: another tenant's (or node's) resource, indistinguishable from a missing one.
    Hidden,
}

fn rank(level: &str) -> u8 {
    match level {
        "viewer" => 1,
        "tenant_member" => 2,
        "tenant_admin" => 3,
        "platform_admin" => 4,
        other => panic!("unknown access level {other}"),
    }
}

struct Operation {
    method: String,
    path: String,
    access: String,
    schemes: Vec<String>,
    json_body: Option<Value>,
    wasm_body: bool,
    query: String,
    path_params: Vec<String>,
}

impl Operation {
    fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

fn operations(doc: &Value) -> Vec<Operation> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if !["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            let label = format!("{} {path}", method.to_uppercase());
            let access = op["x-airtime-access"].as_str().unwrap_or_else(|| panic!("{label}: no x-airtime-access"));
            assert!(
                ["public", "viewer", "tenant_member", "tenant_admin", "platform_admin", "agent"].contains(&access),
                "{label}: unknown access level {access}"
            );
            let schemes: Vec<String> = op["security"]
                .as_array()
                .unwrap_or_else(|| panic!("{label}: no security requirement"))
                .iter()
                .flat_map(|r| r.as_object().unwrap().keys().cloned())
                .collect();
            assert_eq!(access == "public", schemes.is_empty(), "{label}: public exactly when no scheme is required");
            if access == "public" {
                assert!(PUBLIC.contains(&label.as_str()), "{label} is public: add it to PUBLIC if that is intended");
            }
            if access == "agent" {
                assert_eq!(schemes, ["node_credential"], "{label}");
            }
            // Every operation documents the answers every operation can give: a malformed request
            // (400) and rate limiting (429).
            for status in ["400", "429"] {
                assert!(op["responses"].get(status).is_some(), "{label}: the document omits the {status} answer");
            }
            let content = &op["requestBody"]["content"];
            // Unknown fields are refused, and the document says so.
            if let Some(reference) = content["application/json"]["schema"]["$ref"].as_str() {
                let name = reference.rsplit('/').next().unwrap();
                let schema = &doc["components"]["schemas"][name];
                if schema["type"] == "object" {
                    assert_eq!(
                        schema["additionalProperties"],
                        json!(false),
                        "{label}: {name} refuses unknown fields; the document must say so"
                    );
                }
            }
            let json_body = content.get("application/json").map(|c| {
                c.get("example").cloned().unwrap_or_else(|| panic!("{label}: document an example request body"))
            });
            let wasm_body = content.get("application/wasm").is_some();
            let mut query = Vec::new();
            let mut path_params = Vec::new();
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap().to_owned();
                match p["in"].as_str() {
                    Some("path") => path_params.push(name),
                    Some("query") if p["required"] == true => {
                        let example = p["example"]
                            .as_str()
                            .or(p["schema"]["example"].as_str())
                            .unwrap_or_else(|| panic!("{label}: required query parameter {name} needs an example"));
                        query.push(format!("{name}={example}"));
                    }
                    _ => {}
                }
            }
            out.push(Operation {
                method: method.to_uppercase(),
                path: path.clone(),
                access: access.to_owned(),
                schemes,
                json_body,
                wasm_body,
                query: query.join("&"),
                path_params,
            });
        }
    }
    for public in PUBLIC {
        assert!(out.iter().any(|o| o.label() == public), "{public} is missing from the document");
    }
    out
}

fn expect(op: &Operation, caller: &Caller, owned_by_a: bool) -> Expect {
    if op.access == "public" {
        return Expect::Public;
    }
    match caller.kind {
        Kind::Refused => Expect::Unauthorized,
        Kind::Node { own } => {
            if !op.schemes.iter().any(|s| s == "node_credential") {
                Expect::Denied
            } else if own {
                Expect::Allowed
            } else {
                Expect::Hidden
            }
        }
        Kind::Person { scheme, rank: have, tenant } => {
            if !op.schemes.iter().any(|s| s == scheme) {
                return Expect::Denied;
            }
            let needed = rank(&op.access);
            match (owned_by_a && tenant == Tenant::B, have >= needed) {
                (true, true) => Expect::Hidden,
                (true, false) | (false, false) => Expect::Denied,
                (false, true) => Expect::Allowed,
            }
        }
    }
}

fn satisfied(expect: Expect, status: u16, www_authenticate: bool) -> bool {
    match expect {
        Expect::Public => status != 403 && status < 500,
        Expect::Unauthorized => status == 401 && www_authenticate,
        Expect::Allowed => !matches!(status, 401 | 403 | 404 | 429) && status < 500,
        Expect::Denied => matches!(status, 401 | 403 | 404),
        Expect::Hidden => status == 404,
    }
}

/// What the matrix needs to make fresh resources.
struct World {
    cp_url: String,
    admin: Api,
    a_admin: Api,
    a_member: Api,
    tenant_a: String,
    node_x: String,
    /// A node the maintenance routes (cordon, drain, uncordon) name, so node X keeps taking work.
    node_m: String,
    gpu_x: String,
    spare_credentials: std::sync::Mutex<Vec<String>>,
    /// Tenant A's service whose tokens the token routes name (both path parameters must agree).
    token_service: tokio::sync::OnceCell<String>,
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().unwrap_or_else(|| panic!("no id in {v}")).to_owned()
}

impl World {
    /// A fresh value for a path parameter, and whether the resource belongs to tenant A.
    async fn fixture(&self, path: &str, param: &str) -> (String, bool) {
        let short = Uuid::new_v4().simple().to_string()[..8].to_owned();
        match (path, param) {
            (p, "id") if p.starts_with("/api/v1/workloads/{id}") => (self.workload().await, true),
            ("/api/v1/services/{id}/tokens/{token_id}", "id") => (self.token_service().await, true),
            (p, "id") if p.starts_with("/api/v1/services/{id}") => (self.service().await, true),
            ("/api/v1/services/{id}/tokens/{token_id}", "token_id") => {
                // A fresh token of the service the route's {id} names.
                let service = self.token_service().await;
                let token = self
                    .a_member
                    .created(&format!("/api/v1/services/{service}/tokens"), &json!({"name": "fixture"}))
                    .await
                    .unwrap();
                (id_of(&token), true)
            }
            (p, "id") if p.starts_with("/api/v1/policies/{id}") => {
                let wasm = small_policy();
                let answer = self
                    .a_admin
                    .post_raw(&format!("/api/v1/policies?name=fixture-{short}"), "application/wasm", wasm)
                    .await
                    .unwrap();
                assert_eq!(answer.status, 201, "{}", answer.body);
                (id_of(&answer.body), true)
            }
            (p, "id") if p.starts_with("/api/v1/what-if/{id}") => {
                // A what-if run tenant A's admin asked for, of tenant A's own policy.
                let wasm = small_policy();
                let policy = self
                    .a_admin
                    .post_raw(&format!("/api/v1/policies?name=fixture-{short}"), "application/wasm", wasm)
                    .await
                    .unwrap();
                assert_eq!(policy.status, 201, "{}", policy.body);
                let run = self
                    .a_admin
                    .post(&format!("/api/v1/policies/{}/what-if", id_of(&policy.body)), &json!({"hours": 1}))
                    .await
                    .unwrap();
                assert_eq!(run.status, 202, "{}", run.body);
                (id_of(&run.body), true)
            }
            (_, "version") => ("1".into(), true),
            (p, "tenant_id") if p.starts_with("/api/v1/tenants/") => (self.tenant_a.clone(), true),
            (_, "user_id") | ("/api/v1/users/{id}", "id") => {
                let user = self
                    .admin
                    .created(
                        "/api/v1/users",
                        &json!({"email": format!("fixture-{short}@a.test"), "password": "a fixture password",
                                "tenant": "tenant-a", "role": "viewer"}),
                    )
                    .await
                    .unwrap();
                (id_of(&user), true)
            }
            ("/api/v1/tokens/{id}", "id") => {
                let token =
                    self.a_admin.created("/api/v1/tokens", &json!({"name": format!("fixture-{short}")})).await.unwrap();
                (id_of(&token), true)
            }
            ("/api/v1/tenants/{id}" | "/api/v1/tenants/{id}/preview" | "/api/v1/tenants/{id}/archive", "id") => {
                let tenant =
                    self.admin.created("/api/v1/tenants", &json!({"name": format!("fixture-{short}")})).await.unwrap();
                (id_of(&tenant), false)
            }
            ("/api/v1/tenants/{id}/budgets/{period}", "id") => {
                // A fresh tenant with a monthly budget, so removing it finds one.
                let tenant =
                    self.admin.created("/api/v1/tenants", &json!({"name": format!("fixture-{short}")})).await.unwrap();
                let id = id_of(&tenant);
                let budget = json!({"gpu_hours": 10, "action": "warn"});
                let set = self.admin.put(&format!("/api/v1/tenants/{id}/budgets/month"), &budget).await.unwrap();
                assert_eq!(set.status, 200, "{}", set.body);
                (id, false)
            }
            ("/api/v1/tenants/{id}/budgets/{period}", "period") => ("month".into(), false),
            ("/api/v1/enrolment-tokens/{id}", "id") => {
                let token = self.admin.created("/api/v1/enrolment-tokens", &json!({})).await.unwrap();
                (id_of(&token), false)
            }
            ("/api/v1/node-credentials/{id}", "id") => {
                (self.spare_credentials.lock().unwrap().pop().expect("enough spare node credentials"), false)
            }
            ("/api/v1/nodes/{id}" | "/api/v1/nodes/{id}/history", "id") => (self.node_x.clone(), false),
            ("/api/v1/nodes/{id}/cordon" | "/api/v1/nodes/{id}/drain" | "/api/v1/nodes/{id}/uncordon", "id") => {
                (self.node_m.clone(), false)
            }
            ("/api/v1/gpus/{id}" | "/api/v1/gpus/{id}/history" | "/api/v1/gpus/{id}/clear-fault", "id") => {
                (self.gpu_x.clone(), false)
            }
            (_, "node_id") => (self.node_x.clone(), false),
            (_, "workload_id") => (self.workload_on_x().await, false),
            _ => panic!("no fixture for the path parameter {{{param}}} of {path}: add one to access_matrix.rs"),
        }
    }

    async fn workload(&self) -> String {
        let w = self
            .a_member
            .created(
                "/api/v1/workloads",
                &json!({"name": "fixture", "class": "evaluation", "command": ["sleep", "30"],
                        "resources": {"gpu_count": 0, "cpu_millis": 10}}),
            )
            .await
            .unwrap();
        id_of(&w)
    }

    async fn token_service(&self) -> String {
        self.token_service.get_or_init(|| self.service()).await.clone()
    }

    /// A service of tenant A (no replicas: its minimum is 0).
    async fn service(&self) -> String {
        let short = Uuid::new_v4().simple().to_string()[..8].to_owned();
        let s = self
            .a_member
            .created(
                "/api/v1/services",
                &json!({"name": format!("fixture-{short}"), "class": "batch_inference", "capacity": 1.0,
                        "min_replicas": 0, "max_replicas": 1,
                        "replica": {"command": ["sleep", "30"], "resources": {"gpu_count": 0, "cpu_millis": 10}}}),
            )
            .await
            .unwrap();
        id_of(&s)
    }

    /// A workload the scheduler placed on node X (attempt 1).
    async fn workload_on_x(&self) -> String {
        let id = self.workload().await;
        let path = format!("/api/v1/workloads/{id}");
        let node = self.node_x.clone();
        eventually("the fixture workload to be placed on node X", Duration::from_secs(20), || {
            let api = self.admin.clone();
            let path = path.clone();
            let node = node.clone();
            async move {
                let w = api.ok(&path).await?;
                Ok((w["node_id"] == node.as_str() && w["attempt"] == 1).then_some(()))
            }
        })
        .await
        .unwrap();
        id
    }
}

/// A small working policy (hand-written WAT). Small on purpose: a refused upload is answered
/// before its body is read, and a large body still being sent would see the connection close
/// instead of the answer.
fn small_policy() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wat/first_pending_on_gpu0.wat");
    wat::parse_file(&path).unwrap()
}

fn mint(claims: &Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn send(
    http: &reqwest::Client,
    base: &str,
    op: &Operation,
    path: &str,
    token: Option<&str>,
) -> (u16, bool, Value) {
    let mut url = format!("{base}{path}");
    if !op.query.is_empty() {
        url = format!("{url}?{}", op.query);
    }
    let method = reqwest::Method::from_bytes(op.method.as_bytes()).unwrap();
    let mut req = http.request(method, url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = &op.json_body {
        req = req.json(body);
    } else if op.wasm_body {
        req = req.header("content-type", "application/wasm").body(small_policy());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let www = resp.headers().get("www-authenticate").is_some_and(|v| v.to_str().unwrap_or("").starts_with("Bearer"));
    let text = resp.text().await.unwrap_or_default();
    (status, www, serde_json::from_str(&text).unwrap_or(Value::String(text.chars().take(200).collect())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_every_caller_as_its_declared_access_allows() {
    let db = TestDb::create().await.unwrap();
    // Rate limits off: the matrix sends hundreds of mutations with the same credentials; streams
    // (log follow, the live feed) close after a second.
    // Every route gets fresh fixtures: a policy and a what-if run per call, past the per-tenant bounds.
    let cp = ControlPlane::start(
        &db,
        &[
            "--mutations-per-minute",
            "0",
            "--log-follow-default-s",
            "1",
            "--policy-versions-per-tenant",
            "100000",
            "--what-if-runs-per-tenant",
            "100000",
        ],
    )
    .await
    .unwrap();
    let admin = cp.api();
    let anonymous = cp.anonymous();

    let doc = anonymous.ok("/api/v1/openapi.json").await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "OpenAPI 3");
    let schemes = &doc["components"]["securitySchemes"];
    for scheme in ["session", "api_token", "node_credential"] {
        assert_eq!(schemes[scheme]["scheme"], "bearer", "{scheme}: {schemes}");
    }
    let ops = operations(&doc);

    // People and tokens.
    let a_admin = cp.user("tenant-a", "a-admin@a.test", "tenant_admin").await.unwrap();
    let a_member = cp.user("tenant-a", "a-member@a.test", "tenant_member").await.unwrap();
    let a_viewer = cp.user("tenant-a", "a-viewer@a.test", "viewer").await.unwrap();
    let b_admin = cp.user("tenant-b", "b-admin@b.test", "tenant_admin").await.unwrap();
    let b_viewer = cp.user("tenant-b", "b-viewer@b.test", "viewer").await.unwrap();
    // The login example's user, so logging in works for every caller alike.
    admin
        .created(
            "/api/v1/users",
            &json!({"email": "ada@example.com", "password": "correct horse battery staple", "tenant": "tenant-a", "role": "viewer"}),
        )
        .await
        .unwrap();
    let tenants = admin.ok("/api/v1/tenants").await.unwrap();
    let tenant_a = id_of(tenants.as_array().unwrap().iter().find(|t| t["name"] == "tenant-a").unwrap());
    let member_token = cp.api_as(&a_member).created("/api/v1/tokens", &json!({"name": "ci"})).await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoked = admin.created("/api/v1/tokens", &json!({"name": "to-revoke"})).await.unwrap();
    assert_eq!(admin.delete(&format!("/api/v1/tokens/{}", id_of(&revoked))).await.unwrap().status, 200);
    let revoked = revoked["token"].as_str().unwrap().to_owned();

    // Sessions that must be refused: the platform admin's own claims, expired or signed elsewhere.
    let me = admin.ok("/api/v1/auth/me").await.unwrap();
    let claims = |iat: i64, exp: i64| {
        json!({"iss": "airtime", "aud": "airtime-api", "sub": me["user_id"], "iat": iat, "exp": exp,
               "jti": Uuid::new_v4(), "role": "platform_admin", "name": ADMIN_EMAIL})
    };
    let expired = mint(&claims(now() - 7200, now() - 3600), TEST_JWT_SECRET.as_bytes());
    let forged = mint(&claims(now(), now() + 3600), b"not-the-control-plane-secret-at-all-0123456789");
    let refused = cp.api_as(&expired).get("/api/v1/auth/me").await.unwrap();
    assert_eq!(
        (refused.status, refused.body["error"]["message"].as_str()),
        (401, Some("the session has expired; log in again")),
        "the expired session is refused for its expiry, not for anything else"
    );

    // Node X (the one in the paths) and node Y, enrolled over the API; X registers with the
    // documented example and keeps sending telemetry so it stays ready.
    let enrol = |name: &'static str| {
        let cp = &cp;
        let anonymous = anonymous.clone();
        async move {
            let token = cp.enrolment_token(name).await.unwrap();
            let enrolled = anonymous
                .created("/api/v1/agent/enrol", &json!({"enrolment_token": token, "name": name}))
                .await
                .unwrap();
            enrolled["credential"].as_str().unwrap().to_owned()
        }
    };
    let register = ops.iter().find(|o| o.label() == "POST /api/v1/agent/register").expect("register");
    let registration = register.json_body.clone().unwrap();
    let x_name: &'static str = Box::leak(registration["name"].as_str().unwrap().to_owned().into_boxed_str());
    let node_x_credential = enrol(x_name).await;
    let node_y_credential = enrol("node-y").await;
    let x = cp.api_as(&node_x_credential).created("/api/v1/agent/register", &registration).await.unwrap();
    let node_x = x["node_id"].as_str().unwrap().to_owned();
    let mut maintained = registration.clone();
    maintained["name"] = json!("node-m");
    // Node M is for the maintenance routes only: too few cores for the fixture workload, which
    // must land on X (placement by FGD's score spreads ties over the nodes in a fixed order).
    maintained["cpu_millis"] = json!(5);
    let node_m_credential = enrol("node-m").await;
    let m = cp.api_as(&node_m_credential).created("/api/v1/agent/register", &maintained).await.unwrap();
    let node_m = m["node_id"].as_str().unwrap().to_owned();
    let heartbeat = {
        let x_api = cp.api_as(&node_x_credential);
        let path = format!("/api/v1/agent/nodes/{node_x}/telemetry");
        tokio::spawn(async move {
            loop {
                let _ = x_api.post(&path, &json!({"cpu_util": 0.1, "memory_used_mb": 1024, "gpus": []})).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let gpu_x = id_of(&admin.ok(&format!("/api/v1/nodes/{node_x}")).await.unwrap()["gpus"][0]);
    let mut spare = Vec::new();
    for i in 0..20 {
        let name: &'static str = Box::leak(format!("spare-{i}").into_boxed_str());
        let token = cp.enrolment_token(name).await.unwrap();
        let enrolled =
            anonymous.created("/api/v1/agent/enrol", &json!({"enrolment_token": token, "name": name})).await.unwrap();
        spare.push(enrolled["credential_id"].as_str().unwrap().to_owned());
    }

    let callers = vec![
        Caller { name: "no token", token: None, kind: Kind::Refused },
        Caller { name: "expired", token: Some(expired), kind: Kind::Refused },
        Caller { name: "forged", token: Some(forged), kind: Kind::Refused },
        Caller { name: "revoked", token: Some(revoked), kind: Kind::Refused },
        Caller {
            name: "platform admin",
            token: Some(cp.admin_token.clone()),
            kind: Kind::Person { scheme: "session", rank: 4, tenant: Tenant::Platform },
        },
        Caller {
            name: "A admin",
            token: Some(a_admin.clone()),
            kind: Kind::Person { scheme: "session", rank: 3, tenant: Tenant::A },
        },
        Caller {
            name: "A member",
            token: Some(a_member.clone()),
            kind: Kind::Person { scheme: "session", rank: 2, tenant: Tenant::A },
        },
        Caller {
            name: "A member token",
            token: Some(member_token),
            kind: Kind::Person { scheme: "api_token", rank: 2, tenant: Tenant::A },
        },
        Caller {
            name: "A viewer",
            token: Some(a_viewer),
            kind: Kind::Person { scheme: "session", rank: 1, tenant: Tenant::A },
        },
        Caller {
            name: "B admin",
            token: Some(b_admin),
            kind: Kind::Person { scheme: "session", rank: 3, tenant: Tenant::B },
        },
        Caller {
            name: "B viewer",
            token: Some(b_viewer),
            kind: Kind::Person { scheme: "session", rank: 1, tenant: Tenant::B },
        },
        Caller { name: "node X", token: Some(node_x_credential), kind: Kind::Node { own: true } },
        Caller { name: "node Y", token: Some(node_y_credential), kind: Kind::Node { own: false } },
    ];

    let world = World {
        cp_url: cp.url.clone(),
        admin: admin.clone(),
        a_admin: cp.api_as(&a_admin),
        a_member: cp.api_as(&a_member),
        tenant_a,
        node_x,
        node_m,
        gpu_x,
        spare_credentials: std::sync::Mutex::new(spare),
        token_service: tokio::sync::OnceCell::new(),
    };

    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    let mut table = String::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for op in &ops {
        let mut row = format!("{:<58}", op.label());
        for caller in &callers {
            let mut path = op.path.clone();
            let mut owned_by_a = false;
            for param in &op.path_params {
                let (value, of_a) = world.fixture(&op.path, param).await;
                owned_by_a |= of_a;
                path = path.replace(&format!("{{{param}}}"), &value);
            }
            let (status, www, body) = send(&http, &world.cp_url, op, &path, caller.token.as_deref()).await;
            let expected = expect(op, caller, owned_by_a);
            *counts
                .entry(match expected {
                    Expect::Public => "public",
                    Expect::Unauthorized => "unauthorized",
                    Expect::Allowed => "allowed",
                    Expect::Denied => "denied",
                    Expect::Hidden => "hidden",
                })
                .or_default() += 1;
            let _ = write!(row, " {status}");
            if !satisfied(expected, status, www) {
                failures.push(format!(
                    "{} as {}: expected {expected:?}, got {status}: {body}",
                    op.label(),
                    caller.name
                ));
            }
            if status >= 400 {
                let message = body["error"]["message"].as_str().unwrap_or_default().to_lowercase();
                assert!(
                    body["error"]["code"].is_string() && !message.contains("sql") && !message.contains("panicked"),
                    "{} as {}: every error has the one shape and no internals: {body}",
                    op.label(),
                    caller.name
                );
            }
        }
        table.push_str(&row);
        table.push('\n');
    }
    heartbeat.abort();
    let header: Vec<&str> = callers.iter().map(|c| c.name).collect();
    eprintln!("callers: {}\n{table}expectations: {counts:?}", header.join(" | "));
    assert!(failures.is_empty(), "{} of the matrix failed:\n{}", failures.len(), failures.join("\n"));
    assert!(ops.len() >= 40, "only {} operations documented", ops.len());
    cp.stop().await;
}
