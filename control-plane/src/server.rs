//! Builds the router from an `AppState` (`app`) and runs the whole control plane (`serve`): the
//! HTTP surface, the scheduling loop, the fleet watch and the signal relay.

use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use tokio::net::TcpListener;
use tower_http::compression::CompressionLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::config::Config;
pub use crate::state::AppState;
use crate::{api, fleet, scheduler, web};

/// The whole HTTP surface: API, agent protocol, health, metrics and the dashboard.
pub fn app(state: AppState) -> Router {
    let config = state.config.clone();
    let (api, doc) = api::router(&config).split_for_parts();
    let documented = api::openapi::install(doc);
    // A route missing from the OpenAPI document is never served (see api::openapi).
    let api = api.layer(axum::middleware::from_fn_with_state(documented, api::openapi::documented_only));
    Router::new()
        .merge(api)
        .merge(web::routes())
        .fallback(api::not_found)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(config.request_timeout_ms),
        ))
        .layer(CompressionLayer::new())
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Connects to PostgreSQL (applying migrations), starts the scheduling loop and the fleet watch,
/// and serves HTTP until SIGINT or SIGTERM.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let db = crate::db::connect(&config.database_url, config.db_max_connections).await?;
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let state = AppState::new(db, config).await?;

    let shutdown = state.shutdown.clone();
    let scheduler = tokio::spawn(scheduler::run_loop(state.scheduler(), shutdown.clone()));
    let watch = tokio::spawn(fleet::liveness::run(state.liveness(), shutdown.clone()));
    let what_if = tokio::spawn(crate::what_if::runner::run(state.what_if(), shutdown.clone()));
    let credentials =
        tokio::spawn(crate::auth::caller::run_node_credential_sweeps(state.auth.clone(), shutdown.clone()));
    let relay = tokio::spawn(crate::signals::relay(
        state.db.clone(),
        state.leadership.instance(),
        state.outbox.clone(),
        state.wake.clone(),
        state.desired.clone(),
        shutdown.clone(),
    ));

    // Tests and scripts read this line to learn the port when --listen uses port 0.
    #[allow(clippy::print_stdout)]
    {
        println!("airtime control plane listening on http://{addr}");
    }
    tracing::info!(%addr, "listening");

    let telemetry = state.telemetry.clone();
    let router = app(state);
    let signal = shutdown.clone();
    // Connect info gives handlers the peer address (login throttling, the audit log).
    axum::serve(listener, router.into_make_service_with_connect_info::<std::net::SocketAddr>())
        .with_graceful_shutdown(async move {
            wait_for_signal().await;
            signal.cancel();
        })
        .await
        .context("serving HTTP")?;
    shutdown.cancel();
    // Every request has been answered: write the telemetry still queued (none of it acknowledged).
    telemetry.close().await;
    let _ = scheduler.await;
    let _ = watch.await;
    let _ = what_if.await;
    let _ = relay.await;
    let _ = credentials.await;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
