//! Passwords and tokens never appear in a log, nor anywhere they are stored: the control plane and
//! a node agent run at debug level while every secret goes through them — the bootstrap password,
//! logins right and wrong, a new user's password, a password change, session tokens, an API token,
//! an enrolment token and the node credential it buys — and then their whole output, the audit
//! log and the credential tables are searched for each secret.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use airtime_tests::{ADMIN_PASSWORD, ControlPlane, NodeAgent, TestDb, nodes_ready};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_log_or_a_table() {
    let db = TestDb::create().await.unwrap();
    let cp = ControlPlane::start_with_env(&db, &[], &[("RUST_LOG", "debug,sqlx=debug,hyper=debug")]).await.unwrap();
    let admin = cp.api();
    let anonymous = cp.anonymous();
    let mut secrets: Vec<(String, String)> =
        vec![("bootstrap password".into(), ADMIN_PASSWORD.into()), ("admin session".into(), cp.admin_token.clone())];

    // Logins, right and wrong; a new user; a password change.
    let wrong = "Wr0ng-but-still-a-secret-guess";
    assert_eq!(
        anonymous
            .post("/api/v1/auth/login", &json!({"email": "admin@airtime.test", "password": wrong}))
            .await
            .unwrap()
            .status,
        401
    );
    admin.created("/api/v1/tenants", &json!({"name": "research"})).await.unwrap();
    let first = "first password of carol 7d1e";
    admin
        .created(
            "/api/v1/users",
            &json!({"email": "carol@research.test", "password": first, "tenant": "research", "role": "tenant_admin"}),
        )
        .await
        .unwrap();
    let session = anonymous
        .created("/api/v1/auth/login", &json!({"email": "carol@research.test", "password": first}))
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = "second password of carol 93fa";
    let changed = cp
        .api_as(&session)
        .post("/api/v1/auth/password", &json!({"current_password": first, "new_password": second}))
        .await
        .unwrap();
    assert_eq!(changed.status, 204, "{}", changed.body);
    let carol = anonymous
        .created("/api/v1/auth/login", &json!({"email": "carol@research.test", "password": second}))
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    secrets.extend([
        ("wrong password".into(), wrong.into()),
        ("first password".into(), first.into()),
        ("second password".into(), second.into()),
        ("first session".into(), session),
        ("second session".into(), carol.clone()),
    ]);

    // An API token, used and revoked.
    let created = cp.api_as(&carol).created("/api/v1/tokens", &json!({"name": "ci"})).await.unwrap();
    let api_token = created["token"].as_str().unwrap().to_owned();
    assert_eq!(cp.api_as(&api_token).get("/api/v1/workloads").await.unwrap().status, 200);
    assert_eq!(
        cp.api_as(&api_token)
            .post(
                "/api/v1/workloads",
                &json!({"name": "x", "class": "evaluation", "command": ["true"], "resources": {"cpu_millis": 10}})
            )
            .await
            .unwrap()
            .status,
        201
    );
    let token_id = created["id"].as_str().unwrap();
    assert_eq!(cp.api_as(&carol).delete(&format!("/api/v1/tokens/{token_id}")).await.unwrap().status, 200);
    assert_eq!(cp.api_as(&api_token).get("/api/v1/workloads").await.unwrap().status, 401);
    secrets.push(("API token".into(), api_token));

    // An enrolment token, used by an agent logging at debug; and a reused one, refused.
    let agent = NodeAgent::start_logged(&cp, "quiet-node", &["--simulate-gpus", "1:L4:24576"]).await.unwrap();
    nodes_ready(&admin, 1).await.unwrap();
    let credential = agent.credential().await.unwrap();
    secrets.push(("node credential".into(), credential));
    let enrolment = cp.enrolment_token("another-node").await.unwrap();
    for _ in 0..2 {
        anonymous
            .post("/api/v1/agent/enrol", &json!({"enrolment_token": enrolment, "name": "another-node"}))
            .await
            .unwrap();
    }
    secrets.push(("enrolment token".into(), enrolment));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let cp_log = cp.logs().join("\n");
    let agent_log = agent.logs().join("\n");
    assert!(
        cp_log.contains("DEBUG") && cp_log.contains("node enrolled"),
        "the control plane logged at debug:\n{cp_log}"
    );
    assert!(agent_log.contains("DEBUG") && agent_log.contains("enrolled"), "the agent logged at debug:\n{agent_log}");
    let pool = db.pool().await.unwrap();
    let (stored,): (String,) = sqlx::query_as(
        "SELECT concat_ws(' ', (SELECT string_agg(u::text, ' ') FROM users u), \
                (SELECT string_agg(k::text, ' ') FROM api_tokens k), \
                (SELECT string_agg(e::text, ' ') FROM enrolment_tokens e), \
                (SELECT string_agg(c::text, ' ') FROM node_credentials c), \
                (SELECT string_agg(a::text, ' ') FROM audit_log a))",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(stored.contains("$argon2id$"), "passwords are stored as argon2id hashes");
    for (what, secret) in &secrets {
        // Tokens are compared by their secret part (after the kind prefix and the shown characters).
        let needle = if secret.len() > 40 { &secret[secret.len() - 32..] } else { secret.as_str() };
        assert!(!cp_log.contains(needle), "the {what} appears in the control plane's log");
        assert!(!agent_log.contains(needle), "the {what} appears in the agent's log");
        assert!(!stored.contains(needle), "the {what} is stored in clear");
    }
    cp.stop().await;
}
